"""An independent recomputation of one claim per study from the committed files alone.

A reader's recipe (``reproduce.json``'s ``recompute`` says it in short; this module follows it
with numpy and scipy only, importing nothing from ``jattn`` or ``experiments``):

- ``experiments/results/reproduce.json`` holds a ``claims`` list. Each claim names its
  per-example file, ``predictions`` (a JSONL path relative to the repository,
  ``experiments/results/predictions/<id>.jsonl``, one example a line), and two specifications:
  ``measure`` (our number: ``value``, ``ci`` and, where recorded, ``p`` or ``per_seed``) and
  ``baseline_measure`` (the number under ``baseline``: ``value``, ``ci``, [``p``, ``per_seed``]).
  A specification is ``{statistic, columns, ci_method[, against][, cluster]}``: ``columns`` maps each
  argument of the statistic to a column of the file (a column is a number or label per row, or a
  list per row: the predictions of R systems, or one value per head).
- Statistics: ``accuracy(gold, pred)`` = share of rows with gold == pred; ``mean(value)``;
  ``mcc(gold, pred)`` = Matthews correlation of K classes (Gorodkin 2004), 0 when either margin
  is constant; ``accuracy_gain(gold, pred, reference)`` = accuracy averaged over the systems of
  ``pred`` minus accuracy averaged over those of ``reference`` (a scalar column is one system);
  ``head_spearman(x, y)`` = Spearman ρ (average ranks) between the per-head means over rows of
  ``x`` and of ``y``.
- ``ci_method = "bootstrap"``: value = the statistic on all n rows; indices
  ``numpy.random.default_rng(0).integers(0, n, size=(1000, n))`` (B = 1000 resamples, one draw
  of the whole (B, n) array, row k is resample k); the statistic on each resample; interval =
  ``numpy.quantile(thetas, [0.025, 0.975])`` (linear interpolation, Hyndman–Fan type 7).
- ``ci_method = "paired"`` (Koehn 2004): Δ = statistic(``columns``) − statistic(``columns``
  with the ``against`` entries replacing theirs); the same (B, n) indices as above score both
  systems, Δ_k per resample; interval = ``numpy.quantile(Δ_k, [0.025, 0.975])``; two-sided
  p = min(1, 2 · min(share of Δ_k ≤ 0, share of Δ_k ≥ 0)).
- ``cluster`` (a column naming each row's document, e.g. GAP's Wikipedia page): "bootstrap" and
  "paired" resample the K clusters instead of the rows, numbered in order of first appearance:
  ``numpy.random.default_rng(0).integers(0, K, size=(1000, K))``, resample k the rows of the
  clusters of row k (a cluster drawn twice gives its rows twice).
- ``ci_method = "seeds"``: the rows carry a ``seed`` column; the statistic on each seed's rows
  (``per_seed``, keyed by the seed as a string, seeds in ascending order); value = their mean;
  interval = mean ± t_{0.975, k−1} · s / √k (Student t, s the standard deviation with ddof = 1,
  k seeds).
- ``ci_method = "seeds_examples"``: one row per seed and example (``seed``, ``index``); value and
  ``per_seed`` as "seeds"; interval: g = ``numpy.random.default_rng(0)``, example draws
  ``g.integers(0, n, size=(1000, n))`` (positions in the ascending ``index`` list), then seed draws
  ``g.integers(0, k, size=(1000, k))`` (positions in the ascending seed list); resample k: for each
  drawn seed, the statistic on that seed's rows of the drawn examples, averaged over the drawn
  seeds; interval = ``numpy.quantile`` of the 1000 averages at [0.025, 0.975] (Owen 2007's
  pigeonhole bootstrap).
- ``ci_method = "heads"`` (``head_spearman``): value = ρ of the K per-head means; indices
  ``numpy.random.default_rng(0).integers(0, K, size=(2000, K))`` resample the heads; ρ on each
  resample (resamples whose heads all tie have none and are left out); interval =
  ``numpy.nanquantile(rhos, [0.025, 0.975])``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr, t

ROOT = Path(__file__).resolve().parents[1]
B, SEED, LEVEL = 1000, 0, 0.95
TOLERANCE = 1e-9  # relative (and absolute, for numbers near 0): both sides are float64 on the same rows

# one claim per study, and one more where a study's claims use another interval method
CLAIM_IDS = [
    "clark-minilm-syntax-det",
    "clark-minilm-coref-gap",  # GAP's pages resampled
    "kobayashi-minilm-mixing",
    "kovaleva-minilm-sst2-best-head-heldout",
    "michel-minilm-sst2-vs-random50",
    "voita-confidence-lrp",
    "patching-minilm-corruption",  # paired, GAP's pages resampled
    "patching-minilm-sst2-corruption",  # paired, rows resampled
    "induction-attn-only-icl",
    "finetune-minilm-cola",
]


# statistics: each takes its arguments by name, as ``columns`` names them

def accuracy(gold, pred) -> float:
    """Accuracy: the share of rows whose prediction equals the gold label."""
    return float(np.count_nonzero(gold == pred) / len(gold))


def mean(value) -> float:
    """The arithmetic mean of per-row values."""
    return float(np.mean(value.astype(np.float64)))


def mcc(gold, pred) -> float:
    """Matthews correlation coefficient for K classes (Matthews 1975; Gorodkin 2004):
    (c·s − Σ_k p_k t_k) / √((s² − Σ_k p_k²)(s² − Σ_k t_k²)), with s rows, c correct, t_k rows of
    gold class k, p_k rows predicted k; 0 when the denominator is 0 (a constant margin)."""
    classes = np.union1d(gold, pred)
    t_k = np.array([np.count_nonzero(gold == k) for k in classes], dtype=np.int64)
    p_k = np.array([np.count_nonzero(pred == k) for k in classes], dtype=np.int64)
    s, c = len(gold), np.count_nonzero(gold == pred)
    denominator = float(s * s - p_k @ p_k) * float(s * s - t_k @ t_k)
    return 0.0 if denominator == 0 else float((c * s - p_k @ t_k) / np.sqrt(denominator))


def accuracy_gain(gold, pred, reference) -> float:
    """Accuracy averaged over the systems of ``pred`` minus accuracy averaged over the systems of
    ``reference`` (each column (n,) for one system or (n, R) for R systems, a list per row): e.g.
    a pruned model against the unmodified one (Michel et al. 2019), or against random orders."""
    def averaged(systems):
        systems = systems.reshape(len(systems), -1)
        return np.mean([accuracy(gold, systems[:, r]) for r in range(systems.shape[1])])
    return float(averaged(pred) - averaged(reference))


def head_spearman(x, y) -> float:
    """Spearman's ρ (Pearson correlation of average ranks) over heads between the mean over rows
    of ``x`` and that of ``y``, both (n, heads): e.g. a head's confidence against its LRP relevance
    (Voita et al. 2019)."""
    return float(spearmanr(x.astype(np.float64).mean(0), y.astype(np.float64).mean(0)).statistic)


STATISTICS = {"accuracy": accuracy, "mean": mean, "mcc": mcc, "accuracy_gain": accuracy_gain,
              "head_spearman": head_spearman}


# intervals

def resample_indices(rows: list[dict], cluster: str | None = None) -> list[np.ndarray]:
    """B bootstrap resamples of the row indices, drawn with replacement in one call: of the rows
    (a (B, n) draw, row k resample k), or of the clusters named by the ``cluster`` column (a (B, K)
    draw; each resample the rows of its clusters)."""
    if cluster is None:
        return list(np.random.default_rng(SEED).integers(0, len(rows), size=(B, len(rows))))
    order = list(dict.fromkeys(r[cluster] for r in rows))  # clusters in order of first appearance
    members = [np.flatnonzero([r[cluster] == c for r in rows]) for c in order]
    picks = np.random.default_rng(SEED).integers(0, len(order), size=(B, len(order)))
    return [np.concatenate([members[j] for j in pick]) for pick in picks]


def percentile_interval(thetas: np.ndarray) -> list[float]:
    """The central 95 % of the resampled statistics, linearly interpolated (Hyndman & Fan type 7,
    numpy's default)."""
    return [float(q) for q in np.quantile(thetas, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])]


