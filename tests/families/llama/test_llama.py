"""Llama and Qwen2 (``jattn/families/llama``, ``jattn/families/qwen2``) against Hugging Face's
``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (eager attention) on tiny random configs with
grouped-query attention (4 query heads, 2 key/value heads), rotary positions, RMSNorm and SwiGLU:
next-token logits, every hidden state and attention weight on a right-padded batch, head gates
per head / example / token, disabled heads (uniform over the keys the query may see, from the
query head's key/value head), greedy and beam ``generate`` ids on left-padded prompts; Llama tied
and untied, with and without biases; RoPE scaling refused."""

from __future__ import annotations

import numpy as np
import pytest

import jattn

from encoder_family_parity import new_hf, save_random
from lm_family_parity import (check_generate, check_lm_disabled, check_lm_gates, check_lm_outputs, lm_batch,
                              load_lm_pair)

SHAPE = dict(vocab_size=80, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=40, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=2,
             rms_norm_eps=1e-6)
LENGTHS = [11, 6, 3, 11]
FAMILIES = ("llama", "qwen2")


def save_lm(folder, model_type="llama", seed=0, **fields):
    name = {"llama": "Llama", "qwen2": "Qwen2"}[model_type]
    fields = {**SHAPE, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}, **fields}
    return save_random(new_hf(f"{name}Config", f"{name}ForCausalLM", fields, seed), folder, seed)


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    return load_lm_pair(save_lm(tmp_path_factory.mktemp(request.param), request.param))


@pytest.fixture(scope="module")
def batch(pair):
    return lm_batch(pair[0].config, LENGTHS, seed=3)


def llama_only(test: str):
    """``pair``'s cases with qwen2 slow, its fast twin the same test on llama: Qwen2 runs Llama's layers and
    interventions; its only difference, the q/k/v biases, is in the forward checked by test_outputs_and_attention."""
    return pytest.mark.parametrize("pair", ["llama", pytest.param("qwen2", marks=pytest.mark.slow(
        twin=f"tests/families/llama/test_llama.py::{test}[llama]"))], indirect=True)


def test_config(pair):
    c = pair[0].config
    assert (c.causal, c.norm, c.gated_ffn, c.rotary_theta, c.kv_heads, c.kv_head) == (True, "rms", True, 500.0, 2,
                                                                                      (0, 0, 1, 1))
    assert c.attention_bias == (c.model_type == "qwen2") and c.attention_out_bias in (None, False)


def test_outputs_and_attention(pair, batch):
    check_lm_outputs(*pair, batch)


# qwen2: Llama's gates in the same layers (llama_only)
@llama_only("test_head_gates")
def test_head_gates(pair, batch):
    check_lm_gates(*pair, batch)


# qwen2: Llama's disabling in the same layers (llama_only)
@llama_only("test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_lm_disabled(*pair, batch)


# qwen2: Llama's grouped values in the same layers (llama_only)
@llama_only("test_values_are_per_query_head")
def test_values_are_per_query_head(pair, batch):
    """The ``values`` internal (L, b, H, n, d_h): query heads of one group read the same values."""
    v = np.asarray(pair[0].forward(batch, internals=("values",)).internals["values"])
    np.testing.assert_array_equal(v[:, :, 0], v[:, :, 1])
    assert not np.allclose(v[:, :, 1], v[:, :, 2])


# Qwen2 decodes through Llama's step (its only difference, the q/k/v biases, is in the forward checked above): fast
# twin test_generate_equals_hf[llama-*]
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_equals_hf(pair, num_beams, request):
    if pair[0].config.model_type == "qwen2" and not request.config.getoption("--runslow"):
        pytest.skip("Qwen2 decodes through Llama's code path, run on Llama; Qwen2 too: --runslow")
    check_generate(*pair, [7, 4, 2], num_beams)


def test_tied_with_biases(tmp_path):
    model, oracle = load_lm_pair(save_lm(tmp_path, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                         num_key_value_heads=1))
    assert model.config.tied_lm_head and model.config.kv_head == (0, 0, 0, 0)
    check_lm_outputs(model, oracle, lm_batch(model.config, LENGTHS, seed=4))


def test_export_round_trip(pair):
    from jattn.nn.state import to_arrays

    model = pair[0]
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    again = model.family.convert(state, model.config)
    np.testing.assert_array_equal(again["layers"]["ffn_in"]["kernel"],
                                  np.asarray(model.params["layers"]["ffn_in"]["kernel"][...]))


def test_rope_scaling_is_refused(tmp_path):
    import jattn
    from jattn.nn.config import ConfigError

    folder = save_lm(tmp_path, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0})
    with pytest.raises(ConfigError, match="rope_type"):
        jattn.load(folder, tokenizer=False)


