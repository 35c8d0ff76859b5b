"""Generic layers as Flax NNX modules: ``Dense`` (any in/out shape), ``LayerNorm``; dropout and
the activations as functions.

Parameters are ``nnx.Param`` with partitioning metadata (``out_sharding``): axis names ``"model"``
on the axis a tensor-parallel mesh splits (attention heads, FFN columns), ``None`` elsewhere.
A module may be created *stacked* (``stack=(L,)``): every parameter gains leading axes, and the
module's ``__call__`` then acts on one slice, as ``jax.lax.scan`` hands it over (see
``jattn.nn.encoder``).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
from flax import nnx

ACT = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


def param(rngs: nnx.Rngs | None, shape: tuple, init: str, scale: float = 0.0, sharding=None) -> nnx.Param:
    """A parameter initialised as ``"zeros"``, ``"ones"``, ``"normal"`` (std ``scale``) or
    ``"uniform"`` (±``scale``), with partitioning names ``sharding`` (one per axis)."""
    if init == "zeros":
        value = jnp.zeros(shape, jnp.float32)
    elif init == "ones":
        value = jnp.ones(shape, jnp.float32)
    elif init == "normal":
        value = scale * jax.random.normal(rngs.params(), shape, jnp.float32)
    else:
        value = jax.random.uniform(rngs.params(), shape, jnp.float32, -scale, scale)
    names = tuple(sharding) if sharding else (None,) * len(shape)
    return nnx.Param(value, out_sharding=names, eager_sharding=False)  # placed by jattn.nn.state.shard


class Dense(nnx.Module):
    """y = x · kernel + bias, contracting x's last ``len(in_shape)`` axes.

    kernel (*stack, *in_shape, *out_shape), bias (*stack, *out_shape). ``in_names`` /
    ``out_names`` name the axes for sharding. Init: Xavier-uniform over the flattened fan-in and
    fan-out (Glorot & Bengio 2010), or N(0, ``std``) when ``std`` is given (BERT's 0.02).
    """

    def __init__(self, in_shape: tuple, out_shape: tuple, *, rngs: nnx.Rngs, stack: tuple = (),
                 in_names: tuple | None = None, out_names: tuple | None = None, std: float | None = None):
        fan_in, fan_out = math.prod(in_shape), math.prod(out_shape)
        in_names = in_names or (None,) * len(in_shape)
        out_names = out_names or (None,) * len(out_shape)
        lead = (None,) * len(stack)
        shape = (*stack, *in_shape, *out_shape)
        if std is None:
            self.kernel = param(rngs, shape, "uniform", math.sqrt(6.0 / (fan_in + fan_out)), lead + in_names + out_names)
        else:
            self.kernel = param(rngs, shape, "normal", std, lead + in_names + out_names)
        self.bias = param(rngs, (*stack, *out_shape), "zeros", sharding=lead + out_names)
        self.n_in = len(in_shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tensordot(x, self.kernel[...].astype(x.dtype), axes=self.n_in) + self.bias[...].astype(x.dtype)


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis, computed in float32 (Ba et al. 2016). scale γ, bias β (D,)."""

    def __init__(self, dim: int, eps: float, *, stack: tuple = ()):
        lead = (None,) * len(stack)
        self.scale = param(None, (*stack, dim), "ones", sharding=lead + (None,))
        self.bias = param(None, (*stack, dim), "zeros", sharding=lead + (None,))
        self.eps = eps

    def __call__(self, x: jax.Array, sigma: jax.Array | None = None) -> jax.Array:
        """``sigma`` (…, 1), optional, replaces sqrt(var + eps) (e.g. a gradient-detached copy)."""
        x32 = x.astype(jnp.float32)
        centred = x32 - x32.mean(-1, keepdims=True)
        if sigma is None:
            normed = centred * jax.lax.rsqrt(jnp.square(centred).mean(-1, keepdims=True) + self.eps)
        else:
            normed = centred / sigma
        y = normed * self.scale[...] + self.bias[...]
        return y.astype(x.dtype)


def ln_sigma(x: jax.Array, eps: float) -> jax.Array:
    """sqrt(var + eps) over the last axis, float32. (…, D) -> (…, 1)."""
    x32 = x.astype(jnp.float32)
    return jnp.sqrt(jnp.square(x32 - x32.mean(-1, keepdims=True)).mean(-1, keepdims=True) + eps)


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    """Inverted dropout; the identity when ``rng`` is None (evaluation)."""
    if rng is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


CPU_CHUNK_ROWS = 1024  # token rows a layer processes at once on CPU (see ``chunk_count``)


def chunk_rows(rows: int | None) -> int:
    """The chunk size a config asks for (``EncoderConfig.chunk_rows``), its default resolved:
    ``$JATTN_CHUNK_ROWS`` when set, else ``CPU_CHUNK_ROWS`` on CPU and 0 (the whole batch) on
    GPU/TPU, whose kernels want the whole batch. Read when a forward is traced."""
    if rows is not None:
        return rows
    if os.environ.get("JATTN_CHUNK_ROWS"):
        return int(os.environ["JATTN_CHUNK_ROWS"])
    return CPU_CHUNK_ROWS if jax.default_backend() == "cpu" else 0


def chunk_count(b: int, n: int, rows: int) -> int:
    """How many chunks a layer splits a batch of b sequences of n tokens into, at about ``rows``
    token rows a chunk (0: no chunking).

    A layer's activations at 32 × 128 tokens (scores, FFN hidden: 25 MB each for MiniLM) do not
    stay in a CPU's caches between the products that write and read them; run on chunks of about
    1,024 token rows, they do, and the lean forward of MiniLM and of a bert-base shape takes ~15 %
    less time (``benchmarks/bench_encoder.py``). A chunk is s sequences, the largest divisor of b
    with s·n ≤ max(rows, n); no chunking (1) when that leaves fewer than rows / 4 rows a chunk (a
    prime b).
    """
    if rows <= 0:
        return 1
    s = max(d for d in range(1, b + 1) if b % d == 0 and d * n <= max(rows, n))  # sequences per chunk
    return b // s if s * n >= rows // 4 else 1


def over_chunks(fn, b: int, chunks: int, stacks=None, at=0):
    """``fn(i, take) -> (rows, stacked, totals)`` for chunk i = 0..chunks−1 of a batch of b rows,
    one chunk after another (``lax.scan``); returns ``(rows, stacks, totals)``:

    - ``rows`` (arrays (b / chunks, ...)) reassembled in batch order as (b, ...);
    - ``stacked`` (arrays (b / chunks, ...)) written in batch order into ``stacks`` (arrays
      (L, b, ...): a layer loop's outputs, carried through it) at index ``at`` of their leading
      axis, in place: a layer's internals reach the stacked result without passing through a
      (b, ...) buffer of their own (for α, 25 MB a layer of MiniLM at 32 × 128 that would be
      zero-filled and copied). Without ``stacks``, ``stacked`` must be ``{}``;
    - ``totals`` (any arrays, or None) added over the chunks.

    ``take(a)`` cuts an array whose leading axis is the batch, (b, ...), to chunk i's rows
    i, i + chunks, i + 2·chunks, … → (b / chunks, ...). Strided rather than contiguous: when the
    batch is sharded in blocks over a device mesh's ``data`` axis, every chunk holds rows of every
    device, so each device still works on its own rows. ``chunks == 1`` calls ``fn`` once.
    """
    stacks = {} if stacks is None else stacks
    if chunks == 1:
        rows, stacked, totals = fn(0, lambda a: a)
        return rows, jax.tree.map(lambda S, r: jax.lax.dynamic_update_index_in_dim(S, r, at, 0), stacks,
                                  stacked), totals
    s = b // chunks

    def take_from(i):
        return lambda a: jax.lax.dynamic_index_in_dim(a.reshape(s, chunks, *a.shape[1:]), i, axis=1, keepdims=False)

    rows_shape, _, totals_shape = jax.eval_shape(lambda: fn(0, take_from(0)))
    empty = jax.tree.map(lambda x: jnp.zeros((s, chunks, *x.shape[1:]), x.dtype), rows_shape)  # (s, chunks, ...)
    zero = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), totals_shape)
    columns = jax.tree.map(lambda S: S.reshape(S.shape[0], s, chunks, *S.shape[2:]), stacks)  # (L, s, chunks, ...)

    def put(carry, i):  # chunk i's rows written to column i of (s, chunks, ...) and (L, s, chunks, ...)
        buffers, columns, totals = carry
        rows, stacked, more = fn(i, take_from(i))
        buffers = jax.tree.map(lambda buf, r: jax.lax.dynamic_update_index_in_dim(buf, r, i, axis=1), buffers, rows)
        columns = jax.tree.map(lambda S, r: jax.lax.dynamic_update_slice(S, r[None, :, None],
                                                                          (at, 0, i, *(0,) * (r.ndim - 1))),
                               columns, stacked)
        return (buffers, columns, jax.tree.map(jnp.add, totals, more)), None

    (filled, columns, totals), _ = jax.lax.scan(put, (empty, columns, zero), jnp.arange(chunks))
    return (jax.tree.map(lambda a: a.reshape(b, *a.shape[2:]), filled),  # (b, ...)
            jax.tree.map(lambda S: S.reshape(S.shape[0], b, *S.shape[3:]), columns), totals)  # (L, b, ...), summed


def split_rng(rng: jax.Array | None, n: int) -> list:
    """``n`` independent keys, or ``n`` Nones in evaluation."""
    return [None] * n if rng is None else list(jax.random.split(rng, n))
