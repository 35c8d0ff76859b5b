"""jattn.stats against independent formulations: Holm via adjusted p-values, the paired
bootstrap via a plain loop over the same index resamples, the t-interval via scipy, and the
bootstrap's coverage on data whose sampling distribution is known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sp

from jattn import stats


def holm_by_adjusted_p(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's adjusted p-values (Wright 1992): p̃_(k) = max_{j ≤ k} min(1, (m − j + 1) p_(j));
    reject where p̃ ≤ α."""
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.zeros(m, bool)
    out[order] = adjusted <= alpha
    return out


@pytest.mark.parametrize("seed", range(30))
def test_holm_equals_the_adjusted_p_value_rule(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 150))
    p = np.where(rng.random(m) < 0.3, rng.random(m) * 1e-3, rng.random(m))  # some true effects among nulls
    np.testing.assert_array_equal(stats.holm(p, 0.05), holm_by_adjusted_p(p, 0.05))


def test_holm_keeps_the_shape_and_refuses_bad_p_values():
    p = np.array([[0.001, 0.5], [0.03, 0.01]])
    assert stats.holm(p).shape == (2, 2)
    assert stats.holm(p).tolist() == [[True, False], [False, True]]  # 0.001 ≤ .05/4, 0.01 ≤ .05/3, 0.03 > .05/2
    for bad in ([0.1, np.nan], [1.5], [-0.1]):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            stats.holm(bad)


def accuracy(pred, gold):
    return float((pred == gold).mean())


def test_paired_bootstrap_equals_a_loop_over_the_same_resamples():
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 2, 300)
    base = np.where(rng.random(300) < 0.8, gold, 1 - gold)  # 80 % right
    system = np.where(rng.random(300) < 0.1, gold, base)  # fixes some errors
    got = stats.paired_bootstrap(accuracy, system, base, gold, b=500, seed=3)
    idx = np.random.default_rng(3).integers(0, 300, size=(500, 300))
    deltas = np.array([accuracy(system[i], gold[i]) - accuracy(base[i], gold[i]) for i in idx])
    assert got["delta"] == accuracy(system, gold) - accuracy(base, gold)
    assert got["ci"] == tuple(np.quantile(deltas, [0.025, 0.975]))
    assert got["p"] == min(1.0, 2 * min((deltas <= 0).mean(), (deltas >= 0).mean()))
    assert got["ci"][0] > 0 and got["p"] < 0.01  # the fix is detected


def test_paired_bootstrap_of_a_system_against_itself_is_no_difference():
    gold = np.arange(50) % 2
    got = stats.paired_bootstrap(accuracy, gold, gold, gold, b=200)
    assert got["delta"] == 0 and got["ci"] == (0.0, 0.0) and got["p"] == 1.0


def test_mean_interval_covers_like_the_normal_theory_interval():
    """A mean of n = 2000 normal values: the percentile interval's half-width is 1.96 σ/√n
    within the bootstrap's own Monte-Carlo error (B = 1000: a few %)."""
    x = np.random.default_rng(2).normal(3.0, 2.0, 2000)
    value, (lo, hi) = stats.mean_ci(x)
    assert value == x.mean() and lo < value < hi
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
    assert abs((hi - lo) / 2 - half) < 0.1 * half


def test_bootstrap_of_a_corpus_metric_resamples_examples_jointly():
    """MCC recomputed per resample on (prediction, gold) pairs kept together: a perfect
    classifier's interval is the point 1."""
    from sklearn.metrics import matthews_corrcoef

    gold = np.random.default_rng(0).integers(0, 2, 100)
    value, ci = stats.bootstrap_ci(matthews_corrcoef, gold, gold, b=200)
    assert value == 1.0 and ci == (1.0, 1.0)


def test_bootstrap_refuses_non_finite_and_unequal_arrays():
    with pytest.raises(ValueError, match="finite"):
        stats.mean_ci([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="one length"):
        stats.paired_bootstrap(accuracy, np.zeros(3), np.zeros(4), np.zeros(3))


def test_permutation_interval_is_the_no_association_band():
    rng = np.random.default_rng(4)
    x = rng.normal(size=400)
    rho = lambda a, b: sp.spearmanr(a, b).statistic  # noqa: E731
    value, (lo, hi) = stats.permutation_interval(rho, x, x + rng.normal(size=400), b=300)
    assert lo < 0 < hi and hi < 0.15 and value > 0.5  # a real association lies far outside the band
    value, (lo, hi) = stats.permutation_interval(rho, x, rng.normal(size=400), b=300)
    assert lo < value < hi  # independent data: inside the band (a fixed seed; 95 % of seeds would be)


def test_t_interval_equals_scipy():
    seeds = [0.812, 0.825, 0.799, 0.830]
    mean, ci = stats.t_interval(seeds)
    ref = sp.t.interval(0.95, len(seeds) - 1, loc=np.mean(seeds), scale=sp.sem(seeds))
    assert mean == pytest.approx(np.mean(seeds)) and ci == pytest.approx(ref)
    with pytest.raises(ValueError, match="2 seeds"):
        stats.t_interval([0.8])


def test_spearman_bootstrap_is_the_generic_bootstrap_of_scipys_rho():
    """The O(n) resampled ranks (ties: values repeated in the data and examples drawn twice) give
    the interval ``bootstrap_ci`` gives with ``scipy.stats.spearmanr`` recomputed per resample."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(4)
    for x, y in [(rng.integers(0, 9, 200), rng.integers(0, 4, 200)),  # many ties on both sides
                 (rng.normal(size=150), rng.normal(size=150))]:
        y = y + x  # correlated
        value, ci = stats.spearman_bootstrap_ci(x, y, b=300, seed=2)
        want = stats.bootstrap_ci(lambda a, b: spearmanr(a, b).statistic, x, y, b=300, seed=2)
        assert value == want[0] and np.allclose(ci, want[1], rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        stats.spearman_bootstrap_ci([1.0, np.nan, 2.0], [1.0, 2.0, 3.0])
