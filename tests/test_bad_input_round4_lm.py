"""Bad input, round 4, causal LMs and generation (issue #79): GPT-2's learned positions on a
left-padded batch come from the attention mask (``cumsum(mask) − 1``, HF ``generate``'s numbering)
in the forward and in ``generate(return_attentions=True)``; every model method traces under
``jax.jit(jax.grad(...))`` with the batch closed over or passed; ``generate`` / ``translate`` refuse
non-finite length penalties, non-integer lengths, empty prompts, embeddings and a forced first token
that is not a language code, naming the argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from lm_family_parity import left_padded, load_lm_pair, save_gpt2
from tolerance import assert_close, model_terms

LENGTHS = [7, 4, 2]  # left-padded prompts; row 0 unpadded


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_lm_pair(save_gpt2(tmp_path_factory.mktemp("gpt2")))


@pytest.fixture(scope="module")
def m2m(tmp_path_factory):
    from tiny_m2m_100 import save_tiny

    return jattn.load(save_tiny(tmp_path_factory.mktemp("m2m")), use_cache=False)


def hf_positions(mask: np.ndarray) -> np.ndarray:
    """HF ``generate``'s position ids of a left-padded batch: cumsum(mask) − 1, 0 on the padding."""
    return np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 0)


def hf_forward(oracle, ids, mask):
    import torch

    with torch.no_grad():
        return oracle(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                      position_ids=torch.tensor(hf_positions(mask)), output_attentions=True)


def test_left_padded_logits_and_attentions_equal_unpadded_and_hf(gpt2):
    """Each left-padded row's logits and attention at its real tokens equal the prompt's alone and
    HF GPT-2's with the mask-derived position ids."""
    model, oracle = gpt2
    ids, mask = left_padded(model.config, LENGTHS)
    n, terms = ids.shape[1], model_terms(model.config, ids.shape[1])
    out = model.forward({"input_ids": ids, "attention_mask": mask}, internals=("weights",))
    ref = hf_forward(oracle, ids, mask)
    for i, k in enumerate(LENGTHS):
        real = slice(n - k, n)
        alone = model.forward({"input_ids": ids[i:, real][:1], "attention_mask": mask[i:, real][:1]},
                              internals=("weights",))
        assert_close(out.logits[i, real], alone.logits[0], terms=terms, err_msg=f"row {i} logits")
        assert_close(out.logits[i, real], ref.logits[i, real].numpy(), terms=terms, err_msg=f"row {i} vs HF")
        for layer, att in enumerate(ref.attentions):
            got = np.asarray(out.attentions[layer, i])[:, real, real]  # (H, k, k)
            assert_close(got, np.asarray(alone.attentions[layer, 0]), terms=terms, err_msg=f"row {i} layer {layer}")
            assert_close(got, att[i, :, real, real].numpy(), terms=terms, err_msg=f"row {i} layer {layer} vs HF")


def test_generate_attentions_equal_the_prompt_alone_and_hf(gpt2):
    """``generate(return_attentions=True)`` on left-padded prompts: each row's ids and attention at
    its real tokens equal generating from the prompt alone, and HF's forward over the returned ids
    with the mask-derived position ids."""
    model, oracle = gpt2
    ids, mask = left_padded(model.config, [6, 3])
    gen = model.generate(ids, mask, max_new_tokens=4, return_attentions=True)
    out, att = gen.sequences, gen.attentions
    full = np.concatenate([mask, np.ones((2, out.shape[1] - ids.shape[1]), mask.dtype)], axis=1)
    assert (out[:, ids.shape[1]:] != model.config.eos_token_id).all(), "a row stopped: pick another seed"
    ref = hf_forward(oracle, out, full)
    n, terms = out.shape[1], model_terms(model.config, out.shape[1])
    for i, k in enumerate([6 + 4, 3 + 4]):
        real = slice(n - k, n)
        alone = model.generate(out[i:i + 1, n - k:ids.shape[1]], max_new_tokens=4, return_attentions=True)
        alone_ids, alone_att = alone.sequences, alone.attentions
        np.testing.assert_array_equal(alone_ids[0], out[i, real])
        for layer in range(model.config.num_layers):
            got = np.asarray(att[layer, i])[:, real, real]  # (H, k, k)
            assert_close(got, np.asarray(alone_att[layer, 0]), terms=terms, err_msg=f"row {i} layer {layer}")
            assert_close(got, ref.attentions[layer][i, :, real, real].numpy(), terms=terms,
                         err_msg=f"row {i} layer {layer} vs HF")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from tiny_encoders import save_tiny

    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4"), tokenizer=False)


def loss_of(model):
    """(a function of (L, H) gates and a batch calling ``model.forward``, the gates' shape, the batch)."""
    c = model.config
    ids, mask = left_padded(c, [5, 3], seed=4)
    batch = {"input_ids": jnp.asarray(ids), "attention_mask": jnp.asarray(mask)}
    if hasattr(c, "d_model"):  # a translation model: gates on its decoder's self-attention
        batch["decoder_input_ids"] = jnp.asarray(ids[:, ::-1])

        def loss(gates, batch):
            return (
                model.forward(batch, {"decoder": Interventions(head_gates=gates)}, internals=None).logits ** 2
            ).sum()

        return loss, (c.decoder_layers, c.decoder_heads), batch
    read = (lambda r: r.logits) if c.causal else (lambda r: r.last_hidden_state)

    def loss(gates, batch):
        return (read(model.forward(batch, Interventions(head_gates=gates), internals=None)) ** 2).sum()

    return loss, (c.num_layers, c.num_heads), batch


