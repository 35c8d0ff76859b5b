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

import json
from pathlib import Path

import numpy as np

from jattn import stats
from jattn.reproduce.statistics import FAST_BOOTSTRAP, STATISTICS, head_interval, spearman, spearman_arrays, \
    spearman_of_counts

__all__ = ["cluster_codes", "evaluate", "make", "pick_counts", "pigeonhole_picks", "read_rows", "recompute",
           "resample_picks", "STATISTICS", "write_rows"]


def _columns(rows: list[dict], names: dict[str, str], statistic: str) -> list[np.ndarray]:
    """The statistic's arguments, in its order, from ``rows`` by ``names`` (argument -> column)."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r} (known: {', '.join(STATISTICS)})")
    arguments, _ = STATISTICS[statistic]
    if set(names) != set(arguments):
        raise ValueError(f"statistic {statistic!r} reads columns for {arguments}, got {sorted(names)}")
    return [np.asarray([r[names[a]] for r in rows]) for a in arguments]


# The resamples every interval of a claim draws, public so that a study's own tests (its tables, its
# rules) draw exactly the same ones.


def cluster_codes(labels) -> tuple[np.ndarray, int]:
    """(n,) each label's cluster, numbered in order of first appearance, and the number of clusters K."""
    first: dict = {}
    return np.asarray([first.setdefault(x, len(first)) for x in labels], np.int64), len(first)


def resample_picks(k: int, b: int = stats.B) -> np.ndarray:
    """(b, k) the units (rows or clusters) each of ``b`` resamples draws, with replacement:
    ``numpy.random.default_rng(0).integers(0, k, (b, k))``."""
    return np.random.default_rng(stats.SEED).integers(0, k, size=(b, k))


def pigeonhole_picks(n: int, k: int, b: int = stats.B) -> tuple[np.ndarray, np.ndarray]:
    """The pigeonhole bootstrap's draws (Owen 2007) over ``n`` examples shared by ``k`` seeds: (b, n)
    the examples each resample draws, then, from the same generator, (b, k) the seeds it draws."""
    rng = np.random.default_rng(stats.SEED)
    examples = rng.integers(0, n, size=(b, n))  # (b, n)
    return examples, rng.integers(0, k, size=(b, k))  # (b, k)


def pick_counts(picks: np.ndarray, k: int) -> np.ndarray:
    """(b, k) how often each of ``k`` units enters each resample of ``picks`` (b, m)."""
    b = len(picks)
    return np.bincount((np.arange(b)[:, None] * k + picks).ravel(), minlength=b * k).reshape(b, k)


def _cluster(rows: list[dict], spec: dict, level: float) -> dict:
    """The "bootstrap" and "paired" methods over the clusters of ``spec["cluster"]``: each resample
    the rows of its clusters (Spearman ρ from the rows' counts, ``spearman_of_counts``)."""
    statistic, fn = spec["statistic"], STATISTICS[spec["statistic"]][1]
    system = _columns(rows, spec["columns"], statistic)
    tails = [(1 - level) / 2, (1 + level) / 2]
    codes, k = cluster_codes(r[spec["cluster"]] for r in rows)
    picks = resample_picks(k)
    if spec["ci_method"] == "bootstrap" and statistic == "spearman" and spearman_arrays(*system) is not None:
        rho = spearman_of_counts(*spearman_arrays(*system))
        theta = np.concatenate([rho(pick_counts(p, k)[:, codes])  # (c, n) copies of each row
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
        return {"value": spearman(x, y), "ci": head_interval(x, y, level)}
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
    examples, drawn = pigeonhole_picks(len(index), len(seeds), b)  # (b, n) examples, (b, k) seeds drawn
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

    ``measure``: ``{"statistic", "columns", "ci_method"[, "against"]}``; ``baseline``:
    ``{"name", ...}`` with the same keys for the trivial or control system (``"statistic"``
    defaults to the measure's). ``relative``: the path of the predictions file as the claim
    records it (relative to the repository). ``paper``: the paper's number as the stage knows it
    (the REPORT's cell is the study's rules' ``describe``, from ``experiments/papers.py``);
    ``note``: the values of the tests the stage ran. A claim's verdict is not the stage's: the
    study's rules give it (``jattn.reproduce.verdicts``)."""
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
