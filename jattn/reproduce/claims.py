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
  and the Student-t interval over seeds (each seed's value listed).

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


# statistics with an exact faster bootstrap than ``stats.bootstrap_ci`` (the same resamples and interval)
FAST_BOOTSTRAP = {"spearman": stats.spearman_bootstrap_ci}

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


def evaluate(rows: list[dict], spec: dict) -> dict:
    """``{"value", "ci", ...}`` of ``spec`` (``{"statistic", "columns", "ci_method"[, "system",
    "baseline"]}``) on ``rows``, by the rules of the module docstring."""
    statistic, method = spec["statistic"], spec["ci_method"]
    fn = STATISTICS[statistic][1]
    if method == "bootstrap":
        columns = _columns(rows, spec["columns"], statistic)
        value, ci = (FAST_BOOTSTRAP[statistic](*columns) if statistic in FAST_BOOTSTRAP
                     else stats.bootstrap_ci(fn, *columns))
        return {"value": value, "ci": list(ci)}
    if method == "paired":  # Δ = statistic(columns) − statistic(columns with "against"), one resample for both
        system = _columns(rows, spec["columns"], statistic)
        base = _columns(rows, {**spec["columns"], **spec["against"]}, statistic)
        stacked = [np.concatenate([s, b]) for s, b in zip(system, base)]  # rows 0..n-1 system, n..2n-1 baseline
        n = len(rows)
        r = stats.paired_bootstrap(lambda ix: fn(*(c[ix] for c in stacked)), np.arange(n), np.arange(n) + n)
        return {"value": r["delta"], "ci": list(r["ci"]), "p": r["p"]}
    if method == "seeds":
        seeds = sorted({r["seed"] for r in rows})
        per_seed = [fn(*_columns([r for r in rows if r["seed"] == s], spec["columns"], statistic)) for s in seeds]
        value, ci = stats.t_interval(per_seed)
        return {"value": value, "ci": list(ci), "per_seed": dict(zip(map(str, seeds), per_seed))}
    raise ValueError(f"unknown ci_method {method!r} (bootstrap, paired, seeds)")


def write_rows(path: Path, rows: list[dict]) -> None:
    """Per-example predictions as JSONL, one row a line (``index`` first when present)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=False) + "\n")


def read_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def make(*, id: str, study: str, claim: str, paper: str, unit: str, rows: list[dict], path: Path,
         relative: str, measure: dict, baseline: dict, n: int | None = None, seeds: int = 0,
         command: str = "", protocol: str = "", status: str | None = None, note: str = "", **extra) -> dict:
    """Write ``rows`` to ``path`` and return the claim computed from them.

    ``measure``: ``{"statistic", "columns", "ci_method"[, "against"]}``; ``baseline``: ``{"name", ...}`` with the same keys
    for the trivial or control system (``"statistic"`` defaults to the measure's). ``relative``:
    the path of the predictions file as the claim records it (relative to the repository).
    ``status``: ``"reproduced"`` / ``"not reproduced"`` / ``"partly"``, with ``note`` saying why."""
    write_rows(path, rows)
    ours = evaluate(rows, measure)
    base_spec = {"statistic": measure["statistic"], "ci_method": measure["ci_method"], **baseline}
    theirs = evaluate(rows, base_spec)
    out = {"id": id, "study": study, "claim": claim, "paper": paper, "value": ours["value"], "ci": ours["ci"],
           "baseline": {"name": baseline["name"], "value": theirs["value"], "ci": theirs["ci"]},
           "n": len(rows) if n is None else n, "seeds": seeds, "unit": unit, "command": command,
           "predictions": relative, "measure": measure, "baseline_measure": base_spec,
           "protocol": protocol, "status": status, "note": note}
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
