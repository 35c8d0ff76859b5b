"""GPT-2 (``jattn/families/gpt2``) against Hugging Face's ``GPT2LMHeadModel`` (eager attention) on a
tiny random config: next-token logits, every hidden state and attention weight on a right-padded
batch, head gates (per head / example / token) and disabled heads, the causal mask in every layer,
and greedy and beam ``generate`` ids on left-padded prompts."""

from __future__ import annotations

import numpy as np
import pytest

from encoder_family_parity import new_hf, save_random
from lm_family_parity import (check_generate, check_lm_disabled, check_lm_gates, check_lm_outputs, lm_batch,
                              load_lm_pair)

SHAPE = dict(vocab_size=80, n_embd=32, n_layer=3, n_head=4, n_positions=64, n_inner=48, bos_token_id=0,
             eos_token_id=1, pad_token_id=2)
LENGTHS = [11, 6, 3, 11]


def save_gpt2(folder, seed=0, **fields):
    return save_random(new_hf("GPT2Config", "GPT2LMHeadModel", {**SHAPE, **fields}, seed), folder, seed)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return load_lm_pair(save_gpt2(tmp_path_factory.mktemp("gpt2")))


@pytest.fixture(scope="module")
def batch(pair):
    return lm_batch(pair[0].config, LENGTHS, seed=3)


def test_config(pair):
    c = pair[0].config
    assert (c.causal, c.norm_position, c.final_norm, c.embedding_norm, c.tied_lm_head) == (True, "pre", True, False, True)
    assert (c.hidden_act, c.intermediate_size, c.type_vocab_size, c.kv_head) == ("gelu_new", 48, 0, (0, 1, 2, 3))


def test_outputs_and_attention(pair, batch):
    check_lm_outputs(*pair, batch)


def test_attention_is_causal(pair, batch):
    w = np.asarray(pair[0].forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)
    assert np.all(w[..., np.triu(np.ones(w.shape[-2:], bool), 1)] == 0)


def test_head_gates(pair, batch):
    check_lm_gates(*pair, batch)


def test_disabled_heads(pair, batch):
    check_lm_disabled(*pair, batch, values_slice=lambda out: out[..., 2 * out.shape[-1] // 3:])


def test_classify_is_refused(pair, batch):
    with pytest.raises(ValueError, match="causal language model"):
        pair[0].classify(batch)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_equals_hf(pair, num_beams):
    check_generate(*pair, [7, 4, 2], num_beams)


def test_export_round_trip(pair, batch):
    """The exported state dict is the converted one (``c_attn`` joined)."""
    from jattn.nn.state import to_arrays

    model = pair[0]
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    again = model.family.convert(state, model.config)
    np.testing.assert_array_equal(again["layers"]["attention"]["query"]["kernel"],
                                  np.asarray(model.params["layers"]["attention"]["query"]["kernel"][...]))


def test_refused_configs(tmp_path):
    import jattn
    from jattn.nn.config import ConfigError

    with pytest.raises(ConfigError, match="scale_attn_by_inverse_layer_idx"):
        jattn.load(save_gpt2(tmp_path, scale_attn_by_inverse_layer_idx=True), tokenizer=False)


def test_generate_refuses_right_padding_and_returns_attentions(pair):
    from lm_family_parity import left_padded

    model = pair[0]
    ids, mask = left_padded(model.config, [5, 3])
    with pytest.raises(ValueError, match="left-padded"):
        model.generate(ids, mask[:, ::-1].copy(), max_new_tokens=3)
    gen = model.generate(ids, mask, max_new_tokens=3, return_attentions=True)
    out, att = gen.sequences, gen.attentions
    assert out.shape[1] <= ids.shape[1] + 3 and att.shape == (3, 2, 4, out.shape[1], out.shape[1])
    # the generated tokens' attention rows sum to 1 over the real keys at or before them
    np.testing.assert_allclose(np.asarray(att)[..., ids.shape[1]:, :].sum(-1), 1.0, rtol=1e-5)


def test_generate_with_gates_equals_hf_hooks(pair):
    """Head gates during generation: HF ``generate`` with the same (L, H) gates hooked in."""
    import torch

    from hf_head_gates import gated
    from lm_family_parity import left_padded

    model, oracle = pair
    ids, mask = left_padded(model.config, [6, 4])
    g = np.random.default_rng(5).uniform(0, 1.5, (model.config.num_layers, model.config.num_heads)).astype(np.float32)
    with gated(oracle, {"encoder": torch.tensor(g)}), torch.no_grad():
        want = oracle.generate(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                               do_sample=False, max_new_tokens=6, pad_token_id=model.config.pad_token_id).numpy()
    from jattn import Interventions

    got = model.generate(ids, mask, max_new_tokens=6, interventions=Interventions(head_gates=g)).sequences
    np.testing.assert_array_equal(got, want)
