"""Float32 tolerances derived from the computation, for comparing two float32 results of the same
quantity that were computed differently: other shapes or padding (XLA blocks the reductions
differently), another batch composition or chunking, another device count, jit vs eager, or
another library (jattn vs Hugging Face PyTorch).

Error model. Each float32 operation rounds with a relative error of at most EPS / 2, EPS = 2**-23
≈ 1.19e-7. A sum or dot product of n terms rounds once per addition, each error relative to the
partial sum at that point, so its error is at most ~ n · EPS · S in the worst case, where S is the
size of the summed terms (Σ|x_i|; |result| when the terms do not cancel). Two programs that add the
same terms in another order (blocking, SIMD width, a library's kernels) get independent roundings;
modelled as independent zero-mean errors (Higham & Mary 2019, probabilistic rounding error
analysis), their difference grows like sqrt(n) · EPS · S, and exceeding a few times that is
vanishingly rare. For a chain of reductions (a Transformer layer: projections over D, softmax and
context over n keys, the FFN over its width, LayerNorm over D; then the next layer), the errors of
the steps add, each propagated to the result with a gain of about one, so ``terms`` is the sum of
the reduction lengths along the chain. Hence the tolerance

    tol = ulps · EPS · sqrt(terms) · scale

with ``scale`` the magnitude of the compared values (default: the largest |desired|) and ``ulps``
a safety factor (default 8). Across this suite's comparisons (XLA and PyTorch kernels for AVX-512
and for AVX2) the differences stay below 2 ulps · EPS · sqrt(terms) · scale, most below 0.5, and
the suite passes with every library capped at AVX (``make test-no-fma``). Pass an explicit
``scale`` where the result cancels (a difference of large numbers, a gradient of a softmax): the
rounding errors are relative to the terms, not to the result. A computation that amplifies its
errors (a softmax of large logits, an ill-conditioned solve) needs that gain in ``ulps``, said at
the call.

What the tolerance still catches: a term too many or too few (an off-by-one mask, a skipped
element) changes a sum of n comparable terms by ~ S / n, far above EPS · sqrt(n) · S for any n a
test uses (n ≪ 1e6); a wrong sign, scale or eps changes it by much more.

Results compared from the same compiled program on the same shapes are bitwise equal and are
compared exactly, not with this module.
"""

from __future__ import annotations

import math

import numpy as np

EPS = float(np.finfo(np.float32).eps)  # 2**-23
ULPS = 8


def tolerance(scale, terms: int = 1, ulps: float = ULPS):
    """The absolute tolerance ``ulps · EPS · sqrt(terms) · scale`` (see the module docstring)."""
    if terms < 1:
        raise ValueError(f"terms must be >= 1, got {terms}")
    return ulps * EPS * math.sqrt(terms) * np.asarray(scale, np.float64)


def assert_close(actual, desired, *, terms: int = 1, scale=None, ulps: float = ULPS, err_msg: str = ""):
    """Assert |actual - desired| ≤ ``tolerance(scale, terms, ulps)`` elementwise, shapes equal (a
    scalar ``desired`` stands for every element). NaN and ±inf pass only where both sides hold them.

    ``scale`` defaults to max |desired| over its finite elements (1 if that is 0); it may be an
    array broadcastable against ``desired`` (a magnitude per row, per statistic)."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    if desired.ndim == 0:
        desired = np.broadcast_to(desired, actual.shape)
    if actual.shape != desired.shape:
        raise AssertionError(f"{err_msg}: shape {actual.shape} != {desired.shape}")
    finite = np.isfinite(desired)
    if scale is None:
        scale = float(np.max(np.abs(desired), initial=0.0, where=finite)) or 1.0
    tol = tolerance(scale, terms, ulps)
    with np.errstate(invalid="ignore"):  # inf − inf
        diff = np.abs(actual - desired)
    same = (actual == desired) | (np.isnan(actual) & np.isnan(desired))  # equal infinities, NaN in both
    bad = ~((diff <= tol) | same)
    if bad.any():
        excess = np.where(bad, diff / np.maximum(tol, np.finfo(np.float64).tiny), 0.0)
        worst = np.unravel_index(np.argmax(excess), diff.shape) if diff.ndim else ()
        raise AssertionError(
            f"{err_msg}: {int(bad.sum())} of {diff.size} elements differ by more than {ulps} ulps · "
            f"sqrt({terms}) · scale (tolerance {float(np.max(tol)):.3g}); worst at {tuple(map(int, worst))}: "
            f"{actual[worst]!r} vs {desired[worst]!r}, difference {diff[worst]:.3g}")


def layer_terms(layers: int, width: int, keys: int, ffn: int) -> int:
    """``terms`` for ``layers`` Transformer layers of model width ``width``, ``keys`` attended
    positions and FFN width ``ffn``: per layer four reductions over the width (the Q/K/V and the
    output projections, the FFN's input projection, LayerNorm's statistics), one over the keys
    (the context) and one over the FFN width."""
    return layers * (4 * width + keys + ffn)


def model_terms(config, keys: int, target_keys: int | None = None) -> int:
    """``terms`` of a jattn model's forward on ``keys`` source tokens: its encoder layers
    (``layer_terms``) and a head's projection over the width; for a translation model
    (``d_model``) also its decoder layers on ``target_keys`` target tokens, each with self- and
    cross-attention (twice the width reductions, keys of both sides). A gradient doubles it (the
    backward pass runs the same reductions again); sums over a corpus add their length."""
    if hasattr(config, "d_model"):
        t = keys if target_keys is None else target_keys
        return (layer_terms(config.encoder_layers, config.d_model, keys, config.encoder_ffn_dim)
                + layer_terms(config.decoder_layers, 2 * config.d_model, keys + t, config.decoder_ffn_dim)
                + config.d_model)
    return layer_terms(config.num_layers, config.hidden_size, keys, config.intermediate_size) + config.hidden_size
