"""RoBERTa-PreLayerNorm (``jattn/families/roberta_prelayernorm``) against Hugging Face's
``RobertaPreLayerNormModel`` on tiny random configs: pre-LN blocks and the final LayerNorm
(``last_hidden_state`` and HF's last ``hidden_states`` after it); outputs and every
attention weight, head gates per head / example / token, disabled heads, the dense–tanh
classification head with ``classify`` and the disabling sweep's suffix, the masked-LM head,
pruning and export. Padded batches."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_fixtures, save_random)
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=80, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40, hidden_act="gelu", type_vocab_size=1, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, layer_norm_eps=1e-5)
LENGTHS = [15, 9, 4, 15]


def save_preln(folder, head="base", seed=0):
    cls = {"cls": "RobertaPreLayerNormForSequenceClassification", "mlm": "RobertaPreLayerNormForMaskedLM"}.get(
        head, "RobertaPreLayerNormModel")
    return save_random(new_hf("RobertaPreLayerNormConfig", cls, {**SHAPE, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_preln, LENGTHS, seed=3, types=False)


def test_config_is_pre_ln(pair):
    config = pair[0].config
    assert (config.norm_position, config.final_norm) == ("pre", True)


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


def test_last_hidden_state_is_the_final_norm(pair, batch):
    """The final LayerNorm acts: its output is not the last layer's output (HF's ``hidden_states[-1]``
    is the final LayerNorm's output too, checked by ``check_outputs``)."""
    out = pair[0].forward(batch, internals=("ffn_pre_ln", "ffn_output"))
    last_layer = out.internals["ffn_pre_ln"][-1] + out.internals["ffn_output"][-1]  # (b, n, D) x_L = h + FFN(LN(h))
    ln = (last_layer - last_layer.mean(-1, keepdims=True)) / np.sqrt(last_layer.var(-1, keepdims=True) + 1e-5)
    assert not np.allclose(last_layer, out.last_hidden_state, atol=1e-3)
    assert np.corrcoef(ln.ravel(), np.asarray(out.last_hidden_state).ravel())[0, 1] > 0.5  # γ, β random around 1, 0


def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch, types=False)


def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


# classify and the disabling suffix through pre-LN layers (cls_row, the final LayerNorm) run fast on ModernBERT's
# pre-LN layers, the dense–tanh head on RoBERTa's: fast twin ModernBERT's
@pytest.mark.slow(twin="tests/families/modernbert/test_modernbert.py::test_classifier_head")
def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_preln(tmp_path, head="cls"), head="cls")
    assert model.config.num_labels == 3 and model.config.classifier == "dense_tanh"
    check_classifier(model, oracle, batch, types=False)


def test_mlm_head_and_export(tmp_path, batch):
    """The masked-LM logits on the final LayerNorm's output; the exported state dict is the one
    loaded, and HF reads the exported folder back to the same logits."""
    import json

    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays
    from tiny_encoders import hf_model

    model, oracle = load_pair(save_preln(tmp_path / "in", head="mlm"), head="mlm")
    n = batch["input_ids"].shape[1]
    ours = model.forward(batch, internals=None, heads=("mlm_logits",)).mlm_logits
    want = hf_run(oracle, batch).logits
    assert_close(ours, want, terms=model_terms(model.config, n))
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    original = read_state_dict(model.source)
    assert set(state) == {k for k in original if "position_ids" not in k and "token_type_ids" not in k
                          and "decoder" not in k}
    for k, v in state.items():
        np.testing.assert_array_equal(v, original[k], err_msg=k)
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(out / "model.safetensors"))
    np.testing.assert_array_equal(hf_run(hf_model(out, "mlm"), batch).logits.numpy(), want.numpy())


@pytest.fixture(scope="module")
def tokenized_folder(tmp_path_factory):
    """A tiny random model with MiniLM's WordPiece vocabulary and tokenizer files (a tokenizer.json,
    which the family reads), for the commands that take text."""
    import shutil

    from jattn.models.load import default_model_path
    from tiny_encoders import TOKENIZER_FILES

    shape = dict(SHAPE, vocab_size=30522, pad_token_id=0, max_position_embeddings=130, initializer_range=0.3,
                 type_vocab_size=2)  # the WordPiece tokenizer marks a pair's second segment with type 1
    folder = save_random(new_hf("RobertaPreLayerNormConfig", "RobertaPreLayerNormModel", shape, seed=2),
                         tmp_path_factory.mktemp("preln_text"), seed=2)
    for f in TOKENIZER_FILES:
        if (default_model_path() / f).exists():
            shutil.copy(default_model_path() / f, folder / f)
    return folder


