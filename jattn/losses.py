"""Training and importance losses shared by fine-tuning, head importance and gate training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def classification_loss(logits: jax.Array, labels: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """Mean cross-entropy over examples. logits (b, C), labels (b,) int; ``weights`` (b,) {0,1}
    drops padding rows of a fixed-size batch exactly."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)  # (b,)
    if weights is None:
        return ce.mean()
    return (ce * weights).sum() / jnp.maximum(weights.sum(), 1.0)
