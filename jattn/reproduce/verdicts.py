"""Verdicts: the decision rules of ``docs/STATISTICS.md`` §"Decision rules", applied to the claims
after the stages measured them.

A stage measures (value, interval, baseline, predictions file); it does not judge. Each study
registers a *judge* (``jattn.reproduce.studies.register(..., judge=)``): ``judge(claim, evidence)
-> Verdict`` names the rule a claim is tested by and calls it on the numbers the claim, its
predictions file and the other claims hold (``Evidence``). The rules are the functions below,
one per claim type, written before the numbers; none is part of a stage's key, so an edited
rule re-judges every claim without rerunning a stage. Every status is one of ``STATUSES``:

- ``reproduced``: the rule's test decides for the paper's finding;
- ``not reproduced``: it decides against it (an effect in the other direction, a difference
  larger than the margin, a best-of-N selection the null explains, ...);
- ``inconclusive``: the data decide neither way (an equivalence test whose interval straddles the
  margin);
- ``not applicable``: a precondition of the finding is absent in this model or data (the model's
  attention sink is another token; the model does not need the component the claim is about);
  the reason says which;
- ``context``: a number reported beside the claims (a classifier's score, the unpruned BLEU),
  not a finding tested here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = ["ALPHA", "best_of_n", "context", "directional", "equivalent", "Evidence", "holm_family", "judge_claims",
           "not_applicable", "null_maxima", "ordering", "permutation_p", "STATUSES", "Verdict"]

STATUSES = ("reproduced", "not reproduced", "inconclusive", "not applicable", "context")
ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: str  # one of STATUSES
    rule: str  # the rule's name in STATISTICS.md's table
    reason: str  # the numbers the rule read, in words

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is none of {STATUSES}")


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:+.3g}, {ci[1]:+.3g}]"


def directional(delta: float, ci: Sequence[float], *, sign: int = 1, what: str = "Δ") -> Verdict:
    """A finding "A is above B" (``sign=+1``) or below (``-1``) from the paired difference Δ = A − B
    and its 95 % interval (never from two separate intervals overlapping): reproduced when the
    interval lies on the claimed side of 0, not reproduced otherwise (the reason says whether no
    difference was detected or the opposite one was)."""
    lo, hi = sign * np.asarray(ci, float)[:: sign]
    said = f"{what} = {delta:+.3g} {_ci(ci)}"
    if lo > 0:
        return Verdict("reproduced", "directional", f"{said}: on the paper's side of 0")
    if hi < 0:
        return Verdict("not reproduced", "directional", f"{said}: the opposite direction")
    return Verdict("not reproduced", "directional", f"{said}: no difference detected")


def equivalent(delta: float, ci90: Sequence[float], margin: float, *, what: str = "Δ") -> Verdict:
    """A "no loss / no difference" finding by two one-sided tests (TOST, Schuirmann 1987) at α = .05
    with the equivalence margin ±``margin`` stated before the numbers: reproduced when the 90 %
    interval of Δ lies inside (−margin, +margin); not reproduced when it lies wholly outside (a
    difference larger than the margin); inconclusive otherwise — a wide interval is not evidence
    of no difference."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0 (stated before the numbers), got {margin}")
    lo, hi = (float(x) for x in ci90)
    said = f"{what} = {delta:+.3g}, 90 % interval {_ci(ci90)}, margin ±{margin:g}"
    if -margin < lo and hi < margin:
        return Verdict("reproduced", "equivalence", f"{said}: inside the margin (TOST p < .05)")
    if hi <= -margin or lo >= margin:
        return Verdict("not reproduced", "equivalence", f"{said}: a difference beyond the margin")
    return Verdict("inconclusive", "equivalence", f"{said}: straddles the margin")


def null_maxima(standard_errors: Sequence[float], *, draws: int = 10000, seed: int = 0) -> np.ndarray:
    """(draws,) maxima over N candidates of independent N(0, se_i²) effects: where the best of N
    selections sits when no candidate has an effect (the parametric max-statistic null)."""
    se = np.asarray(standard_errors, np.float64)
    return (np.random.default_rng(seed).standard_normal((draws, len(se))) * se).max(1)  # (draws,)


