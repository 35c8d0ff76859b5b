"""Decision rules of the ``finetune`` study: the classifiers that the Kovaleva et al. 2019 and
Michel et al. 2019 studies analyse, scored on the dev sets.

claim type → test → verdict:

- ``finetune-<model>-<task>`` (a classifier's dev accuracy on SST-2 or dev MCC on CoLA, mean over
  the fine-tuning seeds) → no test → context: the number says how good the analysed models are
  (beside BERT-base's GLUE scores, Devlin et al. 2019); no paper's finding is tested here.
"""

from __future__ import annotations

import sys

from experiments import papers
from jattn.reproduce import studies
from jattn.reproduce.verdicts import Evidence, Verdict, context

__all__ = ["describe", "judge"]

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28), after the fine-tuning records they "
              "judge (first committed in 05f91bd, 2026-11-26)")


MODELS = {"mpnet": "MPNet", "minilm": "MiniLM"}
TASKS = {"sst2": "SST-2", "cola": "CoLA"}


def judge(claim: dict, evidence: Evidence) -> Verdict:
    """Context: the classifier's dev score over seeds beside the majority class."""
    lo, hi = claim["ci"]
    b = claim["baseline"]
    return context(f"dev {claim['unit']} {claim['value']:.3f} [{lo:.3f}, {hi:.3f}] over {claim['seeds']} seed(s) "
                   f"against {b['value']:.3f} for the {b['name']}: the quality of the classifiers the Kovaleva and "
                   "Michel claims analyse, no finding tested")


def describe(claim: dict) -> dict[str, str]:
    _, model, task = claim["id"].split("-")
    return {"paper": papers.for_claim(claim), "finding": "the fine-tuned classifiers' dev scores",
            "on": f"{MODELS[model]} {TASKS[task]}",
            "differs": "all-MiniLM-L6-v2 / all-mpnet-base-v2 (contrastively fine-tuned sentence encoders, no MLM "
                       f"head) fine-tuned with {claim['seeds']} seeds, not BERT-base; dev sets, not GLUE test; SST-2 "
                       "and CoLA only."}


studies.register_rules("finetune", sys.modules[__name__])
