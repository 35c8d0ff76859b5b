"""Rotary position embeddings (Su et al. 2021, RoFormer §3.4.2, Eq. 13–15 and 34): query and key
of position m rotated by angles m·θ_i, so that q_m·k_n depends on the positions through m − n
only. θ_i = base^(−2i/d_h), i = 0..d_h/2 − 1; the pairs rotated together are dimensions
(i, i + d_h/2) (the "rotate half" layout of GPT-NeoX and Hugging Face, a permutation of Eq. 34's
adjacent pairs: the same rotation on a permuted basis, so the same scores)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def tables(base, n: int, d_h: int) -> tuple[jax.Array, jax.Array]:
    """cos and sin of the angles m·θ_i of positions m = 0..n−1, each (n, d_h) (the d_h/2 angles
    twice, for the halves), float32 as Hugging Face computes them. ``base`` may be traced."""
    inv_freq = 1.0 / (jnp.asarray(base, jnp.float32) ** (jnp.arange(0, d_h, 2, dtype=jnp.float32) / d_h))  # (d_h/2,)
    angles = jnp.arange(n, dtype=jnp.float32)[:, None] * inv_freq[None]  # (n, d_h/2)
    angles = jnp.concatenate([angles, angles], axis=-1)  # (n, d_h)
    return jnp.cos(angles), jnp.sin(angles)


def rotate_half(x: jax.Array) -> jax.Array:
    """(x_1, x_2) -> (−x_2, x_1) on the halves of the last axis (…, d_h)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """R_m x = x·cos + rotate_half(x)·sin (Eq. 34), in float32. x (…, n, d_h) with the positions on
    the second-last axis, cos / sin (n, d_h) -> (…, n, d_h) in x's dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * cos + rotate_half(x32) * sin).astype(x.dtype)
