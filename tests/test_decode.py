"""Greedy and beam search vs Hugging Face ``generate``; the KV-cache step vs teacher forcing."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import seq2seq_family_generate as generation
import seq2seq_family_parity as parity
from jattn import Interventions
from tiny_seq2seq import hf_model, padded_batch, save_tiny


@pytest.fixture(scope="module", params=["marian", "fsmt"])
def tiny(request, tmp_path_factory):
    kind = request.param
    folder = save_tiny(tmp_path_factory.mktemp(kind), kind, seed=1)
    return kind, jattn.load(folder, use_cache=False), hf_model(folder, kind)


@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (3, 1.0, 12), (4, 0.6, 10)])
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, model, hf = tiny
    ref = generation.check_same_ids(
        model, hf, num_beams=num_beams, max_length=max_length, length_penalty=length_penalty
    )
    if kind == "marian":  # EOS boosted (see save_tiny): hypotheses finish at different lengths
        generation.check_ends_differ(ref, model.config.eos_token_id)


# FSMT's decoder layers and KV cache are Marian's jattn code (they differ in embeddings, output projection and
# default decoder mask); FSMT's cached decoding runs fast in test_generate_matches_hf[fsmt-*]
@pytest.mark.parametrize("tiny", ["marian", pytest.param("fsmt", marks=pytest.mark.slow(
    twin="tests/test_decode.py::test_cached_steps_match_teacher_forcing[marian]"))], indirect=True)
def test_cached_steps_match_teacher_forcing(tiny):
    """Step-by-step decoding with the KV cache gives the teacher-forced logits, also with
    head gates and disabled heads in all three attention types; the step under jit, as greedy and
    beam search call it."""
    _, model, _ = tiny
    c = model.config
    batch = padded_batch(c, seed=3, b=3)
    rng = np.random.default_rng(0)
    padded = batch["decoder_attention_mask"] == 0  # fill: fairseq numbers pad tokens' positions differently
    batch["decoder_input_ids"][padded] = rng.integers(4, c.tgt_vocab_size - 1, padded.sum())
    batch["decoder_attention_mask"][:] = 1
    given = {
        k: Interventions(head_gates=rng.uniform(0, 2, s).astype(np.float32), disabled_heads=rng.uniform(size=s) < 0.3)
        for k, s in parity.shapes(c).items()
    }
    generation.check_steps(model, batch, given, jit=True)


# the banned-token logit mask is the same generate code for both; FSMT differs only in embeddings and output
@pytest.mark.parametrize("tiny", ["marian", pytest.param("fsmt", marks=pytest.mark.slow(
    twin="tests/test_decode.py::test_bad_token_ids_never_generated[marian]"))], indirect=True)
def test_bad_token_ids_never_generated(tiny):
    import dataclasses

    _, model, _ = tiny
    batch = padded_batch(model.config, seed=4, b=3)
    free = model.generate(batch["input_ids"], batch["attention_mask"], max_length=10).sequences
    banned = int(np.bincount(free[:, 1:].ravel()).argmax())  # the most frequent generated token
    if banned in (model.config.eos_token_id, model.config.pad_token_id):
        pytest.skip("the most frequent token is a special token")
    model2 = jattn.models.seq2seq.Seq2SeqModel(dataclasses.replace(model.config, bad_token_ids=(banned,)), model.params)
    for beams in (1, 3):
        out = model2.generate(batch["input_ids"], batch["attention_mask"], num_beams=beams, max_length=10).sequences
        assert banned not in out[:, 1:]
