"""The Michel study of ``jattn reproduce``: pruning orders against ``pruning_curve``, resumable
per-mask predictions, the prunable-share rule, the ``*_gain`` statistics against an independent
formulation, the claims stage recomputable from its files, the curve stage on a tiny classifier,
and the quick profile end to end (slow)."""

from __future__ import annotations

import functools
import json
import types

import numpy as np
import pytest
from sklearn.metrics import matthews_corrcoef

from jattn import stats
from jattn.models.base import ModuleModel
from jattn.reproduce import claims, pipeline
from experiments import common
from experiments.michel2019 import study as michel
from experiments.michel2019 import claims as michel_claims
from experiments.michel2019 import curves as mc
from jattn.sweeps.pruning_curve import prune


def test_masks_match_pruning_curve_on_a_common_grid():
    """With 10 heads, 10 % steps are one head each: ``masks_for`` on the 10 % grid must be the
    masks ``prune(scores=...)`` walks (its tie rule included: scores with ties)."""
    class TwoByFive:  # what prune reads of a model when the scores are given
        head_shapes = {"encoder": (2, 5)}
        per_type = ModuleModel.per_type

    scores = np.array([[0.5, 0.1, 0.5, 0.9, 0.1], [0.3, 0.5, 0.0, 0.3, 0.7]])
    walked = []
    prune(TwoByFive(), None, lambda m: 0.0, scores=scores, step=0.1, masks_out=walked)
    ours = mc.masks_for(scores.ravel(), (2, 5))
    assert len(walked) == len(ours) == 11
    for a, b in zip(walked, ours):
        np.testing.assert_array_equal(a["encoder"], b)


def test_masks_round_each_share_of_all_heads():
    masks = mc.masks_for(np.random.default_rng(1).random(144), (12, 12))
    assert [int(144 - m.sum()) for m in masks] == [round(p * 144) for p in mc.SHARES]
    for a, b in zip(masks, masks[1:]):  # nested: a head once pruned stays pruned
        assert (b <= a).all()


def test_predictions_along_runs_each_mask_once_and_resumes(tmp_path):
    calls = []

    def predict(mask):
        calls.append(mask.copy())
        return (mask.sum(1) > 2).astype(int)  # (L,) any per-mask prediction

    orders = {"a": np.arange(8.0), "b": np.arange(8.0)[::-1], "c": np.arange(8.0)}  # c repeats a
    first = mc.predictions_along(predict, orders, (2, 4), tmp_path)
    distinct = {m.tobytes() for name in orders for m in mc.masks_for(orders[name], (2, 4))}
    assert len(calls) == len(distinct)  # unpruned, all-pruned and order c's masks are not rerun
    for name, scores in orders.items():
        for pred, mask in zip(first[name], mc.masks_for(scores, (2, 4))):
            assert pred == predict(mask).tolist()
    calls.clear()
    assert (
        mc.predictions_along(lambda m: pytest.fail("resumed run recomputed a mask"), orders, (2, 4), tmp_path) == first
    )


def test_a_prunable_share_needs_every_interval_inside_the_margin():
    """Equivalence, not absence of evidence: a 5-point drop whose wide interval reaches 0 is not
    prunable at a 1-point margin; a tight interval inside ±1 point is."""
    wide, tight = {"delta": -0.05, "ci": [-0.1, 0.01]}, {"delta": -0.002, "ci": [-0.008, 0.004]}
    edge = {"delta": -0.005, "ci": [-0.011, 0.001]}  # reaches 0, and past the margin
    shares = [0.0, 0.1, 0.2, 0.3]
    assert michel_claims.equivalent_share(shares, [tight, tight, wide, tight], 0.01) == 0.1
    assert michel_claims.equivalent_share(shares, [tight] * 4, 0.01) == 0.3
    assert michel_claims.equivalent_share(shares, [tight, edge, tight, tight], 0.01) == 0.0
    assert michel_claims.equivalent_share(shares, [tight, tight, wide, tight], 0.1) == 0.3  # a 10-point margin


def test_step_deltas_are_paired_bootstrap_differences():
    rng = np.random.default_rng(0)
    gold, base = rng.integers(0, 2, 60), rng.integers(0, 2, 60)
    pred = np.where(rng.random(60) < 0.3, 1 - base, base)
    d = mc.step_deltas(lambda p, g: float(np.mean(p == g)), gold, [base, pred], base)
    assert d[0] == {"delta": 0.0, "ci": [0.0, 0.0], "p": 1.0}
    ref = stats.paired_bootstrap(lambda s, g: float(np.mean(s == g)), pred, base, gold)
    assert d[1]["delta"] == pytest.approx(np.mean(pred == gold) - np.mean(base == gold))
    assert d[1]["ci"] == list(ref["ci"])