def bootstrap(statistic, columns: dict, resamples: list[np.ndarray]) -> dict:
    """Percentile bootstrap (Efron & Tibshirani 1993, §13.3): the statistic on all rows and the
    central 95 % of it over the B ``resamples``."""
    thetas = np.array([statistic(**{a: c[i] for a, c in columns.items()}) for i in resamples])
    return {"value": statistic(**columns), "ci": percentile_interval(thetas)}


def paired_bootstrap(statistic, columns: dict, against: dict, resamples: list[np.ndarray]) -> dict:
    """Paired bootstrap (Koehn 2004): Δ = statistic(system) − statistic(baseline) on all rows, the
    same index resample scoring both, the central 95 % of Δ over B resamples, and the two-sided
    p-value: twice the share of resamples with Δ on the other side of 0 (0 counting for both),
    capped at 1."""
    deltas = np.array([statistic(**{a: c[i] for a, c in columns.items()})
                       - statistic(**{a: c[i] for a, c in against.items()}) for i in resamples])
    p = min(1.0, 2 * min(np.mean(deltas <= 0), np.mean(deltas >= 0)))
    return {"value": statistic(**columns) - statistic(**against), "ci": percentile_interval(deltas),
            "p": float(p)}


def over_seeds(statistic, rows: list[dict], names: dict) -> dict:
    """The statistic on each training seed's rows, their mean and the Student-t 95 % interval
    (k − 1 degrees of freedom, sample standard deviation) over the k seeds."""
    seeds = sorted({r["seed"] for r in rows})
    per_seed = [statistic(**read_columns([r for r in rows if r["seed"] == s], names)) for s in seeds]
    values = np.array(per_seed)
    half = t.ppf((1 + LEVEL) / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return {"value": float(values.mean()), "ci": [float(values.mean() - half), float(values.mean() + half)],
            "per_seed": {str(s): v for s, v in zip(seeds, per_seed)}}


def over_seeds_and_examples(statistic, rows: list[dict], names: dict) -> dict:
    """The mean over seeds of the statistic per seed, and the pigeonhole bootstrap interval (Owen
    2007): each resample draws the examples (shared by the seeds) and, independently, the seeds."""
    seeds, index = sorted({r["seed"] for r in rows}), sorted({r["index"] for r in rows})
    table = {(r["seed"], r["index"]): r for r in rows}
    columns = {s: read_columns([table[s, i] for i in index], names) for s in seeds}  # each (n,) by index
    draw = np.random.default_rng(SEED)
    examples = draw.integers(0, len(index), size=(B, len(index)))  # positions in ``index``
    drawn = draw.integers(0, len(seeds), size=(B, len(seeds)))  # positions in ``seeds``
    thetas = [np.mean([statistic(**{a: c[ex] for a, c in columns[seeds[j]].items()}) for j in picks])
              for ex, picks in zip(examples, drawn)]
    per_seed = [statistic(**columns[s]) for s in seeds]
    return {"value": float(np.mean(per_seed)), "ci": percentile_interval(np.array(thetas)),
            "per_seed": {str(s): v for s, v in zip(seeds, per_seed)}}


def over_heads(rows: list[dict], names: dict) -> dict:
    """Spearman ρ of the per-head means of ``x`` and ``y`` and the central 95 % of it over 2000
    resamples of the heads (resamples whose heads all tie have no ρ and are left out)."""
    x, y = (c.astype(np.float64).mean(0) for c in (read_columns(rows, names)[a] for a in ("x", "y")))
    picks = np.random.default_rng(SEED).integers(0, len(x), size=(2000, len(x)))
    rhos = np.array([spearmanr(x[i], y[i]).statistic for i in picks])
    return {"value": float(spearmanr(x, y).statistic),
            "ci": [float(q) for q in np.nanquantile(rhos, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])]}