def best_of_n(observed: float, maxima: np.ndarray, held_out: Verdict | None, *, n: int, what: str) -> Verdict:
    """A finding that the best of ``n`` candidates (a head, a layer) has an effect: its in-sample
    effect ``observed`` against the maxima of the null (``null_maxima`` or a permutation), p =
    (1 + #{max ≥ observed}) / (1 + draws); reproduced only when p < .05 *and* the held-out
    confirmation (the same candidate on other data) is reproduced."""
    maxima = np.asarray(maxima, np.float64)
    p = (1 + int((maxima >= observed).sum())) / (1 + len(maxima))
    said = (f"best of {n} {what} {observed:+.3g}; null maximum median {np.median(maxima):+.3g}, "
            f"95th percentile {np.quantile(maxima, 0.95):+.3g}, max-statistic p = {p:.3g}")
    if p >= ALPHA:
        return Verdict("not reproduced", "best-of-N", f"{said}: where the best of {n} null draws sits")
    if held_out is None or held_out.status != "reproduced":
        why = "no held-out confirmation" if held_out is None else f"held out: {held_out.reason}"
        return Verdict("not reproduced", "best-of-N", f"{said}; {why}")
    return Verdict("reproduced", "best-of-N", f"{said}; held out: {held_out.reason}")


def holm_family(p_values: Mapping[str, float], alpha: float = ALPHA) -> dict[str, bool]:
    """Holm–Bonferroni over every test a claim family makes (heads × seeds, layers × seeds):
    {member: rejected}, the family-wise error kept at ``alpha`` (Holm 1979)."""
    from jattn import stats

    keys = list(p_values)
    rejected = stats.holm([p_values[k] for k in keys], alpha)
    return dict(zip(keys, rejected.tolist()))


def permutation_p(observed: float, null: np.ndarray, *, sign: int = 1) -> float:
    """One-sided permutation p-value of ``observed`` against ``null`` draws of the statistic under
    exchangeability, in the claimed direction: (1 + #{sign·null ≥ sign·observed}) / (1 + draws)."""
    null = np.asarray(null, np.float64)
    return (1 + int((sign * null >= sign * observed).sum())) / (1 + len(null))


def ordering(probability: float, *, what: str, level: float = 0.95) -> Verdict:
    """A finding about an order ("the last two layers change most"): the share of bootstrap
    resamples in which the order holds; reproduced at ≥ ``level``, not reproduced at ≤ 1 − level,
    inconclusive between."""
    said = f"{what} in {probability:.1%} of bootstrap resamples"
    if probability >= level:
        return Verdict("reproduced", "ordering", said)
    if probability <= 1 - level:
        return Verdict("not reproduced", "ordering", said)
    return Verdict("inconclusive", "ordering", said)


def not_applicable(reason: str) -> Verdict:
    """A precondition of the finding is absent here (``reason`` names it and the number showing it)."""
    return Verdict("not applicable", "precondition", reason)


def context(reason: str) -> Verdict:
    """A number reported for context, tested by no rule."""
    return Verdict("context", "context", reason)


@dataclasses.dataclass
class Evidence:
    """What a judge may read: every claim by id, every stage's result by name, and the predictions
    files (``rows``) under ``root``."""

    claims: dict[str, dict]
    results: dict[str, dict]
    root: Path
    _rows: dict[str, list[dict]] = dataclasses.field(default_factory=dict)

    def rows(self, claim: dict) -> list[dict]:
        path = claim["predictions"]
        if path not in self._rows:
            with open(self.root / path) as f:
                self._rows[path] = [json.loads(line) for line in f if line.strip()]
        return self._rows[path]


DESCRIBED = ("paper", "differs", "finding", "on")  # what a study's describe(claim) declares (studies.Rules)


def judge_claims(claims: list[dict], evidence: Evidence, rules: Mapping) -> list[dict]:
    """Each claim with its study's declarations (``DESCRIBED``) and verdict (``status``,
    ``rule``, ``reason``); ``rules``: study -> ``jattn.reproduce.studies.Rules``."""
    out = []
    for claim in claims:
        if claim["study"] not in rules:
            raise ValueError(f"study {claim['study']!r} registered no rules: its claims have no decision rule. "
                             "Fix: register it with studies.register(..., rules=...)")
        study = rules[claim["study"]]
        verdict, described = study.judge(claim, evidence), study.describe(claim)
        if missing := [k for k in DESCRIBED if not described.get(k)]:
            raise ValueError(f"{claim['id']}: its study's describe(claim) gives no {', '.join(missing)}. Fix: return "
                             f"{{{', '.join(repr(k) for k in DESCRIBED)}}} (jattn.reproduce.studies.Rules)")
        out.append({**claim, **described, "status": verdict.status, "rule": verdict.rule, "reason": verdict.reason})
    return out
