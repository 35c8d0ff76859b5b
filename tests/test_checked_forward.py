"""``jattn.nn.checked.checked``: the pure faces with their ids and masks checked (checkify), on
tiny random configs (no checkpoint): equal outputs on valid input, an error naming the value,
its position and the vocabulary otherwise, eager, under ``jit`` and under ``vmap``."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from flax import nnx
from jax.experimental import checkify

from jattn.nn import encoder, seq2seq, state
from jattn.nn.checked import checked
from jattn.nn.config import EncoderConfig, Seq2SeqConfig
from tiny_encoders import random_batch

ENCODER = EncoderConfig(model_type="test", vocab_size=60, hidden_size=16, num_layers=2, num_heads=4,
                        intermediate_size=24, hidden_act="gelu", max_position_embeddings=40, type_vocab_size=2,
                        layer_norm_eps=1e-12, pad_token_id=1, positions="after_padding", classifier="dense_tanh",
                        hidden_dropout=0.0, attention_dropout=0.0, num_labels=3)
SRC, TGT = 24, 30  # separate vocabularies: each side checked against its own
SEQ2SEQ = Seq2SeqConfig(model_type="marian", src_vocab_size=SRC, tgt_vocab_size=TGT, d_model=16, encoder_layers=1,
                        decoder_layers=1, encoder_heads=2, decoder_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24,
                        activation="relu", max_position_embeddings=32, scale_embedding=True,
                        shared_embeddings=False, tie_output=False, positions="vaswani", pad_token_id=0,
                        eos_token_id=1, decoder_start_token_id=0, dropout=0.0)


# jitted once: the error cases share one compiled program per config (the eager path: the valid test)
JITTED = {name: jax.jit(checked(f), static_argnums=1, static_argnames="internals")
          for name, f in (("encoder", encoder.forward), ("seq2seq", seq2seq.forward))}


@functools.cache
def params(config):
    return nnx.to_pure_dict(state.init(config, seed=0))


def encoder_batch() -> dict:
    return random_batch(ENCODER, [7, 5, 3], seed=1, pairs=True)


def seq2seq_batch() -> dict:
    rng = np.random.default_rng(2)
    return {"input_ids": rng.integers(2, SRC, (2, 6)).astype(np.int32), "attention_mask": np.ones((2, 6), np.int32),
            "decoder_input_ids": rng.integers(2, TGT, (2, 5)).astype(np.int32),
            "decoder_attention_mask": np.ones((2, 5), np.int32)}


def with_value(batch: dict, key: str, where: tuple, value) -> dict:
    out = {k: np.array(v) for k, v in batch.items()}
    out[key][where] = value
    return out


def assert_same(got, want):
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got, want)


def raises(err, *fragments):
    with pytest.raises(checkify.JaxRuntimeError) as info:
        err.throw()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_the_unchecked_forward_clamps_silently():
    """Why the checked variant exists: an id = V reads the last row, as V − 1 does."""
    batch = encoder_batch()
    p = params(ENCODER)
    over = encoder.forward(p, ENCODER, with_value(batch, "input_ids", (0, 2), ENCODER.vocab_size), internals=None)[0]
    last = encoder.forward(p, ENCODER, with_value(batch, "input_ids", (0, 2), ENCODER.vocab_size - 1),
                           internals=None)[0]
    np.testing.assert_array_equal(over["last_hidden_state"], last["last_hidden_state"])


def test_valid_input_gives_the_unchecked_outputs():
    batch = encoder_batch()
    err, got = checked(encoder.forward)(params(ENCODER), ENCODER, batch)
    assert err.get() is None
    err.throw()  # nothing to throw
    assert_same(got, encoder.forward(params(ENCODER), ENCODER, batch))
    err, logits = checked(encoder.classify)(params(ENCODER), ENCODER, batch)
    assert err.get() is None and logits.shape[0] == 3
    err, got = checked(seq2seq.forward)(params(SEQ2SEQ), SEQ2SEQ, seq2seq_batch())
    assert err.get() is None
    assert_same(got, seq2seq.forward(params(SEQ2SEQ), SEQ2SEQ, seq2seq_batch()))


@pytest.mark.parametrize("key,where,value,fragments", [
    ("input_ids", (1, 2), 60, ("input_ids[1, 2] = 60 is outside the vocabulary of 60", "1 such value(s)")),
    ("input_ids", (2, 0), -1, ("input_ids[2, 0] = -1 is outside the vocabulary of 60 ([0, 60))",)),
    ("attention_mask", (0, 4), 2, ("attention_mask[0, 4] = 2 is not 0 or 1",)),
    ("token_type_ids", (0, 1), 2, ("token_type_ids[0, 1] = 2 is outside the token types of 2",)),
])
def test_encoder_errors_name_value_position_and_vocabulary(key, where, value, fragments):
    err, _ = JITTED["encoder"](params(ENCODER), ENCODER, with_value(encoder_batch(), key, where, value),
                               internals=None)
    raises(err, *fragments)


def test_an_eager_call_raises_too():
    batch = with_value(encoder_batch(), "input_ids", (2, 0), -1)
    err, _ = checked(encoder.forward)(params(ENCODER), ENCODER, batch, internals=None)
    raises(err, "input_ids[2, 0] = -1 is outside the vocabulary of 60")


def test_the_first_offender_is_named_and_all_are_counted():
    batch = with_value(with_value(encoder_batch(), "input_ids", (2, 5), 99), "input_ids", (0, 6), -4)
    err, _ = JITTED["encoder"](params(ENCODER), ENCODER, batch, internals=None)
    raises(err, "input_ids[0, 6] = -4", "2 such value(s) in input_ids (3, 7)")


@pytest.mark.parametrize("key,where,value,fragments", [
    ("input_ids", (0, 3), SRC, (f"input_ids[0, 3] = {SRC} is outside the source vocabulary of {SRC}",)),
    ("decoder_input_ids", (1, 4), TGT, (f"decoder_input_ids[1, 4] = {TGT} is outside the target vocabulary of {TGT}",)),
    ("decoder_input_ids", (0, 0), -1, ("decoder_input_ids[0, 0] = -1 is outside the target vocabulary",)),
    ("decoder_attention_mask", (1, 1), 2, ("decoder_attention_mask[1, 1] = 2 is not 0 or 1",)),
])
def test_seq2seq_errors_check_each_side_against_its_vocabulary(key, where, value, fragments):
    err, _ = JITTED["seq2seq"](params(SEQ2SEQ), SEQ2SEQ, with_value(seq2seq_batch(), key, where, value),
                               internals=None)
    raises(err, *fragments)


def test_an_id_of_the_target_vocabulary_only_is_valid_on_the_target_side():
    ok = with_value(seq2seq_batch(), "decoder_input_ids", (0, 1), SRC + 1)
    assert JITTED["seq2seq"](params(SEQ2SEQ), SEQ2SEQ, ok, internals=None)[0].get() is None


def test_under_jit():
    fn = jax.jit(checked(encoder.forward), static_argnums=1, static_argnames="internals")
    batch = encoder_batch()
    err, got = fn(params(ENCODER), ENCODER, batch, internals=None)
    assert err.get() is None
    unchecked = jax.jit(encoder.forward, static_argnums=1, static_argnames="internals")
    assert_same(got, unchecked(params(ENCODER), ENCODER, batch, internals=None))
    err, _ = fn(params(ENCODER), ENCODER, with_value(batch, "input_ids", (1, 2), 60), internals=None)  # no retrace
    raises(err, "input_ids[1, 2] = 60 is outside the vocabulary of 60")
    err, _ = fn(params(ENCODER), ENCODER, with_value(batch, "attention_mask", (2, 1), 2), internals=None)
    raises(err, "attention_mask[2, 1] = 2 is not 0 or 1")


def test_under_vmap():
    """Two batches mapped over: the error names the offender's position within its batch."""
    batch = encoder_batch()
    stacked = {k: np.stack([v, with_value(batch, "input_ids", (1, 3), -1)[k] if k == "input_ids" else v])
               for k, v in batch.items()}
    fn = jax.vmap(functools.partial(checked(encoder.forward), params(ENCODER), ENCODER, internals=None))
    err, got = jax.jit(fn)({k: v[:1].repeat(2, 0) for k, v in stacked.items()})
    assert err.get() is None
    unchecked = jax.jit(jax.vmap(functools.partial(encoder.forward, params(ENCODER), ENCODER, internals=None)))
    assert_same(got, unchecked({k: v[:1].repeat(2, 0) for k, v in stacked.items()}))
    err, _ = jax.jit(fn)(stacked)
    raises(err, "input_ids[1, 3] = -1 is outside the vocabulary of 60")
