"""Decision rules of the induction study on natural-text LMs (``experiments.olsson2022.natural``),
committed with their synthetic tests (``tests/test_induction_natural.py``) before the stages they
judge were first run. Every claim compares a measure with its baseline on the same evaluation
sequences of the same model, so the test is on the PAIRED difference: per training seed the mean
over sequences of (measure − baseline), the Student-t interval over the seeds of those means
(``verdicts.paired_over_seeds``); **directional** (α = .05). ``induction-natural-<model>-<what>``:

- ``icl``: the in-context drop − the same drop on "A B" (no repeat), above 0;
- ``induction-head``: the named induction head's score − the mean of the other heads of its layer,
  above 0 (it stands out among the heads that could match a prefix, not among layer-0 heads);
- ``induction-head-control``: its score on "A A" − its score at the same positions of "A B", above
  0 (it attends by the earlier occurrence, not by a fixed offset);
- ``induction-head-chance``: its score − uniform causal attention's, above 0;
- ``previous-token-head`` / ``previous-token-head-chance``: the named previous-token head's score −
  the mean of the other heads of its layer / uniform causal attention's, above 0;
- ``path``: the previous-token head's path-patching effect through the keys of all induction heads −
  ``natural.SHARE`` (one half) × the whole in-context effect m("B A") − m("A A"), below 0 (both are
  losses of log-probability: the path carries at least half of what the repeat is worth).

Reproduced when the interval of Δ lies on the claimed side of 0, not reproduced otherwise; with
fewer than ``verdicts.MIN_SEEDS`` seeds, inconclusive.
"""

from __future__ import annotations

import sys

from experiments import papers
from experiments.olsson2022.verdicts import directional_over_seeds
from jattn.reproduce import studies
from jattn.reproduce.verdicts import Evidence, Verdict

SIGN = {"icl": +1, "induction-head": +1, "induction-head-control": +1, "induction-head-chance": +1,
        "previous-token-head": +1, "previous-token-head-chance": +1, "path": -1}
MODELS = {"attn-only": "attention-only", "gpt2": "with MLPs"}


def _parts(claim: dict) -> tuple[str, str]:
    """(model, claim type) of ``induction-natural-<model>-<what>``."""
    rest = claim["id"].removeprefix("induction-natural-")
    model = next(m for m in MODELS if rest.startswith(m + "-"))
    return model, rest[len(model) + 1:]


def judge(claim: dict, evidence: Evidence) -> Verdict:
    return directional_over_seeds(claim, evidence, SIGN[_parts(claim)[1]])


_MODELS = ("2-layer, 8-head GPT-2s (attention-only and with MLPs, context 256) trained here, 5 seeds, on 1.9 M "
           "tokens of English natural text only (captions, novels, Wikipedia, web text) instead of the authors' "
           "unreleased models trained on billions of tokens")
DIFFERS = {
    "icl": f"{_MODELS}; the drop read on repeated random tokens against a non-repeating control, not along "
           "natural contexts.",
    "induction-head": f"{_MODELS}; the head named on separate selection sequences and scored on evaluation "
                      "sequences against the other heads of its layer.",
    "induction-head-control": f"{_MODELS}; the named head's score on repeated tokens against its own score at the "
                              "same positions of non-repeating sequences.",
    "induction-head-chance": f"{_MODELS}; the named head's score against uniform causal attention's.",
    "previous-token-head": f"{_MODELS}; the head named among the layers below the induction head and scored "
                           "against the other heads of its layer.",
    "previous-token-head-chance": f"{_MODELS}; the named head's score against uniform causal attention's.",
    "path": f"{_MODELS}; K-composition measured by path patching (Wang et al. 2022) into the keys of all induction "
            "heads against half the whole in-context effect, not read from the weights or by ablations.",
}
FINDINGS = {"icl": "in-context learning: the loss falls on the repeated copy",
            "induction-head": "an induction head forms", "induction-head-control": "an induction head forms",
            "induction-head-chance": "an induction head forms",
            "previous-token-head": "a previous-token head forms below it",
            "previous-token-head-chance": "a previous-token head forms below it",
            "path": "the previous-token head feeds the induction heads' keys, by path patching"}


def describe(claim: dict) -> dict[str, str]:
    model, what = _parts(claim)
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[what], "finding": FINDINGS[what],
            "on": f"{MODELS[model]}, natural text only"}


studies.register_rules("induction-natural", sys.modules[__name__])
