"""Generic layers as Flax NNX modules: ``Dense`` (any in/out shape), ``LayerNorm``; dropout and
the activations as functions.

Parameters are ``nnx.Param`` with partitioning metadata (``out_sharding``): axis names ``"model"``
on the axis a tensor-parallel mesh splits (attention heads, FFN columns, and the width of the token
tables and output projections over the vocabulary, so that no device holds a whole (V, D) table:
their bytes grow with the vocabulary, 0.5 GB each at 128k x 2,048 in bfloat16), ``None`` elsewhere.
A module may be created *stacked* (``stack=(L,)``): every parameter gains leading axes, and the
module's ``__call__`` then acts on one slice, as ``jax.lax.scan`` hands it over (see
``jattn.nn.encoder``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx


def gelu(x: jax.Array) -> jax.Array:
    """Exact GELU (Hendrycks & Gimpel 2016), x·Φ(x) = ½·x·(1 + erf(x/√2)), written as PyTorch and
    HF compute it. ``jax.nn.gelu(approximate=False)`` evaluates Φ through ``erfc``, whose XLA
    expansion has two branches and an exponential; ``erf`` is one rational approximation, 2.6×
    faster on a (224, 1536) activation; at most 1.1e-6 from float64 (erfc: 3.8e-7), and both
    within 1.4e-6 of PyTorch's."""
    return 0.5 * x * (1.0 + jax.lax.erf(x * (1.0 / math.sqrt(2.0))))


