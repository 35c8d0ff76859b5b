"""The statistics a claim of ``reproduce.json`` names (``STATISTICS``: name -> its argument names and
function), each a function of per-example columns, with the vectorised bootstraps that give
``jattn.stats.bootstrap_ci``'s interval exactly where calling the statistic 1000 times is slow
(``FAST_BOOTSTRAP``), and the interval over heads (``head_interval``). ``jattn.reproduce.claims``
computes and recomputes claims with them.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from jattn import stats

__all__ = ["FAST_BOOTSTRAP", "head_interval", "spearman", "spearman_arrays", "spearman_of_counts", "STATISTICS"]


def _accuracy(gold, pred) -> float:
    return float(np.mean(np.asarray(gold) == np.asarray(pred)))


def _mcc(gold, pred) -> float:
    """Matthews correlation of K classes (Gorodkin 2004) from the confusion matrix, in the float64
    steps of ``sklearn.metrics.matthews_corrcoef`` (0 when a margin is constant), without its
    per-call overhead (a bootstrap calls it 1000 times per system)."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    n = len(gold)
    labels, codes = np.unique(np.concatenate([gold, pred]), return_inverse=True)
    k = len(labels)
    confusion = np.bincount(codes[:n] * k + codes[n:], minlength=k * k).reshape(k, k)  # (gold, pred)
    t, p = confusion.sum(1, dtype=np.float64), confusion.sum(0, dtype=np.float64)
    cov_tp = np.trace(confusion) * n - t @ p
    cov_pp, cov_tt = n * n - p @ p, n * n - t @ t
    return 0.0 if cov_pp * cov_tt == 0 else float(cov_tp / np.sqrt(cov_tt * cov_pp))


def _mean(value) -> float:
    return float(np.mean(np.asarray(value, dtype=float)))


def spearman(x, y) -> float:
    """Spearman's ρ of x and y (scipy's: Pearson's r of the average ranks)."""
    from scipy.stats import spearmanr

    return float(spearmanr(np.asarray(x, dtype=float), np.asarray(y, dtype=float)).statistic)


def _aer(sure, possible, predicted, sure_hits, possible_hits) -> float:
    """Pooled alignment error rate (Och & Ney 2003): 1 − (|A∩S| + |A∩P|) / (|A| + |S|), the counts
    summed over the resampled sentences (S ⊆ P)."""
    a, s = float(np.sum(predicted)), float(np.sum(sure))
    return 1.0 - (float(np.sum(sure_hits)) + float(np.sum(possible_hits))) / (a + s)


def _systems(column) -> np.ndarray:
    """Per-example predictions of one system (n,) or of R systems (n, R: a list per row) -> (n, R)."""
    column = np.asarray(column)
    return column.reshape(len(column), -1)


def _gain(metric: Callable) -> Callable:
    """gain(gold, pred, reference): ``metric`` averaged over the systems of ``pred`` minus averaged
    over those of ``reference`` (columns as ``_systems`` reads them): e.g. a pruned model against
    the unpruned one, or the importance order against the mean of random pruning orders."""
    def gain(gold, pred, reference) -> float:
        p, r = _systems(pred), _systems(reference)
        return float(np.mean([metric(gold, p[:, i]) for i in range(p.shape[1])])
                     - np.mean([metric(gold, r[:, j]) for j in range(r.shape[1])]))
    return gain


def _head_spearman(x, y) -> float:
    """Spearman ρ over heads between the mean over examples of ``x`` and of ``y`` (n, K): e.g. a
    head's patching effect against its weight-based score, each averaged over the same examples."""
    return spearman(np.asarray(x, dtype=float).mean(0), np.asarray(y, dtype=float).mean(0))


HEAD_B = 2000  # head resamples: each 2.5 % tail of the interval rests on 50 of them


def head_interval(x, y, level: float = 0.95, b: int = HEAD_B) -> list[float]:
    """Percentile interval of Spearman ρ of ``x`` against ``y`` (K,) over ``b`` resamples of the K
    heads (``numpy.random.default_rng(0).integers(0, K, (b, K))``), ties ranked by their mean
    rank as ``scipy.stats.spearmanr`` does; resamples without a ρ (all heads tied) left out."""
    from scipy.stats import rankdata

    picks = np.random.default_rng(stats.SEED).integers(0, len(x), (b, len(x)))  # (b, K)
    rx, ry = rankdata(x[picks], axis=1), rankdata(y[picks], axis=1)  # (b, K) each
    rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))  # (b,) NaN where a side ties
    return [float(q) for q in np.nanquantile(rho, [(1 - level) / 2, (1 + level) / 2])]


