"""Verdicts: the decision rules of ``docs/STATISTICS.md`` §"Decision rules", applied to the claims
after the stages measured them.

A stage measures (value, interval, baseline, predictions file); it does not judge. Each study
registers its rules (``jattn.reproduce.studies.register_rules(name, rules)``): ``rules.judge(claim,
evidence) -> Verdict`` names the rule a claim is tested by and calls it on the numbers the claim, its
predictions file and the other claims hold (``Evidence``). The rules are the functions below,
one per claim type, written after the first records they judge (``docs/STATISTICS.md``,
"Provenance"); none is part of a stage's key, so an edited
rule re-judges every claim without rerunning a stage. Every status is one of ``STATUSES``:

- ``reproduced``: the rule's test decides for the paper's finding;
- ``not reproduced``: it decides against it (an effect in the other direction, a loss beyond the
  margin, a best-of-N selection the null explains, no effect where the test had the power to see
  the paper's); its reason states the minimum detectable effect at 80 % power beside the paper's
  effect (``judge_claims`` refuses one without);
- ``inconclusive``: the data decide neither way (a non-inferiority interval that straddles the
  margin; a precondition the data neither confirm nor exclude);
- ``inconclusive (underpowered)``: the test detected nothing and the paper's effect lies below the
  smallest effect the test detects with 80 % power: "not detected; compatible with the paper's
  effect" (``powered``);
- ``not applicable``: a precondition of the finding, independent of the finding itself, is absent
  in this model or data (the model does not translate the out-of-domain text); the reason says
  which. A precondition never tests what the finding asserts: where the finding is "X takes the
  attention", X not taking it is "not reproduced";
- ``context``: a number reported beside the claims (a classifier's score, the unpruned BLEU),
  not a finding tested here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

__all__ = ["ALPHA", "best_of_n", "cluster_t", "context", "detectable", "directional", "Evidence", "holm_family",
           "judge_claims", "noninferior", "not_applicable", "ordering", "permutation_p", "POWER", "powered",
           "provenance", "standard_error", "STATUSES", "step_down_max_t", "UNDERPOWERED", "Verdict"]

UNDERPOWERED = "inconclusive (underpowered)"
STATUSES = ("reproduced", "not reproduced", "inconclusive", UNDERPOWERED, "not applicable", "context")
ALPHA = 0.05
POWER = 0.80  # the power a minimum detectable effect is stated at
MDE = "minimum detectable effect"  # the words every "not reproduced" reason carries (judge_claims checks)
_Z = NormalDist().inv_cdf


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


def standard_error(ci: Sequence[float], level: float = 0.95) -> float:
    """The standard error a normal ``level`` interval ``ci`` implies: width / (2 z_{(1+level)/2})."""
    return (float(ci[1]) - float(ci[0])) / (2 * _Z((1 + level) / 2))


def detectable(se: float, *, alpha: float = ALPHA, sides: int = 2, tests: int = 1) -> float:
    """The minimum detectable effect at ``POWER`` of a z test of one effect with standard error ``se``
    at level ``alpha`` (``sides`` 2 or 1), Bonferroni-split over ``tests`` (Holm's first step):
    (z_{1 − α/(sides·tests)} + z_{POWER})·se."""
    return (_Z(1 - alpha / (sides * tests)) + _Z(POWER)) * se


def powered(verdict: Verdict, mde: float, *, paper: float | None = None, detected: bool = False) -> Verdict:
    """A "not reproduced" ``verdict`` with its minimum detectable effect ``mde`` beside the paper's
    effect ``paper`` (in the test's units; None where the paper states no number); where the test
    detected nothing (``detected`` False) and the paper's effect lies below ``mde``, it becomes
    ``UNDERPOWERED``: not detected, compatible with the paper's effect. Other verdicts pass."""
    if verdict.status != "not reproduced":
        return verdict
    theirs = f"the paper's effect {paper:.3g}" if paper is not None else "the paper states no effect size"
    said = f"{MDE} at {POWER * 100:.0f} % power {mde:.3g}, {theirs}"
    if not detected and paper is not None and abs(paper) < mde:
        return Verdict(UNDERPOWERED, verdict.rule, f"not detected; compatible with the paper's effect: "
                                                   f"{verdict.reason}; {said}")
    return Verdict("not reproduced", verdict.rule, f"{verdict.reason}; {said}")


def directional(delta: float, ci: Sequence[float], *, sign: int = 1, what: str = "Δ", paper: float | None = None,
                tests: int = 1) -> Verdict:
    """A finding "A is above B" (``sign=+1``) or below (``-1``) from the paired difference Δ = A − B
    and its 95 % interval (never from two separate intervals overlapping): reproduced when the
    interval lies on the claimed side of 0, not reproduced otherwise (the reason says whether no
    difference was detected or the opposite one was), with the minimum detectable effect of the
    test (its ``tests``-fold Bonferroni level where it is one of a Holm family) beside ``paper``,
    the paper's Δ (``powered``)."""
    lo, hi = sign * np.asarray(ci, float)[:: sign]
    said = f"{what} = {delta:+.3g} {_ci(ci)}"
    if lo > 0:
        return Verdict("reproduced", "directional", f"{said}: on the paper's side of 0")
    mde = detectable(standard_error(ci), tests=tests)
    if hi < 0:
        return powered(Verdict("not reproduced", "directional", f"{said}: the opposite direction"), mde,
                       paper=paper, detected=True)
    return powered(Verdict("not reproduced", "directional", f"{said}: no difference detected"), mde, paper=paper)


def cluster_t(values: Sequence[float], clusters: Sequence, level: float = 0.95) -> tuple[float, list[float], int]:
    """(mean, interval, K) of per-row ``values`` whose rows fall in K ``clusters``: the cluster-robust
    (CR1) standard error of the mean, √(K/(K−1) · Σ_k (Σ_{i∈k} (v_i − v̄))²) / n, and Student-t with
    K − 1 degrees of freedom — the interval that keeps its level with few clusters (Cameron and
    Miller 2015), where a percentile bootstrap over fewer than ~30 clusters is too narrow."""
    from scipy.stats import t as student

    v = np.asarray(values, np.float64)  # (n,)
    _, codes = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    k, mean = int(codes.max()) + 1, float(v.mean())
    if k < 2:
        raise ValueError(f"a cluster-robust interval needs at least 2 clusters, got {k}")
    sums = np.bincount(codes, v - mean, minlength=k)  # (K,) each cluster's summed deviation
    se = float(np.sqrt(k / (k - 1) * (sums ** 2).sum()) / len(v))
    half = float(student.ppf((1 + level) / 2, k - 1)) * se
    return mean, [mean - half, mean + half], k


def noninferior(delta: float, ci90: Sequence[float], margin: float, *, what: str = "Δ") -> Verdict:
    """A "no loss" finding by the one-sided non-inferiority test at α = .05 against the margin
    ``margin`` stated before the test: H0 Δ ≤ −margin is rejected when the lower end of the 90 %
    interval (a one-sided 95 % bound) lies above −margin → reproduced; not reproduced when the whole
    90 % interval lies at or below −margin (a loss beyond the margin); inconclusive otherwise — a
    wide interval is not evidence of no loss, and a gain is no loss."""
    if not margin > 0:
        raise ValueError(f"a non-inferiority margin must be > 0 (stated before the test), got {margin}")
    lo, hi = (float(x) for x in ci90)
    said = f"{what} = {delta:+.3g}, 90 % interval {_ci(ci90)}, margin −{margin:g}"
    if lo > -margin:
        return Verdict("reproduced", "non-inferiority", f"{said}: the one-sided 95 % bound lies above −{margin:g}")
    if hi <= -margin:
        mde = detectable(standard_error(ci90, 0.90), sides=1)
        return powered(Verdict("not reproduced", "non-inferiority", f"{said}: a loss beyond the margin"), mde,
                       paper=0.0, detected=True)
    return Verdict("inconclusive", "non-inferiority", f"{said}: the interval straddles −{margin:g}")


def step_down_max_t(observed: Sequence[float], null: np.ndarray) -> np.ndarray:
    """Westfall and Young's (1993) step-down max-T adjusted p-values of m tests at once: ``observed``
    (m,) statistics, larger the stronger the evidence (|Δ| for two-sided tests); ``null`` (B, m) the
    same statistics on B resamples drawn jointly for all m tests (the same example indices for
    every test, so the tests' correlation is kept) and centred at the observed effects (|Δ* − Δ|:
    the null of no effect in any test). With the tests ordered t_(1) ≥ … ≥ t_(m),
    p̃_(j) = (1 + #{b : max_{k ≥ j} T*_b,(k) ≥ t_(j)}) / (1 + B), made non-decreasing in j; a test is
    rejected at family-wise level α when p̃ < α, so the resolution 1 / (1 + B) must lie below α.
    Ties count as reaching the observed value (a 1e-12 guard against float rounding: conservative)."""
    t = np.asarray(observed, np.float64)  # (m,)
    null = np.asarray(null, np.float64)  # (B, m)
    if null.ndim != 2 or null.shape[1] != len(t):
        raise ValueError(f"null must be (resamples, {len(t)}) for {len(t)} observed statistics, got {null.shape}")
    if 1 / (1 + len(null)) >= ALPHA:
        raise ValueError(f"{len(null)} resamples cannot resolve p below α = {ALPHA}: draw at least {int(1 / ALPHA)}")
    order = np.argsort(-t, kind="stable")  # (m,) strongest first
    tail_max = np.maximum.accumulate(null[:, order[::-1]], axis=1)[:, ::-1]  # (B, m) max over tests j..m
    reached = (tail_max >= t[order] - 1e-12).sum(0)  # (m,)
    adjusted = np.maximum.accumulate((1 + reached) / (1 + len(null)))  # (m,) non-decreasing in j
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out


def best_of_n(observed: float, maxima: np.ndarray, held_out: Verdict | None, *, n: int, what: str, se: float,
              paper: float | None = None) -> Verdict:
    """A finding that the best of ``n`` candidates (a head, a layer) has an effect: its in-sample
    effect ``observed`` against the maxima of the null (the best of the candidates on each resample
    of a joint Westfall–Young resampling centred at the observed effects, or a permutation),
    p = (1 + #{max ≥ observed}) / (1 + draws), which must resolve below α (draws ≥ 1/α); reproduced
    only when p < .05 *and* the held-out confirmation (the same candidate on other data) is
    reproduced. Not reproduced states the minimum detectable effect: the null's 95th percentile
    plus z_{POWER} candidate standard errors ``se`` (a candidate with that effect beats the
    critical value with 80 % power), beside ``paper``."""
    maxima = np.asarray(maxima, np.float64)
    if 1 / (1 + len(maxima)) >= ALPHA:
        raise ValueError(f"{len(maxima)} null draws cannot resolve p below α = {ALPHA}: draw at least {int(1 / ALPHA)}")
    p = (1 + int((maxima >= observed - 1e-12).sum())) / (1 + len(maxima))  # ties reach it (float rounding)
    critical = float(np.quantile(maxima, 1 - ALPHA))
    said = (f"best of {n} {what} {observed:+.3g}; null maximum median {np.median(maxima):+.3g}, "
            f"95th percentile {critical:+.3g}, max-statistic p = {p:.3g}")
    mde = critical + _Z(POWER) * se
    if p >= ALPHA:
        return powered(Verdict("not reproduced", "best-of-N", f"{said}: where the best of {n} null draws sits"),
                       mde, paper=paper)
    if held_out is None or held_out.status != "reproduced":
        why = "no held-out confirmation" if held_out is None else f"held out: {held_out.reason}"
        status = "not reproduced" if held_out is None else held_out.status
        return powered(Verdict(status, "best-of-N", f"{said}; {why}"), mde, paper=paper)
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


def ordering(probability: float, *, what: str, gap_se: float, level: float = 0.95) -> Verdict:
    """A finding about an order ("the last two layers change most"): the share of bootstrap
    resamples in which the order holds; reproduced at ≥ ``level``, not reproduced at ≤ 1 − level
    (with the smallest margin of the order the test detects at 80 % power: ``gap_se``, the
    bootstrap standard error of the margin, times z_level + z_POWER), inconclusive between."""
    said = f"{what} in {probability:.1%} of bootstrap resamples"
    if probability >= level:
        return Verdict("reproduced", "ordering", said)
    if probability <= 1 - level:
        return powered(Verdict("not reproduced", "ordering", said),
                       detectable(gap_se, alpha=1 - level, sides=1), detected=True)
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
    files (``rows``) under ``root``; ``derived``: what a rule computes from them once for several
    claims (a resampling null that claims of one model and task share), by the rule's own key."""

    claims: dict[str, dict]
    results: dict[str, dict]
    root: Path
    _rows: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    derived: dict = dataclasses.field(default_factory=dict)

    def rows(self, claim: dict) -> list[dict]:
        path = claim["predictions"]
        if path not in self._rows:
            with open(self.root / path) as f:
                self._rows[path] = [json.loads(line) for line in f if line.strip()]
        return self._rows[path]


DESCRIBED = ("paper", "differs", "finding", "on")  # what a study's describe(claim) declares (studies.Rules)


def provenance(study, claim: dict) -> str:
    """When the rule judging ``claim`` was written relative to the records it judges: the rules'
    ``provenance(claim)`` where they declare one (a study whose rules were written at different
    times), else their ``PROVENANCE``."""
    per_claim = getattr(study, "provenance", None)
    return per_claim(claim) if callable(per_claim) else getattr(study, "PROVENANCE", "")


def judge_claims(claims: list[dict], evidence: Evidence, rules: Mapping) -> list[dict]:
    """Each claim with its study's declarations (``DESCRIBED``) and verdict (``status``,
    ``rule``, ``reason``); ``rules``: study -> ``jattn.reproduce.studies.Rules``."""
    out = []
    for claim in claims:
        if claim["study"] not in rules:
            raise ValueError(f"study {claim['study']!r} registered no rules: its claims have no decision rule. "
                             "Fix: register them with studies.register_rules(name, rules)")
        study = rules[claim["study"]]
        verdict, described = study.judge(claim, evidence), study.describe(claim)
        if missing := [k for k in DESCRIBED if not described.get(k)]:
            raise ValueError(f"{claim['id']}: its study's describe(claim) gives no {', '.join(missing)}. Fix: return "
                             f"{{{', '.join(repr(k) for k in DESCRIBED)}}} (jattn.reproduce.studies.Rules)")
        if verdict.status == "not reproduced" and MDE not in verdict.reason:
            raise ValueError(f"{claim['id']}: a 'not reproduced' verdict without its {MDE} ({verdict.reason}). Fix: "
                             "return it through jattn.reproduce.verdicts.powered (its rule's test at 80 % power)")
        out.append({**claim, **described, "status": verdict.status, "rule": verdict.rule, "reason": verdict.reason,
                    "provenance": provenance(study, claim)})
    return out