@pytest.mark.parametrize("kind", ["encoder", "lm", "seq2seq"])
def test_jit_grad_with_the_batch_closed_over_or_passed(kind, bert, gpt2, m2m):
    """``jax.jit(jax.grad(f))`` of a function calling ``model.forward`` on a batch of jax arrays,
    closed over or passed, equals the gradient outside ``jit``; a closed-over batch's values are
    still checked (they are concrete)."""
    model = {"encoder": bert, "lm": gpt2[0], "seq2seq": m2m}[kind]
    loss, shape, batch = loss_of(model)
    gates = jnp.ones(shape)
    want = jax.grad(loss)(gates, batch)
    closed = jax.jit(jax.grad(lambda g: loss(g, batch)))(gates)
    passed = jax.jit(jax.grad(loss))(gates, batch)
    terms = 2 * model_terms(model.config, batch["input_ids"].shape[1])
    assert_close(closed, want, terms=terms)
    assert_close(passed, want, terms=terms)
    bad = dict(batch, input_ids=batch["input_ids"].at[0, -1].set(10 ** 6))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        jax.jit(jax.grad(lambda g: loss(g, bad)))(gates)


NOT_FINITE = [float("nan"), float("inf")]


@pytest.mark.parametrize("value", NOT_FINITE)
def test_generate_refuses_a_non_finite_length_penalty(value, gpt2, m2m):
    ids, mask = left_padded(gpt2[0].config, [3, 2])
    for beams in (1, 2):
        with pytest.raises(ValueError, match="length_penalty"):
            gpt2[0].generate(ids, mask, max_new_tokens=2, num_beams=beams, length_penalty=value)
        with pytest.raises(ValueError, match="length_penalty"):
            m2m.generate(ids, mask, max_length=4, num_beams=beams, length_penalty=value)


@pytest.mark.parametrize("name,value", [("max_new_tokens", 2.5), ("max_new_tokens", 0), ("max_new_tokens", True),
                                        ("num_beams", 1.5), ("num_beams", 0), ("num_beams", "2")])
def test_decoder_generate_refuses_non_integer_counts(name, value, gpt2):
    ids, mask = left_padded(gpt2[0].config, [3, 2])
    with pytest.raises(ValueError, match=name):
        gpt2[0].generate(ids, mask, **{"max_new_tokens": 2, "num_beams": 1, name: value})


@pytest.mark.parametrize("name,value", [("max_length", 3.5), ("max_length", 1), ("num_beams", 1.5), ("num_beams", 0)])
def test_seq2seq_generate_refuses_non_integer_counts(name, value, m2m):
    ids = np.full((1, 3), 10, np.int32)
    with pytest.raises(ValueError, match=name):
        m2m.generate(ids, **{"max_length": 4, "num_beams": 1, name: value})


@pytest.mark.parametrize("case", ["empty prompt", "no prompts", "embeddings"])
def test_generate_says_what_is_wrong_with_the_prompts(case, gpt2, m2m):
    """An empty prompt, a batch of 0 prompts and embeddings in place of token ids, in the caller's terms."""
    for model, width in ((gpt2[0], gpt2[0].config.hidden_size), (m2m, m2m.config.d_model)):
        prompts, match = {"empty prompt": (np.zeros((1, 0), np.int32), "at least one token"),
                          "no prompts": (np.zeros((0, 4), np.int32), "at least one"),
                          "embeddings": (np.zeros((1, 4, width), np.float32), "token ids")}[case]
        kwargs = {"max_new_tokens": 2} if model is gpt2[0] else {"max_length": 4}
        with pytest.raises(ValueError, match=match) as e:
            model.generate(prompts, **kwargs)
        assert "one shape" not in str(e.value)


def test_translate_refuses_a_forced_token_that_is_not_a_language_code(m2m):
    """``<unk>`` (a mistyped code: ``convert_tokens_to_ids`` gives it) and a word piece are refused by
    name; a language code of the tokenizer is taken."""
    from tiny_m2m_100 import OTHER_LANG

    tok = m2m.tokenizer
    for bad in (tok.unk_token_id, tok.convert_tokens_to_ids("fra_Latm"), tok.convert_tokens_to_ids("▁homme")):
        with pytest.raises(ValueError, match="forced_bos_token_id"):
            m2m.translate(["un homme"], num_beams=1, max_length=4, forced_bos_token_id=bad)
        with pytest.raises(ValueError, match="forced_bos_token_id"):
            m2m.generate(np.full((1, 3), 10, np.int32), max_length=4, forced_bos_token_id=bad)
    code = tok.convert_tokens_to_ids(OTHER_LANG)
    out = m2m.generate(np.full((1, 3), 10, np.int32), max_length=4, forced_bos_token_id=code).sequences
    assert out[0, 1] == code
