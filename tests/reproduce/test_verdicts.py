"""The decision rules of ``jattn.reproduce.verdicts`` on synthetic numbers: each says reproduced,
not reproduced and (where it has one) inconclusive or not applicable where it must, and the
judging of claims applies a study's rules (``judge_claims``); the cluster bootstrap of
``jattn.reproduce.claims`` resamples clusters, not rows."""

import numpy as np
import pytest

from jattn.reproduce import claims, verdicts


def test_directional_needs_the_paired_interval_on_the_claimed_side():
    assert verdicts.directional(0.3, (0.1, 0.5)).status == "reproduced"
    assert verdicts.directional(0.1, (-0.1, 0.3)).status == "not reproduced"
    assert "no difference detected" in verdicts.directional(0.1, (-0.1, 0.3)).reason
    assert "opposite" in verdicts.directional(-0.3, (-0.5, -0.1)).reason
    assert verdicts.directional(-0.3, (-0.5, -0.1), sign=-1).status == "reproduced"  # a claimed decrease
    assert verdicts.directional(0.3, (0.1, 0.5), sign=-1).status == "not reproduced"


def test_no_loss_is_one_sided_non_inferiority_and_a_gain_is_no_loss():
    assert verdicts.noninferior(0.001, (-0.004, 0.006), margin=0.01).status == "reproduced"
    assert verdicts.noninferior(0.015, (-0.006, 0.036), margin=0.01).status == "reproduced"  # a gain: no loss
    assert verdicts.noninferior(0.03, (0.02, 0.05), margin=0.01).status == "reproduced"  # TOST called this a failure
    loss = verdicts.noninferior(-0.03, (-0.05, -0.02), margin=0.01)  # the finding fails: a loss beyond the margin
    assert loss.status == "not reproduced" and verdicts.MDE in loss.reason
    wide = verdicts.noninferior(0.01, (-0.06, 0.08), margin=0.01)
    assert wide.status == "inconclusive" and "straddles" in wide.reason
    with pytest.raises(ValueError, match="margin"):
        verdicts.noninferior(0.0, (-0.1, 0.1), margin=0.0)


def test_a_negative_states_its_detectable_effect_and_is_underpowered_below_it():
    """(z_.975 + z_.8)·se = 2.80·se; nothing detected and a paper's effect below that is "inconclusive
    (underpowered)"; an effect in the opposite direction stays "not reproduced" whatever the power."""
    se = verdicts.standard_error((-0.0196, 0.0196))
    assert se == pytest.approx(0.01, rel=1e-4) and verdicts.detectable(se) == pytest.approx(0.0280, abs=1e-4)
    assert verdicts.detectable(se, tests=10) > verdicts.detectable(se) > verdicts.detectable(se, sides=1)
    weak = verdicts.directional(0.0, (-0.0196, 0.0196), paper=0.012)
    assert weak.status == verdicts.UNDERPOWERED and "compatible with the paper's effect" in weak.reason
    strong = verdicts.directional(0.0, (-0.0196, 0.0196), paper=0.05)
    assert strong.status == "not reproduced" and "0.028" in strong.reason and verdicts.MDE in strong.reason
    opposite = verdicts.directional(-0.1, (-0.12, -0.08), paper=0.001)
    assert opposite.status == "not reproduced" and "opposite" in opposite.reason
    assert "states no effect size" in verdicts.directional(0.0, (-0.1, 0.1)).reason
    assert f"{verdicts.POWER * 100:.0f} % power" in strong.reason
    passed = verdicts.Verdict("reproduced", "x", "y")
    assert verdicts.powered(passed, 1.0, paper=0.1) is passed  # only a negative carries the detectable effect