def _loop_gain(metric, gold, pred: list[list], reference: list[list]) -> float:
    """The gain statistic written out: per system a loop over examples, then the means."""
    def score(column, r):
        return metric([int(g) for g in gold], [int(s[r]) for s in column])

    return (np.mean([score(pred, r) for r in range(len(pred[0]))])
            - np.mean([score(reference, r) for r in range(len(reference[0]))]))


@pytest.mark.parametrize("statistic, metric", [
    ("accuracy_gain", lambda g, p: sum(a == b for a, b in zip(g, p)) / len(g)),
    ("mcc_gain", lambda g, p: matthews_corrcoef(g, p))])
def test_gain_statistics_against_a_loop(statistic, metric):
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 2, 40)
    pred, ref = rng.integers(0, 2, (40, 2)), rng.integers(0, 2, (40, 5))
    fn = claims.STATISTICS[statistic][1]
    assert fn(gold, pred, ref) == pytest.approx(_loop_gain(metric, gold, pred.tolist(), ref.tolist()))
    one = rng.integers(0, 2, 40)  # a column of ints is one system
    assert fn(gold, one, ref) == pytest.approx(_loop_gain(metric, gold, one[:, None].tolist(), ref.tolist()))
    rows = [{"gold": int(g), "p": p, "r": r} for g, p, r in zip(gold, pred.tolist(), ref.tolist())]
    spec = {
        "statistic": statistic,
        "columns": {"gold": "gold", "pred": "p", "reference": "r"},
        "ci_method": "bootstrap",
    }
    columns = [gold, *pred.T, *ref.T]  # the same data as 1-D columns, one per system
    value, ci = stats.bootstrap_ci(lambda g, *c: fn(g, np.stack(c[:2], 1), np.stack(c[2:], 1)), *columns)
    assert claims.evaluate(rows, spec) == {"value": value, "ci": list(ci)}


def test_bootstrap_ci_resamples_examples_as_scipy_paired_does():
    """The index resampling of ``bootstrap_ci`` gives scipy's paired bootstrap of 1-D columns (the
    intervals every claim had before 2-D columns were allowed), for a corpus metric and a mean."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(5)
    gold, pred, v = rng.integers(0, 2, 120), rng.integers(0, 2, 120), rng.random(120)
    for fn, arrays in [(matthews_corrcoef, (gold, pred)), (np.mean, (v,))]:
        ref = bootstrap(arrays, lambda *xs: fn(*xs), n_resamples=1000, paired=True, vectorized=False,
                        method="percentile", rng=np.random.default_rng(0)).confidence_interval
        assert stats.bootstrap_ci(fn, *arrays) == (float(fn(*arrays)), (float(ref.low), float(ref.high)))


def _fake_curve_result(seed: int, n: int, randoms: int, rng) -> dict:
    """A curve stage's result: predictions that degrade as heads are pruned, slower by importance."""
    gold = rng.integers(0, 2, n)
    orders = {}
    for name, speed in [("importance", 0.5)] + [(f"random-{r}", 1.0) for r in range(randoms)]:
        preds = [np.where(rng.random(n) < speed * p, rng.integers(0, 2, n), gold) for p in mc.SHARES]
        preds[0] = gold.copy() if name == "importance" else orders["importance"][0]
        orders[name] = preds
    orders = {k: [mc.digits(x) for x in v] for k, v in orders.items()}
    return {"seed": seed, "gold": mc.digits(gold), "shares": list(mc.SHARES), "orders": orders,
            "importance_examples": 10}


