"""Decision rules of the patching study (activation patching: Vig et al. 2020, Wang et al. 2022;
attribution patching: Nanda 2023, Syed et al. 2023; on the coreference heads of Clark et al.
2019); the rules are those of ``jattn.reproduce.verdicts``. α = .05. Written after the records
they judge (``PROVENANCE``; ``docs/STATISTICS.md``, "Provenance"). A "not reproduced" by a
permutation over heads states the smallest ρ the test detects with 80 % power: the null's 95th
percentile plus z_0.8 null standard deviations (``powered``).

- ``patching-<m>-behaviour`` (the metric reflects coreference): Δ = accuracy of "m > 0" − accuracy
  of the nearest-name rule on the same clean pairs, paired bootstrap (B = 1000) →
  ``directional`` (reproduced when the 95 % interval of Δ lies above 0; never two intervals
  overlapping).

- ``patching-<m>-corruption`` (the corruption moves the metric): the claim's own paired Δ = mean
  m(clean) − m(corrupted) and its 95 % interval → ``directional``.
- ``patching-<m>-clark`` (heads with a larger patching effect are Clark's weight-based coreference
  heads): Spearman ρ over heads between the mean exact patching effect and the mean weight-based
  score; the test is a permutation over heads (``PERMUTATIONS`` permutations of the score map,
  ``permutation_p``), one-sided in ``PREDICTED_SIGN``: reproduced when p < .05. The sign: a head
  that attends to the antecedent and carries the coreference restores the lean to the antecedent
  when patched clean into the corrupted run, a positive effect, so the prediction is ρ > 0 on the
  *signed* effect. ρ on |effect| (the head matters, in either direction) is reported beside it
  with its own permutation p and bootstrap interval, not judged: a head whose clean
  activation pushes the metric away from the antecedent does not implement the behaviour.
- ``patching-<m>-attribution`` (attribution patching ranks heads like exact patching): the claim's
  ρ over heads and its bootstrap interval → ``directional`` (reproduced when the
  interval lies above 0); the permutation p over heads is reported beside it.

Every interval of the GAP claims resamples GAP's Wikipedia pages, the document a pair's paragraph
comes from (``STATISTICS.md`` §"Resampling unit"; a page gives one or a few pairs), with the pairs
of each page drawn (``resample_weights``); the SST-2 and translation pairs, one sentence each, are
resampled as pairs.

The SST-2 pairs (``experiments.patching.sentiment``: one sentiment word swapped for its antonym,
the classifier's logit difference m read from its output head) and the translation pairs
(``experiments.patching.gender``: the source's man/woman noun swapped, the output's logit
difference of the English word against its counterpart) take the same rules:
``patching-<m>-sst2-behaviour`` (Δ = accuracy of m > 0 − the train majority class, paired),
``patching-translation-gender-behaviour`` (Δ = accuracy of m > 0 − always the gender more frequent
in the training captions, paired), ``-corruption`` and ``-attribution`` as above, and

- ``patching-<m>-sst2-hidden`` (a hidden-state metric ranks heads as the output head does):
  Spearman ρ over heads between the mean exact effects under the hidden-state metric and under the
  logit difference. Reproduced when both hold: the bootstrap interval over pairs (recomputing both
  means) lies above 0, and the one-sided permutation p over heads is below .05 — the interval
  treats the heads as fixed, so two unrelated maps of a few dozen heads can give a narrow interval
  away from 0; the permutation asks whether the agreement exceeds a chance pairing of heads. ρ of
  |effect| under both (with its bootstrap interval) is reported beside it, not judged. The two
  models' hidden-state claims agree near-perfectly by construction (a classifier's logit
  difference is a linear read-out of the hidden state it patches): ``describe`` files them under
  one finding, counted once in the headline.
"""

from __future__ import annotations

import sys

import numpy as np

