"""The finetune study's rule (``experiments/finetune/verdicts.py``): a classifier's dev score is
context, never a verdict; every committed finetune claim gets it."""

from jattn.reproduce import verdicts as V
from experiments.finetune import verdicts as F


def test_a_classifier_score_is_context():
    claim = {"id": "finetune-m-t", "study": "finetune", "value": 0.9, "ci": [0.88, 0.92], "unit": "accuracy",
             "seeds": 3, "baseline": {"name": "majority class", "value": 0.5}, "paper": "p"}
    v = F.judge(claim, V.Evidence({}, {}, None))
    assert v.status == "context" and "0.900" in v.reason
    described = F.describe({**claim, "id": "finetune-minilm-cola"})
    assert described["paper"].startswith("BERT-base") and "with 3 seeds" in described["differs"]  # the registry's
