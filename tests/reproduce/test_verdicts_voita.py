"""The Voita study's decision rules (experiments/voita2019/verdicts.py) on synthetic claims where
each outcome must occur, and every committed claim judged to a valid status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jattn.reproduce import claims as C
from jattn.reproduce.verdicts import Evidence
from experiments.voita2019 import verdicts as VV



def _claim(cid: str, value: float, ci: list, **extra) -> dict:
    return {"id": cid, "study": "voita", "paper": "p", "value": value, "ci": ci, "unit": "Δ BLEU",
            "baseline": {"name": "base", "value": 0.0, "ci": [0.0, 0.0]}, **extra}


def _fewest(tmp: Path, value: float, ci: list) -> dict:
    relative = "predictions/voita-encoder-fewest-heads.jsonl"
    C.write_rows(tmp / relative, [{"index": 0, "ref": "a", "heads": [0, 3, 9, 23, 41, 48]}])
    return _claim("voita-encoder-fewest-heads", value, ci, predictions=relative,
                  measure={"statistic": "fewest_heads_within_1_bleu", "ci_method": "bootstrap",
                           "columns": {"ref": "ref", "systems": "gated", "heads": "heads", "reference": "unpruned"}})


def _evidence(tmp: Path, fewest: dict, no_heads_ci: list | None) -> Evidence:
    claims = {"voita-unpruned-bleu": _claim("voita-unpruned-bleu", 52.0, [50.0, 54.0]), fewest["id"]: fewest}
    if no_heads_ci is not None:
        closed = _claim("voita-encoder-lam0.02", float(np.mean(no_heads_ci)), no_heads_ci, lam=0.02, steps=600,
                        open_heads={"encoder": 0})
        claims[closed["id"]] = closed
    return Evidence(claims, {}, tmp)


@pytest.mark.parametrize("no_heads, value, ci, want", [
    ([-0.9, 0.5], 0, [0, 3], "not applicable"),  # the encoder keeps its BLEU without any head (90 %: > −1)
    ([-1.53, 0.38], 0, [0, 3], "inconclusive"),  # −0.55 [−1.53, +0.38]: neither needed nor shown not to be
    ([-6.0, -3.0], 9, [3, 23], "reproduced"),
    ([-6.0, -3.0], 41, [41, 48], "not reproduced"),
    ([-6.0, -3.0], 23, [9, 41], "inconclusive"),
    (None, 9, [3, 9], "inconclusive"),
])
def test_fewest_heads(tmp_path, no_heads, value, ci, want):
    fewest = _fewest(tmp_path, value, ci)
    v = VV.judge(fewest, _evidence(tmp_path, fewest, no_heads))
    assert v.status == want, v.reason


def test_the_harder_sets_fewest_heads_reads_the_harder_sets_claims(tmp_path):
    """``voita-encoder-fewest-heads-long``: its precondition is the no-head encoder's Δ on the same
    sentences (the ``-long`` claims), not the whole test set's."""
    fewest = {**_fewest(tmp_path, 9, [3, 23]), "id": "voita-encoder-fewest-heads-long"}
    ev = _evidence(tmp_path, fewest, [-0.9, 0.5])  # the whole test set: the encoder is not needed
    closed = _claim("voita-encoder-lam0.02-long", -4.5, [-6.0, -3.0], lam=0.02, steps=600, open_heads={"encoder": 0})
    ev.claims[closed["id"]] = closed
    assert VV.judge(fewest, ev).status == "reproduced"
    del ev.claims[closed["id"]]
    assert VV.judge(fewest, ev).status == "inconclusive"  # nothing measured on the harder set
    ev.claims["voita-michel-encoder-0-long"] = _claim("voita-michel-encoder-0-long", -0.2, [-0.8, 0.4])
    assert VV.judge(fewest, ev).status == "not applicable"


def test_the_model_trained_without_encoder_attention_is_the_precondition_first(tmp_path):
    fewest = _fewest(tmp_path, 9, [3, 23])
    ev = _evidence(tmp_path, fewest, [-6.0, -3.0])  # the gate run closing every head loses
    assert VV.judge(fewest, ev).status == "reproduced"
    ev.claims["voita-no-encoder-attention"] = _claim("voita-no-encoder-attention", -0.3, [-0.9, 0.3])
    v = VV.judge(fewest, ev)  # trained from scratch without it, the encoder keeps its BLEU
    assert v.status == "not applicable" and "trained from scratch" in v.reason


def test_fewest_heads_falls_back_to_importance_pruning(tmp_path):
    fewest = _fewest(tmp_path, 9, [3, 9])
    ev = _evidence(tmp_path, fewest, None)
    ev.claims["voita-michel-encoder-0"] = _claim("voita-michel-encoder-0", -0.2, [-0.8, 0.4])
    assert VV.judge(fewest, ev).status == "not applicable"


