"""BART teacher-forced forward vs Hugging Face PyTorch: logits, hidden states, the embedding
pipeline and every attention weight of the three attention types; head gates and disabled heads
per attention type against HF with hooks; conversion of bare ``BartModel`` checkpoints; refusals."""

from __future__ import annotations

import json

import pytest

import jattn
import seq2seq_family_parity as parity
import tiny_bart
from jattn.io.hf import read_state_dict
from tiny_bart import hf_model, save_tiny

tiny = parity.tiny_cases(tiny_bart)


def test_parity_teacher_forced_padded(tiny):
    _, _, model, hf = tiny
    parity.check_parity(model, hf)


def test_default_decoder_mask_matches_hf(tiny):
    _, _, model, hf = tiny
    parity.check_default_decoder_mask(model, hf)


def test_embeddings_equal_hf(tiny):
    """Layer 0's input on each side is HF's embedding output: LayerNorm(scale · token + position row
    p + 2), padded positions included."""
    _, _, model, hf = tiny
    parity.check_embeddings(model, hf)


# the same post-LN Seq2SeqLayer internals and Kobayashi decomposition as Marian's and FSMT's (BART differs in
# embeddings only)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_internals_complete")
def test_internals_complete(tiny):
    _, _, model, _ = tiny
    parity.check_internals(model)


# gates act in MultiHeadAttention inside the same post-LN layers as Marian's (BART differs in embeddings only): the
# twin gates and disables heads in every attention type of Marian and FSMT; against HF hooks on mBART (same attention)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_interventions_per_kind")
def test_head_gates_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_gates(model, hf)


# disabling acts in MultiHeadAttention inside the same post-LN layers as Marian's (BART differs in embeddings only):
# the twin disables heads in Marian and FSMT; against HF hooks on mBART (same attention)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_interventions_per_kind")
def test_disabled_heads_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_disabled(model, hf)


def test_bare_model_checkpoint(tmp_path):
    """A ``BartModel`` folder (no ``model.`` prefix, no final_logits_bias) loads; its states equal
    HF's BartModel and its logits h · E^T equal BartForConditionalGeneration loaded from it."""
    parity.check_bare_model(save_tiny(tmp_path / "bare", "bart", bare=True), hf_model)


def test_refused_configs(tiny):
    from jattn.nn.config import ConfigError

    _, folder, _, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get("bart")
    for change, match in (({"normalize_before": True}, "normalize_before"),
                          ({"add_final_layer_norm": True}, "add_final_layer_norm"),
                          ({"static_position_embeddings": True}, "static_position_embeddings"),
                          ({"extra_pos_embeddings": 0}, "extra_pos_embeddings"),
                          ({"tie_word_embeddings": False}, "tie_word_embeddings"),
                          ({"activation_function": "glu"}, "activation_function"),
                          ({"forced_bos_token_id": [0, 1]}, "forced_bos_token_id")):
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))
    # the older layout fields, as transformers 3/4 wrote them for BART, are accepted
    legacy = dict(cfg, normalize_before=False, add_final_layer_norm=False, normalize_embedding=True,
                  static_position_embeddings=False, extra_pos_embeddings=2)
    assert spec.config_from_hf(legacy) == spec.config_from_hf(cfg)


def test_conversion_reports_all_problems(tiny):
    _, folder, model, _ = tiny
    parity.check_conversion_problems("bart", model.config, read_state_dict(folder),
                                     ("model.decoder.layernorm_embedding.bias", "model.encoder.embed_positions.weight"))