from jattn import stats
from jattn.reproduce import claims as claim_stats
from experiments import papers
from experiments.patching.resampling import resample_weights
from jattn.reproduce import studies
from jattn.reproduce.verdicts import ALPHA, POWER, Evidence, Verdict, directional, permutation_p, powered

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28), after the patching records they "
              "judge (first committed in e2fca12, 2026-11-26)")
PREDICTED_SIGN = +1  # the signed effect of Clark's heads: patching them clean restores the lean to the antecedent
PERMUTATIONS = 10_000  # head permutations: p in steps of 1e-4, far below α = .05


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank)."""
    from scipy.stats import rankdata

    return rankdata(a, axis=-1)


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r of each row of ``a`` with the matching row of ``b`` (broadcast), (..., K) -> (...)."""
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


def head_rho_null(x: np.ndarray, y: np.ndarray, draws: int = PERMUTATIONS, seed: int = stats.SEED) -> np.ndarray:
    """(draws,) Spearman ρ of the per-head values ``x`` (K,) against ``y`` (K,) with the heads of
    ``y`` permuted: the null of no association over exchangeable heads."""
    rx, ry = _ranks(x), _ranks(y)
    shuffled = np.random.default_rng(seed).permuted(np.tile(ry, (draws, 1)), axis=1)  # (draws, K)
    return _pearson_rows(shuffled, rx[None])


def head_rho_bootstrap(x: np.ndarray, y: np.ndarray, transform=lambda m: m, clusters=None, b: int = stats.B,
                       level: float = 0.95) -> list[float]:
    """Percentile interval of ρ(transform(mean over pairs of x), transform(mean of y)) over
    resamples of the pairs (or of their ``clusters``: ``resample_weights``), x and y (n, K)."""
    w = resample_weights(len(x), clusters, b).astype(np.float64)
    w /= w.sum(1, keepdims=True)  # (b, n) each resample's weight on each pair
    rho = _pearson_rows(_ranks(transform(w @ x)), _ranks(transform(w @ y)))  # (b,)
    return [float(q) for q in np.quantile(rho, [(1 - level) / 2, (1 + level) / 2])]


def clusters(claim: dict, rows: list[dict]) -> list | None:
    """Each row's cluster when the claim resamples clusters (``"cluster"`` in its measure), else None."""
    column = claim["measure"].get("cluster")
    return [r[column] for r in rows] if column else None


def resampled(claim: dict, evidence: Evidence) -> str:
    """What the claim's intervals resample, in words."""
    groups = clusters(claim, evidence.rows(claim)) if claim["measure"].get("cluster") else None
    return f"{len(set(groups))} GAP pages resampled" if groups else "pairs resampled"


