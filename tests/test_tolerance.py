"""The float32 tolerance helper (tests/tolerance.py): reordered float32 computations of one quantity
pass; a sum that is off by one element, a wrong sign or a NaN fails."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tolerance import EPS, assert_close, tolerance

N = 4096


def _sequential(x):
    """Left-to-right float32 accumulation (what a scalar loop does)."""
    return np.cumsum(x, dtype=np.float32)[-1]


def _vectors(seed=0, rows=16):
    return np.random.default_rng(seed).uniform(0, 1, (rows, N)).astype(np.float32)  # same-sign: S = |sum|


def test_reordered_sums_pass():
    x = _vectors()
    exact = np.array([math.fsum(map(float, r)) for r in x])
    forward = np.array([_sequential(r) for r in x])
    backward = np.array([_sequential(r[::-1]) for r in x])
    blocked = x.reshape(len(x), 64, -1).sum(-1, dtype=np.float32).sum(-1, dtype=np.float32)  # 64 partial sums
    pairwise = x.sum(-1, dtype=np.float32)  # numpy's pairwise summation
    assert not np.array_equal(forward, backward) and not np.array_equal(forward, blocked)  # rounding differs
    for got in (backward, blocked, pairwise):
        assert_close(got, forward, terms=N)
    for got in (forward, backward, blocked, pairwise):
        assert_close(got, exact, terms=N)


def test_matmul_vs_explicit_loop_passes():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(8, 300)).astype(np.float32), rng.normal(size=(300, 5)).astype(np.float32)
    loop = np.zeros((8, 5), np.float32)
    for k in range(300):  # one rank-1 update at a time: another order than the BLAS kernel
        loop += a[:, k:k + 1] * b[k:k + 1]
    # The terms cancel (signed normals): the scale is the size of the terms, Σ_k |a_ik b_kj|.
    assert_close(a @ b, loop, terms=300, scale=np.abs(a) @ np.abs(b))


def test_off_by_one_element_fails():
    x = _vectors(2, rows=4)[:, :1000]  # a sum ~500; one element ~0.5: a real difference of ~1e-3
    full = x.sum(-1, dtype=np.float32)
    skipped = x[:, 1:].sum(-1, dtype=np.float32)
    assert np.all(np.abs(skipped - full) / full > 1e-4)
    with pytest.raises(AssertionError, match="differ by more than"):
        assert_close(skipped, full, terms=1000)


def test_relative_difference_of_1e_3_fails_at_any_test_size():
    desired = np.linspace(-3, 3, 50)
    for terms in (1, 100, 10_000, 100_000):
        with pytest.raises(AssertionError):
            assert_close(desired * (1 + 1e-3), desired, terms=terms)


def test_wrong_sign_nan_and_shape_fail():
    desired = np.array([0.5, -0.25, 1.0])
    with pytest.raises(AssertionError):
        assert_close(desired * [1, -1, 1], desired, terms=100)
    with pytest.raises(AssertionError):
        assert_close([0.5, np.nan, 1.0], desired)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(desired[:2], desired)
    with pytest.raises(AssertionError):
        assert_close([0.5, np.inf, 1.0], desired)


def test_nan_and_inf_pass_where_both_sides_hold_them():
    assert_close([np.nan, 1.0, np.inf], [np.nan, 1.0, np.inf])
    assert_close(np.full(3, 1.0), 1.0)  # a scalar stands for every element
    with pytest.raises(AssertionError):
        assert_close([np.nan, 1.0], [1.0, np.nan])


def test_tolerance_formula():
    assert tolerance(2.0, terms=100, ulps=4) == pytest.approx(4 * EPS * 10 * 2.0)
    assert EPS == 2.0 ** -23
    np.testing.assert_allclose(tolerance(np.array([1.0, 3.0]), terms=1, ulps=1), [EPS, 3 * EPS])
    with pytest.raises(ValueError):
        tolerance(1.0, terms=0)
