"""Distances between attention heads (Clark et al. 2019, §6, Fig. 6).

D(h, g) = Σ_sequences Σ_{real rows i} JS(A'_h[i], A'_g[i]), with the smoothing
A' = 0.999·A + 0.001/n over the n real keys and JS(p, q) = ½[KL(p‖m) + KL(q‖m)], m = (p+q)/2
(natural log), for all L·H × L·H pairs (head index l·H + h). A 2-D metric MDS embedding of D
(n_init=5, max_iter=1000, eps=1e-10) places heads with similar behaviour close together.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.registry import register

JS_SMOOTHING = 1e-3  # A' = 0.999 A + 0.001 / n  (Clark's released code)


def xlogx_rows(x: jax.Array) -> jax.Array:
    """Σ_j x log x over the last axis (0 log 0 = 0). (..., n) -> (...)"""
    return (x * jnp.log(jnp.where(x > 0, x, 1.0))).sum(-1)


def pairwise_js(weights: jax.Array, real: jax.Array, *, block_rows: int = 16) -> jax.Array:
    """Σ over sequences and real rows of JS between every pair of heads.

    weights (L, b, H, n, n), real (b, n) bool -> (K, K), K = L·H, symmetric, zero diagonal.
    ``real`` may also be the allowed keys of every row, (b, q, k) bool (a causal decoder, or
    cross-attention's q ≠ k); n in the smoothing is then each row's number of allowed keys.
    Per row, JS(p, q) = ½(Σ p log p + Σ q log q) − Σ m log m: one log per entry of a pair, the
    per-head Σ p log p computed once; the difference is taken per row (before summing rows) so
    float32 cancellation stays at the size of one row. p is zero on padded rows and keys, which
    then add nothing. Each unordered pair is computed once: step s of a scan pairs head a with
    head (a+s) mod K, s = 1..K//2, ~K²/2 maps of n² entries.

    That work reads every map K/2 times, so it is cut into blocks of ``block_rows`` query rows,
    e = gcd(b, 8) sequences × block_rows/e rows each (K·block_rows·n floats, ~0.6 MB for K=72,
    n=128: cache-resident while all pairs are formed), visited one after another by ``lax.map``.
    The batch is split as (e, b/e) and the block keeps the outer axis, so a device-sharded batch
    stays sharded.
    """
    L, b, H, n, k = weights.shape
    K, e = L * H, math.gcd(b, 8)
    rows = max(1, block_rows // e)
    pad = -n % rows
    heads = jnp.moveaxis(weights, 2, 1).reshape(K, b, n, k)  # (K, b, n, k) head k = l·H + h
    allowed = real if real.ndim == 3 else real[:, :, None] & real[:, None, :]  # (b, n, k) real row and key
    cells = allowed[None]  # (1, b, n, k)
    length = jnp.maximum(allowed.sum(-1), 1).astype(heads.dtype)[None, :, :, None]  # (1, b, n, 1)
    p = jnp.where(cells, (1 - JS_SMOOTHING) * heads + JS_SMOOTHING / length, 0.0)  # (K, b, n, k)
    p = jnp.pad(p, ((0, 0), (0, 0), (0, pad), (0, 0)))  # (K, b, R·rows, k) zero rows add nothing
    R = (n + pad) // rows
    blocks = p.reshape(K, e, b // e, R, rows, k)  # (K, e, g, R, rows, k)
    blocks = blocks.transpose(2, 3, 0, 1, 4, 5).reshape(b // e * R, K, e * rows, k)  # (g·R, K, e·rows, k)
    js = jax.lax.map(_block_js, blocks).sum(0)  # (S, K)
    shifts = jnp.arange(1, K // 2 + 1)  # (S,)
    a = jnp.broadcast_to(jnp.arange(K), js.shape)  # (S, K)
    g = (a + shifts[:, None]) % K  # (S, K)
    d = jnp.zeros((K, K), js.dtype).at[a, g].set(js)  # (K, K) for even K the pair at s = K/2
    return d.at[g, a].set(js)  # appears twice with the same value


def _block_js(p: jax.Array) -> jax.Array:
    """Σ over a block's rows of JS(p_a, p_(a+s) mod K). p (K, rows, n) -> (S, K), S = K//2."""
    K = p.shape[0]
    p_log_p = xlogx_rows(p)  # (K, rows)
    p2, p_log_p2 = jnp.concatenate([p, p]), jnp.concatenate([p_log_p, p_log_p])  # (2K, ...)

    def shift(_, s):
        q = jax.lax.dynamic_slice_in_dim(p2, s, K)  # (K, rows, n) head (a+s) mod K
        q_log_q = jax.lax.dynamic_slice_in_dim(p_log_p2, s, K)  # (K, rows)
        js_rows = 0.5 * (p_log_p + q_log_q) - xlogx_rows(0.5 * (p + q))  # (K, rows)
        return None, js_rows.sum(1)  # (K,)

    _, js = jax.lax.scan(shift, None, jnp.arange(1, K // 2 + 1))  # (S, K)
    return js


def mds(distance: np.ndarray, seed: int = 0) -> np.ndarray:
    """2-D metric MDS of a precomputed distance matrix, Clark's settings. (K, K) -> (K, 2)."""
    from sklearn.manifold import MDS

    bad = np.argwhere(~np.isfinite(distance))
    if len(bad):
        raise ValueError(f"the head distances hold {len(bad)} NaN/inf entries, the first between heads "
                         f"{bad[0][0]} and {bad[0][1]} (index l·H + h): the model produced non-finite "
                         "attention. Fix: check the model's weights (jattn.load refuses non-finite ones)")
    model = MDS(n_components=2, metric_mds=True, metric="precomputed", init="random", n_init=5,
                max_iter=1000, eps=1e-10, random_state=seed)
    return model.fit_transform(distance)


@dataclasses.dataclass(frozen=True)
class JSDistance(Method):
    """Jensen–Shannon distance between all pairs of heads and its MDS embedding (per attention
    type on a translation model, over the keys each row may attend)."""

    name = "js"
    families = ("encoder", "seq2seq", "decoder")

    def reduce(self, ctx: StepContext) -> dict:
        allowed = ctx.batch["allowed"]  # (b, q, k)
        return {"js_distance": pairwise_js(ctx.internals["weights"], allowed)}  # (K, K)

    def finalize(self, totals, meta):
        d = totals["js_distance"]
        return {
            "js_distance": Statistic(d, "(L·H, L·H) Jensen-Shannon divergence between heads "
                                     "(index l·H + h), summed over real rows and sequences; "
                                     "smoothing 0.999·A + 0.001/n (Clark et al. 2019, §6)"),
            "js_mds": Statistic(mds(d), "(L·H, 2) metric MDS embedding of js_distance "
                                "(n_init=5, max_iter=1000, eps=1e-10, random_state=0)"),
        }


register("js", "Jensen-Shannon distance between all heads + MDS (Clark et al. 2019)",
         lambda model, options: JSDistance())
