"""The patching study's decision rules (``experiments.patching.verdicts``) on synthetic claims,
where each rule must say each of its outcomes, and on every committed patching claim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments import papers
from scipy.stats import spearmanr

from jattn.reproduce import claims, verdicts
from experiments.patching import verdicts as patching



def _claim(root: Path, id: str, rows: list[dict], measure: dict, baseline: dict, **extra) -> dict:
    path = f"predictions/{id}.jsonl"
    claims.write_rows(root / path, rows)
    return {"id": id, "study": "patching", "claim": id, "paper": "p", "predictions": path, "measure": measure,
            "baseline_measure": {"statistic": measure["statistic"], "ci_method": measure["ci_method"], **baseline},
            "baseline": {"name": baseline["name"]}, **extra}


def _judge(root: Path, claim: dict) -> verdicts.Verdict:
    return patching.judge(claim, verdicts.Evidence({claim["id"]: claim}, {}, root))


def test_behaviour_is_the_paired_difference_against_the_nearest_name(tmp_path):
    rng = np.random.default_rng(0)
    nearest = (rng.random(160) < 0.5).astype(int)
    measure = {"statistic": "accuracy", "columns": {"gold": "right", "pred": "metric"}, "ci_method": "bootstrap"}
    base = {"name": "nearest name", "columns": {"gold": "right", "pred": "nearest"}}
    for metric, want in (((rng.random(160) < 0.75).astype(int), "reproduced"), (nearest, "not reproduced"),
                         ((rng.random(160) < 0.2).astype(int), "not reproduced")):
        rows = [
            {"index": i, "right": 1, "metric": int(m), "nearest": int(b)}
            for i, (m, b) in enumerate(zip(metric, nearest))
        ]
        assert _judge(tmp_path, _claim(tmp_path, "patching-toy-behaviour", rows, measure, base)).status == want


def test_corruption_is_directional_on_its_paired_delta(tmp_path):
    base = {"statistic": "mean", "columns": {"value": "clean"}, "ci_method": "paired"}
    for ci, want in (([0.2, 0.6], "reproduced"), ([-0.1, 0.3], "not reproduced"), ([-0.6, -0.2], "not reproduced")):
        c = {"id": "patching-toy-corruption", "value": float(np.mean(ci)), "ci": ci, "measure": base}
        assert _judge(tmp_path, c).status == want


def _maps(n: int, k: int, effect_of_score, seed: int = 0):
    """(n, k) weight-based scores and exact effects whose head means follow effect_of_score(score)."""
    rng = np.random.default_rng(seed)
    score = np.clip(rng.random(k)[None] + rng.normal(0, 0.1, (n, k)), 0, 1)
    effect = effect_of_score(score.mean(0))[None] + rng.normal(0, 0.02, (n, k))
    return effect, score


def _clark_claim(root, effect, score):
    rows = [{"index": i, "effect": e.tolist(), "clark": s.tolist()} for i, (e, s) in enumerate(zip(effect, score))]
    measure = {"statistic": "head_spearman", "columns": {"x": "effect", "y": "clark"}, "ci_method": "bootstrap"}
    return _claim(
        root,
        "patching-toy-clark",
        rows,
        measure,
        {"name": "shuffled", "columns": {"x": "effect", "y": "clark"}},
        value=patching._rho(effect.mean(0), score.mean(0)),
        ci=patching.head_rho_bootstrap(effect, score),
    )


def test_clark_association_is_judged_on_the_signed_effect_by_permutation(tmp_path):
    got = _judge(tmp_path, _clark_claim(tmp_path, *_maps(40, 48, lambda s: s)))
    assert got.status == "reproduced" and got.rule == "permutation"
    got = _judge(tmp_path, _clark_claim(tmp_path, *_maps(40, 48, lambda s: -s)))  # Clark's heads push the other way
    assert got.status == "not reproduced" and "|effect|" in got.reason
    assert "ρ = +" in got.reason.split("|effect|")[1]  # the |effect| association is reported, not judged
    flat = lambda s: np.random.default_rng(5).normal(0, 1, len(s))  # noqa: E731
    assert _judge(tmp_path, _clark_claim(tmp_path, *_maps(40, 48, flat))).status == "not reproduced"


def test_head_rho_helpers_match_scipy():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=30), np.round(rng.random(30), 1)  # ties in y
    assert patching._rho(x, y) == pytest.approx(spearmanr(x, y).statistic)
    null = patching.head_rho_null(x, y, draws=500)
    assert null.shape == (500,) and abs(null.mean()) < 0.05 and null.std() == pytest.approx(1 / np.sqrt(29), rel=0.2)


def test_clustered_claims_are_judged_on_their_documents(tmp_path):
    """A GAP claim whose measure resamples documents: the |effect| interval resamples them as the
    claim's own interval does (``claims.evaluate`` with "cluster"), and the reason says so; the
    behaviour's paired test resamples them too."""
    rng = np.random.default_rng(1)
    score = rng.random((24, 12))
    effect = score.mean(0) + rng.normal(0, 0.5, (24, 12))  # a noisy association: the intervals are wide
    documents = [f"page-{i // 2}" for i in range(24)]
    rows = [{"index": i, "document": d, "effect": e.tolist(), "clark": s.tolist()}
            for i, (d, e, s) in enumerate(zip(documents, effect, score))]
    measure = {"statistic": "head_spearman", "columns": {"x": "effect", "y": "clark"}, "ci_method": "bootstrap",
               "cluster": "document"}
    want = claims.evaluate(rows, measure)
    assert patching.head_rho_bootstrap(effect, score, clusters=documents) == pytest.approx(want["ci"], abs=1e-12)
    assert patching.head_rho_bootstrap(effect, score) != pytest.approx(want["ci"], abs=1e-6)  # rows: another interval
    claim = _claim(tmp_path, "patching-toy-clark", rows, measure, {"name": "s", "columns": measure["columns"],
                                                                    "cluster": "document"}, **want)
    assert "12 GAP pages resampled" in _judge(tmp_path, claim).reason
    metric, nearest = (rng.random(24) < 0.8).astype(int), (rng.random(24) < 0.4).astype(int)
    rows = [{"index": i, "document": d, "right": 1, "metric": int(m), "nearest": int(b)}
            for i, (d, m, b) in enumerate(zip(documents, metric, nearest))]
    measure = {"statistic": "accuracy", "columns": {"gold": "right", "pred": "metric"}, "ci_method": "bootstrap",
               "cluster": "document"}
    paired = claims.evaluate(rows, {**measure, "ci_method": "paired", "against": {"pred": "nearest"}})
    got = _judge(tmp_path, _claim(tmp_path, "patching-toy-behaviour", rows, measure,
                                  {"name": "nearest name", "columns": {"gold": "right", "pred": "nearest"},
                                   "cluster": "document"}))
    assert "12 GAP pages resampled" in got.reason and f"{paired['ci'][0]:+.3g}" in got.reason


