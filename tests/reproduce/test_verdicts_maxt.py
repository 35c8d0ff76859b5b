"""The Westfall–Young max-T null of the Kovaleva best-of-N and heads / layers families
(``jattn.reproduce.verdicts.step_down_max_t``, ``experiments/kovaleva2019/maxt.py``): calibrated on
many correlated null heads, where the independent-normal null it replaces is not; a planted head
is detected; a finding that fails is not reproduced (or underpowered)."""

import numpy as np
import pytest
from scipy.stats import binom

from experiments.kovaleva2019 import maxt as M
from experiments.kovaleva2019 import verdicts as K
from jattn.reproduce import verdicts as V
from jattn.reproduce.claims import evaluate, write_rows

CONFIRMED = V.Verdict("reproduced", "directional", "held out")


def sweeps(rng, n=300, heads=30, seeds=2, planted: dict | None = None):
    """Binary predictions with no head effect: a shared 30 % of fragile examples, the base right on
    half of them in each seed (90 % elsewhere), each head flipping a fragile example with its shared
    propensity (correlated heads, E Δ = 0). ``planted`` {seed: k}: head 5 also fixes k base errors.
    Returns gold (n,), base (S, n), preds (S, U, n)."""
    gold = rng.integers(0, 2, n)
    fragile = rng.random(n) < 0.3  # (n,)
    propensity = rng.beta(1, 3, n) * fragile  # (n,)
    right = np.where(fragile[None], rng.random((seeds, n)) < 0.5, rng.random((seeds, n)) < 0.9)  # (S, n)
    base = np.where(right, gold, 1 - gold)
    preds = np.where(rng.random((seeds, heads, n)) < propensity, 1 - base[:, None], base[:, None])  # (S, U, n)
    for s, k in (planted or {}).items():
        wrong = np.flatnonzero(~right[s] & ~fragile)[:k]
        preds[s, 5] = base[s]
        preds[s, 5, wrong] = gold[wrong]
    return gold, base, preds


def test_the_max_t_null_is_calibrated_on_correlated_null_heads_and_the_independent_one_is_not():
    rng, draws = np.random.default_rng(0), 400
    best, family, independent = [], [], []
    for k in range(200):
        gold, base, preds = sweeps(rng)
        delta, null = M.joint_null(gold, base, preds, "accuracy", resamples=draws, seed=k)  # (S, U), (B, S, U)
        observed, maxima = float(delta.max(1).mean()), null.max(2).mean(1)  # the claim's value, (B,)
        best.append((1 + (maxima >= observed - 1e-12).sum()) / (1 + draws))  # best_of_n's p
        v = V.best_of_n(observed, maxima, CONFIRMED, n=30, what="heads", se=0.01)
        assert (v.status == "reproduced") == (best[-1] < 0.05)
        family.append(V.step_down_max_t(np.abs(delta.ravel()), np.abs(null.reshape(draws, -1))).min())
        normal = np.random.default_rng(k).standard_normal(null.shape) * null.std(0)  # (B, S, U) independent heads
        independent.append(np.mean(normal.max(2).mean(1) >= delta.max(1).mean()))
    best, family, independent = map(np.asarray, (best, family, independent))
    for alpha in (0.05, 0.25):  # the share of the 200 null datasets rejected: ~alpha, as a uniform p gives
        lo, hi = binom.interval(0.99, 200, alpha)
        assert lo <= (best < alpha).sum() <= hi, (alpha, (best < alpha).mean())
    lo, hi = binom.interval(0.99, 200, 0.05)
    assert lo <= (family < 0.05).sum() <= hi, (family < 0.05).mean()  # family-wise error of the step-down
    lo, _ = binom.interval(0.99, 200, 0.25)
    assert (independent < 0.25).sum() < lo  # independent N(0, se²) heads: far too few rejections


def test_step_down_adjusted_p_are_monotone_in_the_evidence_and_need_the_resolution():
    rng = np.random.default_rng(1)
    null = np.abs(rng.standard_normal((2000, 5)))  # (B, m)
    p = V.step_down_max_t([4.0, 0.1, 2.5, 3.0, 0.0], null)
    assert p[0] < 0.05 and p[4] == 1.0 and p[0] <= p[3] <= p[2] <= p[1] <= p[4]
    assert p[3] <= (1 + (null.max(1) >= 3.0).sum()) / 2001  # a step down: at most the single-step max-T p
    with pytest.raises(ValueError, match="cannot resolve p below"):
        V.step_down_max_t([1.0], null[:10, :1])


