"""mBART teacher-forced forward vs Hugging Face PyTorch on padded batches (both tokenizer styles,
two shapes): logits, hidden states, the embedding pipeline and every attention weight of the
three attention types, the pre-LN internals; head gates and disabled heads per attention type
against HF with hooks; ``inputs_embeds``; bare ``MBartModel`` checkpoints; refusals."""

from __future__ import annotations

import json

import pytest

import jattn
import seq2seq_family_parity as parity
import tiny_mbart
from jattn.io.hf import read_state_dict
from tiny_mbart import hf_model, save_tiny

tiny = parity.tiny_cases(tiny_mbart)
HERE = "tests/families/mbart/test_mbart_parity.py::"


def fifty_slow(test: str):
    """``tiny``'s cases with mbart-50 slow, its fast twin the same test on mbart-cc25: both run the same pre-LN
    layers and interventions; mbart-50 differs in sizes, activation and embedding scale, which its teacher-forced
    parity test checks fast."""
    return parity.slow_case("mbart-cc25", "mbart-50", f"{HERE}{test}[mbart-cc25]")


def test_config_is_pre_ln(tiny):
    _, _, model, _ = tiny
    c = model.config
    assert (c.norm_position, c.final_norm, c.positions, c.position_offset, c.embedding_ln) == ("pre", True, "learned",
                                                                                               2, True)
    assert c.final_logits_bias and c.tie_output and c.shared_embeddings and c.decoder_mask == "all"


def test_parity_teacher_forced_padded(tiny):
    _, _, model, hf = tiny
    parity.check_parity(model, hf)


def test_default_decoder_mask_matches_hf(tiny):
    _, _, model, hf = tiny
    parity.check_default_decoder_mask(model, hf)


def test_hidden_states_equal_hf(tiny):
    """LayerNorm(scale · token + position row p + 2) in, the final LayerNorm's output out."""
    _, _, model, hf = tiny
    parity.check_hidden_states(model, hf)


# mbart-50: the same pre-LN code as mbart-cc25 (fifty_slow)
@fifty_slow("test_pre_ln_internals")
def test_pre_ln_internals(tiny):
    _, _, model, _ = tiny
    parity.check_pre_ln_internals(model)


# mbart-50: the same pre-LN code as mbart-cc25 (fifty_slow)
@fifty_slow("test_head_gates_equal_hf_hooks")
def test_head_gates_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_gates(model, hf)


# mbart-50: the same pre-LN code as mbart-cc25 (fifty_slow)
@fifty_slow("test_disabled_heads_equal_hf_hooks")
def test_disabled_heads_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_disabled(model, hf)


# mbart-50: the same pre-LN code as mbart-cc25 (fifty_slow)
@fifty_slow("test_inputs_embeds_equal_hf")
def test_inputs_embeds_equal_hf(tiny):
    """mBART's ``inputs_embeds`` / ``decoder_inputs_embeds`` are the scaled token embeddings, as jattn's."""
    _, _, model, hf = tiny
    parity.check_inputs_embeds(model, hf)


def test_bare_model_checkpoint(tmp_path):
    """An ``MBartModel`` folder (no ``model.`` prefix, no final_logits_bias) loads; its states equal
    HF's MBartModel and its logits h · E^T equal MBartForConditionalGeneration loaded from it."""
    parity.check_bare_model(save_tiny(tmp_path / "bare", "mbart-cc25", bare=True), hf_model)


def test_refused_and_legacy_configs(tiny):
    from jattn.nn.config import ConfigError

    _, folder, model, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get("mbart")
    for change, match in (({"normalize_before": False}, "normalize_before"),
                          ({"add_final_layer_norm": False}, "add_final_layer_norm"),
                          ({"normalize_embedding": False}, "normalize_embedding"),
                          ({"static_position_embeddings": True}, "static_position_embeddings"),
                          ({"extra_pos_embeddings": 0}, "extra_pos_embeddings"),
                          ({"tie_word_embeddings": False}, "tie_word_embeddings"),
                          ({"activation_function": "glu"}, "activation_function"),
                          ({"forced_bos_token_id": [0, 1]}, "forced_bos_token_id"),
                          ({"decoder_start_token_id": None, "bos_token_id": None}, "decoder_start_token_id")):
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))
    # the layout fields transformers 3/4 wrote for mBART (mbart-large-cc25's config.json) are accepted
    legacy = dict(cfg, normalize_before=True, add_final_layer_norm=True, normalize_embedding=True,
                  static_position_embeddings=False, extra_pos_embeddings=2)
    assert spec.config_from_hf(legacy) == spec.config_from_hf(cfg)
    # mbart-large-cc25 has no decoder_start_token_id: HF's generate starts from bos_token_id
    assert spec.config_from_hf(dict(cfg, decoder_start_token_id=None)).decoder_start_token_id == cfg["bos_token_id"]


def test_conversion_reports_all_problems(tiny):
    _, folder, model, _ = tiny
    parity.check_conversion_problems("mbart", model.config, read_state_dict(folder),
                                     ("model.decoder.layer_norm.weight", "model.encoder.layernorm_embedding.bias"))
