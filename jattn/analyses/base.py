"""What many methods reduce alike, on top of the runner's protocol (``jattn.runner.protocol``):
a per-sequence mean averaged over sequences (``segment_mean`` / ``ratio``), a row-wise reduction
of α one block of query rows at a time (``over_query_blocks``), sums over each token class of
the keys (``class_sums``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn.token_classes import CLASS_NAMES


def segment_mean(per_row: jax.Array, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Additive statistics of "mean over the selected rows of a sequence, then mean over
    sequences" (Clark et al. 2019, §3): (Σ_s mean_{i∈rows_s} per_row[s, i], #sequences with
    at least one selected row). per_row (L, b, H, n), rows (b, n) bool -> ((L, H), ())."""
    rows = rows.astype(per_row.dtype)  # (b, n)
    count = rows.sum(-1)  # (b,)
    total = jnp.einsum("lbhi,bi->lbh", per_row, rows)  # (L, b, H)
    mean = total / jnp.maximum(count, 1.0)[None, :, None]  # (L, b, H)
    return mean.sum(1), (count > 0).sum().astype(per_row.dtype)  # (L, H), ()


BLOCK_BYTES = 2**26  # a query block's float32 slice of α (64 MiB): what ``over_query_blocks`` holds at once


def query_block(n: int, row_bytes: int) -> int:
    """The query rows of a block (``over_query_blocks``): the largest divisor of n whose rows of
    ``row_bytes`` each fit ``BLOCK_BYTES`` (at least 1 row)."""
    return max(d for d in range(1, n + 1) if n % d == 0 and (d == 1 or d * row_bytes <= BLOCK_BYTES))


def over_query_blocks(fn, n: int, row_bytes: int):
    """Σ over blocks of query rows of ``fn(start, size)`` (additive arrays), for a statistic that
    reduces each query row of α (…, q, k) over its keys: the blocks run one after another
    (``lax.scan``) with ``size = query_block(n, row_bytes)`` rows from ``start`` (traced), so the
    temporaries of a row-wise reduction (a masked copy, a transposed operand) are a block's, not a
    copy of the layer's α (b, H, n, n) (32 × 4,096² float32: 2.1 GB). ``row_bytes``: one query
    row of the reduced operand, e.g. b·H·k·4."""
    size = query_block(n, row_bytes)
    if size == n:
        return fn(0, n)
    zero = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(lambda: fn(0, size)))

    def add(total, start):
        return jax.tree.map(jnp.add, total, fn(start, size)), None

    return jax.lax.scan(add, zero, jnp.arange(0, n, size))[0]


def class_sums(A: jax.Array, token_class: jax.Array) -> jax.Array:
    """Σ_{j∈c} A[l, s, h, i, j] for each token class c (``CLS``..``OTHER``): one pass over A.

    A (L, b, H, q, k), token_class (b, k) int (-1 on padding) -> (C, L, b, H, q). Computed as a
    batched matmul with the batch axis leading, (b, L·H·q, k) @ (b, k, C): XLA's CPU dot then
    reads A in place, where an einsum with the batch axis in the middle copies A first."""
    L, b, H, q, k = A.shape
    onehot = (token_class[:, :, None] == jnp.arange(len(CLASS_NAMES))).astype(A.dtype)  # (b, k, C)
    rows = jnp.moveaxis(A, 1, 0).reshape(b, L * H * q, k)  # (b, L·H·q, k)  free when L = 1
    sums = jnp.matmul(rows, onehot).reshape(b, L, H, q, -1)  # (b, L, H, q, C)
    return jnp.transpose(sums, (4, 1, 0, 2, 3))  # (C, L, b, H, q)


def ratio(totals: dict, key: str) -> np.ndarray:
    """Finalize a ``segment_mean`` pair stored as ``key`` and ``key + '_n'``."""
    n = totals[key + "_n"]
    if n == 0:
        return np.full_like(totals[key], np.nan)
    return totals[key] / n
