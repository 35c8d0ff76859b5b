"""RoBERTa-PreLayerNorm (``jattn/families/roberta_prelayernorm``) against Hugging Face's
``RobertaPreLayerNormModel`` on tiny random configs: pre-LN blocks and the final LayerNorm
(``last_hidden_state`` and HF's last ``hidden_states`` after it); outputs and every
attention weight, head gates per head / example / token, disabled heads, the dense–tanh
classification head with ``classify`` and the disabling sweep's suffix, the masked-LM head,
pruning and export. Padded batches."""

from __future__ import annotations

import numpy as np
import pytest

from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, pair_batch, save_random)
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=80, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40, hidden_act="gelu", type_vocab_size=1, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, layer_norm_eps=1e-5)
LENGTHS = [15, 9, 4, 15]


def save_preln(folder, head="base", seed=0):
    import torch
    from transformers import (RobertaPreLayerNormConfig, RobertaPreLayerNormForMaskedLM,
                              RobertaPreLayerNormForSequenceClassification, RobertaPreLayerNormModel)

    torch.manual_seed(seed)
    cls = {"cls": RobertaPreLayerNormForSequenceClassification, "mlm": RobertaPreLayerNormForMaskedLM}.get(
        head, RobertaPreLayerNormModel)
    return save_random(cls(RobertaPreLayerNormConfig(**SHAPE, num_labels=3)), folder, seed)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return load_pair(save_preln(tmp_path_factory.mktemp("preln")))


@pytest.fixture(scope="module")
def batch(pair):
    return pair_batch(pair[0].config, LENGTHS, seed=3, types=False)


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
