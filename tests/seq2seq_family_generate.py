"""The generation checks the encoder–decoder families' tests (BART, mBART, M2M100, T5) run against
Hugging Face PyTorch on a tiny random checkpoint: greedy and beam search against ``generate`` (with a
forced first token, also given per call, and with cross-attention gates applied by hooks), and the
KV-cache step against teacher forcing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from hf_head_gates import gated
from jattn import Interventions
from seq2seq_family_parity import shapes
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms

def hf_generate(hf, batch, **kw) -> np.ndarray:
    with torch.no_grad():
        return hf.generate(input_ids=torch.tensor(batch["input_ids"]),
                           attention_mask=torch.tensor(batch["attention_mask"]), do_sample=False,
                           early_stopping=False, **kw).numpy()


def check_same_ids(model, hf, **search) -> np.ndarray:
    """Greedy / beam ids (``search``: num_beams, max_length, length_penalty) on a padded batch equal
    HF ``generate``'s. -> HF's ids (b, t)."""
    batch = padded_batch(model.config, seed=2, b=5)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], **search).sequences
    ref = hf_generate(hf, batch, **search)
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)
    return ref


def check_ends_differ(ids: np.ndarray, eos_id: int) -> None:
    """The hypotheses ``ids`` (b, t) end at different lengths: the searches' finished-hypothesis
    paths ran."""
    ends = [(row[1:] == eos_id).argmax() for row in ids]
    assert len(set(ends)) > 1


def check_generate(model, hf, num_beams: int, length_penalty: float, max_length: int, forced_bos: bool) -> None:
    """Greedy / beam ids equal HF ``generate``'s: the start token, the forced first token where the
    generation config has one, hypotheses of different lengths (EOS boosted at max_length 12)."""
    ref = check_same_ids(model, hf, num_beams=num_beams, max_length=max_length, length_penalty=length_penalty)
    c = model.config
    assert (ref[:, 0] == c.decoder_start_token_id).all()
    assert (c.forced_bos_token_id is not None) == forced_bos
    if forced_bos:
        assert (ref[:, 1] == c.forced_bos_token_id).all()
    if max_length == 12:
        check_ends_differ(ref, c.eos_token_id)


def check_generate_language(model, hf, code: int) -> None:
    """A target language code forced per call (``jattn.nn.decode.generate(forced_bos_token_id=)``,
    the model's ``generate``) equals HF's ``generate(forced_bos_token_id=)``, greedy and beam."""
    from jattn.nn import decode

    batch = padded_batch(model.config, seed=7, b=3)
    for beams in (1, 3):
        ours = decode.generate(model.params, model.config, batch["input_ids"], batch["attention_mask"],
                               num_beams=beams, max_length=10, forced_bos_token_id=code)
        ref = hf_generate(hf, batch, num_beams=beams, max_length=10, forced_bos_token_id=code)
        np.testing.assert_array_equal(ours, ref)
        assert (ref[:, 1] == code).all()
        np.testing.assert_array_equal(model.generate(batch["input_ids"], batch["attention_mask"], num_beams=beams,
                                                     # the model's
                                                     max_length=10, forced_bos_token_id=code).sequences, ref)
    with pytest.raises(ValueError, match="forced_bos_token_id=.* is not a target token id"):
        decode.generate(model.params, model.config, batch["input_ids"], batch["attention_mask"], max_length=10,
                        forced_bos_token_id=model.config.tgt_vocab_size)


def check_steps(model, batch: dict, given: dict, jit: bool = False) -> None:
    """Step-by-step decoding of ``batch`` (every target position attended) with the KV cache gives
    its teacher-forced logits under the interventions ``given``; with ``jit`` the step runs under
    jax.jit with a traced position, as greedy and beam search call it: one program for every step
    (op by op, each position's slices compiled kernels of their own)."""
    from jattn.nn import decode, seq2seq

    c = model.config
    full = np.asarray(model.forward(batch, given).logits)  # (b, t, V)
    iv = seq2seq.check_interventions(c, given)
    ids = jnp.asarray(batch["input_ids"], jnp.int32)
    mask = jnp.asarray(batch["attention_mask"], jnp.int32)
    t = batch["decoder_input_ids"].shape[1]
    cache = decode.init_state(model.params, c, ids, mask, iv, t, jnp.float32)
    step = jax.jit(decode.decoder_step, static_argnums=1) if jit else decode.decoder_step
    for pos in range(t):
        tokens = jnp.asarray(batch["decoder_input_ids"][:, pos], jnp.int32)
        logits, cache = step(model.params, c, tokens, jnp.int32(pos) if jit else pos, cache, mask, iv)
        assert_close(logits, full[:, pos], terms=model_terms(c, ids.shape[1], t), err_msg=str(pos))  # other shapes


def check_cached_steps(model) -> None:
    """Step-by-step decoding with the KV cache (positions offset by the step, the same sublayers,
    the decoder's final norm where it has one) gives the teacher-forced logits, with head gates and
    disabled heads in all three attention types."""
    c = model.config
    batch = padded_batch(c, seed=3, b=3)
    batch["decoder_attention_mask"][:] = 1
    batch["decoder_input_ids"][:, 1:][batch["decoder_input_ids"][:, 1:] == c.pad_token_id] = 5  # real tokens only
    rng = np.random.default_rng(0)
    given = {k: Interventions(head_gates=rng.uniform(0, 2, s).astype(np.float32),
                              disabled_heads=rng.uniform(size=s) < 0.3) for k, s in shapes(c).items()}
    check_steps(model, batch, given)


def check_generate_gated(model, hf) -> None:
    """Greedy decoding with cross-attention head gates equals HF's generate with the same gates
    applied by hooks."""
    c = model.config
    batch = padded_batch(c, seed=6, b=4)
    gates = np.random.default_rng(2).uniform(0, 2, (c.decoder_layers, c.decoder_heads)).astype(np.float32)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], max_length=12,
                          interventions={"cross": Interventions(head_gates=gates)}).sequences
    with gated(hf, {"cross": torch.tensor(gates)}):
        ref = hf_generate(hf, batch, num_beams=1, max_length=12)
    np.testing.assert_array_equal(ours, ref)
