"""A claim of ``reproduce.json``: a number beside the paper's, computed from a per-example file.

Every claim names a *statistic* (``STATISTICS``) and the columns of its predictions file (JSONL,
one example a row) the statistic reads. Its value is the statistic on all rows; its interval is
the one ``../docs/STATISTICS.md`` §2 asks for:

- ``ci_method = "bootstrap"``: percentile bootstrap over rows (B = 1000, seed 0), the statistic
  recomputed on each resample (a mean, or a corpus metric such as MCC or Spearman ρ);
- ``ci_method = "paired"``: Δ = the statistic on ``columns`` − the statistic on ``columns`` with
  the ``against`` columns swapped in (e.g. predictions with a head disabled against the
  unmodified model's, the gold labels shared): the paired bootstrap of
  ``jattn.stats.paired_bootstrap`` (Koehn 2004), with its two-sided p-value;
- ``ci_method = "seeds"``: the rows carry a ``seed`` column; the statistic per seed, their mean,
  and the Student-t interval over seeds (each seed's value listed);
- ``ci_method = "seeds_examples"``: the rows carry ``seed`` and ``index`` columns, one row per
  seed and example, every seed on the same examples; the value and ``per_seed`` as "seeds"; the
  interval the pigeonhole bootstrap (Owen 2007) of that mean: B = 1000 resamples, each drawing
  the examples with replacement (``numpy.random.default_rng(0).integers(0, n, (B, n))``, the
  examples in ascending ``index``) and then, independently, the seeds
  (``….integers(0, k, (B, k))`` from the same generator, seeds ascending); the statistic of each
  drawn seed on its rows of the drawn examples, averaged over the drawn seeds; the percentile
  interval. Both sources of variation at once: a new seed and new examples (a fine-tuned model's
  score where the seeds share one dev set);
- ``ci_method = "heads"`` (``head_spearman`` only): ρ over the K heads of the per-head means, its
  percentile interval over ``HEAD_B`` resamples of the heads with replacement (seed 0; a resample
  whose heads all tie has no ρ and is left out): the unit a ρ over heads generalises over, where
  resampling the examples the means are taken over would treat the heads as fixed.

With ``"cluster": COLUMN`` in the spec, "bootstrap" and "paired" resample the clusters that column
names instead of rows (documents of a corpus, types of a word-frequency claim: the unit the
claim generalises over; STATISTICS.md §"Resampling unit"): B = 1000 resamples of the K clusters
with replacement (``numpy.random.default_rng(0).integers(0, K, (B, K))``, clusters numbered in
order of first appearance), each resample the rows of its clusters, the percentile interval by
``numpy.quantile`` (linear), the paired p-value as ``jattn.stats.paired_bootstrap``'s.

The baseline is the same statistic (or another) on other columns of the same rows: the majority
class, uniform attention, a fixed-offset parser. ``make`` writes the rows and computes the claim;
``recompute`` recomputes value, interval and baseline from the file alone, so that a reader (and
``tests/test_reproduce.py``) can check every number of the REPORT.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Callable

import numpy as np

from jattn import stats

__all__ = ["evaluate", "make", "read_rows", "recompute", "STATISTICS", "write_rows"]


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


def _spearman(x, y) -> float:
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
    return _spearman(np.asarray(x, dtype=float).mean(0), np.asarray(y, dtype=float).mean(0))


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
    whose BLEU is at most 1 below the ``reference`` system's: Voita et al. 2019's "heads kept for a
    drop of less than 1 BLEU". The rows should hold the reference among the systems (then one
    always qualifies); with none, the largest count."""
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


