"""Decision rules of the induction study (Olsson et al. 2022, "In-context Learning and Induction
Heads"; Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"), fixed before the
models were trained. Every claim compares a measure with its baseline on the same evaluation
sequences of the same model (each row one sequence of one training seed, both columns on it), so
the test is on the PAIRED difference: per seed, the mean over sequences of (measure − baseline);
the Student-t interval over the seeds of those means (``claims.evaluate`` with ci_method "seeds":
the training seed is the unit the finding generalises over); **directional** (α = .05):

- ``induction-<model>-icl`` (Olsson §2: the second copy of a repeated random sequence is predicted
  far better than the first): Δ = in-context drop − the same drop on "A B" (no repeat), above 0;
- ``induction-<model>-induction-head`` (a head attends to the token after the current token's
  earlier occurrence): Δ = the named head's induction score − a random other head's, above 0;
- ``induction-<model>-previous-token-head`` (Elhage: a previous-token head in a layer below):
  Δ = the named head's previous-token score − a random head's of those layers, above 0;
- ``induction-<model>-path`` (K-composition: the induction head finds its target through the
  previous-token head's output in its keys): Δ = the previous-token head's path-patching effect
  through the induction head's keys − a random lower head's through the same keys, below 0
  (a more negative effect on the second copy's log-probability).

Reproduced when the interval of Δ lies on the claimed side of 0, not reproduced otherwise; with
fewer than ``MIN_SEEDS`` seeds there is no interval over seeds and the verdict is inconclusive.
(The stage's former rule compared the two separate intervals: it is replaced by the paired Δ, the
substance — measure beyond its baseline over training seeds — kept.)
"""

from __future__ import annotations

import sys

from jattn.reproduce import claims as C
from experiments import papers
from jattn.reproduce import studies
from jattn.reproduce import verdicts as V
from jattn.reproduce.verdicts import Evidence, Verdict

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28 21:09), after the induction records "
              "they judge (first committed in b56f32a, 2026-11-28 15:49)")

MIN_SEEDS = 2  # a t-interval over seeds needs two; the full profile trains three
SIGN = {"icl": +1, "induction-head": +1, "previous-token-head": +1, "path": -1}


def _kind(claim: dict) -> str:
    """The claim type: the id's tail after ``induction-<model>-``."""
    return next(k for k in SIGN if claim["id"].endswith("-" + k))


def paired_over_seeds(rows: list[dict], column: str, baseline: str) -> dict:
    """Per seed the mean of ``column`` − ``baseline`` over its rows; their mean and t-interval over seeds."""
    diff = [{"seed": r["seed"], "value": float(r[column]) - float(r[baseline])} for r in rows]
    return C.evaluate(diff, {"statistic": "mean", "columns": {"value": "value"}, "ci_method": "seeds"})


def directional_over_seeds(claim: dict, evidence: Evidence, sign: int) -> Verdict:
    """The claim's paired difference from its baseline, one value per training seed, judged
    ``directional`` on its Student-t interval over the seeds (inconclusive under ``MIN_SEEDS``)."""
    rows = evidence.rows(claim)
    seeds = sorted({r["seed"] for r in rows})
    if len(seeds) < MIN_SEEDS:
        return Verdict("inconclusive", "directional", f"{len(seeds)} training seed(s): no interval over seeds")
    d = paired_over_seeds(rows, claim["measure"]["columns"]["value"], claim["baseline_measure"]["columns"]["value"])
    per_seed = ", ".join(f"{v:+.3f}" for v in d["per_seed"].values())
    verdict = V.directional(d["value"], d["ci"], sign=sign,
                            what=f"Δ vs {claim['baseline']['name']} (t over {len(seeds)} seeds)")
    return Verdict(verdict.status, "directional (seeds)", f"{verdict.reason}; per seed {per_seed}")


def judge(claim: dict, evidence: Evidence) -> Verdict:
    return directional_over_seeds(claim, evidence, SIGN[_kind(claim)])


_MODELS = ("2-layer, 8-head GPT-2s (attention-only and with MLPs) trained here, 5 seeds, on captions with half "
           "their training sequences repeated random segments, instead of the authors' unreleased models trained "
           "on natural text")
DIFFERS = {
    "icl": f"{_MODELS}; the drop read on repeated random tokens against a non-repeating control, not along "
           "natural contexts.",
    "induction-head": f"{_MODELS}; the head named on separate selection sequences and scored on evaluation "
                      "sequences against a random other head.",
    "previous-token-head": f"{_MODELS}; the head named among the layers below the induction head on selection "
                           "sequences and scored on evaluation sequences against a random head of those layers.",
    "path": f"{_MODELS}; K-composition measured by path patching (Wang et al. 2022) against a random lower head, "
            "not read from the weights or by the authors' ablations.",
}


FINDINGS = {"icl": "in-context learning: the loss falls on the repeated copy",
            "induction-head": "an induction head forms",
            "previous-token-head": "a previous-token head forms below it",
            "path": "the previous-token head feeds the induction head's keys, by path patching"}


def describe(claim: dict) -> dict[str, str]:
    on = "attention-only" if claim["id"].startswith("induction-attn-only-") else "with MLPs"
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[_kind(claim)], "finding": FINDINGS[_kind(claim)],
            "on": on}


studies.register_rules("induction", sys.modules[__name__])