def test_the_cluster_robust_t_widens_with_few_clusters():
    """Ten clusters of 20 equal rows: the CR1 interval is the t(9) interval of the ten cluster means."""
    from scipy.stats import t

    means = np.random.default_rng(2).standard_normal(10)
    values, clusters = np.repeat(means, 20), np.repeat(np.arange(10), 20)
    value, ci, k = verdicts.cluster_t(values, clusters)
    half = t.ppf(0.975, 9) * np.sqrt(10 / 9) * means.std() / np.sqrt(10)
    assert k == 10 and value == pytest.approx(means.mean()) and ci == pytest.approx([value - half, value + half])



def test_cluster_t_refuses_a_single_cluster():
    with pytest.raises(ValueError, match="at least 2 clusters"):
        verdicts.cluster_t([0.1, 0.2, 0.3], ["one", "one", "one"])

def test_best_of_n_is_judged_against_the_maximum_of_n_null_effects_and_held_out_data():
    se = np.full(144, 0.02)
    maxima = (np.random.default_rng(0).standard_normal((4000, 144)) * se).max(1)  # (draws,) best of 144 null effects
    assert 0.045 < np.median(maxima) < 0.06  # E max of 144 N(0, 1) ≈ 2.5 standard errors
    confirmed = verdicts.directional(0.02, (0.01, 0.03))
    assert verdicts.best_of_n(0.2, maxima, confirmed, n=144, what="gain", se=0.02).status == "reproduced"
    noise = verdicts.best_of_n(0.05, maxima, confirmed, n=144, what="gain", se=0.02, paper=0.5)  # the finding fails
    assert noise.status == "not reproduced" and "null" in noise.reason and verdicts.MDE in noise.reason
    assert verdicts.best_of_n(0.05, maxima, confirmed, n=144, what="gain", se=0.02,
                              paper=0.01).status == verdicts.UNDERPOWERED
    unconfirmed = verdicts.best_of_n(0.2, maxima, verdicts.directional(0.0, (-0.01, 0.01)), n=144, what="gain",
                                     se=0.02)
    assert unconfirmed.status == "not reproduced" and "held out" in unconfirmed.reason
    with pytest.raises(ValueError, match="resolve"):
        verdicts.best_of_n(0.2, maxima[:10], confirmed, n=144, what="gain", se=0.02)


def test_holm_family_counts_every_test_of_the_family():
    one_seed = {f"L{i}": 0.5 for i in range(11)} | {"L3": 0.003}
    assert verdicts.holm_family(one_seed)["L3"]  # .003 ≤ .05 / 12
    three_seeds = {f"{k}/s{s}": (p if s == 0 else 0.5) for k, p in one_seed.items() for s in range(3)}
    assert not verdicts.holm_family(three_seeds)["L3/s0"]  # .003 > .05 / 36


def test_permutation_p_and_ordering():
    null = np.random.default_rng(0).standard_normal(999)
    assert verdicts.permutation_p(5.0, null) == pytest.approx(1 / 1000)
    assert verdicts.permutation_p(-5.0, null, sign=-1) == pytest.approx(1 / 1000)
    assert verdicts.permutation_p(0.0, null) > 0.3
    assert verdicts.ordering(0.99, what="x", gap_se=0.01).status == "reproduced"
    failed = verdicts.ordering(0.0, what="x", gap_se=0.01)
    assert failed.status == "not reproduced" and verdicts.MDE in failed.reason
    assert verdicts.ordering(0.5, what="x", gap_se=0.01).status == "inconclusive"


def test_not_applicable_and_context_and_unknown_status():
    assert verdicts.not_applicable("the sink is [CLS]").status == "not applicable"
    assert verdicts.context("a classifier's score").status == "context"
    with pytest.raises(ValueError, match="partly"):
        verdicts.Verdict("partly", "x", "y")


class _Rules:
    @staticmethod
    def judge(claim, evidence):
        rows = evidence.rows(claim)
        return verdicts.directional(claim["value"], claim["ci"]) if rows else verdicts.context("no rows")

    @staticmethod
    def describe(claim):
        return {"paper": "Table 1: 34.5", "differs": "a smaller model", "finding": "heads do x", "on": "a model"}


