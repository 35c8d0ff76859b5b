"""Attention statistics of a causal language model over a corpus (``lm-attention``).

A causal LM's query i attends the keys j ≤ i only (``EncoderConfig.causal``), so Clark et al.'s
class statistics ([CLS], [SEP], next token) do not apply; what its heads spread over the past is
read here. Per (layer, head), for each sequence the mean over its real query rows i ≥ 1 (i counted
from the sequence's first real token; row 0 can attend only itself), then the mean over sequences
(equal weight per sequence, as Clark et al. 2019, §3):

* ``lm_first_token``: α[i, 0], the attention sink (Xiao et al. 2024, "Efficient Streaming Language
  Models with Attention Sinks", §3.1: most heads put much of their weight on the first token);
* ``lm_previous_token``: α[i, i−1], previous-token heads (Olsson et al. 2022; Clark et al. 2019,
  §3.2); at i = 1 the previous token is the first one;
* ``lm_self``: α[i, i];
* ``lm_other``: Σ_{1 ≤ j ≤ i−2} α[i, j], the weight beyond those three keys, = 1 − first −
  previous − self for i ≥ 2, 0 at i = 1;
* ``lm_entropy``: H_i = −Σ_{j ≤ i} α[i, j] log α[i, j] in nats (0 log 0 = 0, no smoothing), with
  its uniform reference ``lm_entropy_uniform`` (the same means of log(i + 1), the entropy of a
  head spreading evenly over the i + 1 keys it may see) and ``lm_entropy_normalised``, the means
  of H_i / log(i + 1) (0: one key, 1: uniform).

Padding never enters, left or right: positions count real tokens, padded rows are not averaged
and padded keys are in no set. Definitions: ``docs/METHODS.md``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.base import over_query_blocks, ratio, segment_mean
from jattn.analyses.registry import register

SHARES = {"lm_first_token": "α[i, 0] (first token, the attention sink; Xiao et al. 2024)",
          "lm_previous_token": "α[i, i-1] (previous token)",
          "lm_self": "α[i, i] (the token itself)",
          "lm_other": "Σ_{1 ≤ j ≤ i-2} α[i, j] (beyond first, previous and self)"}


def positions(attention_mask: jax.Array) -> jax.Array:
    """Each real token's position counted from its sequence's first real token, -1 on padding.
    (b, n) -> (b, n) int32."""
    real = attention_mask > 0  # (b, n)
    return jnp.where(real, jnp.cumsum(real, axis=1, dtype=jnp.int32) - 1, -1)  # (b, n)


def key_sets(rows: jax.Array, keys: jax.Array) -> dict[str, jax.Array]:
    """The keys of each share, and ``allowed`` (the keys j ≤ i a row may see), by position: of
    the query rows' positions ``rows`` (b, q) (all rows, or a block of them) over the keys'
    ``keys`` (b, k) -> each (b, q, k) bool, false on padded rows and keys."""
    i, j = rows[:, :, None], keys[:, None, :]  # (b, q, 1), (b, 1, k)
    key = (j >= 0) & (i >= 0)  # (b, q, k) real row and key
    return {"lm_first_token": key & (j == 0), "lm_previous_token": key & (j == i - 1), "lm_self": key & (j == i),
            "lm_other": key & (j >= 1) & (j <= i - 2), "allowed": key & (j <= i)}


def row_entropy(weights: jax.Array, allowed: jax.Array) -> jax.Array:
    """H_i = −Σ_{allowed j} α[i, j] log α[i, j] (nats, 0 log 0 = 0). weights (L, b, H, q, k),
    allowed (b, q, k) -> (L, b, H, q)."""
    keep = allowed[None, :, None] & (weights > 0)  # (L, b, H, q, k)
    return -jnp.where(keep, weights * jnp.log(jnp.where(keep, weights, 1.0)), 0.0).sum(-1)  # (L, b, H, q)


@dataclasses.dataclass(frozen=True)
class LMAttention(Method):
    """First-token (sink), previous-token, self and other shares and row entropy of a causal
    LM's heads over a corpus (module docstring)."""

    name = "lm-attention"
    layerwise = True  # each layer's statistics from that layer alone: reduced inside the scan
    families = ("decoder",)
    needs = "a causal mask: query i sees keys j ≤ i only (config.causal), α[i, 0] and α[i, i-1] its past"

    def reduce(self, ctx: StepContext) -> dict:
        """Every statistic is a reduction of each query row of α over its keys, taken in blocks of
        rows (``over_query_blocks``): nothing the size of a layer's α is made beside it."""
        A = ctx.internals["weights"]  # (L, b, H, n, n)
        L, b, H, n, _ = A.shape
        pos = positions(ctx.batch["attention_mask"])  # (b, n)
        rows = pos >= 1  # (b, n) real rows with a past
        log_keys = jnp.log(jnp.maximum(pos + 1, 1).astype(A.dtype))  # (b, n) log(i + 1)

        def block(start, size):  # Σ over the block's rows i ≥ 1 of each row's statistic -> each (L, b, H)
            a = jax.lax.dynamic_slice_in_dim(A, start, size, axis=3)  # (L, b, H, q, k)
            i = jax.lax.dynamic_slice_in_dim(pos, start, size, axis=1)  # (b, q)
            sets = key_sets(i, pos)  # each (b, q, k)
            per_row = {key: jnp.where(sets[key][None, :, None], a, 0.0).sum(-1) for key in SHARES}  # (L, b, H, q)
            per_row["lm_entropy"] = row_entropy(a, sets["allowed"])  # (L, b, H, q)
            logs = jax.lax.dynamic_slice_in_dim(log_keys, start, size, axis=1)  # (b, q)
            per_row["lm_entropy_normalised"] = per_row["lm_entropy"] / jnp.where(i >= 1, logs, 1.0)[None, :, None]
            return {k: jnp.einsum("lbhq,bq->lbh", v, (i >= 1).astype(A.dtype)) for k, v in per_row.items()}

        count = rows.sum(-1)  # (b,) rows averaged per sequence
        sums = over_query_blocks(block, n, L * b * H * n * A.dtype.itemsize)  # each (L, b, H)
        out = {}
        for key, total in sums.items():  # per sequence the mean over its rows, summed over sequences: segment_mean's
            out[key] = (total / jnp.maximum(count, 1).astype(A.dtype)[None, :, None]).sum(1)  # (L, H)
            out[key + "_n"] = (count > 0).sum().astype(A.dtype)  # ()
        uniform, out["lm_entropy_uniform_n"] = segment_mean(log_keys[None, :, None], rows)  # (1, 1), ()
        out["lm_entropy_uniform"] = uniform.reshape(())
        return out

    def finalize(self, totals, meta):
        tail = "; per sequence over real rows i ≥ 1, then over sequences"
        stats = {k: Statistic(ratio(totals, k), f"(L, H) mean share {d}" + tail) for k, d in SHARES.items()}
        stats["lm_entropy"] = Statistic(ratio(totals, "lm_entropy"),
                                        "(L, H) mean row entropy −Σ_{j ≤ i} α[i, j] log α[i, j], nats" + tail)
        stats["lm_entropy_uniform"] = Statistic(ratio(totals, "lm_entropy_uniform"),
                                                "() uniform reference: mean of log(i + 1)" + tail)
        stats["lm_entropy_normalised"] = Statistic(ratio(totals, "lm_entropy_normalised"),
                                                   "(L, H) mean row entropy / log(i + 1) (1: uniform)" + tail)
        return stats


register("lm-attention", "causal LM: first-token (sink), previous-token, self and other shares, row entropy vs "
         "log(i+1) (Xiao et al. 2024; Olsson et al. 2022)", lambda model, options: LMAttention())
