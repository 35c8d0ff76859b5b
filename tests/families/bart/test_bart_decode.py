"""BART greedy and beam search vs Hugging Face ``generate`` (decoder start </s>, forced <s> first
where the generation config asks, forced </s> at max_length); the KV-cache step vs teacher forcing."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jattn
from jattn import Interventions
from tiny_bart import CONFIGS, EOS_BOOST, FORCED_BOS, hf_model, save_tiny
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param, seed=1,
                       eos_boost=EOS_BOOST[request.param])
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder)


HERE = "tests/families/bart/test_bart_decode.py::"


def scaled_slow(twin: str):
    """``tiny``'s cases with bart-scaled slow: BART decodes both through the same post-LN cache and search
    (jattn.nn.decode); bart-scaled differs in sizes, activation, embedding scale and no forced <s>, which the
    teacher-forced parity tests (test_bart_parity.py) and the mBART / M2M100 cases check fast."""
    return pytest.mark.parametrize("tiny", ["bart", pytest.param("bart-scaled", marks=pytest.mark.slow(twin=twin))],
                                   indirect=True)


# a second length penalty is the same beam arithmetic (jattn.nn.decode) as 0.6: fast twin [bart-4-0.6-10]
@pytest.mark.parametrize("num_beams,length_penalty,max_length", [
    (1, 1.0, 12), (4, 1.0, 12), (4, 0.6, 10),
    pytest.param(4, 2.0, 14, marks=pytest.mark.slow(twin=HERE + "test_generate_matches_hf[bart-4-0.6-10]"))])
# bart-scaled: fast twin bart's same search (scaled_slow)
@scaled_slow(HERE + "test_generate_matches_hf[bart-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, model, hf = tiny
    batch = padded_batch(model.config, seed=2, b=5)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], num_beams=num_beams, max_length=max_length,
                          length_penalty=length_penalty)
    with torch.no_grad():
        ref = hf.generate(input_ids=torch.tensor(batch["input_ids"]), attention_mask=torch.tensor(batch["attention_mask"]),
                          do_sample=False, early_stopping=False, num_beams=num_beams, max_length=max_length,
                          length_penalty=length_penalty).numpy()
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)
    c = model.config
    assert (ref[:, 0] == c.decoder_start_token_id).all()
    assert (c.forced_bos_token_id is not None) == FORCED_BOS[kind]
    if FORCED_BOS[kind]:
        assert (ref[:, 1] == c.forced_bos_token_id).all()
    if max_length == 12:  # EOS boosted (EOS_BOOST): hypotheses end at different lengths
        ends = [(row[1:] == c.eos_token_id).argmax() for row in ref]
        assert len(set(ends)) > 1


# the same post-LN decoder step and KV cache, with gates and disabled heads in all three types, as Marian's and FSMT's
# (BART differs in embeddings only: its learned positions offset by the step are checked by the generate tests)
@pytest.mark.slow(twin="tests/test_decode.py::test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    """Step-by-step decoding with the KV cache (learned positions offset by the step) gives the
    teacher-forced logits, with head gates and disabled heads in all three attention types."""
    from jattn.nn import decode, seq2seq

    _, model, _ = tiny
    c = model.config
    batch = padded_batch(c, seed=3, b=3)
    batch["decoder_attention_mask"][:] = 1
    rng = np.random.default_rng(0)
    shapes = {"encoder": (c.encoder_layers, c.encoder_heads), "decoder": (c.decoder_layers, c.decoder_heads),
              "cross": (c.decoder_layers, c.decoder_heads)}
    given = {k: Interventions(head_gates=rng.uniform(0, 2, s).astype(np.float32),
                              disabled_heads=rng.uniform(size=s) < 0.3) for k, s in shapes.items()}
    full = np.asarray(model.forward(batch, given).logits)  # (b, t, V)
    iv = seq2seq.check_interventions(c, given)
    ids = jnp.asarray(batch["input_ids"], jnp.int32)
    mask = jnp.asarray(batch["attention_mask"], jnp.int32)
    t = batch["decoder_input_ids"].shape[1]
    cache = decode.init_state(model.params, c, ids, mask, iv, t, jnp.float32)
    for pos in range(t):
        tokens = jnp.asarray(batch["decoder_input_ids"][:, pos], jnp.int32)
        logits, cache = decode.decoder_step(model.params, c, tokens, pos, cache, mask, iv)
        assert_close(logits, full[:, pos], terms=model_terms(c, ids.shape[1], t), err_msg=str(pos))


# bart-scaled: fast twin bart's same gated search (scaled_slow)
@scaled_slow(HERE + "test_generate_with_interventions_equals_gated_hf[bart]")
def test_generate_with_interventions_equals_gated_hf(tiny):
    """Greedy decoding with cross-attention head gates equals HF's generate with the same gates
    applied by hooks."""
    from hf_head_gates import gated

    _, model, hf = tiny
    c = model.config
    batch = padded_batch(c, seed=6, b=4)
    gates = np.random.default_rng(2).uniform(0, 2, (c.decoder_layers, c.decoder_heads)).astype(np.float32)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], max_length=12,
                          interventions={"cross": Interventions(head_gates=gates)})
    with torch.no_grad(), gated(hf, {"cross": torch.tensor(gates)}):
        ref = hf.generate(input_ids=torch.tensor(batch["input_ids"]), attention_mask=torch.tensor(batch["attention_mask"]),
                          do_sample=False, num_beams=1, max_length=12).numpy()
    np.testing.assert_array_equal(ours, ref)