ACT = {
    "gelu": gelu,
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
                 in_names: tuple | None = None, out_names: tuple | None = None, std: float | None = None,
                 bias: bool = True):
        fan_in, fan_out = math.prod(in_shape), math.prod(out_shape)
        in_names = in_names or (None,) * len(in_shape)
        out_names = out_names or (None,) * len(out_shape)
        lead = (None,) * len(stack)
        shape = (*stack, *in_shape, *out_shape)
        if std is None:
            self.kernel = param(
                rngs, shape, "uniform", math.sqrt(6.0 / (fan_in + fan_out)), lead + in_names + out_names
            )
        else:
            self.kernel = param(rngs, shape, "normal", std, lead + in_names + out_names)
        # bias=False: y = x · kernel, no bias parameter (e.g. Warner et al. 2024's bias-free projections)
        self.bias = param(rngs, (*stack, *out_shape), "zeros", sharding=lead + out_names) if bias else None
        self.n_in = len(in_shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        """As one (rows, fan-in) × (fan-in, fan-out) product on free reshapes: its gradient x̄ =
        ȳ · kernelᵀ then reads the kernel in place, where XLA:CPU copies a transposed kernel for the
        gradient of the equivalent ``tensordot`` over several axes."""
        kernel = self.kernel[...].astype(x.dtype)  # (*in_shape, *out_shape)
        lead, fan_in = x.shape[:x.ndim - self.n_in], math.prod(x.shape[x.ndim - self.n_in:])
        out_shape = kernel.shape[self.n_in:]
        y = x.reshape(-1, fan_in) @ kernel.reshape(fan_in, -1)  # (rows, fan-out)
        y = y.reshape(*lead, *out_shape)  # (*lead, *out_shape)
        return y if self.bias is None else y + self.bias[...].astype(x.dtype)  # (*lead, *out_shape)


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis, computed in float32 (Ba et al. 2016). scale γ, bias β (D,)."""

    def __init__(self, dim: int, eps: float, *, stack: tuple = (), bias: bool = True):
        lead = (None,) * len(stack)
        self.scale = param(None, (*stack, dim), "ones", sharding=lead + (None,))
        # bias=False: no β (PyTorch's LayerNorm(bias=False)); ``beta`` reads it as zeros
        self.bias = param(None, (*stack, dim), "zeros", sharding=lead + (None,)) if bias else None
        self.eps = eps

    def __call__(self, x: jax.Array, sigma: jax.Array | None = None) -> jax.Array:
        """``sigma`` (…, 1), optional, replaces sqrt(var + eps) (e.g. a gradient-detached copy)."""
        x32 = x.astype(jnp.float32)
        centred = x32 - x32.mean(-1, keepdims=True)
        if sigma is None:
            normed = centred * jax.lax.rsqrt(jnp.square(centred).mean(-1, keepdims=True) + self.eps)
        else:
            normed = centred / sigma
        y = normed * self.scale[...]
        y = y if self.bias is None else y + self.bias[...]
        return y.astype(x.dtype)

    def beta(self) -> jax.Array:
        """β (…, D), zeros for a LayerNorm without one (what the norm-based views read)."""
        return jnp.zeros_like(self.scale[...]) if self.bias is None else self.bias[...]

    def sigma(self, x: jax.Array) -> jax.Array:
        """The divisor sqrt(var + eps) this LayerNorm applies to x (…, D) -> (…, 1), float32."""
        return ln_sigma(x, self.eps)


class RMSNorm(nnx.Module):
    """y = x / sqrt(mean(x²) + eps) ⊙ (offset + γ) over the last axis, computed in float32 (Zhang &
    Sennrich 2019; T5's and Llama's "LayerNorm": no centring, no β). ``offset`` 1: Gemma's, whose
    checkpoints store γ − 1. The same interface as ``LayerNorm`` (``sigma``, ``beta``), so the
    sublayers of ``jattn.nn.attention`` take either."""

    def __init__(self, dim: int, eps: float, *, stack: tuple = (), offset: float = 0.0):
        lead = (None,) * len(stack)
        self.scale = param(None, (*stack, dim), "zeros" if offset else "ones", sharding=lead + (None,))
        self.bias = None
        self.eps, self.offset = eps, offset

    def __call__(self, x: jax.Array, sigma: jax.Array | None = None) -> jax.Array:
        """``sigma`` (…, 1), optional, replaces sqrt(mean(x²) + eps) (e.g. a gradient-detached copy)."""
        x32 = x.astype(jnp.float32)
        normed = (
            x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + self.eps) if sigma is None else x32 / sigma
        )
        return (normed * (self.offset + self.scale[...])).astype(x.dtype)

    def beta(self) -> jax.Array:
        """Zeros (…, D): an RMSNorm has no β."""
        return jnp.zeros_like(self.scale[...])

    def sigma(self, x: jax.Array) -> jax.Array:
        """sqrt(mean(x²) + eps) over the last axis, float32. (…, D) -> (…, 1)."""
        x32 = x.astype(jnp.float32)
        return jnp.sqrt(jnp.square(x32).mean(-1, keepdims=True) + self.eps)


NORMS = {"layer": LayerNorm, "rms": RMSNorm}  # by a config's ``norm`` field


def norm_module(config, dim: int, stack: tuple = ()):
    """The normaliser a config's ``norm`` names (``NORMS``), with its ``layer_norm_eps``: a LayerNorm
    with β where ``norm_bias``, or an RMSNorm with γ offset ``norm_offset``."""
    kind = getattr(config, "norm", "layer")
    if kind not in NORMS:
        raise ValueError(f"config.norm must be one of {tuple(NORMS)}, got {kind!r}")
    if kind == "rms":
        return RMSNorm(dim, config.layer_norm_eps, stack=stack, offset=config.norm_offset)
    return LayerNorm(dim, config.layer_norm_eps, stack=stack, bias=config.norm_bias)


def ln_sigma(x: jax.Array, eps: float) -> jax.Array:
    """sqrt(var + eps) over the last axis, float32. (…, D) -> (…, 1)."""
    x32 = x.astype(jnp.float32)
    return jnp.sqrt(jnp.square(x32 - x32.mean(-1, keepdims=True)).mean(-1, keepdims=True) + eps)


def safe_sqrt(sq: jax.Array) -> jax.Array:
    """sqrt(max(sq, 0)) with a finite gradient everywhere: 0 at sq ≤ 0, where sqrt's derivative
    1/(2√sq) is infinite. A norm of a masked (all-zero) vector is 0 with gradient 0 instead of
    0·∞ = NaN, so ``jax.grad`` through a norm on a padded batch stays finite (the double
    ``where``: the untaken branch is evaluated at 1, never at 0)."""
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


def safe_norm(x: jax.Array, axis: int = -1, keepdims: bool = False) -> jax.Array:
    """‖x‖₂ over ``axis`` with a finite gradient at x = 0 (``safe_sqrt``)."""
    return safe_sqrt(jnp.square(x).sum(axis, keepdims=keepdims))


def dropout_key(module: nnx.Module, rng):
    """The key a forward of ``module`` draws its dropout from, by Flax NNX's convention: a model
    is in evaluation mode (``module.eval()``; how jattn builds every model) or in training mode
    (``module.train()``), the flag ``module.deterministic``; dropout acts in training mode only.
    There it draws from ``rng``, a key or an ``nnx.Rngs`` (its ``dropout`` stream), passed to the
    call as ``nnx.Dropout`` takes ``rngs`` at call time. -> the key, or None in evaluation mode."""
    if module.deterministic:
        if rng is not None:
            raise ValueError("dropout_rng was given to a model in evaluation mode, where dropout is off. Fix: "
                             "module.train() first (module.eval() after training), or pass no dropout_rng")
        return None
    if rng is None:
        raise ValueError("a model in training mode (module.train()) needs a dropout key. Fix: pass "
                         "dropout_rng=jax.random.key(seed) or nnx.Rngs(dropout=seed), or call module.eval()")
    return rng.dropout() if isinstance(rng, nnx.Rngs) else rng


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    """Inverted dropout; the identity when ``rng`` is None (evaluation)."""
    if rng is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def split_rng(rng: jax.Array | None, n: int) -> list:
    """``n`` independent keys, or ``n`` Nones in evaluation."""
    return [None] * n if rng is None else list(jax.random.split(rng, n))