def _spearman_of_counts(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """rho(w): Spearman ρ of (x, y) over each resample of counts w (c, n) — each example taken as
    often as drawn: its average ranks from the original sort and the counts (tie groups are runs
    of the sorted values), ρ the count-weighted Pearson correlation of those ranks."""
    sorts = []
    for v in (x, y):
        order = np.argsort(v, kind="stable")
        starts = np.flatnonzero(np.concatenate([[True], v[order][1:] != v[order][:-1]]))  # (groups,) first positions
        sorts.append((order, starts, np.cumsum(np.isin(np.arange(len(v)), starts)) - 1))  # group of each sorted position

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


def _spearman_arrays(x, y) -> tuple[np.ndarray, np.ndarray] | None:
    """float64 (x, y), or None where ``stats.spearman_bootstrap_ci``'s checks and errors should speak."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 2 or len(x) != len(y) or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    return x, y


def _fast_spearman(x, y):
    """``stats.spearman_bootstrap_ci`` with the resamples taken a chunk at a time as counts
    (``_spearman_of_counts``)."""
    from scipy.stats import spearmanr

    if (checked := _spearman_arrays(x, y)) is None:
        return stats.spearman_bootstrap_ci(x, y)  # its checks and errors
    x, y = checked
    return float(spearmanr(x, y).statistic), _count_bootstrap(_spearman_of_counts(x, y), len(x), chunk=20)


# statistics with an exact faster bootstrap than ``stats.bootstrap_ci`` (the same resamples and interval)
FAST_BOOTSTRAP = {"spearman": _fast_spearman, "bleu": _fast_bleu, "bleu_gain": _fast_bleu_gain,
                  "fewest_heads_within_1_bleu": _fast_fewest_heads}

# name -> (the statistic's argument names, the function of those columns)
STATISTICS: dict[str, tuple[tuple[str, ...], Callable[..., float]]] = {
    "accuracy": (("gold", "pred"), _accuracy),
    "mcc": (("gold", "pred"), _mcc),
    "mean": (("value",), _mean),
    "spearman": (("x", "y"), _spearman),
    "aer": (("sure", "possible", "predicted", "sure_hits", "possible_hits"), _aer),
    "accuracy_gain": (("gold", "pred", "reference"), _gain(_accuracy)),
    "mcc_gain": (("gold", "pred", "reference"), _gain(_mcc)),
    "head_spearman": (("x", "y"), _head_spearman),
    "bleu": (("ref", "hyp"), _bleu),
    "bleu_gain": (("ref", "hyp", "reference"), lambda ref, hyp, reference: _bleu(ref, hyp) - _bleu(ref, reference)),
    "fewest_heads_within_1_bleu": (("ref", "systems", "heads", "reference"), _fewest_heads),
}


def _columns(rows: list[dict], names: dict[str, str], statistic: str) -> list[np.ndarray]:
    """The statistic's arguments, in its order, from ``rows`` by ``names`` (argument -> column)."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r} (known: {', '.join(STATISTICS)})")
    arguments, _ = STATISTICS[statistic]
    if set(names) != set(arguments):
        raise ValueError(f"statistic {statistic!r} reads columns for {arguments}, got {sorted(names)}")
    return [np.asarray([r[names[a]] for r in rows]) for a in arguments]


def _cluster_codes(rows: list[dict], column: str) -> tuple[np.ndarray, int]:
    """(n,) each row's cluster, numbered in order of first appearance, and the number of clusters K."""
    codes: dict = {}
    return np.asarray([codes.setdefault(r[column], len(codes)) for r in rows]), len(codes)


def _cluster_picks(k: int, b: int = stats.B) -> np.ndarray:
    """(b, K) the clusters each resample draws, with replacement."""
    return np.random.default_rng(stats.SEED).integers(0, k, size=(b, k))


def _cluster(rows: list[dict], spec: dict, level: float) -> dict:
    """The "bootstrap" and "paired" methods over the clusters of ``spec["cluster"]``: each resample
    the rows of its clusters (Spearman ρ from the rows' counts, ``_spearman_of_counts``)."""
    statistic, fn = spec["statistic"], STATISTICS[spec["statistic"]][1]
    system = _columns(rows, spec["columns"], statistic)
    tails = [(1 - level) / 2, (1 + level) / 2]
    codes, k = _cluster_codes(rows, spec["cluster"])
    picks = _cluster_picks(k)
    if spec["ci_method"] == "bootstrap" and statistic == "spearman" and _spearman_arrays(*system) is not None:
        rho = _spearman_of_counts(*_spearman_arrays(*system))
        theta = np.concatenate([rho(np.bincount((np.arange(len(p))[:, None] * k + p).ravel(), minlength=len(p) * k)
                                    .reshape(len(p), k)[:, codes])  # (c, n) copies of each row
                                for p in np.array_split(picks, range(20, stats.B, 20))])
        return {"value": float(fn(*system)), "ci": [float(q) for q in np.quantile(theta, tails)]}
    members = [np.flatnonzero(codes == j) for j in range(k)]
    resamples = [np.concatenate([members[j] for j in pick]) for pick in picks]
    if spec["ci_method"] == "bootstrap":
        theta = np.array([fn(*(c[ix] for c in system)) for ix in resamples])
        return {"value": float(fn(*system)), "ci": [float(q) for q in np.quantile(theta, tails)]}
    base = _columns(rows, {**spec["columns"], **spec["against"]}, statistic)
    deltas = np.array([fn(*(c[ix] for c in system)) - fn(*(c[ix] for c in base)) for ix in resamples])
    p = min(1.0, 2 * min((deltas <= 0).mean(), (deltas >= 0).mean()))
    return {"value": float(fn(*system) - fn(*base)), "ci": [float(q) for q in np.quantile(deltas, tails)],
            "p": float(p)}


def evaluate(rows: list[dict], spec: dict, level: float = 0.95) -> dict:
    """``{"value", "ci", ...}`` of ``spec`` (``{"statistic", "columns", "ci_method"[, "against",
    "cluster"]}``) on ``rows``, the interval at ``level``, by the rules of the module docstring."""
    statistic, method = spec["statistic"], spec["ci_method"]
    fn = STATISTICS[statistic][1]
    if spec.get("cluster") and method in ("bootstrap", "paired"):
        return _cluster(rows, spec, level)
    if method == "bootstrap":
        columns = _columns(rows, spec["columns"], statistic)
        value, ci = (FAST_BOOTSTRAP[statistic](*columns) if statistic in FAST_BOOTSTRAP and level == 0.95
                     else stats.bootstrap_ci(fn, *columns, level=level))
        return {"value": value, "ci": list(ci)}
    if method == "paired":  # Δ = statistic(columns) − statistic(columns with "against"), one resample for both
        system = _columns(rows, spec["columns"], statistic)
        base = _columns(rows, {**spec["columns"], **spec["against"]}, statistic)
        stacked = [np.concatenate([s, b]) for s, b in zip(system, base)]  # rows 0..n-1 system, n..2n-1 baseline
        n = len(rows)
        r = stats.paired_bootstrap(lambda ix: fn(*(c[ix] for c in stacked)), np.arange(n), np.arange(n) + n,
                                   level=level)
        return {"value": r["delta"], "ci": list(r["ci"]), "p": r["p"]}
    if method == "heads":
        if statistic != "head_spearman":
            raise ValueError(f"ci_method 'heads' resamples the heads of a head_spearman claim, not of {statistic}")
        x, y = (np.asarray(c, float).mean(0) for c in _columns(rows, spec["columns"], statistic))  # (K,) each
        return {"value": _spearman(x, y), "ci": head_interval(x, y, level)}
    if method == "seeds":
        seeds = sorted({r["seed"] for r in rows})
        per_seed = [fn(*_columns([r for r in rows if r["seed"] == s], spec["columns"], statistic)) for s in seeds]
        value, ci = stats.t_interval(per_seed, level)
        return {"value": value, "ci": list(ci), "per_seed": dict(zip(map(str, seeds), per_seed))}
    if method == "seeds_examples":
        return _seeds_examples(rows, spec, level)
    raise ValueError(f"unknown ci_method {method!r} (bootstrap, paired, seeds, seeds_examples, heads)")


def _seeds_examples(rows: list[dict], spec: dict, level: float, b: int = stats.B) -> dict:
    """The "seeds_examples" method (module docstring): the seeds' mean of the statistic per seed,
    its interval by the pigeonhole bootstrap over the seeds and the examples they share."""
    statistic, fn = spec["statistic"], STATISTICS[spec["statistic"]][1]
    seeds, index = sorted({r["seed"] for r in rows}), sorted({r["index"] for r in rows})
    mine = {s: sorted((r for r in rows if r["seed"] == s), key=lambda r: r["index"]) for s in seeds}
    if any([r["index"] for r in mine[s]] != index for s in seeds):
        raise ValueError("ci_method 'seeds_examples' needs one row per seed and example (every seed on the same "
                         "examples, each once)")
    columns = {s: _columns(mine[s], spec["columns"], statistic) for s in seeds}
    rng = np.random.default_rng(stats.SEED)
    examples = rng.integers(0, len(index), size=(b, len(index)))  # (b, n) the examples each resample draws
    drawn = rng.integers(0, len(seeds), size=(b, len(seeds)))  # (b, k) the seeds each resample draws
    theta = np.array([[fn(*(c[ix] for c in columns[s])) for ix in examples] for s in seeds])  # (k, b)
    thetas = theta[drawn, np.arange(b)[:, None]].mean(1)  # (b,) each resample's mean over its drawn seeds
    per_seed = [fn(*columns[s]) for s in seeds]
    lo, hi = np.quantile(thetas, [(1 - level) / 2, (1 + level) / 2])
    return {"value": float(np.mean(per_seed)), "ci": [float(lo), float(hi)],
            "per_seed": dict(zip(map(str, seeds), per_seed))}


def write_rows(path: Path, rows: list[dict]) -> None:
    """Per-example predictions as JSONL, one row a line (``index`` first when present)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=False) + "\n")


def read_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def make(*, id: str, study: str, claim: str, unit: str, rows: list[dict], path: Path, relative: str,
         measure: dict, baseline: dict, paper: str = "", n: int | None = None, seeds: int = 0, command: str = "",
         protocol: str = "", note: str = "", **extra) -> dict:
    """Write ``rows`` to ``path`` and return the claim computed from them.

    ``measure``: ``{"statistic", "columns", "ci_method"[, "against"]}``; ``baseline``: ``{"name", ...}`` with the same keys
    for the trivial or control system (``"statistic"`` defaults to the measure's). ``relative``:
    the path of the predictions file as the claim records it (relative to the repository).
    ``paper``: the paper's number as the stage knows it (the REPORT's cell is the study's rules'
    ``describe``, from ``experiments/papers.py``); ``note``: the values of the tests the stage ran.
    A claim's verdict is not the stage's: the study's rules give it (``jattn.reproduce.verdicts``)."""
    write_rows(path, rows)
    ours = evaluate(rows, measure)
    base_spec = {"statistic": measure["statistic"], "ci_method": measure["ci_method"], **baseline}
    theirs = evaluate(rows, base_spec)
    out = {"id": id, "study": study, "claim": claim, "paper": paper, "value": ours["value"], "ci": ours["ci"],
           "baseline": {"name": baseline["name"], "value": theirs["value"], "ci": theirs["ci"]},
           "n": len(rows) if n is None else n, "seeds": seeds, "unit": unit, "command": command,
           "predictions": relative, "measure": measure, "baseline_measure": base_spec,
           "protocol": protocol, "note": note}
    for key in ("p", "per_seed"):
        if key in ours:
            out[key] = ours[key]
        if key in theirs:
            out["baseline"][key] = theirs[key]
    out.update(extra)
    return out


def recompute(claim: dict, root: Path) -> dict:
    """Value, interval and baseline of ``claim`` recomputed from its predictions file under ``root``."""
    rows = read_rows(Path(root) / claim["predictions"])
    return {"value": evaluate(rows, claim["measure"]), "baseline": evaluate(rows, claim["baseline_measure"])}
