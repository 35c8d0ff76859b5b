"""Token and position embeddings of the encoder–decoder Transformer (``jattn.nn.seq2seq``):
the token tables (shared or one per side), the position scheme (Vaswani et al. 2017, §3.5 and
tensor2tensor's sinusoids, a learned table per side, or none: ``positions="none"``, where the
stacks' relative-position score bias orders the tokens, Raffel et al. 2020's T5 §2.1), the
embedding LayerNorm, dropout.

Parameters (under ``embeddings``): shared (V, D)  or  source (V_src, D) + target (V_tgt, D);
with learned positions source_positions, target_positions (offset + P, D); with
``embedding_ln`` source_ln, target_ln (the embedding LayerNorm of each side).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn.config import Seq2SeqConfig
from jattn.nn.layers import LayerNorm, dropout, param


@functools.lru_cache(maxsize=16)
def sinusoid_table(config: Seq2SeqConfig) -> np.ndarray:
    """The fixed position table (Vaswani et al. 2017, §3.5), rows indexed by position id.

    vaswani: row p = [sin(p ω_0..ω_{D/2-1}), cos(p ω_0..ω_{D/2-1})], ω_i = 10000^(-2i/D),
      rows 0..P-1, computed in float64 (HF ``MarianSinusoidalPositionalEmbedding``).
    tensor2tensor: ω_i = exp(-i log(10000) / (D/2 - 1)), same sin|cos halves, computed in float32,
      P + pad + 1 rows with the ``pad_token_id`` row zero (tensor2tensor's variant, fairseq's
      ``SinusoidalPositionalEmbedding``; a table HF builds with other row counts has these rows).
      The float32 arguments as torch forms them, exp, sin and cos rounded from float64: numpy's
      float32 exp differs from torch's by an ulp in about a third of the ω_i, an error position p
      multiplies (6e-5 at row 783 of a 768-wide table); rounded, the table is within 8e-6 of HF's.
    """
    D, P = config.d_model, config.max_position_embeddings
    if config.positions == "vaswani":
        omega = np.power(10000.0, -2.0 * np.arange(D // 2) / D)  # (D/2,)
        angles = np.arange(P)[:, None] * omega[None]  # (P, D/2)
        return np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)  # (P, D)
    n, half = P + config.pad_token_id + 1, D // 2
    exponent = np.arange(half, dtype=np.float32) * np.float32(-np.log(10000) / (half - 1))  # (D/2,) float32
    omega = np.exp(exponent.astype(np.float64)).astype(np.float32)  # (D/2,)
    angles = (np.arange(n, dtype=np.float32)[:, None] * omega[None]).astype(np.float64)  # (n, D/2), float32 products
    table = np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)  # (n, D)
    table[config.pad_token_id] = 0.0
    return table


def position_ids(config: Seq2SeqConfig, ids: jax.Array, offset=0) -> jax.Array:
    """``positions`` of token ids (b, n), padding where they are the pad id -> (b, n)."""
    return positions(config, ids != config.pad_token_id, offset)


def positions(config: Seq2SeqConfig, real: jax.Array, offset=0) -> jax.Array:
    """Row of the position table (``sinusoid_table`` or the learned one) for each token; ``real``
    (b, n) bool marks the real tokens; ``offset`` = tokens already decoded.

    vaswani: offset + 0..n-1. learned: position_offset + offset + 0..n-1, padding included.
    tensor2tensor: real tokens numbered from pad+1 (+offset), padding gets the zero row ``pad``
    — fairseq's ``make_positions``, also in incremental decoding.
    """
    if config.positions in ("vaswani", "learned"):
        start = offset + (config.position_offset if config.positions == "learned" else 0)
        return jnp.broadcast_to(jnp.arange(real.shape[1]) + start, real.shape)  # (b, n)
    real = real.astype(jnp.int32)  # (b, n)
    return jnp.cumsum(real, axis=1) * real + config.pad_token_id + offset  # (b, n)


def token_table(rngs, config: Seq2SeqConfig, V: int) -> nnx.Param:
    """A token table, N(0, D^-1/2) with a zero pad row (Vaswani et al. 2017 with fairseq's init)."""
    p = param(rngs, (V, config.d_model), "normal", config.d_model ** -0.5, (None, "model"))  # width over "model"
    p[...] = p[...].at[config.pad_token_id].set(0.0)
    return p


class Seq2SeqEmbeddings(nnx.Module):
    """Each side's input: scaled token embedding + position, the embedding LayerNorm if any, dropout."""

    def __init__(self, config: Seq2SeqConfig, *, rngs: nnx.Rngs):
        if config.shared_embeddings:
            self.shared = token_table(rngs, config, config.src_vocab_size)
        else:
            self.source = token_table(rngs, config, config.src_vocab_size)
            self.target = token_table(rngs, config, config.tgt_vocab_size)
        if config.positions == "learned":  # N(0, 0.02), BERT's and BART's init
            self.source_positions = param(rngs, (config.position_rows, config.d_model), "normal", 0.02)
            self.target_positions = param(rngs, (config.position_rows, config.d_model), "normal", 0.02)
        if config.embedding_ln:
            self.source_ln = LayerNorm(config.d_model, config.layer_norm_eps)
            self.target_ln = LayerNorm(config.d_model, config.layer_norm_eps)
        self.config = config

    def table(self, side: str) -> jax.Array:
        """Token table of ``side`` ("source" | "target"): (V, D)."""
        return (self.shared if self.config.shared_embeddings else getattr(self, side))[...]

    def words(self, ids, side: str) -> jax.Array:
        """The scaled token embeddings sqrt(D)·E[ids] (E[ids] without ``scale_embedding``), what the
        positions are added to. ids (b, n) -> (b, n, D)."""
        return self.table(side)[ids] * (np.sqrt(self.config.d_model) if self.config.scale_embedding else 1.0)

    def __call__(self, ids, side: str, dtype, rng, offset=0) -> jax.Array:
        """Scaled token embedding + position, the embedding LayerNorm if the config has one, then
        dropout. ids (b, n) -> (b, n, D)."""
        return self.embed(self.words(ids, side), ids != self.config.pad_token_id, side, dtype, rng, offset)

    def side_input(self, ids, embeds, mask, side: str, dtype, rng) -> jax.Array:
        """A side's input (b, n, D) from its ids (b, n) or, in their place, its scaled token
        embeddings ``embeds`` (b, n, D), the real tokens then those ``mask`` (b, n) marks."""
        key = "input_ids" if side == "source" else "decoder_input_ids"
        embeds_key = key.replace("input_ids", "inputs_embeds")
        if (ids is None) == (embeds is None):
            raise ValueError(f"a batch needs exactly one of {key} and {embeds_key}. Fix: drop one ({embeds_key} = "
                             f"jattn.nn.seq2seq.word_embeddings(params, config, {key}, {side!r}))")
        if ids is not None:
            return self(ids, side, dtype, rng)
        if embeds.ndim != 3 or embeds.shape[2] != self.config.d_model:
            raise ValueError(f"{embeds_key} must be (batch, length, {self.config.d_model}), got shape "
                             f"{tuple(embeds.shape)}. Fix: use jattn.nn.seq2seq.word_embeddings")
        return self.embed(embeds.astype(jnp.float32), mask.astype(bool), side, dtype, rng)

    def embed(self, words, real, side: str, dtype, rng, offset=0) -> jax.Array:
        """words (b, n, D), the scaled token embeddings, + positions (``real`` (b, n) bool marks
        the tokens tensor2tensor's count), the embedding LayerNorm if any, dropout -> (b, n, D)."""
        c = self.config
        if c.positions == "none":  # no absolute positions (T5: a relative score bias in the stacks)
            x = words.astype(dtype)  # (b, n, D)
        else:
            table = (getattr(self, f"{side}_positions")[...] if c.positions == "learned"
                     else jnp.asarray(sinusoid_table(c)))
            x = (words + table[positions(c, real, offset)]).astype(dtype)  # (b, n, D)
        if c.embedding_ln:
            x = getattr(self, f"{side}_ln")(x)  # (b, n, D)
        return dropout(x, c.dropout, rng)  # (b, n, D)
