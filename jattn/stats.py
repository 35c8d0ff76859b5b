"""How sure a reported number is: the intervals and tests every claim of jattn carries.

- ``bootstrap_ci``: percentile bootstrap over examples of any statistic of per-example arrays
  (a mean, or a corpus metric recomputed on each resample: MCC, Spearman ρ, ...), B resamples,
  a fixed seed (Efron & Tibshirani 1993, §13.3). Built on ``scipy.stats.bootstrap``.
- ``paired_bootstrap``: two systems scored on the same examples: one index resample scores
  both (Koehn 2004); Δ, its interval and the two-sided p-value (the share of resamples whose Δ
  falls on the other side of 0, doubled).
- ``holm``: Holm–Bonferroni (Holm 1979) over a family of p-values: which tests are rejected at a
  family-wise error rate α.
- ``permutation_interval``: the central 95 % of a statistic under random permutations of one
  argument: the band a value must leave to differ from "no association".
- ``t_interval``: mean and Student-t interval over training seeds.
- ``bleu_statistics`` / ``bleu_from_statistics``: corpus sacreBLEU (Post 2018) as a statistic of
  per-sentence rows (n-gram matches and totals, lengths: they sum to the corpus ones), so the two
  bootstraps above resample sentences and recompute the corpus BLEU.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["B", "bleu_ci", "bleu_from_statistics", "bleu_statistics", "bootstrap_ci", "holm", "mean_ci",
           "paired_bootstrap", "permutation_interval", "SEED"]

B = 1000  # resamples, as STATISTICS.md §2 asks (≥ 1000)
SEED = 0


def _check(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    arrays = [np.asarray(a) for a in arrays]
    n = len(arrays[0])
    if n < 2 or any(len(a) != n for a in arrays):
        raise ValueError(f"a bootstrap needs ≥ 2 examples and arrays of one length, got {[len(a) for a in arrays]}")
    if any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrays):
        raise ValueError("per-example values must be finite (a NaN or inf would make every resample NaN)")
    return arrays


def _resamples(n: int, b: int, seed: int) -> np.ndarray:
    """(b, n) example indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, size=(b, n))


