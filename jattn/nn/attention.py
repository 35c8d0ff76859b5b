"""Multi-head attention that returns its internals (Vaswani et al. 2017, Eq. 1 and §3.2.2).

Shared by every attention block in jattn (encoder self-attention, decoder self- and
cross-attention). Notation follows ``METHODS.md``: α[h,i,j] the softmax weight of query i on
key j in head h, v_hj = x_j W_V^h + b_V^h the value (bias included), W_O^h the (d_h, D) slice of
the output projection, f_h(x_j) = v_hj W_O^h (Kobayashi et al. 2020, Eq. 5), so that the block's
output is  y_i = Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O.

Interventions enter as arrays:
  * ``gate`` (H,) multiplies head h's context Σ_j α v_hj before W_O (Michel et al. 2019, ξ_h;
    Voita et al. 2019, g_h). Ones = identity, zeros = masking the head.
  * ``disabled`` (H,) bool replaces the head's weights by the uniform distribution over the
    keys the query may see (Kovaleva et al. 2019, §4.2).
  * ``weights_delta`` (b, H, q, k), optional, is added to α before it multiplies the values:
    at zero it changes nothing, and the gradient of a loss w.r.t. it is ∂L/∂α (Clark et al.
    2019, Fig. 3).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Params = dict


def dense(p: Params, x: jax.Array) -> jax.Array:
    """x @ kernel + bias, contracting x's last axis with the kernel's first."""
    return jnp.tensordot(x, p["kernel"].astype(x.dtype), axes=1) + p["bias"].astype(x.dtype)


def layer_norm(p: Params, x: jax.Array, eps: float) -> jax.Array:
    """LayerNorm over the last axis, computed in float32 (Ba et al. 2016)."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]
    return y.astype(x.dtype)


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    """Inverted dropout; the identity when ``rng`` is None (evaluation)."""
    if rng is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def multi_head_attention(
    p: Params,
    x_q: jax.Array,  # (b, q, D) queries' input
    x_kv: jax.Array,  # (b, k, D) keys' and values' input
    allowed: jax.Array,  # (b, 1 or q, k) bool: query i may attend to key j
    gate: jax.Array,  # (H,) multiplies each head's context
    disabled: jax.Array,  # (H,) bool: uniform attention instead of softmax
    *,
    dropout_rate: float = 0.0,
    rng: jax.Array | None = None,
    weights_delta: jax.Array | None = None,  # (b, H, q, k) additive perturbation of α
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Scaled dot-product attention over H heads; returns (output before residual, internals).

    ``p`` holds ``query``/``key``/``value`` kernels (D, H, d_h) with biases (H, d_h) and the
    ``out`` kernel (H, d_h, D) with bias (D,). Softmax is taken in float32 whatever the
    compute dtype.
    """
    dt = x_q.dtype
    d_h = p["query"]["kernel"].shape[-1]
    q = dense(p["query"], x_q)  # (b, q, H, d_h)
    k = dense(p["key"], x_kv)  # (b, k, H, d_h)
    v = dense(p["value"], x_kv)  # (b, k, H, d_h)  value bias included
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(d_h)  # (b, H, q, k)
    mask = allowed[:, None]  # (b, 1, 1 or q, k)
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1)  # (b, H, q, k)
    uniform = mask / mask.sum(-1, keepdims=True)  # (b, 1, 1 or q, k)  Kovaleva's disabled head
    weights = jnp.where(disabled[None, :, None, None], uniform, weights)  # (b, H, q, k)
    if weights_delta is not None:
        weights = weights + weights_delta  # (b, H, q, k)  zero delta: ∂L/∂delta = ∂L/∂α
    probs = dropout(weights, dropout_rate, rng).astype(dt)  # (b, H, q, k)
    context = jnp.einsum("bhqk,bkhd->bhqd", probs, v)  # (b, H, q, d_h)
    context = context * gate.astype(dt)[None, :, None, None]  # (b, H, q, d_h)  ξ_h · head_h
    out = jnp.einsum("bhqd,hdo->bqo", context, p["out"]["kernel"].astype(dt))  # (b, q, D)
    out = out + p["out"]["bias"].astype(dt)  # (b, q, D)
    internals = {
        "weights": weights,  # (b, H, q, k) α, float32
        "values": jnp.moveaxis(v, 2, 1),  # (b, H, k, d_h) v_hj
        "context": context,  # (b, H, q, d_h) per-head output before W_O (after the gate)
        "output": out,  # (b, q, D) Σ_h Σ_j α f_h(x_j) + b_O
        "out_kernel": p["out"]["kernel"],  # (H, d_h, D) W_O split by head
        "out_bias": p["out"]["bias"],  # (D,) b_O
    }
    return out, internals


def transformed_vectors(values: jax.Array, out_kernel: jax.Array) -> jax.Array:
    """f_h(x_j) = v_hj W_O^h (Kobayashi et al. 2020, Eq. 5) for one attention block.

    values (b, H, n, d_h), out_kernel (H, d_h, D) -> (b, H, n, D). For internals stacked over
    layers, ``jax.vmap`` it over the leading layer axis.
    """
    return jnp.einsum("bhnd,hde->bhne", values, out_kernel)  # (b, H, n, D)
