"""The Kobayashi study's decision rules (experiments/kobayashi2020/verdicts.py) on synthetic claims
where each outcome must occur, and every committed claim judged to a valid status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jattn.reproduce import claims as C
from jattn.reproduce.verdicts import Evidence
from experiments.kobayashi2020 import verdicts as KV



def _claim(tmp: Path, cid: str, rows: list[dict], statistic: str, columns: dict, baseline: dict, **extra) -> dict:
    relative = f"predictions/{cid}.jsonl"
    C.write_rows(tmp / relative, rows)
    return {"id": cid, "study": "kobayashi", "paper": "p", "value": 0.0, "ci": [0.0, 0.0], "unit": "u",
            "baseline": {"name": "base", "value": 0.0, "ci": [0.0, 0.0]}, "predictions": relative,
            "measure": {"statistic": statistic, "columns": columns, "ci_method": "bootstrap"},
            "baseline_measure": {"statistic": statistic, "columns": baseline, "ci_method": "bootstrap"}, **extra}


def _share_rows(weight: float, norm: float, uniform: float = 0.05, n: int = 60) -> list[dict]:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(n):
        e = rng.normal(0, 0.005, 3)
        rows.append({"index": i, "weight_sep": weight + e[0], "norm_sep": norm + e[1], "uniform_sep": uniform + e[2],
                     **{f"{k}_{c}": 0.1 + 0.01 * rng.random() for k in ("weight", "norm", "uniform")
                        for c in ("cls", "punct", "other")}})
    return rows


def _share_claims(tmp: Path, rows: list[dict]) -> dict:
    out = {}
    for kind, other in (("weight", "uniform"), ("norm", "weight")):
        c = _claim(tmp, f"kobayashi-toy-{kind}-sep", rows, "mean", {"value": f"{kind}_sep"}, {"value": f"{other}_sep"})
        out[c["id"]] = c
    return out


@pytest.mark.parametrize("weight, norm, want", [(0.30, 0.04, ("reproduced", "reproduced")),
                                                (0.30, 0.40, ("reproduced", "not reproduced")),
                                                (0.02, 0.01, ("not reproduced", "reproduced"))])
def test_shares_direction_without_a_sink_precondition(tmp_path, weight, norm, want):
    """A token below uniform attention does not receive large α: the weight claim is not reproduced
    (no "not applicable" for a finding that fails); the norm claim is judged on its own Δ."""
    claims = _share_claims(tmp_path, _share_rows(weight, norm))
    ev = Evidence(claims, {}, tmp_path)
    got = tuple(KV.judge(claims[f"kobayashi-toy-{k}-sep"], ev).status for k in ("weight", "norm"))
    assert got == want


def test_other_tokens_direction(tmp_path):
    rows = _share_rows(0.3, 0.04)
    for r in rows:
        r.update(weight_other=0.5 + 0.01 * (r["index"] % 3), uniform_other=0.8, norm_other=0.7)
    up = _claim(tmp_path, "kobayashi-toy-norm-other", rows, "mean", {"value": "norm_other"}, {"value": "weight_other"})
    down = _claim(tmp_path, "kobayashi-toy-weight-other", rows, "mean", {"value": "weight_other"},
                  {"value": "uniform_other"})
    wrong = _claim(tmp_path, "kobayashi-toy2-norm-other", rows, "mean", {"value": "weight_other"},
                   {"value": "norm_other"})
    ev = Evidence({c["id"]: c for c in (up, down, wrong)}, {}, tmp_path)
    assert KV.judge(up, ev).status == "reproduced"
    assert KV.judge(down, ev).status == "reproduced"
    assert KV.judge(wrong, ev).status == "not reproduced"


def test_mixing(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"index": i, "mixing_attnresln_n": 0.2 + 0.01 * rng.random(), "mixing_attn_w": 0.9} for i in range(40)]
    low = _claim(tmp_path, "kobayashi-toy-mixing", rows, "mean", {"value": "mixing_attnresln_n"},
                 {"value": "mixing_attn_w"})
    high = _claim(tmp_path, "kobayashi-toy2-mixing", rows, "mean", {"value": "mixing_attn_w"},
                  {"value": "mixing_attnresln_n"})
    ev = Evidence({}, {}, tmp_path)
    assert KV.judge(low, ev).status == "reproduced"
    assert KV.judge(high, ev).status == "not reproduced"


def _frequency_rows(carried_by_top: bool, types: int = 400) -> list[dict]:
    """Occurrences of ``types`` types (type t has rank t + 1 and 1 + 300 // (t + 1) occurrences):
    ‖f‖ rises with the rank over all types, or only across the 200 most frequent ones."""
    rng = np.random.default_rng(2)
    rows = []
    for t in range(types):
        level = min(t, 199) if carried_by_top else t
        for _ in range(1 + 300 // (t + 1)):
            f = level / 50 + rng.normal(0, 0.3) if (not carried_by_top or t < 200) else 4 + rng.normal(0, 0.3)
            rows.append({"id": 1000 + t, "fnorm": float(f), "rank": t + 1})
    return rows


@pytest.mark.parametrize("carried, want", [(False, "reproduced"), (True, "not reproduced")])
def test_frequency_types_and_top_types(tmp_path, carried, want):
    c = _claim(tmp_path, "kobayashi-toy-frequency", _frequency_rows(carried), "spearman", {"x": "fnorm", "y": "rank"},
               {"x": "fnorm", "y": "rank"})
    v = KV.judge(c, Evidence({}, {}, tmp_path))
    assert v.status == want, v.reason
    assert "type-level ρ" in v.reason


def _aer_rows(good: int, base: int, n: int = 60) -> list[dict]:
    rng = np.random.default_rng(4)
    rows = []
    for i in range(n):
        s = int(rng.integers(8, 12))
        g, b = min(s, good + int(rng.integers(0, 2))), min(s, base + int(rng.integers(0, 2)))
        rows.append({"index": i, "sure": s, "possible": s + 2, "n:predicted": s, "n:sure_hits": g, "n:possible_hits": g,
                     "b:predicted": s, "b:sure_hits": b, "b:possible_hits": b})
    return rows


def _aer_claim(tmp: Path, cid: str, rows: list[dict], stage: str) -> dict:
    col = lambda p: {"sure": "sure", "possible": "possible", **{k: f"{p}:{k}" for k in  # noqa: E731
                                                                ("predicted", "sure_hits", "possible_hits")}}
    return _claim(tmp, cid, rows, "aer", col("n"), col("b"), stage=stage)


def _familiarity(hansards: float, home: float = 0.65) -> dict:
    return {"familiarity": {"hansards": {"next_token_accuracy": hansards}, "multi30k": {"next_token_accuracy": home}}}


@pytest.mark.parametrize("good, base, hansards, want", [(8, 4, 0.5, "reproduced"), (4, 8, 0.5, "not reproduced"),
                                                         (8, 4, 0.16, "not applicable")])
def test_alignment_out_of_domain(tmp_path, good, base, hansards, want):
    c = _aer_claim(tmp_path, "kobayashi-align-toy-AWO-norms-vs-weights", _aer_rows(good, base), "kobayashi.toy")
    ev = Evidence({c["id"]: c}, {"kobayashi.toy": _familiarity(hansards)}, tmp_path)
    assert KV.judge(c, ev).status == want


def test_alignment_in_domain_needs_no_familiarity(tmp_path):
    c = _aer_claim(tmp_path, "kobayashi-align-toy-in-domain-AWI-norms-vs-diagonal", _aer_rows(8, 4), "kobayashi.toy")
    ev = Evidence({c["id"]: c}, {"kobayashi.toy": _familiarity(0.01)}, tmp_path)
    assert KV.judge(c, ev).status == "reproduced"
    eflomal = {**c, "id": "kobayashi-align-toy-eflomal"}
    assert KV.judge(eflomal, ev).status == "context"