def test_judge_claims_sets_status_rule_reason_and_the_declarations(tmp_path):
    from jattn.reproduce import studies

    assert isinstance(_Rules, studies.Rules) and not isinstance(object(), studies.Rules)
    claims.write_rows(tmp_path / "p.jsonl", [{"x": 1}])
    claim = {"id": "a", "study": "toy", "value": 0.2, "ci": [0.1, 0.3], "predictions": "p.jsonl", "paper": "old"}
    evidence = verdicts.Evidence({"a": claim}, {}, tmp_path)
    [judged] = verdicts.judge_claims([claim], evidence, {"toy": _Rules})
    assert (judged["status"], judged["rule"], judged["paper"], judged["differs"]) == (
        "reproduced", "directional", "Table 1: 34.5", "a smaller model")
    with pytest.raises(ValueError, match="registered no rules"):
        verdicts.judge_claims([{**claim, "study": "other"}], evidence, {"toy": _Rules})

    class _Undeclared(_Rules):
        @staticmethod
        def describe(claim):
            return {"paper": "Table 1: 34.5", "differs": "a smaller model"}

    with pytest.raises(ValueError, match="gives no finding, on"):
        verdicts.judge_claims([claim], evidence, {"toy": _Undeclared})

    class _Bare(_Rules):
        @staticmethod
        def judge(claim, evidence):
            return verdicts.Verdict("not reproduced", "directional", "no difference")

    with pytest.raises(ValueError, match="minimum detectable effect"):
        verdicts.judge_claims([claim], evidence, {"toy": _Bare})


def test_the_cluster_bootstrap_resamples_clusters_not_rows():
    """Ten documents of 50 rows each, every row of a document equal: resampling rows makes the
    interval of the mean as if there were 500 independent values; resampling documents, as if 10."""
    rng = np.random.default_rng(1)
    doc_value = rng.standard_normal(10)
    rows = [{"document": d, "v": float(doc_value[d])} for d in range(10) for _ in range(50)]
    spec = {"statistic": "mean", "columns": {"value": "v"}, "ci_method": "bootstrap"}
    by_row = claims.evaluate(rows, spec)
    by_doc = claims.evaluate(rows, {**spec, "cluster": "document"})
    assert by_doc["value"] == by_row["value"]
    width = lambda r: r["ci"][1] - r["ci"][0]  # noqa: E731
    assert width(by_doc) > 4 * width(by_row)  # √50 ≈ 7 in expectation
    paired = claims.evaluate([{**r, "w": r["v"] + 1} for r in rows],
                             {**spec, "ci_method": "paired", "against": {"value": "w"}, "cluster": "document"})
    assert paired["value"] == pytest.approx(-1) and paired["ci"] == pytest.approx([-1, -1]) and paired["p"] == 0


def test_the_cluster_spearman_from_counts_is_the_spearman_of_each_resamples_rows():
    """The type-cluster interval of a frequency ρ is computed from each resample's row counts; it
    equals ρ recomputed on each resample's concatenated rows (same draws, same quantiles)."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, 300)
    rows = [{"id": int(i), "x": float(np.round(rng.normal(i / 10, 1), 1)), "y": int(i % 7)} for i in ids]
    got = claims.evaluate(rows, {"statistic": "spearman", "columns": {"x": "x", "y": "y"}, "ci_method": "bootstrap",
                                 "cluster": "id"})
    first = list(dict.fromkeys(int(i) for i in ids))  # clusters in order of first appearance
    members = [np.flatnonzero(ids == c) for c in first]
    x, y = np.array([r["x"] for r in rows]), np.array([r["y"] for r in rows])
    picks = np.random.default_rng(0).integers(0, len(first), (1000, len(first)))
    rhos = [spearmanr(x[ix], y[ix]).statistic for ix in (np.concatenate([members[j] for j in p]) for p in picks)]
    np.testing.assert_allclose(got["ci"], np.quantile(rhos, [0.025, 0.975]), rtol=1e-9, atol=1e-12)
    assert got["value"] == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
