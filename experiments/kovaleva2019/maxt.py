"""The joint resampling the Kovaleva disabling verdicts judge by (``experiments.kovaleva2019.verdicts``):
Westfall and Young's (1993) max-T null for the best of N heads and for the heads × seeds and
layers × seeds families, computed at judging time from the sweeps' records (no stage names this
module, so editing it re-keys none).

Per model and task, the records ``kovaleva.sweep-<model>-<task>-s<seed>`` hold the dev examples'
labels, the unmodified predictions and, per head (l·H + h) and per layer, the examples whose binary
prediction flips when the unit is disabled: every variant's predictions on the same examples for
every seed. ``joint_null`` draws B resamples of those examples, **one index draw shared by every
unit and every seed** (the units' and the seeds' correlation kept), and returns each variant's
observed Δ (the metric with the unit disabled − the unmodified model's) and its resampled
Δ* − Δ, centred at the observed effects: the null of no effect for any unit.

The statistic is the plain Δ, not a studentised one: the claims select and report the head with the
largest Δ in points of accuracy / MCC (the paper's ranking and units), so the best-of-N null is the
null of that very number; and a head flips 0–35 of the 400–872 dev examples (median 2–7), so a
studentised T = Δ / se would divide by a standard error estimated from a handful of flips (a head
flipping one example has T = ±1 whatever it does, and a bootstrap T* = c − 1, c ~ Poisson(1)): not
pivotal either, and its discreteness, not the heads' effects, would set the critical value. The
price of the plain Δ: units whose removal flips many examples set the null's maximum, so a unit
that flips few, all for the better, needs a larger share of them to pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments.kovaleva2019 import disabling as D
from experiments.kovaleva2019.claims import UNITS

RESAMPLES = 10_000  # p resolved to 1 / 10,001 ≈ 1e-4, below α = .05 (the only threshold a max-T p meets)
CHUNK = 500  # resamples per pass: (500, n) weights and (500, seeds · (units + 1)) scores, a few MB
SEED = 0


@dataclasses.dataclass(frozen=True)
class Family:
    """The sweeps of one model and task: ``delta`` (S, U) observed Δ per seed and unit, ``null``
    (B, S, U) Δ* − Δ on the joint resamples, the ``seeds`` and the units' ``names``."""

    delta: np.ndarray
    null: np.ndarray
    seeds: list[int]
    names: list[str]

    @property
    def se(self) -> np.ndarray:
        """(S, U) each Δ's bootstrap standard error."""
        return self.null.std(0)


def joint_null(gold, base, preds, metric: str, *, resamples: int = RESAMPLES, seed: int = SEED,
               chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Observed Δ (S, U) and centred resampled Δ* − Δ (B, S, U) of binary ``preds`` (S, U, n) against
    ``base`` (S, n) on the examples with labels ``gold`` (n,), shared by the S seeds: ``resamples``
    draws of n example indices (``default_rng(seed).integers(0, n, (chunk, n))`` per chunk), each
    scoring every unit of every seed (``D.metric_counts``: accuracy or MCC)."""
    preds, base = np.asarray(preds), np.asarray(base)
    S, U, n = preds.shape
    systems = np.concatenate([base[:, None], preds], 1).reshape(S * (U + 1), n)  # (S·(U+1), n) base first per seed

    def deltas(weights: np.ndarray) -> np.ndarray:  # (R, n) -> (R, S, U)
        scores = D.metric_counts(weights, gold, systems, metric).reshape(len(weights), S, U + 1)
        return scores[..., 1:] - scores[..., :1]

    delta = deltas(np.ones((1, n)))[0]  # (S, U)
    rng = np.random.default_rng(seed)
    null = np.empty((resamples, S, U))
    for start in range(0, resamples, chunk):
        c = min(chunk, resamples - start)
        idx = rng.integers(0, n, (c, n))  # (c, n)
        counts = np.bincount((np.arange(c)[:, None] * n + idx).ravel(), minlength=c * n).reshape(c, n)  # (c, n)
        null[start:start + c] = deltas(counts) - delta  # (c, S, U)
    return delta, null


def _sweeps(evidence, claim: dict) -> list[dict]:
    """The sweep records of the claim's model and task, one per seed its rows name."""
    model, task = claim["id"].split("-")[1:3]
    seeds = sorted({r["seed"] for r in evidence.rows(claim)})
    names = [f"kovaleva.sweep-{model}-{task}-s{s}" for s in seeds]
    if missing := [n for n in names if n not in evidence.results]:
        raise ValueError(f"{claim['id']}: the max-T null resamples the sweeps' records, and {', '.join(missing)} "
                         "has none. Fix: run `jattn reproduce kovaleva`")
    records = [evidence.results[n] for n in names]
    if any(r["index"] != records[0]["index"] or r["gold"] != records[0]["gold"] for r in records):
        raise ValueError(f"{claim['id']}: the seeds' sweeps hold other dev examples ({', '.join(names)}); the joint "
                         "resampling needs the same examples in every seed. Fix: rerun `jattn reproduce kovaleva`")
    return records


def family(evidence, claim: dict, unit: str, *, resamples: int = RESAMPLES) -> Family:
    """The ``Family`` of the claim's model and task (``kovaleva-<model>-<task>-…``), ``unit`` "heads" or
    "layers", over the seeds the claim's rows name (``Evidence.results``: the sweep records); computed
    once per evidence for the claims that share it (``Evidence.derived``)."""
    records = _sweeps(evidence, claim)
    key = ("kovaleva-maxt", *map(id, records), unit, resamples)  # the same sweep records of this evidence
    if key not in evidence.derived:
        evidence.derived[key] = _family(records, unit, resamples)
    return evidence.derived[key]


def _family(records: list[dict], unit: str, resamples: int) -> Family:
    flips = "head_flips" if unit == "heads" else "layer_flips"
    base = np.stack([np.asarray(r["base"]) for r in records])  # (S, n)
    preds = np.stack([D.unflip(b, r[flips]) for b, r in zip(base, records)])  # (S, U, n)
    metric = UNITS[records[0]["task"]][1]
    delta, null = joint_null(np.asarray(records[0]["gold"]), base, preds, metric, resamples=resamples)
    H = records[0]["heads_per_layer"]
    names = [f"{u // H}:{u % H}" if unit == "heads" else f"layer {u}" for u in range(preds.shape[1])]
    return Family(delta, null, [r["seed"] for r in records], names)