@functools.lru_cache(maxsize=None)
def _sentence_bleu_row(hyp: str, ref: str) -> tuple:
    return tuple(stats.bleu_statistics([hyp], [ref])[0])


def _bleu(ref, hyp) -> float:
    """Corpus sacreBLEU of one system (n,) or the mean over R systems (n, R: a list per row), from
    per-sentence statistics (``jattn.stats.bleu_from_statistics``), each pair's computed once."""
    systems = _systems(hyp)
    return float(np.mean([stats.bleu_from_statistics(np.array([_sentence_bleu_row(str(h), str(r))
                                                               for h, r in zip(systems[:, i], ref)]))
                          for i in range(systems.shape[1])]))


def _fewest_heads(ref, systems, heads, reference) -> float:
    """The fewest heads among K systems (n, K; their head counts ``heads``, the same on every row)
    whose BLEU is at most 1 below the ``reference`` system's (Voita et al. 2019, §6.2.1: the heads
    kept; the 1-BLEU tolerance is this project's, not a paper number). The rows should hold the
    reference among the systems (then one always qualifies); with none, the largest count."""
    systems, heads = _systems(systems), np.asarray(heads)[0]
    floor = _bleu(ref, reference) - 1.0
    ok = [int(heads[i]) for i in range(systems.shape[1]) if _bleu(ref, systems[:, i]) >= floor]
    return float(min(ok)) if ok else float(heads.max())


def _count_bootstrap(value_of_counts: Callable[[np.ndarray], np.ndarray], n: int, level: float = 0.95,
                     chunk: int = 50) -> tuple[float, float]:
    """The percentile interval ``stats.bootstrap_ci`` gives (its resamples, ``stats.B`` of them with
    ``stats.SEED``, and its percentile rule) for a statistic that depends on a resample only
    through how often it drew each example: ``value_of_counts(w)``, w (c, n) int64 counts of c
    resamples -> (c,). Corpus BLEU is one: its per-sentence statistics are summed."""
    from scipy.stats import quantile

    theta = []
    for idx in np.array_split(stats._resamples(n, stats.B, stats.SEED), range(chunk, stats.B, chunk)):
        c = len(idx)
        w = np.bincount((np.arange(c)[:, None] * n + idx).ravel(), minlength=c * n).reshape(c, n)  # (c, n)
        theta.append(value_of_counts(w))
    lo, hi = quantile(np.concatenate(theta), np.array([(1 - level) / 2, (1 + level) / 2]))
    return float(lo), float(hi)


def _sentence_rows(ref, hyp) -> np.ndarray:
    """(R, n, 10) per-sentence BLEU statistics of each of the R systems of ``hyp`` (``_systems``)."""
    systems = _systems(hyp)
    return np.array([[_sentence_bleu_row(str(h), str(r)) for h, r in zip(systems[:, i], ref)]
                     for i in range(systems.shape[1])], dtype=np.int64)


