"""RoBERTa-PreLayerNorm's quirks (``jattn/families/roberta_prelayernorm``): the final LayerNorm after pre-LN
blocks; on a folder with MiniLM's WordPiece tokenizer, ``jattn analyze``, ``jattn.patch_heads`` against HF hooks
and the viewer (no AttnResLn-N or GlobEnc panel for a pre-LN block). The rest: the conformance table."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from conformance_table import FAMILIES
from encoder_family_smoke import wordpiece_tokenizer
from family_pairs import pair_fixture, save
from tolerance import assert_close, model_terms

pair = pair_fixture("roberta-prelayernorm")
SHAPE = FAMILIES["roberta-prelayernorm"].fields


def test_last_hidden_state_is_the_final_norm(pair):
    """The final LayerNorm acts: its output is not the last layer's output (HF's ``hidden_states[-1]``
    is the final LayerNorm's output too, checked by ``check_outputs``)."""
    model, _, batch = pair
    out = model.forward(batch, internals=("ffn_pre_ln", "ffn_output"))
    last_layer = out.internals["ffn_pre_ln"][-1] + out.internals["ffn_output"][-1]  # (b, n, D) x_L = h + FFN(LN(h))
    ln = (last_layer - last_layer.mean(-1, keepdims=True)) / np.sqrt(last_layer.var(-1, keepdims=True) + 1e-5)
    assert not np.allclose(last_layer, out.last_hidden_state, atol=1e-3)
    assert np.corrcoef(ln.ravel(), np.asarray(out.last_hidden_state).ravel())[0, 1] > 0.5  # γ, β random around 1, 0


@pytest.fixture(scope="module")
def tokenized_folder(tmp_path_factory):
    """A tiny random model with MiniLM's WordPiece vocabulary and tokenizer files (a tokenizer.json, which the
    family reads), for the commands that take text; two token types (the tokenizer marks a pair's segment B)."""
    folder = save(tmp_path_factory.mktemp("preln_text"), "roberta-prelayernorm", seed=2, vocab_size=30522,
                  pad_token_id=0, max_position_embeddings=130, initializer_range=0.3, type_vocab_size=2)
    wordpiece_tokenizer(folder)
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
                         lambda out: out.last_hidden_state[:, 0] @ torch.tensor(w),
                         {"encoder": SHAPE["num_attention_heads"]})["encoder"]
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