def test_analyze_command(tokenized_folder, tmp_path):
    """``jattn analyze --methods weights,entropy,norms,alti`` on the pre-LN model: every statistic
    of the four methods, finite; ALTI's rolled-out shares are distributions over classes."""
    import json

    from jattn.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat.\nAlice met Bob, then left.\tHe stayed.\nShort.\n")
    main(["analyze", "--model", str(tokenized_folder), "--input", str(corpus), "--methods",
          "weights,entropy,norms,alti", "--out", str(tmp_path / "out"), "--batch-size", "2"])
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    L, H = SHAPE["num_hidden_layers"], SHAPE["num_attention_heads"]
    assert doc["attn_to_sep"]["shape"] == [L, H] and doc["entropy"]["shape"] == [L, H]
    assert np.array(doc["norm_to_sep"]["value"]).shape == (L, H)
    shares = np.array(doc["alti_class"]["value"])  # (L, 4)
    np.testing.assert_allclose(shares.sum(-1), 1.0, rtol=1e-5)
    assert all(np.isfinite(np.array(doc[k]["value"], float)).all() for k in doc if k != "meta")


def test_patch_heads_equals_hf_hooks(tokenized_folder):
    """``jattn.patch_heads`` on the pre-LN model against one HF forward per head with the head's
    input to the output projection replaced by hooks (``hf_head_gates.hf_patch_loop``)."""
    import torch

    from hf_head_gates import hf_patch_loop, torch_inputs
    from jattn.sweeps.patching import paired_inputs
    from tiny_encoders import hf_model
    from tolerance import tolerance

    model = jattn.load(tokenized_folder, use_cache=False)
    clean, corrupted = ["the cat sat on the mat ."], ["a dog ran in a park !"]
    w = np.random.default_rng(0).normal(size=model.config.hidden_size)
    w /= np.linalg.norm(w)
    w32 = w.astype(np.float32)
    got = jattn.patch_heads(model, clean, corrupted, lambda out: out["last_hidden_state"][:, 0] @ w32)["encoder"]
    a, b = paired_inputs(model, clean, corrupted)
    a, b = ({k: v for k, v in x.items() if k != "token_type_ids"} for x in (a, b))
    want = hf_patch_loop(hf_model(tokenized_folder).double(), torch_inputs(a), torch_inputs(b),
                         lambda out: out.last_hidden_state[:, 0] @ torch.tensor(w), {"encoder": SHAPE["num_attention_heads"]})["encoder"]
    terms = 2 * model_terms(model.config, a["input_ids"].shape[1])
    assert_close(got, want, terms=terms, scale=1.0)
    assert np.abs(want).max() > 20 * tolerance(1.0, terms)  # effects well above the tolerance




def test_viewer_page(tokenized_folder):
    """``jattn.view`` on the pre-LN model: every measure stored equals the library's arrays; no
    AttnResLn-N or GlobEnc panel (undefined for a pre-LN block)."""
    from test_view import assert_stored, read_page

    model = jattn.load(tokenized_folder, use_cache=False)
    text = "the cat sat on the mat ."
    measures = read_page(jattn.view(model, text))["views"]["encoder"]["measures"]
    assert list(measures) == ["alpha", "norm", "summed", "attnres", "rollout", "alti"]
    batch = model.tokenize([text])
    norms = jattn.norms(model, batch, residual=True)["encoder"]
    attributions = jattn.attributions(model, batch)["encoder"]
    assert_stored(measures["alpha"], np.asarray(model.forward(batch).attentions)[:, 0])
    for key, name in (("norm", "weighted_norm"), ("summed", "summed_norm"), ("attnres", "attnres_norm")):
        assert_stored(measures[key], norms[name][:, 0])
    for key in ("rollout", "alti"):
        assert_stored(measures[key], attributions[key][:, 0])
