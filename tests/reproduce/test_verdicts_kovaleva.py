"""The Kovaleva study's decision rules (``experiments/kovaleva2019/verdicts.py``) on synthetic
claims: each claim type says reproduced, not reproduced and, where the rule has it, inconclusive
or context where it must; and every committed Kovaleva claim gets a valid status."""

import numpy as np
import pytest

from jattn.reproduce import verdicts as V
from jattn.reproduce.claims import write_rows
from experiments.kovaleva2019 import verdicts as K



def claim(tmp_path, id, rows, **extra) -> dict:
    path = f"p/{id}.jsonl"
    write_rows(tmp_path / path, rows)
    return {"id": id, "study": "kovaleva", "predictions": path, "unit": "Δ accuracy", "paper": "p", **extra}


def evidence(tmp_path, *claims) -> V.Evidence:
    return V.Evidence({c["id"]: c for c in claims}, {}, tmp_path)


GAIN = {"statistic": "accuracy_gain", "columns": {"gold": "gold", "pred": "pred", "reference": "base"},
        "ci_method": "seeds"}


def heldout_rows(helped: int, seeds=(0, 1, 2), n=200) -> list[dict]:
    """Per seed n examples, base right on 80 %; disabling the head puts ``helped`` of its errors right."""
    rows = []
    for s in seeds:
        for i in range(n):
            base = int(i >= 40)  # gold all 1: 40 errors
            pred = 1 if i < helped else base
            rows.append({"index": i, "seed": s, "gold": 1, "pred": pred, "base": base})
    return rows


def heldout_claim(tmp_path, id: str, rows: list[dict]) -> dict:
    """A held-out claim as the stage makes it: its value and seeds × examples interval from the rows."""
    from jattn.reproduce.claims import evaluate

    spec = {**GAIN, "ci_method": "seeds_examples"}
    got = evaluate(rows, spec)
    return claim(tmp_path, id, rows, measure=spec, value=got["value"], ci=got["ci"])


def test_held_out_best_head_is_directional_on_the_two_way_bootstrap(tmp_path):
    helps = heldout_claim(tmp_path, "kovaleva-m-t-best-head-heldout", heldout_rows(20))
    nothing = heldout_claim(tmp_path, "kovaleva-m-u-best-head-heldout", heldout_rows(0))
    ev = evidence(tmp_path, helps, nothing)
    v = K.judge(helps, ev)
    assert v.status == "reproduced" and "(seeds × examples bootstrap)" in v.reason
    v = K.judge(nothing, ev)
    assert v.status == "not reproduced" and "no difference" in v.reason


# the in-sample best head and the heads / layers families: tests/reproduce/test_verdicts_maxt.py


def test_finetune_change_is_an_ordering_over_resamples_of_seeds_and_examples(tmp_path):
    rng = np.random.default_rng(0)
    shift = {"last": [0, 0, 0, 0, 0.3, 0.3], "middle": [0, 0, 0.3, 0.3, 0, 0.1], "tie": [0, 0, 0, 0.3, 0.3, 0.3]}

    def rows(*patterns):  # one seed per pattern, the same 100 examples
        return [{"seed": s, "index": i, "per_layer": list(x)} for s, k in enumerate(patterns)
                for i, x in enumerate(rng.uniform(0.8, 1.0, (100, 6)) - np.array(shift[k]))]

    made = [claim(tmp_path, f"kovaleva-m-{k}-finetune-change", rows(*patterns))
            for k, patterns in (("a", ("last",) * 3), ("b", ("middle",) * 3), ("c", ("tie",) * 3),
                                ("d", ("last", "middle", "middle", "middle", "last")))]
    ev = evidence(tmp_path, *made)
    assert [K.judge(c, ev).status for c in made[:3]] == ["reproduced", "not reproduced", "inconclusive"]
    # two of five seeds change the last layers most: a resample of the seeds decides, so no "reproduced"
    assert K.judge(made[3], ev).status != "reproduced" and "(seeds × examples)" in K.judge(made[3], ev).reason
    one = claim(tmp_path, "kovaleva-m-e-finetune-change", rows("last", "last")[:150])  # seed 1 lacks examples
    with pytest.raises(ValueError, match="every seed needs a row for every example"):
        K.judge(one, evidence(tmp_path, one))


def test_instruments_beat_the_majority_class_and_structured_share_is_context(tmp_path):
    rng = np.random.default_rng(0)
    hand = rng.integers(0, 5, 80)
    spec = {"statistic": "accuracy", "columns": {"gold": "hand", "pred": "rule"}, "ci_method": "bootstrap"}
    base = {"statistic": "accuracy", "columns": {"gold": "hand", "pred": "majority"}, "ci_method": "bootstrap"}
    good = claim(tmp_path, "kovaleva-rules-held-out", [{"hand": int(h), "rule": int(h) if i % 5 else 0, "majority": 4}
                                                       for i, h in enumerate(hand)],
                 measure=spec, baseline_measure=base, baseline={"name": "majority"}, unit="accuracy")
    bad = claim(tmp_path, "kovaleva-cnn-held-out", [{"hand": int(h), "rule": int(rng.integers(0, 5)), "majority": 4}
                                                    for h in hand],
                measure=spec, baseline_measure=base, baseline={"name": "majority"}, unit="accuracy")
    share = {"id": "kovaleva-m-t-structured-share", "value": 0.8, "baseline": {"value": 0.1}}
    ev = evidence(tmp_path, good, bad)
    assert K.judge(good, ev).status == "reproduced"
    assert K.judge(bad, ev).status == "not reproduced"
    v = K.judge(share, ev)
    assert v.status == "context" and "by construction" in v.reason