# files

def read_rows(path: Path) -> list[dict]:
    """The rows of a JSONL predictions file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_columns(rows: list[dict], names: dict) -> dict:
    """{argument: array of the named column over ``rows``}."""
    return {argument: np.array([r[column] for r in rows]) for argument, column in names.items()}


def recompute(rows: list[dict], spec: dict) -> dict:
    """Value and interval (and p or per_seed) of a ``measure`` / ``baseline_measure`` on ``rows``."""
    statistic = STATISTICS[spec["statistic"]]
    if spec["ci_method"] == "bootstrap":
        return bootstrap(statistic, read_columns(rows, spec["columns"]), resample_indices(rows, spec.get("cluster")))
    if spec["ci_method"] == "paired":
        return paired_bootstrap(statistic, read_columns(rows, spec["columns"]),
                                read_columns(rows, {**spec["columns"], **spec["against"]}),
                                resample_indices(rows, spec.get("cluster")))
    if spec["ci_method"] == "heads":
        return over_heads(rows, spec["columns"])
    if spec["ci_method"] == "seeds_examples":
        return over_seeds_and_examples(statistic, rows, spec["columns"])
    assert spec["ci_method"] == "seeds", spec["ci_method"]
    return over_seeds(statistic, rows, spec["columns"])


def mismatches(got: dict, recorded: dict, where: str) -> list[str]:
    """Each number of ``got`` (value, ci, p, per_seed) that differs from ``recorded`` by more than
    TOLERANCE; a key recorded on one side only is a mismatch too."""
    def close(a, b):
        return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))

    out = [
        f"{where}: {key} recorded on one side only" for key in ("p", "per_seed") if (key in got) != (key in recorded)
    ]
    pairs = [("value", got["value"], recorded["value"])]
    pairs += [(f"ci[{j}]", g, r) for j, (g, r) in enumerate(zip(got["ci"], recorded["ci"], strict=True))]
    if "p" in got and "p" in recorded:
        pairs.append(("p", got["p"], recorded["p"]))
    if "per_seed" in got and "per_seed" in recorded:
        if set(got["per_seed"]) != set(recorded["per_seed"]):
            out.append(f"{where}: seeds {sorted(got['per_seed'])} != recorded {sorted(recorded['per_seed'])}")
        else:
            pairs += [(f"per_seed[{s}]", got["per_seed"][s], recorded["per_seed"][s]) for s in got["per_seed"]]
    return out + [f"{where}: {name} {g!r} != recorded {r!r}" for name, g, r in pairs if not close(g, r)]


def check(claim: dict, rows: list[dict]) -> list[str]:
    """Every mismatch between a claim's recorded numbers and their recomputation from ``rows``."""
    return (mismatches(recompute(rows, claim["measure"]), claim, claim["id"])
            + mismatches(recompute(rows, claim["baseline_measure"]), claim["baseline"], claim["id"] + " baseline"))


