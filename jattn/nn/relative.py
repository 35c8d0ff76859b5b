"""An additive relative-position score bias: a learned scalar per head and bucket of the signed
distance j − i between key j and query i, added to the attention scores before the softmax
(Shaw et al. 2018; the bucketed, bidirectional form of Raffel et al. 2020, T5 §2.1, which
MPNet, Song et al. 2020, shares across its layers):

    s[h, i, j] = q_hi · k_hj / sqrt(d_h) + B[bucket(j − i), h]

Buckets: half of them for keys before the query and half for keys after it (the sign); within a
half, distances below a quarter of the buckets get a bucket each, larger ones share
logarithmically spaced buckets up to ``max_distance``, beyond which all fall into the last.
One-sided (``bidirectional=False``, T5's decoder self-attention, which never sees keys after the
query): all buckets for the distance i − j ≥ 0 (keys after the query read bucket 0), half of them
exact.
Distances are those of the padded sequence's positions 0..n−1 (padding sits after the real
tokens, so a real pair's distance is its distance in the sentence).

The bias changes α only; the values, W_O and hence Kobayashi et al.'s (2020) decomposition
y_i = Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O hold as they are.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def relative_position_bucket(relative: jax.Array, buckets: int, max_distance: int,
                             bidirectional: bool = True) -> jax.Array:
    """Bucket (int32, in [0, buckets)) of each signed distance ``relative`` = j − i (any shape);
    ``bidirectional=False``: the one-sided buckets of a causal stack (HF T5's
    ``_relative_position_bucket(bidirectional=False)``).

    Computed in float32 as the reference implementations compute it (the logarithm's rounding
    decides the buckets at their edges)."""
    half = buckets // 2 if bidirectional else buckets  # the buckets of one side
    n = -relative  # i − j: positive for keys before the query
    if bidirectional:
        side = jnp.where(n < 0, half, 0)  # keys after the query use the upper half
        n = jnp.abs(n)
    else:
        side, n = 0, jnp.maximum(n, 0)  # keys after the query: distance 0
    exact = half // 2  # distances 0..exact−1 get one bucket each
    log_bucket = exact + (jnp.log(n.astype(jnp.float32) / exact) / math.log(max_distance / exact)
                          * (half - exact)).astype(jnp.int32)  # n ≥ exact: log-spaced
    return side + jnp.where(n < exact, n, jnp.minimum(log_bucket, half - 1)).astype(jnp.int32)


def relative_position_bias(table: jax.Array, n: int, max_distance: int, bidirectional: bool = True,
                           keys: int | None = None, offset=0) -> jax.Array:
    """The score bias of one layer on n query positions offset..offset+n−1 (``offset``: an int or
    traced, the tokens a decoding cache holds before them) and ``keys`` key positions 0..keys−1
    (None: n): table (buckets, H) -> (H, n, keys), bias[h, i, j] = table[bucket(j − i), h]."""
    query, key = jnp.arange(n) + offset, jnp.arange(n if keys is None else keys)
    bucket = relative_position_bucket(key[None, :] - query[:, None], table.shape[0], max_distance,
                                      bidirectional)  # (n, keys)
    return jnp.moveaxis(table[bucket], -1, 0)  # (H, n, keys)
