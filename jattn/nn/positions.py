"""Content-dependent relative-position score terms: disentangled attention (He et al. 2021,
DeBERTa, Eq. 2–4 and §3.1; v3: He et al. 2023).

Each token is a content vector H_i and each signed distance δ a position vector P_δ (rows of
the relative embeddings shared by the layers, after an optional LayerNorm). With
Q_c = H W_q, K_c = H W_k (the layer's own projections) and Q_r = P W_{q,r}, K_r = P W_{k,r} (the
layer's position projections, or W_q, W_k themselves: ``shared_projections``, DeBERTa-v3's
``share_att_key``), the score of query i on key j is (Eq. 4, HF's order of terms)

    s[h, i, j] = ( Q_c,i · K_c,j   +   Q_c,i · K_r,δ(i,j)   +   K_c,j · Q_r,δ(j,i) ) / sqrt(d_h · f)
                   content→content      content→position (c2p)   position→content (p2c)

with δ(i, j) the bucket of i − j clamped into [−k, k) (k the span; ``log_bucket``: DeBERTa-v2's
logarithmic buckets beyond k/2) and f = 1 + the number of position terms (``scale_factor``).
The terms change the scores, hence α, only: the values, W_O and Kobayashi et al.'s (2020)
decomposition y_i = Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O hold unchanged.

``RelativeScores`` is one layer's position terms as data (a pytree): the encoder builds it
per layer (``layer_scores``) and passes it where an additive score bias goes
(``jattn.nn.attention.MultiHeadAttention``'s ``score_bias``), which calls ``scores``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from jattn.nn.config import ConfigError, DisentangledAttention, EncoderConfig
from jattn.nn.layers import Dense, LayerNorm, param


def log_bucket(relative: jax.Array, buckets: int, max_position: int) -> jax.Array:
    """DeBERTa-v2's bucket of each signed distance ``relative`` (int, any shape): itself when
    |δ| ≤ buckets/2, else sign(δ)·(mid + ceil(log(|δ|/mid) / log((max_position−1)/mid) · (mid−1))),
    mid = buckets/2. Computed in float32 as Hugging Face's ``make_log_bucket_position``.
    (Not ``jattn.nn.relative``'s T5 buckets: those use floor, a quarter of the buckets exact
    and separate halves per sign.)"""
    mid = buckets // 2
    near = (relative < mid) & (relative > -mid)
    absolute = jnp.where(near, mid - 1, jnp.abs(relative)).astype(jnp.float32)  # log's argument stays ≥ 1
    log_pos = jnp.ceil(jnp.log(absolute / mid) / jnp.log(jnp.float32((max_position - 1) / mid))
                       * (mid - 1)) + mid  # (…) float32
    return jnp.where(absolute <= mid, relative.astype(jnp.float32), log_pos * jnp.sign(relative)).astype(jnp.int32)


def relative_index(n: int, d: DisentangledAttention) -> tuple[jax.Array, jax.Array]:
    """(c2p, p2c) rows of the 2k relative embeddings each (query i, key j) reads, (n, n) int32:
    c2p[i, j] = clamp(δ(i − j) + k), p2c[i, j] = clamp(−δ(j − i) + k), clamped into [0, 2k)."""
    pos = jnp.arange(n)
    rel = pos[:, None] - pos[None, :]  # (n, n) i − j
    if d.buckets > 0 and d.max_position > 0:
        rel = log_bucket(rel, d.buckets, d.max_position)  # (n, n)
    k = d.span
    return jnp.clip(rel + k, 0, 2 * k - 1), jnp.clip(-rel.T + k, 0, 2 * k - 1)  # (n, n), (n, n)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RelativeScores:
    """One layer's position terms: ``pos_key`` K_r (H, 2k, d_h) for c2p, ``pos_query`` Q_r
    (H, 2k, d_h) for p2c (None where the term is absent), the embedding rows each (query, key)
    reads, ``c2p`` and ``p2c`` (q, n) int32, and the scale factor f. Indexing it as the (H, q, k)
    bias it stands for (``bias[:, :1]``: the first query row) cuts the query rows; an integer
    index (a layer of a stack built with ``jax.vmap``) indexes every array."""

    pos_key: jax.Array | None
    pos_query: jax.Array | None
    c2p: jax.Array
    p2c: jax.Array
    scale_factor: int = dataclasses.field(metadata=dict(static=True), default=1)

    def __getitem__(self, index):
        if isinstance(index, tuple):  # (heads, query rows) of an (H, q, k) bias
            return dataclasses.replace(self, c2p=self.c2p[index[1]], p2c=self.p2c[index[1]])
        return jax.tree.map(lambda a: a[index], self)


def scores(q: jax.Array, k: jax.Array, score_bias) -> jax.Array:
    """The attention scores of queries q (b, q, H, d_h) on keys k (b, H, k, d_h), float32 (b, H, q, k):
    q·k / sqrt(d_h) + ``score_bias`` (an additive (H, q, k) bias, ``jattn.nn.relative``, or None),
    or, given ``RelativeScores``, disentangled attention's (q·k + c2p + p2c) / sqrt(d_h · f)."""
    d_h = q.shape[-1]
    if not isinstance(score_bias, RelativeScores):
        s = jnp.einsum("bqhd,bhkd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(d_h)  # (b, H, q, k)
        return s if score_bias is None else s + score_bias  # (b, H, q, k)
    t, scale = score_bias, math.sqrt(d_h * score_bias.scale_factor)
    s = jnp.einsum("bqhd,bhkd->bhqk", q, k).astype(jnp.float32)  # (b, H, q, k) content→content
    rows, cols = jnp.arange(t.c2p.shape[0])[:, None], jnp.arange(t.c2p.shape[1])[None, :]  # (q, 1), (1, k)
    if t.pos_key is not None:
        c2p = jnp.einsum("bqhd,hrd->bhqr", q, t.pos_key.astype(q.dtype)).astype(jnp.float32)  # (b, H, q, 2k)
        s = s + c2p[:, :, rows, t.c2p]  # (b, H, q, k) Q_c,i · K_r,δ(i,j)
    if t.pos_query is not None:
        p2c = jnp.einsum("bhkd,hrd->bhkr", k, t.pos_query.astype(k.dtype)).astype(jnp.float32)  # (b, H, k, 2k)
        s = s + p2c[:, :, cols, t.p2c]  # (b, H, q, k) K_c,j · Q_r,δ(j,i)
    return s / scale  # (b, H, q, k)


class PositionProjections(nnx.Module):
    """A layer's own position projections W_{k,r} (c2p) and W_{q,r} (p2c), (D, H, d_h) with
    biases, created stacked; absent with ``shared_projections`` (the layer's W_k, W_q serve)."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs, stack: tuple = (), std=None):
        d = config.disentangled
        if config.pruned:
            raise ConfigError("physically pruning heads of a model with its own position projections "
                              "(config.disentangled.shared_projections false) is not supported: "
                              "jattn does not slice those. Fix: gate the heads (Interventions(head_gates=...)) "
                              "instead of removing them")
        D, H, d_h = config.hidden_size, config.num_heads, config.head_dim
        proj = dict(rngs=rngs, stack=stack, out_names=("model", None), std=std)
        self.key = Dense((D,), (H, d_h), **proj) if "c2p" in d.terms else None
        self.query = Dense((D,), (H, d_h), **proj) if "p2c" in d.terms else None


class RelativeEmbeddings(nnx.Module):
    """The relative embeddings P (2k, D) shared by the layers and their LayerNorm (DeBERTa's
    ``rel_embeddings``, ``norm_rel_ebd: layer_norm``)."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs, std=None):
        d = config.disentangled
        self.table = param(rngs, (2 * d.span, config.hidden_size), "normal", std)
        self.ln = LayerNorm(config.hidden_size, config.layer_norm_eps) if d.layer_norm else None

    def __call__(self) -> jax.Array:
        """P, after the LayerNorm when there is one: (2k, D)."""
        table = self.table[...]  # (2k, D)
        return table if self.ln is None else self.ln(table)  # (2k, D)


def _project(dense: Dense, layer, x: jax.Array) -> jax.Array:
    """Layer ``layer``'s slice of the stacked projection ``dense`` on x (r, D) -> (H, r, d_h)."""
    y = jnp.einsum("rd,dhe->hre", x, dense.kernel[...][layer])  # (H, r, d_h)
    return y + dense.bias[...][layer][:, None]  # (H, r, d_h)


def layer_scores(config: EncoderConfig, relative: RelativeEmbeddings | None, layers, layer, n: int) -> RelativeScores:
    """Layer ``layer``'s (an int, or traced) position terms on n positions: the shared relative
    embeddings through the layer's position projections (``layers.positions``) or, shared, its
    own key and query projections (``layers.attention``)."""
    d = config.disentangled
    if relative is None or not d.terms:  # no relative attention: the scale factor alone
        empty = jnp.zeros((n, n), jnp.int32)
        return RelativeScores(None, None, empty, empty, d.scale_factor)
    P = relative()  # (2k, D)
    own = layers.attention if d.shared_projections else layers.positions
    pos_key = _project(own.key, layer, P) if "c2p" in d.terms else None  # (H, 2k, d_h)
    pos_query = _project(own.query, layer, P) if "p2c" in d.terms else None  # (H, 2k, d_h)
    c2p, p2c = relative_index(n, d)  # (n, n)
    return RelativeScores(pos_key, pos_query, c2p, p2c, d.scale_factor)


def position_projections(config: EncoderConfig, *, rngs: nnx.Rngs, stack: tuple, std=None):
    """A stacked layer's ``PositionProjections``, or None (no position terms, or shared projections)."""
    d = config.disentangled
    if d is None or not d.terms or d.shared_projections:
        return None
    return PositionProjections(config, rngs=rngs, stack=stack, std=std)


def relative_embeddings(config: EncoderConfig, *, rngs: nnx.Rngs, std=None):
    """The encoder's ``RelativeEmbeddings``, or None (no position terms)."""
    d = config.disentangled
    return RelativeEmbeddings(config, rngs=rngs, std=std) if d is not None and d.terms else None
