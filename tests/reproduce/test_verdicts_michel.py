"""The Michel study's decision rules (``experiments/michel2019/verdicts.py``) on synthetic claims:
the 40 % claim is an equivalence test at ±1 point (reproduced, not reproduced, inconclusive), the
50 % claim a directional one; and every committed Michel claim gets a valid status."""


from jattn.reproduce import verdicts as V
from jattn.reproduce.claims import write_rows
from experiments.michel2019 import verdicts as M

MEASURE = {"statistic": "accuracy_gain", "columns": {"gold": "gold", "pred": "importance", "reference": "unpruned"},
           "ci_method": "seeds"}


def prune_rows(changes, n=400) -> list[dict]:
    """Per seed s, ``changes[s]`` examples (of n, gold all 1) turned right (> 0) or wrong (< 0) by pruning."""
    rows = []
    for s, c in enumerate(changes):
        for i in range(n):
            unpruned = int(i >= 100) if c > 0 else 1
            importance = (1 if i < c else unpruned) if c > 0 else (0 if i < -c else 1)
            rows.append({"index": i, "seed": s, "gold": 1, "unpruned": unpruned, "importance": importance,
                         "random": [0, 1]})
    return rows


def prune_claim(tmp_path, name, changes) -> dict:
    path = f"p/{name}.jsonl"
    write_rows(tmp_path / path, prune_rows(changes))
    return {"id": f"michel-{name}-prune40", "study": "michel", "predictions": path, "measure": MEASURE,
            "unit": "Δ accuracy", "paper": "p"}


def test_prune40_is_tost_at_one_point(tmp_path):
    same = prune_claim(tmp_path, "m-a", [0, 1, -1])  # Δ within ±0.25 points in every seed
    loss = prune_claim(tmp_path, "m-b", [-20, -22, -18])  # about −5 points in every seed
    wide = prune_claim(tmp_path, "m-c", [12, -12, 0])  # ±3 points across 3 seeds
    ev = V.Evidence({c["id"]: c for c in (same, loss, wide)}, {}, tmp_path)
    assert M.MARGIN == 0.01
    v = M.judge(same, ev)
    assert v.status == "reproduced" and "90 %" in v.reason
    assert M.judge(loss, ev).status == "not reproduced"
    assert M.judge(wide, ev).status == "inconclusive"


def test_vs_random50_is_directional_over_seeds():
    ev = V.Evidence({}, {}, None)
    beats = {"id": "michel-m-t-vs-random50", "value": 0.05, "ci": [0.02, 0.08], "unit": "Δ MCC",
             "measure": {"ci_method": "seeds"}}
    assert M.judge(beats, ev).status == "reproduced"
    assert M.judge({**beats, "value": 0.01, "ci": [-0.03, 0.05]}, ev).status == "not reproduced"
    assert M.judge({**beats, "value": -0.05, "ci": [-0.08, -0.02]}, ev).status == "not reproduced"
