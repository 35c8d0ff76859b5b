"""Greedy and beam search vs Hugging Face ``generate``; the KV-cache step vs teacher forcing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from tiny_seq2seq import hf_model, padded_batch, save_tiny
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module", params=["marian", "fsmt"])
def tiny(request, tmp_path_factory):
    kind = request.param
    folder = save_tiny(tmp_path_factory.mktemp(kind), kind, seed=1)
    return kind, jattn.load(folder, use_cache=False), hf_model(folder, kind)


def _hf_generate(hf, batch, **kw):
    import torch

    with torch.no_grad():
        out = hf.generate(input_ids=torch.tensor(batch["input_ids"]), attention_mask=torch.tensor(batch["attention_mask"]),
                          do_sample=False, early_stopping=False, **kw)
    return out.numpy()


@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (3, 1.0, 12), (4, 0.6, 10)])
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, model, hf = tiny
    batch = padded_batch(model.config, seed=2, b=5)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], num_beams=num_beams, max_length=max_length,
                          length_penalty=length_penalty)
    ref = _hf_generate(hf, batch, num_beams=num_beams, max_length=max_length, length_penalty=length_penalty)
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)
    if kind == "marian":  # EOS boosted (see save_tiny): hypotheses finish at different lengths
        ends = [(row[1:] == model.config.eos_token_id).argmax() for row in ref]
        assert len(set(ends)) > 1


# FSMT's decoder layers and KV cache are Marian's jattn code (they differ in embeddings, output projection and
# default decoder mask); FSMT's cached decoding runs fast in test_generate_matches_hf[fsmt-*]
@pytest.mark.parametrize("tiny", ["marian", pytest.param("fsmt", marks=pytest.mark.slow(
    twin="tests/test_decode.py::test_cached_steps_match_teacher_forcing[marian]"))], indirect=True)
def test_cached_steps_match_teacher_forcing(tiny):
    """Step-by-step decoding with the KV cache gives the teacher-forced logits, also with
    head gates and disabled heads in all three attention types."""
    from jattn.nn import decode, seq2seq

    _, model, _ = tiny
    c = model.config
    batch = padded_batch(c, seed=3, b=3)
    rng = np.random.default_rng(0)
    padded = batch["decoder_attention_mask"] == 0  # fill: fairseq numbers pad tokens' positions differently
    batch["decoder_input_ids"][padded] = rng.integers(4, c.tgt_vocab_size - 1, padded.sum())
    batch["decoder_attention_mask"][:] = 1
    shapes = {"encoder": (c.encoder_layers, c.encoder_heads), "decoder": (c.decoder_layers, c.decoder_heads),
              "cross": (c.decoder_layers, c.decoder_heads)}
    given = {k: Interventions(head_gates=rng.uniform(0, 2, s).astype(np.float32), disabled_heads=rng.uniform(size=s) < 0.3)
             for k, s in shapes.items()}
    full = np.asarray(model.forward(batch, given).logits)  # (b, t, V)
    iv = seq2seq.check_interventions(c, given)
    ids = jnp.asarray(batch["input_ids"], jnp.int32)
    mask = jnp.asarray(batch["attention_mask"], jnp.int32)
    t = batch["decoder_input_ids"].shape[1]
    cache = decode.init_state(model.params, c, ids, mask, iv, t, jnp.float32)
    # under jit with a traced position, as greedy and beam search call it: one program for every step
    # (op by op, each position's slices compiled kernels of their own)
    step = jax.jit(decode.decoder_step, static_argnums=1)
    for pos in range(t):
        tokens = jnp.asarray(batch["decoder_input_ids"][:, pos], jnp.int32)
        logits, cache = step(model.params, c, tokens, jnp.int32(pos), cache, mask, iv)
        assert_close(logits, full[:, pos], terms=model_terms(c, ids.shape[1], t), err_msg=str(pos))  # other shapes


# the banned-token logit mask is the same generate code for both; FSMT differs only in embeddings and output
@pytest.mark.parametrize("tiny", ["marian", pytest.param("fsmt", marks=pytest.mark.slow(
    twin="tests/test_decode.py::test_bad_token_ids_never_generated[marian]"))], indirect=True)
def test_bad_token_ids_never_generated(tiny):
    import dataclasses

    _, model, _ = tiny
    batch = padded_batch(model.config, seed=4, b=3)
    free = model.generate(batch["input_ids"], batch["attention_mask"], max_length=10)
    banned = int(np.bincount(free[:, 1:].ravel()).argmax())  # the most frequent generated token
    if banned in (model.config.eos_token_id, model.config.pad_token_id):
        pytest.skip("the most frequent token is a special token")
    model2 = jattn.models.seq2seq.Seq2SeqModel(dataclasses.replace(model.config, bad_token_ids=(banned,)), model.params)
    for beams in (1, 3):
        out = model2.generate(batch["input_ids"], batch["attention_mask"], num_beams=beams, max_length=10)
        assert banned not in out[:, 1:]
