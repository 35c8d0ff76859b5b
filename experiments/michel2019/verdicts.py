"""Decision rules of the Michel study (Michel, Levy and Neubig 2019, "Are Sixteen Heads Really
Better than One?", §4, Fig. 3); the tests are ``jattn.reproduce.verdicts``'. Written after the
records they judge (``PROVENANCE``; ``docs/STATISTICS.md``, "Provenance").

claim type → test → verdict:

- ``*-prune40`` ("about 40 % of heads can be pruned without a noticeable loss": a one-sided claim)
  → ``noninferior``: the one-sided non-inferiority test at α = .05 on Δ = metric(40 % pruned by
  importance) − metric(unpruned), margin ``MARGIN`` (one metric point), the lower end of the 90 %
  interval the claim's own measure gives at that level (Student-t over the fine-tuning seeds,
  ``stats.t_interval(per_seed, 0.90)``; the paired bootstrap over dev examples when there is one
  seed) → reproduced above −margin (a gain is no loss), not reproduced when the whole interval
  lies at or below −margin, inconclusive otherwise.
- ``*-vs-random50`` (pruning by importance beats pruning at random, at 50 % pruned) →
  ``directional``: Δ = importance order − the mean of the random orders, its 95 % interval over
  seeds (Student-t; one seed: paired bootstrap) above 0 → reproduced; otherwise not reproduced.
"""

from __future__ import annotations

import sys

from jattn.reproduce import claims as C
from experiments import papers
from jattn.reproduce import studies
from experiments.papers import effect
from jattn.reproduce.verdicts import Evidence, Verdict, directional, noninferior

__all__ = ["describe", "judge"]

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28), after the Michel records they judge "
              "(first committed in 473ae4a, 2026-11-26)")

# One metric point (accuracy 0.01 on SST-2; MCC 0.01, i.e. 1 point of MCC × 100, on CoLA): the
# paper's "no noticeable loss" is read off curves plotted in points, and one point is the smallest
# difference the GLUE leaderboards report and the study's own TOLERANCE; SST-2's 872 and CoLA's 527
# dev examples resolve 0.1-0.2 points, so the margin is not below the measurement's resolution.
MARGIN = 0.01
ONE_SIDED_LEVEL = 0.90  # the lower end of a 90 % interval is the one-sided 95 % bound: α = .05


def _prune(claim: dict, evidence: Evidence) -> Verdict:
    r = C.evaluate(evidence.rows(claim), claim["measure"], level=ONE_SIDED_LEVEL)
    how = "t over seeds" if claim["measure"]["ci_method"] == "seeds" else "paired bootstrap"
    return noninferior(r["value"], r["ci"], MARGIN, what=f"{claim['unit']} at 40 % pruned ({how})")


def _versus(claim: dict, evidence: Evidence) -> Verdict:
    how = "t over seeds" if claim["measure"]["ci_method"] == "seeds" else "paired bootstrap"
    return directional(claim["value"], claim["ci"], what=f"importance − random orders at 50 %, {claim['unit']} ({how})",
                       paper=effect(claim["id"]))


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