def test_attribution_is_directional_on_its_interval(tmp_path):
    effect, score = _maps(30, 24, lambda s: s)
    rows = [
        {"index": i, "attribution": e.tolist(), "effect": s.tolist()} for i, (e, s) in enumerate(zip(effect, score))
    ]
    measure = {"statistic": "head_spearman", "columns": {"x": "attribution", "y": "effect"}, "ci_method": "bootstrap"}
    for value, ci, want in ((0.8, [0.6, 0.9], "reproduced"), (0.1, [-0.1, 0.3], "not reproduced")):
        c = _claim(tmp_path, "patching-toy-attribution", rows, measure, {"name": "s", "columns": measure["columns"]},
                   value=value, ci=ci)
        got = _judge(tmp_path, c)
        assert got.status == want and "permutation p" in got.reason


def test_unknown_claims_are_refused_and_described():
    with pytest.raises(ValueError):
        patching.judge({"id": "patching-toy-other"}, None)
    d_id = "patching-mpnet-clark"
    d = patching.describe({"id": d_id, "paper": "p"})
    assert d["paper"] == papers.for_claim({"id": d_id, "paper": "p"}) != "p" and "all-mpnet-base-v2" in d["differs"]


def test_hidden_state_metric_is_judged_on_its_rank_agreement_with_the_logit_difference(tmp_path):
    """``-sst2-hidden``: directional on ρ over heads (pairs resampled); |effect| reported beside it."""
    rng = np.random.default_rng(6)
    logit = rng.normal(0, 1, 48)[None] + rng.normal(0, 0.2, (40, 48))  # (n, K) exact effects, logit difference
    measure = {"statistic": "head_spearman", "columns": {"x": "hidden_effect", "y": "effect"}, "ci_method": "bootstrap"}
    for hidden, want in ((2 * logit + rng.normal(0, 0.2, (40, 48)), "reproduced"),
                         (rng.normal(0, 1, 48)[None] + rng.normal(0, 0.2, (40, 48)), "not reproduced"),
                         (-logit, "not reproduced")):
        rows = [{"index": i, "hidden_effect": h.tolist(), "effect": e.tolist()}
                for i, (h, e) in enumerate(zip(hidden, logit))]
        claim = _claim(tmp_path, "patching-toy-sst2-hidden", rows, measure,
                       {"name": "shuffled", "columns": {"x": "hidden_effect", "y": "effect"}},
                       value=patching._rho(hidden.mean(0), logit.mean(0)),
                       ci=patching.head_rho_bootstrap(hidden, logit))
        got = _judge(tmp_path, claim)
        assert got.status == want and "|effect| under both" in got.reason
    assert "+1.000" in got.reason  # -logit: the signed ranks reverse, the |effect| ranks agree
    said = patching.describe({"id": "patching-minilm-sst2-hidden", "paper": "p"})["differs"]
    assert said.startswith("no paper compares")
    said = patching.describe({"id": "patching-translation-gender-corruption", "paper": "p"})["differs"]
    assert "other gender's" in said and "Multi30k fr→en" in said