def _bleu_of_counts(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """BLEU of each resample (w (c, n) counts) of each system (rows (R, n, 10)): (c, R)."""
    sums = np.einsum("cn,rnk->crk", w, rows)  # (c, R, 10) integer sums: what bleu_from_statistics adds up
    return np.array([[stats.bleu_from_statistics(t[None]) for t in per_system] for per_system in sums])


def _fast_bleu(ref, hyp):
    rows = _sentence_rows(ref, hyp)
    return _bleu(ref, hyp), _count_bootstrap(lambda w: _bleu_of_counts(rows, w).mean(1), len(ref))


def _fast_bleu_gain(ref, hyp, reference):
    a, b = _sentence_rows(ref, hyp), _sentence_rows(ref, reference)
    value = STATISTICS["bleu_gain"][1](ref, hyp, reference)
    return value, _count_bootstrap(lambda w: _bleu_of_counts(a, w).mean(1) - _bleu_of_counts(b, w).mean(1), len(ref))


def _fast_fewest_heads(ref, systems, heads, reference):
    rows, base, counts = _sentence_rows(ref, systems), _sentence_rows(ref, reference), np.asarray(heads)[0]

    def fewest(w):
        bleu, floor = _bleu_of_counts(rows, w), _bleu_of_counts(base, w)[:, 0] - 1.0  # (c, K), (c,)
        ok = np.where(bleu >= floor[:, None], counts[None].astype(float), np.inf)  # (c, K)
        return np.where(np.isfinite(ok.min(1)), ok.min(1), float(counts.max()))

    return _fewest_heads(ref, systems, heads, reference), _count_bootstrap(fewest, len(ref))


def spearman_of_counts(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """rho(w): Spearman ρ of (x, y) over each resample of counts w (c, n) — each example taken as
    often as drawn: its average ranks from the original sort and the counts (tie groups are runs
    of the sorted values), ρ the count-weighted Pearson correlation of those ranks."""
    sorts = []
    for v in (x, y):
        order = np.argsort(v, kind="stable")
        starts = np.flatnonzero(np.concatenate([[True], v[order][1:] != v[order][:-1]]))  # (groups,) first positions
        # group of each sorted position
        sorts.append((order, starts, np.cumsum(np.isin(np.arange(len(v)), starts)) - 1))

    def ranks(w, order, starts, group):
        size = np.add.reduceat(w[:, order], starts, axis=1)  # (c, groups) copies per group of equal values
        rank = np.cumsum(size, 1) - size + (size + 1) / 2  # (c, groups) average rank
        out = np.empty(w.shape)
        out[:, order] = rank[:, group]
        return out  # (c, n)

    def rho(w):
        w = w.astype(np.float64)
        rx, ry = ranks(w, *sorts[0]), ranks(w, *sorts[1])  # (c, n)
        total = w.sum(1, keepdims=True)
        dx, dy = rx - (w * rx).sum(1, keepdims=True) / total, ry - (w * ry).sum(1, keepdims=True) / total
        return (w * dx * dy).sum(1) / np.sqrt((w * dx * dx).sum(1) * (w * dy * dy).sum(1))

    return rho


def spearman_arrays(x, y) -> tuple[np.ndarray, np.ndarray] | None:
    """float64 (x, y), or None where ``stats.spearman_bootstrap_ci``'s checks and errors should speak."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 2 or len(x) != len(y) or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    return x, y


def _fast_spearman(x, y):
    """``stats.spearman_bootstrap_ci`` with the resamples taken a chunk at a time as counts
    (``spearman_of_counts``)."""
    from scipy.stats import spearmanr

    if (checked := spearman_arrays(x, y)) is None:
        return stats.spearman_bootstrap_ci(x, y)  # its checks and errors
    x, y = checked
    return float(spearmanr(x, y).statistic), _count_bootstrap(spearman_of_counts(x, y), len(x), chunk=20)


# statistics with an exact faster bootstrap than ``stats.bootstrap_ci`` (the same resamples and interval)
FAST_BOOTSTRAP = {"spearman": _fast_spearman, "bleu": _fast_bleu, "bleu_gain": _fast_bleu_gain,
                  "fewest_heads_within_1_bleu": _fast_fewest_heads}

# name -> (the statistic's argument names, the function of those columns)
STATISTICS: dict[str, tuple[tuple[str, ...], Callable[..., float]]] = {
    "accuracy": (("gold", "pred"), _accuracy),
    "mcc": (("gold", "pred"), _mcc),
    "mean": (("value",), _mean),
    "spearman": (("x", "y"), spearman),
    "aer": (("sure", "possible", "predicted", "sure_hits", "possible_hits"), _aer),
    "accuracy_gain": (("gold", "pred", "reference"), _gain(_accuracy)),
    "mcc_gain": (("gold", "pred", "reference"), _gain(_mcc)),
    "head_spearman": (("x", "y"), _head_spearman),
    "bleu": (("ref", "hyp"), _bleu),
    "bleu_gain": (("ref", "hyp", "reference"), lambda ref, hyp, reference: _bleu(ref, hyp) - _bleu(ref, reference)),
    "fewest_heads_within_1_bleu": (("ref", "systems", "heads", "reference"), _fewest_heads),
}