def bootstrap_ci(statistic: Callable[..., float], *arrays, b: int = B, seed: int = SEED,
                 level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """(value on all examples, percentile interval) of ``statistic(*arrays)`` resampling examples
    (the first axis of every array together; an array may have more axes, e.g. (n, R) predictions
    of R systems). ``statistic`` takes the arrays and returns a number. The resampled object is the
    example index (what ``scipy.stats.bootstrap(paired=True)`` does inside), so arrays of any
    shape and dtype go through unchanged."""
    from scipy.stats import bootstrap

    arrays = _check(arrays)
    value = float(statistic(*arrays))
    result = bootstrap((np.arange(len(arrays[0])),), lambda i: statistic(*(a[i] for a in arrays)), n_resamples=b,
                       vectorized=False, confidence_level=level, method="percentile",
                       rng=np.random.default_rng(seed))
    return value, (float(result.confidence_interval.low), float(result.confidence_interval.high))


def _tie_groups(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(stable sort order, each sorted position's group of equal values, the number of groups)."""
    order = np.argsort(v, kind="stable")
    s = v[order]
    group = np.concatenate([[0], np.cumsum(s[1:] != s[:-1])])  # (n,)
    return order, group, int(group[-1]) + 1 if len(v) else 0


def _resampled_ranks(counts: np.ndarray, order: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """The average rank each example's copies get in a resample that drew example i ``counts[i]``
    times (scipy's ``rankdata(method="average")`` of the resampled values)."""
    size = np.bincount(group, weights=counts[order], minlength=groups)  # (groups,) resampled values per group
    rank = np.cumsum(size) - size + (size + 1) / 2  # (groups,)
    out = np.empty(len(order))
    out[order] = rank[group]
    return out


def spearman_bootstrap_ci(x, y, *, b: int = B, seed: int = SEED, level: float = 0.95
                          ) -> tuple[float, tuple[float, float]]:
    """``bootstrap_ci`` of Spearman's ρ in O(n) per resample instead of two sorts: a resample's
    ranks follow from the original order and how often it drew each example, and ρ is the Pearson
    correlation of those ranks weighted by the counts. The same resamples and percentile rule as
    ``bootstrap_ci``, so the same interval to rounding (tested against it)."""
    from scipy.stats import quantile, spearmanr

    x, y = (np.asarray(a, np.float64) for a in _check((x, y)))
    value = float(spearmanr(x, y).statistic)
    gx, gy = _tie_groups(x), _tie_groups(y)
    rho = np.empty(b)
    for k, idx in enumerate(_resamples(len(x), b, seed)):
        w = np.bincount(idx, minlength=len(x)).astype(np.float64)  # (n,) copies of each example
        rx, ry = _resampled_ranks(w, *gx), _resampled_ranks(w, *gy)
        dx, dy = rx - w @ rx / w.sum(), ry - w @ ry / w.sum()
        rho[k] = (w * dx) @ dy / np.sqrt(((w * dx) @ dx) * ((w * dy) @ dy))
    lo, hi = quantile(rho, np.array([(1 - level) / 2, (1 + level) / 2]))
    return value, (float(lo), float(hi))


def mean_ci(values, **kw) -> tuple[float, tuple[float, float]]:
    """The mean of per-example values and its percentile bootstrap interval."""
    return bootstrap_ci(np.mean, values, **kw)


def paired_bootstrap(metric: Callable[..., float], system, baseline, *rest, b: int = B, seed: int = SEED,
                     level: float = 0.95) -> dict:
    """Δ = metric(system, *rest) − metric(baseline, *rest) on the same examples (e.g. predictions
    with a head disabled vs without, and the gold labels in ``rest``); one index resample scores
    both (Koehn 2004). -> {"delta", "ci": (lo, hi), "p", "b"}; p is two-sided: twice the share of
    resamples with Δ on the other side of 0 (or at 0), capped at 1."""
    system, baseline, *rest = _check((system, baseline, *rest))
    delta = float(metric(system, *rest) - metric(baseline, *rest))
    deltas = np.empty(b)
    for k, idx in enumerate(_resamples(len(system), b, seed)):
        picked = [a[idx] for a in rest]
        deltas[k] = metric(system[idx], *picked) - metric(baseline[idx], *picked)
    lo, hi = np.quantile(deltas, [(1 - level) / 2, (1 + level) / 2])
    p = min(1.0, 2 * min((deltas <= 0).mean(), (deltas >= 0).mean()))
    return {"delta": delta, "ci": (float(lo), float(hi)), "p": float(p), "b": b}


def holm(p_values, alpha: float = 0.05) -> np.ndarray:
    """Holm–Bonferroni: bool array, True where the hypothesis is rejected with the family-wise
    error rate kept at ``alpha`` (p-values of any shape; the family is all of them)."""
    p = np.asarray(p_values, np.float64)
    flat = p.ravel()
    if not np.isfinite(flat).all() or (flat < 0).any() or (flat > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    order = np.argsort(flat, kind="stable")
    m = len(flat)
    passes = flat[order] <= alpha / (m - np.arange(m))  # the k-th smallest against α / (m − k)
    k = m if passes.all() else int(np.argmin(passes))  # the first failure stops the procedure
    rejected = np.zeros(m, bool)
    rejected[order[:k]] = True
    return rejected.reshape(p.shape)


def permutation_interval(statistic: Callable[[np.ndarray, np.ndarray], float], x, y, *, b: int = B,
                         seed: int = SEED, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """(statistic(x, y), the central ``level`` interval of statistic(x, permuted y)): the values
    "no association" gives on these data (e.g. Spearman ρ with a shuffled frequency rank)."""
    x, y = _check((x, y))
    rng = np.random.default_rng(seed)
    null = np.asarray([statistic(x, rng.permutation(y)) for _ in range(b)])
    lo, hi = np.quantile(null, [(1 - level) / 2, (1 + level) / 2])
    return float(statistic(x, y)), (float(lo), float(hi))


def t_interval(values, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """Mean over training seeds and its Student-t interval (n − 1 degrees of freedom)."""
    from scipy.stats import t

    v = np.asarray(values, np.float64)
    if len(v) < 2:
        raise ValueError(f"a t-interval needs ≥ 2 seeds, got {len(v)}")
    half = t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), (float(v.mean() - half), float(v.mean() + half))


def bleu_statistics(hyps: list[str], refs: list[str]) -> np.ndarray:
    """(n, 10) per sentence: sacreBLEU's (13a) matched n-grams (n = 1..4), n-gram totals, hypothesis
    and reference length, one reference per sentence. Rows sum to the corpus statistics."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} translations but {len(refs)} references: they must be aligned line by line")
    metric = BLEU(effective_order=True)  # changes sentence scores only, not the counts read here
    return np.array([[*s.counts, *s.totals, s.sys_len, s.ref_len]
                     for s in (metric.sentence_score(h, [r]) for h, r in zip(hyps, refs))], dtype=np.int64)


def bleu_from_statistics(rows: np.ndarray) -> float:
    """Corpus BLEU (sacreBLEU's defaults: exponential smoothing, brevity penalty) of the summed rows."""
    from sacrebleu.metrics import BLEU

    t = np.asarray(rows).sum(0)
    return BLEU.compute_bleu(t[:4].tolist(), t[4:8].tolist(), int(t[8]), int(t[9]), smooth_method="exp").score


def bleu_ci(hyps: list[str], refs: list[str]) -> dict:
    """Corpus sacreBLEU with its percentile bootstrap interval over sentences (``STATISTICS.md`` §2)
    and sacreBLEU's signature -> {"bleu", "ci", "n", "b", "signature"}."""
    from sacrebleu.metrics import BLEU

    value, ci = bootstrap_ci(bleu_from_statistics, bleu_statistics(hyps, refs))
    metric = BLEU()
    corpus = metric.corpus_score(hyps, [refs])  # sacreBLEU's own score: the signature needs one
    if abs(corpus.score - value) > 1e-9:
        raise AssertionError(f"BLEU from per-sentence statistics {value} != sacreBLEU's corpus score {corpus.score}")
    return {"bleu": value, "ci": list(ci), "n": len(hyps), "b": B, "signature": str(metric.get_signature())}