def _maps(claim: dict, rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    cols = claim["measure"]["columns"]
    return tuple(np.asarray([r[cols[a]] for r in rows], np.float64) for a in ("x", "y"))  # (n, K) each


def _rho(x: np.ndarray, y: np.ndarray) -> float:
    return float(_pearson_rows(_ranks(x), _ranks(y)))


def null_mde(null: np.ndarray) -> float:
    """The smallest statistic a one-sided permutation test at α detects with ``POWER``: the null's
    (1 − α) quantile plus z_POWER null standard deviations."""
    from statistics import NormalDist

    return float(np.quantile(null, 1 - ALPHA) + NormalDist().inv_cdf(POWER) * np.std(null))


def judge_clark(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    effect, score = _maps(claim, rows)
    mean_effect, mean_score = effect.mean(0), score.mean(0)
    signed, absolute = _rho(mean_effect, mean_score), _rho(np.abs(mean_effect), mean_score)
    null = head_rho_null(mean_effect, mean_score)
    p = permutation_p(signed, null, sign=PREDICTED_SIGN)
    p_abs = permutation_p(absolute, head_rho_null(np.abs(mean_effect), mean_score), sign=PREDICTED_SIGN)
    ci_abs = head_rho_bootstrap(effect, score, np.abs, clusters(claim, rows))
    said = (
        f"signed effect: ρ = {signed:+.3f} [{claim['ci'][0]:+.3f}, {claim['ci'][1]:+.3f}] "
        f"({resampled(claim, evidence)}), one-sided permutation p = {p:.3g} over {effect.shape[1]} heads (predicted "
        f"ρ > 0); |effect| (not judged): ρ = {absolute:+.3f} [{ci_abs[0]:+.3f}, {ci_abs[1]:+.3f}], permutation "
        f"p = {p_abs:.3g}"
    )
    if p < ALPHA:
        return Verdict("reproduced", "permutation", said)
    return powered(Verdict("not reproduced", "permutation", said), null_mde(null))


def judge_attribution(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    x, y = _maps(claim, rows)
    p = permutation_p(claim["value"], head_rho_null(x.mean(0), y.mean(0)))
    verdict = directional(claim["value"], claim["ci"],
                          what=f"ρ(attribution, exact) over heads ({resampled(claim, evidence)})")
    return Verdict(verdict.status, verdict.rule, f"{verdict.reason}; permutation p over {x.shape[1]} heads = {p:.3g}")


def judge_hidden(claim: dict, evidence: Evidence) -> Verdict:
    rows = evidence.rows(claim)
    x, y = _maps(claim, rows)
    null = head_rho_null(x.mean(0), y.mean(0))
    p = permutation_p(claim["value"], null)
    absolute, ci_abs = _rho(np.abs(x.mean(0)), np.abs(y.mean(0))), head_rho_bootstrap(x, y, np.abs,
                                                                                      clusters(claim, rows))
    verdict = directional(claim["value"], claim["ci"], what="ρ(hidden-state effect, logit-difference effect) over "
                                                            f"heads ({resampled(claim, evidence)})")
    status = verdict.status if p < ALPHA else "not reproduced"
    said = (f"{verdict.reason}; one-sided permutation p over {x.shape[1]} heads = {p:.3g}"
            f"{'' if p < ALPHA else ' (not below .05: a chance association of the heads)'}; |effect| under both "
            f"(not judged): ρ = {absolute:+.3f} [{ci_abs[0]:+.3f}, {ci_abs[1]:+.3f}]")
    if status == "not reproduced" and "minimum detectable" not in said:
        return powered(Verdict(status, "directional and permutation", said), null_mde(null))
    return Verdict(status, "directional and permutation", said)


def judge_behaviour(claim: dict, evidence: Evidence) -> Verdict:
    cols, base = claim["measure"]["columns"], claim["baseline_measure"]["columns"]
    rows, cluster = evidence.rows(claim), claim["measure"].get("cluster")
    t = claim_stats.evaluate(rows, {"statistic": claim["measure"]["statistic"], "columns": cols, "ci_method": "paired",
                                    "against": {"pred": base["pred"]}, **({"cluster": cluster} if cluster else {})})
    return directional(t["value"], t["ci"], what=f"accuracy of m > 0 − {claim['baseline']['name']} (paired, "
                                                 f"{resampled(claim, evidence)})")


def judge_corruption(claim: dict, evidence: Evidence) -> Verdict:
    return directional(claim["value"], claim["ci"], what=f"mean m clean − corrupted (paired, "
                                                         f"{resampled(claim, evidence)})")


JUDGES = {"behaviour": judge_behaviour, "corruption": judge_corruption, "clark": judge_clark,
          "attribution": judge_attribution, "hidden": judge_hidden}

DIFFERS = {  # (pairs, claim type) -> what differs from the paper
    ("gap", "behaviour"): "{model}, a sentence encoder without an MLM head: the behaviour is a dot-product metric on "
                          "final hidden states, not a prediction, on 160 GAP development pairs instead of CoNLL-2012; "
                          "Clark's number is one head's attention, not the model's behaviour.",
    ("gap", "corruption"): "no paper number: the corruption swaps the antecedent's name for an other-gender GAP name "
                           "of equal word pieces, on 160 GAP development pairs, {model} final hidden states.",
    ("gap", "clark"): "Clark's heads were named from bert-base's weights on CoNLL-2012; here each of {model}'s heads "
                      "is patched (exact activation patching, a metric on final hidden states without an MLM head) on "
                      "160 GAP pairs and its weight-based score computed on the same pairs; no head is selected.",
    ("gap", "attribution"): "attribution patching was compared with activation patching on language-model logits "
                            "(Nanda 2023; Syed et al. 2023); here on {model}'s heads with a metric on final hidden "
                            "states, 160 GAP pairs.",
    ("sst2", "behaviour"): "no paper number: {model} fine-tuned on SST-2 (seed 0), its accuracy on the clean "
                           "sentences of the pairs (one sentiment word of a fixed antonym list each).",
    ("sst2", "corruption"): "no paper number: one sentiment word swapped for its antonym (equal word pieces), "
                            "{model}'s SST-2 classifier, the output head's logit difference.",
    ("sst2", "attribution"): "attribution patching was compared with activation patching on language-model logits "
                             "(Nanda 2023; Syed et al. 2023); here on the logit difference of {model}'s SST-2 "
                             "classifier, one seed.",
    ("sst2", "hidden"): "no paper compares the two: the hidden-state metric is this study's own (the first position's "
                        "final vector on the clean − corrupted direction), beside the output head's logit difference "
                        "that Heimersheim & Nanda 2024 recommend; {model}'s SST-2 classifier, one seed.",
    ("gender", "behaviour"): "no paper number: {model} trained here (one seed), on Multi30k test captions whose "
                             "French source names one man, woman, boy or girl; the output's logit difference between "
                             "the reference's word and its other-gender counterpart.",
    ("gender", "corruption"): "no paper number: the source's noun (and the words agreeing with it) swapped for the "
                              "other gender's, {model}, teacher-forced on the reference.",
    ("gender", "attribution"): "attribution patching was compared with activation patching on language-model logits "
                               "(Nanda 2023; Syed et al. 2023); here on a translation model's encoder, decoder and "
                               "cross-attention heads ({model}), its output's logit difference, one seed.",
}


def _pairs(claim: dict) -> str:
    """Which pairs a claim is on: "gap" (patching-<model>-<type>), "sst2" (patching-<model>-sst2-<type>)
    or "gender" (patching-translation-gender-<type>)."""
    return next((k for k in ("sst2", "gender") if f"-{k}-" in claim["id"]), "gap")


def _kind(claim: dict) -> str:
    kind = claim["id"].rsplit("-", 1)[1]
    if kind not in JUDGES:
        raise ValueError(f"{claim['id']}: no patching rule for this claim type")
    return kind


def judge(claim: dict, evidence: Evidence) -> Verdict:
    """The claim's verdict by the rule of its type (the module docstring)."""
    return JUDGES[_kind(claim)](claim, evidence)


FINDINGS = {"behaviour": "the metric reads the behaviour: it beats the trivial rule",
            "corruption": "the corruption moves the metric",
            "clark": "heads with larger patching effects are Clark's weight-based coreference heads",
            "attribution": "attribution patching ranks heads like exact patching",
            "hidden": "a hidden-state metric ranks heads like the output's logit difference (near-identical by "
                      "construction on a classifier; both models one finding)"}


def describe(claim: dict) -> dict[str, str]:
    model = claim["id"].split("-")[1]
    name = {"mpnet": "all-mpnet-base-v2", "minilm": "all-MiniLM-L6-v2",
            "translation": "the 6+6 × 8-head Multi30k fr→en model"}.get(model, model)
    on = {"gap": "{} GAP", "sst2": "{} SST-2", "gender": "translation gender"}[_pairs(claim)].format(
        {"mpnet": "MPNet", "minilm": "MiniLM"}.get(model, model))
    if _kind(claim) == "hidden":
        on = "SST-2, MiniLM and MPNet"
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[_pairs(claim), _kind(claim)].format(model=name),
            "finding": FINDINGS[_kind(claim)], "on": on}


studies.register_rules("patching", sys.modules[__name__])
