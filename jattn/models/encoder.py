"""``EncoderModel``: a converted BERT/RoBERTa checkpoint with its tokenizer and a jitted forward."""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.config import EncoderConfig
from jattn.data.tokenize import Batch, tokenize
from jattn.nn import encoder


@dataclasses.dataclass
class EncoderResult:
    last_hidden_state: jax.Array  # (b, n, D)
    hidden_states: jax.Array  # (L+1, b, n, D) embeddings, then each layer's output
    internals: dict  # per-layer attention internals, each (L, b, ...); see jattn.nn.encoder
    pooler_output: jax.Array | None  # (b, D) when the checkpoint has a pooler

    @property
    def attentions(self) -> jax.Array:  # (L, b, H, n, n)
        return self.internals["weights"]


@partial(jax.jit, static_argnames=("config", "compute_dtype"))
def _forward(params, config, batch, head_gates, disabled_heads, compute_dtype):
    outputs, internals = encoder.forward(params, config, batch, head_gates=head_gates,
                                         disabled_heads=disabled_heads, compute_dtype=compute_dtype)
    pooled = encoder.pooler(params, outputs["last_hidden_state"]) if "pooler" in params else None
    return outputs, internals, pooled


class EncoderModel:
    """A BERT-family encoder: ``.config``, ``.params``, ``.tokenizer``, ``.tokenize``, ``.forward``."""

    def __init__(self, config: EncoderConfig, params, tokenizer, source: str = ""):
        self.config, self.tokenizer, self.source = config, tokenizer, source
        self.params = jax.tree.map(jnp.asarray, params)

    def __repr__(self) -> str:
        c = self.config
        return (f"EncoderModel({c.model_type}, L={c.num_layers}, H={c.num_heads}, D={c.hidden_size}, "
                f"source={self.source!r})")

    def tokenize(self, examples, max_length: int = 128, truncate: bool = False,
                 pad_to: int | None = None) -> Batch:
        """Tokenize strings, (A, B) pairs or pre-split words; see ``jattn.data.tokenize``."""
        if max_length > self.config.max_length:
            raise ValueError(f"max_length={max_length} exceeds the model's {self.config.max_length} positions")
        return tokenize(self.tokenizer, examples, max_length=max_length, truncate=truncate, pad_to=pad_to)

    def check_batch(self, batch) -> dict:
        """Validate a Batch or dict of (b, n) arrays and return the forward's input dict."""
        inputs = batch.inputs() if isinstance(batch, Batch) else dict(batch)
        if "input_ids" not in inputs or "attention_mask" not in inputs:
            raise ValueError("a batch needs input_ids and attention_mask (b, n)")
        ids = np.asarray(inputs["input_ids"])
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be (batch, length), got shape {ids.shape}")
        if ids.shape[1] > self.config.max_length:
            raise ValueError(f"sequences of {ids.shape[1]} tokens exceed the model's "
                             f"{self.config.max_length} positions")
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"input_ids outside the vocabulary [0, {self.config.vocab_size}): "
                             "was the batch made with another model's tokenizer?")
        inputs.setdefault("token_type_ids", np.zeros_like(ids))
        for k in ("input_ids", "attention_mask", "token_type_ids"):
            if np.shape(inputs[k]) != ids.shape:
                raise ValueError(f"{k} has shape {np.shape(inputs[k])}, input_ids has {ids.shape}")
        return {k: jnp.asarray(inputs[k], jnp.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}

    def forward(self, batch, head_gates=None, disabled_heads=None, compute_dtype=jnp.float32) -> EncoderResult:
        """Jitted forward; one compile per padded shape. Gates (L, H) float, disabled (L, H) bool."""
        L, H = self.config.num_layers, self.config.num_heads
        gates = jnp.ones((L, H), jnp.float32) if head_gates is None else jnp.asarray(head_gates, jnp.float32)
        disabled = jnp.zeros((L, H), bool) if disabled_heads is None else jnp.asarray(disabled_heads, bool)
        outputs, internals, pooled = _forward(self.params, self.config, self.check_batch(batch),
                                              gates, disabled, compute_dtype)
        return EncoderResult(outputs["last_hidden_state"], outputs["hidden_states"], internals, pooled)