@pytest.mark.parametrize("strength, want", [(1.0, "reproduced"), (0.0, "not reproduced"), (-1.0, "not reproduced")])
def test_confidence_lrp_is_judged_with_the_heads_resampled(tmp_path, strength, want):
    """48 heads whose LRP relevance follows (1), ignores (0) or opposes (−1) their confidence, on
    many sentences: only a relation across heads is reproduced, however many sentences."""
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.2, 0.5, 48)  # (K,)
    lrp = strength * confidence + 0.05 * rng.standard_normal(48)  # (K,)
    rows = [{"index": i, "confidence": (confidence + 0.01 * rng.standard_normal(48)).tolist(),
             "lrp": (lrp + 0.01 * rng.standard_normal(48)).tolist()} for i in range(200)]
    C.write_rows(tmp_path / "p.jsonl", rows)
    claim = _claim("voita-confidence-lrp", 0.0, [0.0, 0.0], predictions="p.jsonl",
                   measure={"statistic": "head_spearman", "ci_method": "bootstrap",
                            "columns": {"x": "confidence", "y": "lrp"}})
    verdict = VV.judge(claim, Evidence({}, {}, tmp_path))
    assert verdict.status == want and "over 48 heads, heads resampled" in verdict.reason


def test_the_head_bootstrap_is_spearman_on_each_resample_of_the_heads():
    """claims' "heads" interval: scipy's ρ on each resample of the heads (ties included), wider than
    the interval over sentences of the same rows, which treats the heads as fixed."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal(48), 1)  # ties
    y = 0.5 * x + rng.standard_normal(48)
    picks = np.random.default_rng(0).integers(0, 48, (2000, 48))
    want = np.nanquantile([spearmanr(x[i], y[i]).statistic for i in picks], [0.025, 0.975])
    assert C.head_interval(x, y) == pytest.approx(want, abs=1e-12)
    rows = [{"x": (x + 0.1 * rng.standard_normal(48)).tolist(), "y": (y + 0.1 * rng.standard_normal(48)).tolist()}
            for _ in range(100)]
    spec = {"statistic": "head_spearman", "columns": {"x": "x", "y": "y"}}
    heads, sentences = (C.evaluate(rows, {**spec, "ci_method": m}) for m in ("heads", "bootstrap"))
    assert heads["value"] == pytest.approx(sentences["value"], abs=1e-12)
    assert heads["ci"][1] - heads["ci"][0] > 2 * (sentences["ci"][1] - sentences["ci"][0])


def _kept_evidence(kept: np.ndarray, confidence: np.ndarray, no_heads_ci: tuple = (-6.0, -3.0)) -> Evidence:
    """The gates and confidences, and the encoder trained without self-attention losing ``no_heads_ci``."""
    results = {"voita.roles": {"confidence": {"encoder": confidence.reshape(6, 8).tolist()}},
               "voita.gates-encoder-lam0.005": {"gates": {"encoder": kept.reshape(6, 8).astype(float).tolist()}}}
    control = _claim("voita-no-encoder-attention", float(np.mean(no_heads_ci)), list(no_heads_ci))
    return Evidence({control["id"]: control}, results, Path("."))


def test_kept_confidence_permutation():
    confidence = np.linspace(0.1, 0.5, 48)
    claim = _claim("voita-kept-confidence-encoder-lam0.005", 0.1, [0.09, 0.11])
    top = np.zeros(48, bool)
    top[-9:] = True
    assert VV.judge(claim, _kept_evidence(top, confidence)).status == "reproduced"
    middle = np.zeros(48, bool)
    middle[20:29] = True  # the kept heads' mean sits at the random subsets' median
    assert VV.judge(claim, _kept_evidence(middle, confidence)).status == "not reproduced"
    failed = VV.judge(claim, _kept_evidence(middle, confidence))  # the finding fails: not reproduced, with its MDE
    assert "minimum detectable" in failed.reason
    assert VV.judge(claim, _kept_evidence(np.zeros(48, bool), confidence)).status == "not applicable"
    undecided = VV.judge(claim, _kept_evidence(top, confidence, (-1.53, 0.38)))  # is the encoder needed at all?
    assert undecided.status == "inconclusive" and "undecided" in undecided.reason


def test_subset_p_matches_exact_small_case():
    # 4 heads, keep the 2 most confident of (1, 2, 3, 4): 1 of the C(4, 2) = 6 subsets reaches mean 3.5
    _, p, null = VV.subset_p([1, 2, 3, 4], [0, 0, 1, 1], subsets=20000)
    assert abs(np.mean(null >= 3.5) - 1 / 6) < 0.01 and abs(p - 1 / 6) < 0.01


def test_curve_points_are_context():
    for cid in ("voita-unpruned-bleu", "voita-encoder-lam0.01", "voita-all-lam0.02-vs-control",
                "voita-encoder-lam0.005-vs-importance", "voita-michel-all-34"):
        assert VV.judge(_claim(cid, 1.0, [0.5, 1.5]), Evidence({}, {}, Path("."))).status == "context"
