"""M2M100 / NLLB teacher-forced forward vs Hugging Face PyTorch on padded batches (two shapes):
logits, hidden states, the embedding pipeline (sinusoids numbered from the padding) and every
attention weight of the three attention types, the pre-LN internals; head gates and disabled
heads per attention type against HF with hooks; ``inputs_embeds``; bare ``M2M100Model``
checkpoints; the configuration defaults and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
import seq2seq_family_parity as parity
import tiny_m2m_100
from jattn.io.hf import read_state_dict
from tiny_m2m_100 import hf_model, save_tiny
from tolerance import assert_close

tiny = parity.tiny_cases(tiny_m2m_100)
HERE = "tests/families/m2m_100/test_m2m_100_parity.py::"
MBART = "tests/families/mbart/test_mbart_parity.py::"


def gelu_slow(test: str):
    """``tiny``'s cases with m2m_100-gelu slow, its fast twin the same test on m2m_100: both run the same pre-LN
    layers, interventions and embeddings; m2m_100-gelu differs in sizes, activation and embedding scale, which its
    teacher-forced parity test checks fast."""
    return parity.slow_case("m2m_100", "m2m_100-gelu", f"{HERE}{test}[m2m_100]")


def test_config_is_pre_ln(tiny):
    _, _, model, _ = tiny
    c = model.config
    assert (c.norm_position, c.final_norm, c.positions, c.embedding_ln) == ("pre", True, "tensor2tensor", False)
    assert not c.final_logits_bias and c.tie_output and c.shared_embeddings and c.decoder_mask == "all"


def test_position_table_equals_hf(tiny):
    """jattn's tensor2tensor table holds HF's ``M2M100SinusoidalPositionalEmbedding`` rows (HF's
    table has P + 2 rows, jattn's P + pad + 1), the pad row zero."""
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    from jattn.nn.seq2seq import sinusoid_table

    _, _, model, hf = tiny
    c = model.config
    ref = M2M100SinusoidalPositionalEmbedding(c.max_position_embeddings, c.d_model, c.pad_token_id).weights.numpy()
    ours = sinusoid_table(c)
    n = min(len(ours), len(ref))
    assert_close(ours[:n], ref[:n], terms=c.d_model)
    assert not ours[c.pad_token_id].any()


def test_parity_teacher_forced_padded(tiny):
    _, _, model, hf = tiny
    parity.check_parity(model, hf)


def test_default_decoder_mask_matches_hf(tiny):
    _, _, model, hf = tiny
    parity.check_default_decoder_mask(model, hf)


def test_hidden_states_equal_hf(tiny):
    """scale · token + sinusoid row pad + i in (the zero row on padding), the final LayerNorm's output out."""
    _, _, model, hf = tiny
    parity.check_hidden_states(model, hf)


# the same pre-LN LayerNorm layers and interventions as mBART's (M2M100 differs in embeddings only), fast twin mBART's
@pytest.mark.slow(twin=MBART + "test_pre_ln_internals")
def test_pre_ln_internals(tiny):
    _, _, model, _ = tiny
    parity.check_pre_ln_internals(model)


# the same pre-LN LayerNorm layers and interventions as mBART's (M2M100 differs in embeddings only), fast twin mBART's
@pytest.mark.slow(twin=MBART + "test_head_gates_equal_hf_hooks")
def test_head_gates_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_gates(model, hf)


# the same pre-LN LayerNorm layers and interventions as mBART's (M2M100 differs in embeddings only), fast twin mBART's
@pytest.mark.slow(twin=MBART + "test_disabled_heads_equal_hf_hooks")
def test_disabled_heads_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_disabled(model, hf)


# m2m_100-gelu: the same embeddings code as m2m_100 (gelu_slow)
@gelu_slow("test_inputs_embeds_equal_hf")
def test_inputs_embeds_equal_hf(tiny):
    """The scaled token embeddings, as jattn's; on right-padded rows' real tokens HF's positions
    (every position numbered) and jattn's (the real tokens counted) agree."""
    _, _, model, hf = tiny
    parity.check_inputs_embeds(model, hf)


def test_bare_model_checkpoint(tmp_path):
    """An ``M2M100Model`` folder (no ``model.`` prefix) loads; its states equal HF's M2M100Model
    and its logits h · E^T equal M2M100ForConditionalGeneration loaded from it."""
    parity.check_bare_model(save_tiny(tmp_path / "bare", "m2m_100", bare=True), hf_model)


def test_defaults_and_refused_configs(tiny):
    """Fields a config.json may omit take M2M100Config's defaults (scale_embedding, the start
    token, LayerDrop 0.05: refused); what jattn cannot run is refused, naming the field."""
    from jattn.nn.config import ConfigError

    _, folder, model, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get("m2m_100")
    bare = {k: v for k, v in cfg.items() if k not in ("scale_embedding", "decoder_start_token_id", "attention_dropout")}
    got = spec.config_from_hf(dict(bare, encoder_layerdrop=0.0, decoder_layerdrop=0.0))
    assert (got.scale_embedding, got.decoder_start_token_id, got.attention_dropout) == (True, 2, 0.1)
    assert spec.config_from_hf(cfg).layerdrop == (0.0, 0.0)
    omitted = {k: v for k, v in cfg.items() if "layerdrop" not in k}
    assert spec.config_from_hf(omitted).layerdrop == (0.05, 0.05)  # M2M100Config's default: kept; evaluation as HF
    for change, match in (({"normalize_before": False}, "normalize_before"),
                          ({"add_final_layer_norm": False}, "add_final_layer_norm"),
                          ({"normalize_embedding": True}, "normalize_embedding"),
                          ({"tie_word_embeddings": False}, "tie_word_embeddings"),
                          ({"d_model": 33, "encoder_attention_heads": 1, "decoder_attention_heads": 1}, "even"),
                          ({"activation_function": "glu"}, "activation_function")):
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))
    with pytest.raises(ConfigError, match="unsupported model_type 'nllb-moe'"):  # NLLB-200's mixture of experts
        jattn.families.get("nllb-moe")


def test_conversion_reports_all_problems(tiny):
    """Also: the sinusoid table older versions saved is no problem."""
    _, folder, model, _ = tiny
    state = read_state_dict(folder)
    state["model.encoder.embed_positions.weights"] = np.zeros((66, model.config.d_model))  # saved by older versions
    message = parity.check_conversion_problems("m2m_100", model.config, state, (
        "model.encoder.layer_norm.bias", "model.decoder.layers.0.encoder_attn.k_proj.weight"))
    assert "embed_positions" not in message