GEMMA2 = dict(vocab_size=80, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=40, head_dim=16, sliding_window=4, max_position_embeddings=64, query_pre_attn_scalar=12,
              attn_logit_softcapping=2.0, final_logit_softcapping=3.0, bos_token_id=0, eos_token_id=1, pad_token_id=2,
              rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """Gemma 2 with a window (4) shorter than the batch, soft-capping that bites (scores and logits
    capped at 2 and 3), head_dim 16 ≠ D / H and query_pre_attn_scalar 12 ≠ head_dim."""
    folder = save_random(new_hf("Gemma2Config", "Gemma2ForCausalLM", GEMMA2), tmp_path_factory.mktemp("gemma2"))
    return load_lm_pair(folder)


def test_gemma2_config(gemma):
    c = gemma[0].config
    assert (c.norm_offset, c.sublayer_post_norm, c.attention_softcap, c.logit_softcap) == (1.0, True, 2.0, 3.0)
    assert c.attention_radius == (3, 0, 3, 0) and c.head_dim == 16 and c.tied_lm_head


def test_gemma2_outputs_gates_disabled(gemma):
    batch = lm_batch(gemma[0].config, LENGTHS, seed=3)
    check_lm_outputs(*gemma, batch)
    check_lm_gates(*gemma, batch)
    check_lm_disabled(*gemma, batch)


# beam search moves Gemma 2's windowed caches by the same row gather as Llama's (fast twin
# test_generate_equals_hf[llama-3]); its windowed, soft-capped steps run in the greedy case
@pytest.mark.parametrize("num_beams", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_gemma2_generate_equals_hf(gemma, num_beams):
    check_generate(*gemma, [7, 4, 2], num_beams)


def test_gemma2_refuses_the_residual_decomposition(gemma):
    """Sublayer post-norms put Gemma 2's blocks outside both decomposable forms (docs/METHODS.md):
    AttnRes-N and ALTI are refused with the applicable alternatives named; the attention-only norms
    and value zeroing run."""
    from jattn.analyses.context_mixing import value_zeroing

    model = gemma[0]
    batch = lm_batch(model.config, LENGTHS, seed=3)
    for call in (lambda: jattn.norms(model, batch, residual=True), lambda: jattn.attributions(model, batch)):
        with pytest.raises(ValueError, match="sublayer post-norms.*Fix: the attention-only norms"):
            call()
    assert np.isfinite(jattn.norms(model, batch)["encoder"]["summed_norm"]).all()
    assert np.isfinite(value_zeroing(model, batch)["value_zeroing"]).all()


def test_pruning_refuses_grouped_query_attention(pair):
    """Physical pruning under GQA (a key/value head serving several query heads) is refused, naming gates."""
    from jattn.sweeps.pruning import remove_heads

    model = pair[0]
    if model.config.kv_heads == model.config.num_heads:
        pytest.skip("multi-head attention: pruning applies")
    with pytest.raises(ValueError, match="grouped-query attention.*Fix: gate the heads"):
        remove_heads(model, np.ones((model.config.num_layers, model.config.num_heads), bool))
