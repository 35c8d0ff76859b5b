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

from jattn.nn.recompute import layer_weights
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.registry import register

JS_SMOOTHING = 1e-3  # A' = 0.999 A + 0.001 / n  (Clark's released code)


def xlogx_rows(x: jax.Array) -> jax.Array:
    """Σ_j x log x over the last axis (0 log 0 = 0). (..., n) -> (...)"""
    return (x * jnp.log(jnp.where(x > 0, x, 1.0))).sum(-1)


def pairwise_js(weights_of, L: int, real: jax.Array, *, block_rows: int = 16) -> jax.Array:
    """Σ over sequences and real rows of JS between every pair of heads, layer pair by layer pair.

    ``weights_of(l)`` -> layer l's α (b, H, n, k) (l traced; e.g. recomputed from the layer's
    input, ``jattn.nn.recompute.layer_weights``), L layers, real (b, n) bool -> (K, K),
    K = L·H, symmetric, zero diagonal (head index l·H + h). ``real`` may also be the allowed keys
    of every row, (b, q, k) bool (a causal decoder, or cross-attention's q ≠ k); n in the smoothing
    is then each row's number of allowed keys. Per row, JS(p, q) = ½(Σ p log p + Σ q log q) −
    Σ m log m: one log per entry of a pair, the per-head Σ p log p computed once; the difference is
    taken per row (before summing rows) so float32 cancellation stays at the size of one row. p is
    zero on padded rows and keys, which then add nothing.

    Layer a's α is computed once and paired with itself and with each later layer c, computed in
    turn: two layers' smoothed α are held at a time, never every layer's (L + L(L−1)/2 layer
    computations). Each pair of layers is cut into blocks of ``block_rows`` query rows,
    e = gcd(b, 8) sequences × block_rows/e rows each (2·H·block_rows·k floats: cache-resident
    while its H² pairs are formed), visited one after another by ``lax.map``. The batch is split
    as (e, b/e) and the block keeps the outer axis, so a device-sharded batch stays sharded.
    """
    allowed = real if real.ndim == 3 else real[:, :, None] & real[:, None, :]  # (b, n, k) real row and key
    length = jnp.maximum(allowed.sum(-1), 1).astype(jnp.float32)[:, None, :, None]  # (b, 1, n, 1)

    def smoothed(l):  # layer l's α smoothed, in row blocks (g·R, H, e·rows, k)
        w = weights_of(l)  # (b, H, n, k)
        b, H, n, k = w.shape
        e = math.gcd(b, 8)
        rows = max(1, block_rows // e)
        pad = -n % rows
        p = jnp.where(allowed[:, None], (1 - JS_SMOOTHING) * w + JS_SMOOTHING / length, 0.0)  # (b, H, n, k)
        p = jnp.pad(p, ((0, 0), (0, 0), (0, pad), (0, 0)))  # (b, H, R·rows, k) zero rows add nothing
        R = (n + pad) // rows
        blocks = p.reshape(e, b // e, H, R, rows, k).transpose(1, 3, 2, 0, 4, 5)  # (g, R, H, e, rows, k)
        return blocks.reshape(b // e * R, H, e * rows, k)  # (g·R, H, e·rows, k)

    def pair(p, q):  # two layers' blocks -> (H, H) JS summed over rows
        return jax.lax.map(lambda pq: _block_js(*pq), (p, q)).sum(0)  # (H, H)

    H = jax.eval_shape(weights_of, 0).shape[1]

    def layer(d, a):  # layer a with itself and with every later layer c
        p = smoothed(a)
        d = jax.lax.dynamic_update_slice(d, pair(p, p)[None, :, None], (a, 0, a, 0))

        def later(c, d):
            js = pair(p, smoothed(c))  # (H, H) heads of a × heads of c
            d = jax.lax.dynamic_update_slice(d, js[None, :, None], (a, 0, c, 0))
            return jax.lax.dynamic_update_slice(d, js.T[None, :, None], (c, 0, a, 0))

        return jax.lax.fori_loop(a + 1, L, later, d), None

    d, _ = jax.lax.scan(layer, jnp.zeros((L, H, L, H), jnp.float32), jnp.arange(L))  # (L, H, L, H)
    return d.reshape(L * H, L * H) * (1 - jnp.eye(L * H, dtype=d.dtype))  # (K, K) JS(p, p) = 0


def _block_js(p: jax.Array, q: jax.Array) -> jax.Array:
    """Σ over a block's rows of JS(p_h, q_g) for every head h of p and g of q.
    p, q (H, rows, n) -> (H, H) [h, g]."""
    p_log_p, q_log_q = xlogx_rows(p), xlogx_rows(q)  # (H, rows)

    def head(_, g):  # head g of q against every head of p
        js_rows = 0.5 * (p_log_p + q_log_q[g]) - xlogx_rows(0.5 * (p + q[g]))  # (H, rows)
        return None, js_rows.sum(1)  # (H,)

    _, js = jax.lax.scan(head, None, jnp.arange(q.shape[0]))  # (H_q, H_p)
    return js.T


def mds(distance: np.ndarray, seed: int = 0) -> np.ndarray:
    """2-D metric MDS of a precomputed distance matrix, Clark's settings. (K, K) -> (K, 2)."""
    from sklearn.manifold import MDS

    bad = np.argwhere(~np.isfinite(distance))
    if len(bad):
        raise ValueError(f"the head distances hold {len(bad)} NaN/inf entries, the first between heads "
                         f"{bad[0][0]} and {bad[0][1]} (index l·H + h): the model produced non-finite "
                         "attention. Fix: check the model's weights (jattn.load refuses non-finite ones)")
    # All-zero distances (every head alike; the zero totals finalized before a run's first batch): the fit puts
    # every head at the origin, after 5 x 1000 steps that each divide by the zero total distance
    if not distance.any():
        return np.zeros((len(distance), 2))  # (K, 2)
    model = MDS(n_components=2, metric_mds=True, metric="precomputed", init="random", n_init=5,
                max_iter=1000, eps=1e-10, random_state=seed)
    return model.fit_transform(distance)


@dataclasses.dataclass(frozen=True)
class JSDistance(Method):
    """Jensen–Shannon distance between all pairs of heads and its MDS embedding (per attention
    type on a translation model, over the keys each row may attend). The runner keeps the layers'
    inputs only; each layer's α is recomputed from its input when its pairs are formed, so about
    two layers' α are held at a time (``pairwise_js``)."""

    name = "js"
    families = ("encoder", "seq2seq", "decoder")
    internals = ("residual",)  # the layers' inputs (L, b, q, D): each layer's α recomputed when paired

    def reduce(self, ctx: StepContext) -> dict:
        x = ctx.internals["residual"]  # (L, b, q, D)
        weights = layer_weights(ctx.params, ctx.config, ctx.kind, ctx.batch, ctx.outputs)
        return {"js_distance": pairwise_js(lambda l: weights(l, x[l]), x.shape[0], ctx.batch["allowed"])}  # (K, K)

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
