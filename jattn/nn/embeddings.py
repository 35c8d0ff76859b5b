"""An encoder's input embeddings (Devlin et al. 2019, §3.2): word + position + token-type
embeddings, a LayerNorm, dropout, and the projection E -> D of factorised embeddings (Clark et
al. 2020); how positions are numbered is ``config.positions``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jattn.nn import state
from jattn.nn.config import EncoderConfig
from jattn.nn.heads import STD
from jattn.nn.layers import Dense, LayerNorm, dropout, param


def position_ids(config: EncoderConfig, input_ids: jax.Array) -> jax.Array:
    """``positions`` of token ids, padding where they are the pad id. (b, n) -> (b, n)."""
    return positions(config, input_ids != config.pad_token_id)


def positions(config: EncoderConfig, real: jax.Array) -> jax.Array:
    """absolute: 0..n-1. after_padding: pad+1+cumulative count of real tokens, pad id on padding.
    from_mask: ``counted``. real (b, n) bool (True: a real token) -> (b, n)."""
    if config.positions == "from_mask":
        return counted(real)  # (b, n)
    if config.positions == "after_padding":
        real = real.astype(jnp.int32)  # (b, n)
        return jnp.cumsum(real, axis=1) * real + config.pad_token_id  # (b, n)
    return jnp.broadcast_to(jnp.arange(real.shape[1]), real.shape)  # (b, n)


def counted(real: jax.Array) -> jax.Array:
    """A causal LM's positions as HF ``generate`` numbers a (left-)padded batch: the count of real
    tokens before each one, ``cumsum(attention_mask) − 1``, and 0 on the padding (a valid row,
    read by padding queries only). real (b, n) bool -> (b, n) int32."""
    real = real.astype(jnp.int32)  # (b, n)
    return jnp.where(real == 1, jnp.cumsum(real, axis=1) - 1, 0)  # (b, n)


class Embeddings(nnx.Module):
    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        E, D = config.embedding_size or config.hidden_size, config.hidden_size
        self.word = param(rngs, (config.vocab_size, E), "normal", STD, (None, "model"))  # width over "model"
        self.position = (param(rngs, (config.max_position_embeddings, E), "normal", STD)
                         if config.position_embeddings else None)  # None: no absolute positions (DeBERTa-v3)
        # no table when the family has no token types (type_vocab_size 0): their ids are ignored
        self.token_type = param(rngs, (config.type_vocab_size, E), "normal", STD) if config.type_vocab_size else None
        # none on a causal LM's embeddings (GPT-2, Llama: config.embedding_norm False)
        self.ln = LayerNorm(E, config.layer_norm_eps, bias=config.norm_bias) if config.embedding_norm else None
        self.project = Dense((E,), (D,), rngs=rngs, std=STD) if E != D else None
        self.config = config

    def __call__(self, batch: dict, dtype, rng) -> jax.Array:
        """``input_ids`` (b, n) looked up in the word table, or ``inputs_embeds`` (b, n, E) in its
        place (positions then count the tokens ``attention_mask`` marks real, for after_padding;
        from_mask always counts them);
        + positions + token types, LayerNorm, dropout, the projection E -> D -> (b, n, D)."""
        words, real = self.words(batch)  # (b, n, E), (b, n)
        if self.config.positions == "from_mask":  # the mask says which tokens count (GPT-2's EOS is its pad id)
            real = batch["attention_mask"].astype(bool)  # (b, n)
        if self.config.embedding_scale != 1.0:  # Gemma's √D (Gemma Team 2024), in float32 here
            words = words * jnp.asarray(self.config.embedding_scale, words.dtype)  # (b, n, E)
        x = words if self.position is None else words + state.lookup(self.position[...], positions(self.config, real))
        if self.token_type is not None:
            types = batch.get("token_type_ids")
            x = x + state.lookup(self.token_type[...], jnp.zeros(real.shape, jnp.int32) if types is None else types)
        x = (x if self.ln is None else self.ln(x)).astype(dtype)  # (b, n, E)
        if self.config.mask_embeddings:  # padding rows zeroed, as DeBERTa's embeddings do
            x = x * batch["attention_mask"][..., None].astype(dtype)  # (b, n, E)
        x = dropout(x, self.config.hidden_dropout, rng)  # (b, n, E)
        return x if self.project is None else self.project(x)  # (b, n, D)

    def words(self, batch: dict) -> tuple[jax.Array, jax.Array]:
        """(word embeddings (b, n, E), real tokens (b, n) bool) of ``input_ids`` or ``inputs_embeds``."""
        if ("input_ids" in batch) == ("inputs_embeds" in batch):
            raise ValueError("a batch needs exactly one of input_ids (b, n) and inputs_embeds (b, n, E). Fix: drop "
                             "one (inputs_embeds = jattn.nn.encoder.word_embeddings(params, config, input_ids))")
        if "input_ids" in batch:
            ids = batch["input_ids"]  # (b, n)
            return state.lookup(self.word[...], ids), ids != self.config.pad_token_id  # (b, n, E) sharded as ids
        x, E = batch["inputs_embeds"], self.word[...].shape[1]  # (b, n, E)
        if x.ndim != 3 or x.shape[2] != E:
            raise ValueError(f"inputs_embeds must be (batch, length, {E}) (the word embeddings' width), got shape "
                             f"{tuple(x.shape)}. Fix: inputs_embeds = jattn.nn.encoder.word_embeddings(params, "
                             "config, input_ids)")
        return x.astype(jnp.float32), batch["attention_mask"].astype(bool)
