"""Decision rules of the Michel study (Michel, Levy and Neubig 2019, "Are Sixteen Heads Really
Better than One?", §4, Fig. 3), written before the numbers; the tests are
``jattn.reproduce.verdicts``'.

claim type → test → verdict:

- ``*-prune40`` ("about 40 % of heads can be pruned without a noticeable loss") → ``equivalent``:
  two one-sided tests (Schuirmann 1987) at α = .05 on Δ = metric(40 % pruned by importance) −
  metric(unpruned), margin ±``MARGIN`` (one metric point), the 90 % interval the claim's own
  measure gives at that level (Student-t over the fine-tuning seeds, ``stats.t_interval(per_seed,
  0.90)``; the paired bootstrap over dev examples when there is one seed) → reproduced inside the
  margin, not reproduced wholly outside it, inconclusive when it straddles it.
- ``*-vs-random50`` (pruning by importance beats pruning at random, at 50 % pruned) →
  ``directional``: Δ = importance order − the mean of the random orders, its 95 % interval over
  seeds (Student-t; one seed: paired bootstrap) above 0 → reproduced; otherwise not reproduced.
"""

from __future__ import annotations

import sys

from jattn.reproduce import claims as C
from experiments import papers
from jattn.reproduce import studies
from jattn.reproduce.verdicts import Evidence, Verdict, directional, equivalent

__all__ = ["describe", "judge"]

# One metric point (accuracy 0.01 on SST-2; MCC 0.01, i.e. 1 point of MCC × 100, on CoLA): the
# paper's "no noticeable loss" is read off curves plotted in points, and one point is the smallest
# difference the GLUE leaderboards report and the study's own TOLERANCE; SST-2's 872 and CoLA's 527
# dev examples resolve 0.1-0.2 points, so the margin is not below the measurement's resolution.
MARGIN = 0.01
TOST_LEVEL = 0.90  # TOST at α = .05: the two one-sided tests are the 90 % interval inside the margin


def _prune(claim: dict, evidence: Evidence) -> Verdict:
    r = C.evaluate(evidence.rows(claim), claim["measure"], level=TOST_LEVEL)
    how = "t over seeds" if claim["measure"]["ci_method"] == "seeds" else "paired bootstrap"
    return equivalent(r["value"], r["ci"], MARGIN, what=f"{claim['unit']} at 40 % pruned ({how})")


def _versus(claim: dict, evidence: Evidence) -> Verdict:
    how = "t over seeds" if claim["measure"]["ci_method"] == "seeds" else "paired bootstrap"
    return directional(claim["value"], claim["ci"], what=f"importance − random orders at 50 %, {claim['unit']} ({how})")


JUDGES = {"prune40": _prune, "vs-random50": _versus}
DIFFERS = {
    "prune40": "MPNet / MiniLM fine-tuned on SST-2 / CoLA ({seeds} seeds), not BERT-base on MNLI; importance estimated "
               "once on 1000 training sentences, not re-estimated as heads are pruned.",
    "vs-random50": "Random pruning orders (5 per seed) are not in the paper; MPNet / MiniLM on SST-2 / CoLA, not "
                   "BERT-base on MNLI; importance estimated once, not iteratively.",
}


def _kind(claim_id: str) -> str:
    for kind in JUDGES:
        if claim_id.endswith(kind):
            return kind
    raise ValueError(f"michel claim {claim_id!r} has no decision rule")


def judge(claim: dict, evidence: Evidence) -> Verdict:
    """The claim's verdict by the rule of its type (module docstring)."""
    return JUDGES[_kind(claim["id"])](claim, evidence)


NAMES = {"mpnet": "MPNet", "minilm": "MiniLM", "sst2": "SST-2", "cola": "CoLA"}
FINDINGS = {"prune40": "40 % of heads pruned by importance cost under one point",
            "vs-random50": "pruning by importance beats pruning at random, at 50 % pruned"}


def describe(claim: dict) -> dict[str, str]:
    kind, (_, model, task, *_) = _kind(claim["id"]), claim["id"].split("-")
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[kind].format(seeds=claim["seeds"]),
            "finding": FINDINGS[kind], "on": f"{NAMES[model]} {NAMES[task]}"}


studies.register_rules("michel", sys.modules[__name__])