@pytest.fixture(scope="module")
def claims() -> dict:
    data = json.loads((ROOT / "experiments/results/reproduce.json").read_text())
    return {c["id"]: c for c in data["claims"]}


@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_recorded_numbers_recompute(claims, claim_id):
    claim = claims[claim_id]
    assert check(claim, read_rows(ROOT / claim["predictions"])) == []


@pytest.mark.parametrize("claim_id, column, change", [
    ("clark-minilm-syntax-det", "head", lambda v: v + 1),  # one dependency attached elsewhere
    ("patching-minilm-corruption", "clean", lambda v: v + 0.5),  # one clean logit difference moved
    ("finetune-minilm-cola", "pred", lambda v: 1 - v),  # one fine-tuned prediction flipped
    ("kovaleva-minilm-sst2-best-head-heldout", "pred", lambda v: 1 - v),  # seeds × examples
    ("clark-minilm-coref-gap", "head", lambda v: 1 - v),  # GAP's pages resampled
])
def test_a_changed_row_is_caught(claims, claim_id, column, change):
    """The check can fail: one row changed in a copy of the file (for each ci_method), or a recorded
    number moved by 10 × TOLERANCE, gives a mismatch."""
    claim = claims[claim_id]
    rows = [dict(r) for r in read_rows(ROOT / claim["predictions"])]
    rows[0][column] = change(rows[0][column])
    assert any(m.startswith(claim_id + ":") for m in check(claim, rows))
    moved = {**claim["baseline"], "value": claim["baseline"]["value"] * (1 + 10 * TOLERANCE) + 10 * TOLERANCE}
    assert mismatches(claim["baseline"], moved, "moved") != []


def test_every_resampling_scheme_is_recomputed(claims):
    """The claims above take each interval method the committed claims use, documents (clusters)
    included, so each recipe of the module docstring is checked against a committed number."""
    specs = [claims[c][k] for c in CLAIM_IDS for k in ("measure", "baseline_measure")]
    every = [c[k] for c in claims.values() for k in ("measure", "baseline_measure")]
    scheme = lambda s: (s["ci_method"], bool(s.get("cluster")))  # noqa: E731
    assert {scheme(s) for s in every} <= {scheme(s) for s in specs}


def test_reproduce_json_says_how_to_recompute_what_its_claims_use():
    """``reproduce.json``'s ``recompute`` names every statistic, interval method and resampling
    option its claims' specifications use, so a reader needs no other document to start."""
    data = json.loads((ROOT / "experiments/results/reproduce.json").read_text())
    specs = [c[k] for c in data["claims"] for k in ("measure", "baseline_measure")]
    used = {s["statistic"].removesuffix("_gain") for s in specs} | {s["ci_method"] for s in specs}
    used |= {"cluster" for s in specs if s.get("cluster")} | {"against" for s in specs if s.get("against")}
    assert [u for u in sorted(used) if u not in data["recompute"]] == []


def test_the_heads_interval_recomputes():
    """jattn's "heads" interval against the recipe above (the one test here that imports jattn: the
    recomputations of the committed claims above never do)."""
    from jattn.reproduce import claims as jattn_claims

    rng = np.random.default_rng(3)
    base = rng.normal(size=48)
    rows = [{"x": (base + 0.3 * rng.normal(size=48)).tolist(), "y": (0.5 * base + rng.normal(size=48)).tolist()}
            for _ in range(30)]
    spec = {"statistic": "head_spearman", "columns": {"x": "x", "y": "y"}, "ci_method": "heads"}
    assert mismatches(recompute(rows, spec), jattn_claims.evaluate(rows, spec), "heads") == []