def record(gold, base, preds, seed, task="sst2") -> dict:
    """A ``kovaleva.sweep-*`` stage's result: 2 layers × (U / 2) heads, each layer flipping its heads' union."""
    U, n = preds.shape  # (U, n) one seed
    flips = [np.flatnonzero(p != base).tolist() for p in preds]
    layers = [sorted(set().union(*flips[:U // 2])), sorted(set().union(*flips[U // 2:]))]
    return {"model": "x", "task": task, "seed": seed, "index": list(range(n)), "heads_per_layer": U // 2,
            "gold": gold.tolist(), "base": base.tolist(), "head_flips": flips, "layer_flips": layers}


def study(tmp_path, name: str, planted: dict | None, seeds=3, heldout=20):
    """The claims of one synthetic model × task and their Evidence: the sweep records per seed, the
    heads / layers families, the in-sample best head and its held-out twin."""
    gold, base, preds = sweeps(np.random.default_rng(2), heads=24, seeds=seeds, planted=planted)
    results = {f"kovaleva.sweep-{name}-s{s}": record(gold, base[s], preds[s], s) for s in range(seeds)}
    seed_rows = [{"seed": s} for s in range(seeds)]

    def claim(kind, rows, **extra):
        id = f"kovaleva-{name}-{kind}"
        write_rows(tmp_path / f"p/{id}.jsonl", rows)
        return {"id": id, "study": "kovaleva", "predictions": f"p/{id}.jsonl", "unit": "Δ accuracy", **extra}

    delta = (preds == gold).mean(2) - (base == gold).mean(1, keepdims=True)  # (S, U)
    held_rows = [{"index": i, "seed": s, "gold": 1, "pred": 1 if i < heldout else int(i >= 40), "base": int(i >= 40)}
                 for s in range(seeds) for i in range(200)]
    spec = {"statistic": "accuracy_gain", "columns": {"gold": "gold", "pred": "pred", "reference": "base"},
            "ci_method": "seeds_examples"}
    got = evaluate(held_rows, spec)
    claims = [claim("heads-holm", seed_rows), claim("layers-holm", seed_rows),
              claim("best-head-insample", seed_rows, value=float(delta.max(1).mean())),
              claim("best-head-heldout", held_rows, measure=spec, value=got["value"], ci=got["ci"])]
    return {c["id"].split(name + "-")[1]: c for c in claims}, V.Evidence({c["id"]: c for c in claims}, results,
                                                                          tmp_path)


def test_a_planted_head_is_detected_in_sample_and_by_the_family(tmp_path):
    claims, ev = study(tmp_path, "x-sst2", planted={0: 30, 1: 30, 2: 30})
    v = K.judge(claims["heads-holm"], ev)
    assert v.status == "reproduced" and v.rule == "max-T" and "0:5 (seed 0)" in v.reason, v.reason
    v = K.judge(claims["best-head-insample"], ev)
    assert v.status == "reproduced" and "Westfall–Young" in v.reason, v.reason


def test_a_failing_finding_is_not_reproduced_or_underpowered(tmp_path):
    claims, ev = study(tmp_path, "x-sst2", planted=None)
    for kind in ("heads-holm", "layers-holm", "best-head-insample"):
        v = K.judge(claims[kind], ev)
        assert v.status in ("not reproduced", V.UNDERPOWERED) and "minimum detectable effect" in v.reason, v.reason
    claims, ev = study(tmp_path, "y-sst2", planted={0: 30, 1: 30, 2: 30}, heldout=0)  # best head not held out
    v = K.judge(claims["best-head-insample"], ev)
    assert v.status in ("not reproduced", V.UNDERPOWERED) and "held out" in v.reason, v.reason


def test_an_improvement_must_replicate_over_seeds(tmp_path):
    claims, ev = study(tmp_path, "x-sst2", planted={0: 30, 1: 0, 2: 0})  # seed 0 only: Δ ≤ 0 elsewhere
    v = K.judge(claims["heads-holm"], ev)
    assert v.status == "not reproduced" and "another seed" in v.reason, v.reason
    claims, ev = study(tmp_path, "y-sst2", planted={0: 30}, seeds=1)
    assert K.judge(claims["heads-holm"], ev).status == "inconclusive"


def test_the_null_needs_the_claims_own_sweep_records(tmp_path):
    claims, ev = study(tmp_path, "x-sst2", planted=None)
    with pytest.raises(ValueError, match="jattn reproduce kovaleva"):
        K.judge(claims["heads-holm"], V.Evidence(ev.claims, {}, tmp_path))
    off = {**claims["best-head-insample"], "value": 0.5}
    with pytest.raises(ValueError, match="not the seed mean of the best Δ"):
        K.judge(off, ev)
