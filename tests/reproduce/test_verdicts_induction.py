"""The induction study's decision rules (experiments/olsson2022/verdicts.py) on synthetic claims
where each outcome must occur, and every committed claim judged to a valid status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jattn.reproduce import claims as C
from jattn.reproduce.verdicts import Evidence
from experiments.olsson2022 import verdicts as IV



def _claim(tmp: Path, cid: str, shift_per_seed: list[float], column: str = "named", base: str = "random") -> dict:
    rng = np.random.default_rng(0)
    rows = [{"seed": s, "index": i, column: 0.5 + shift + rng.normal(0, 0.05), base: 0.5 + rng.normal(0, 0.05)}
            for s, shift in enumerate(shift_per_seed) for i in range(20)]
    relative = f"predictions/{cid}.jsonl"
    C.write_rows(tmp / relative, rows)
    spec = lambda c: {"statistic": "mean", "columns": {"value": c}, "ci_method": "seeds"}  # noqa: E731
    return {"id": cid, "study": "induction", "paper": "p", "predictions": relative, "measure": spec(column),
            "baseline_measure": spec(base), "baseline": {"name": "a random other head"}}


@pytest.mark.parametrize("what, shifts, want", [
    ("induction-head", [0.4, 0.45, 0.5], "reproduced"),
    ("induction-head", [0.4, -0.3, 0.05], "not reproduced"),  # no consistent difference over seeds
    ("previous-token-head", [-0.4, -0.45, -0.5], "not reproduced"),  # the opposite direction
    ("path", [-0.1, -0.12, -0.11], "reproduced"),  # path effects are claimed below the baseline
    ("path", [0.1, 0.12, 0.11], "not reproduced"),
    ("induction-head", [0.4], "inconclusive"),  # one seed: no interval over seeds
])
def test_directional_over_seeds(tmp_path, what, shifts, want):
    c = _claim(tmp_path, f"induction-toy-{what}", shifts)
    v = IV.judge(c, Evidence({}, {}, tmp_path))
    assert v.status == want, v.reason


def test_icl_columns(tmp_path):
    c = _claim(tmp_path, "induction-toy-icl", [5.0, 6.0, 5.5], "drop", "control_drop")
    assert IV.judge(c, Evidence({}, {}, tmp_path)).status == "reproduced"


def test_paired_over_seeds_is_per_seed_mean_difference():
    rows = [
        {"seed": s, "a": a, "b": b} for s, a, b in [(0, 1, 0), (0, 3, 1), (1, 2, 2), (1, 4, 2), (2, 5, 1), (2, 1, 1)]
    ]
    d = IV.paired_over_seeds(rows, "a", "b")
    assert list(d["per_seed"].values()) == [1.5, 1.0, 2.0] and d["value"] == pytest.approx(1.5)