@pytest.mark.parametrize("seeds", [(0,), (0, 1, 2)])
def test_claims_stage_recomputes_from_its_files(tmp_path, monkeypatch, seeds):
    # the curves' per-point intervals on 200 resamples (a Python metric call each): step_deltas at the
    # library's 10,000 is test_step_deltas_are_paired_bootstrap_differences; the claims keep theirs
    fewer = functools.partial(stats.paired_bootstrap, b=200)
    monkeypatch.setattr(mc, "stats", types.SimpleNamespace(paired_bootstrap=fewer))
    rng = np.random.default_rng(7)
    names = [f"michel.curves-m-cola-s{s}" for s in seeds]
    task = michel._tasks()["cola"]
    stage = pipeline.Stage("michel.m-cola", michel_claims.claims_stage("m", task, names, 0.01, 0.4, 0.5),
                           needs=tuple(names))
    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path, tmp_path / "work", tmp_path, stage=stage,
                           results={n: _fake_curve_result(s, 50, 5, rng) for n, s in zip(names, seeds)})
    result = stage.run(ctx)
    assert {c["id"] for c in result["claims"]} == {"michel-m-cola-prune40", "michel-m-cola-vs-random50"}
    for c in result["claims"]:
        again = claims.recompute(c, tmp_path)
        assert again["value"]["value"] == c["value"] and again["value"]["ci"] == c["ci"]
        assert again["baseline"]["value"] == c["baseline"]["value"] and again["baseline"]["ci"] == c["baseline"]["ci"]
        assert "status" not in c and c["seeds"] == len(seeds)
        assert c["measure"]["ci_method"] == ("seeds" if len(seeds) > 1 else "bootstrap")
    rows = claims.read_rows(tmp_path / result["curves"])
    assert len(rows) == 50 * len(seeds) and all(len(r["importance"]) == len(mc.SHARES) for r in rows)
    gold = [r["gold"] for r in rows if r["seed"] == seeds[0]]
    at40 = [int(r["importance"][4]) for r in rows if r["seed"] == seeds[0]]
    first = claims.read_rows(tmp_path / result["claims"][0]["predictions"])
    assert [r["importance"] for r in first if r["seed"] == seeds[0]] == at40  # the claim reads the 40 % point
    assert [r["gold"] for r in first if r["seed"] == seeds[0]] == gold
    assert (tmp_path / result["figures"][0]).is_file() and "| 40% |" in result["table"]


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    import jattn
    from jattn.training.finetune import save_classifier, with_classifier
    from tiny_encoders import save_tiny

    folder = tmp_path_factory.mktemp("michel")
    net = with_classifier(jattn.load(save_tiny(folder / "base", "bert-2x4", max_positions=128), use_cache=False), 2)
    return save_classifier(net, folder / "classifier")


def test_curves_stage_on_a_tiny_classifier(tiny_classifier, tmp_path, monkeypatch, data_set):
    """The stage's importance and predictions equal ``jattn.importance`` and the classifier's own
    predictions under each mask; a rerun after the record is lost reads the work folder."""
    import jattn
    from jattn.sweeps.pruning_curve import classification_predictions

    data_set("sst2")
    monkeypatch.setattr(common, "classifier", lambda ctx, model, task, seed: tiny_classifier)
    p = {**michel.params(pipeline.PROFILES["quick"]), "importance_examples": 6, "dev_examples": 10}
    stage = pipeline.Stage("michel.curves-tiny-sst2-s0", michel._curves_stage("tiny", "sst2", 0), params=p)
    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path, tmp_path / "work", tmp_path, stage=stage,
                           key=pipeline.keys([stage])[stage.name], progress=False)
    result = stage.run(ctx)
    net = jattn.load(tiny_classifier)
    imp_examples, dev = michel._slices("sst2", p)
    np.testing.assert_array_equal(result["importance"], jattn.importance(net, imp_examples, progress=False)["encoder"])
    predict = classification_predictions(net, [x for x, _ in dev])
    for name, scores in [("importance", np.ravel(result["importance"])), ("random-2", common.random_orders(8, 5)[2])]:
        for share, mask, got in zip(mc.SHARES, mc.masks_for(scores, (2, 4)), result["orders"][name]):
            assert got == mc.digits(predict(mask)), (name, share)
    assert result["gold"] == mc.digits([y for _, y in dev]) and len(result["orders"]) == 6
    assert json.loads((ctx.work() / "importance.json").read_text()) == result["importance"]
    again = stage.run(ctx)
    assert again["orders"] == result["orders"] and "importance" not in again["seconds"]


@pytest.mark.slow
def test_quick_profile_end_to_end(tmp_path, data_set):
    """``jattn reproduce michel --quick`` (fine-tunes its tiny MiniLMs first): every claim
    recomputes from its predictions file."""
    from jattn.io import manifest
    from jattn.reproduce import studies

    data_set("sst2"), data_set("cola")
    profile = pipeline.PROFILES["quick"]
    ctx = pipeline.Context(profile, tmp_path, tmp_path / ".work", manifest.data_dir(), progress=False)
    records = pipeline.run(studies.stages(profile, ("michel",)), ctx, log=lambda m: None)
    found = [c for r in records.values() if r["name"].startswith("michel.") for c in r["result"].get("claims", [])]
    assert len(found) == 4
    for c in found:
        again = claims.recompute(c, tmp_path)
        assert again["value"]["value"] == c["value"] and again["value"]["ci"] == c["ci"]


def test_mcc_statistic_is_sklearns():
    rng = np.random.default_rng(11)
    mcc = claims.STATISTICS["mcc"][1]
    for k, n in [(2, 9), (2, 527), (3, 300), (4, 50)]:
        gold, pred = rng.integers(0, k, n), rng.integers(0, k, n)
        assert mcc(gold, pred) == pytest.approx(matthews_corrcoef(gold, pred), rel=1e-12, abs=1e-15)
    assert (
        mcc(np.ones(20, int), rng.integers(0, 2, 20)) == 0.0 == matthews_corrcoef(np.ones(20, int), np.r_[0, [1] * 19])
    )
    assert mcc(gold, gold) == 1.0
