"""Decision rules of the Kovaleva study (Kovaleva, Romanov, Rogers and Rumshisky 2019, "Revealing
the Dark Secrets of BERT"); the tests are ``jattn.reproduce.verdicts``'. Written after the records
they judge (``PROVENANCE``; ``docs/STATISTICS.md``, "Provenance"). Every "not reproduced" states the
minimum detectable effect of its test at 80 % power beside the paper's (the largest single-head
gain, 1.2 points; the layer gain, 3.2 points: ``experiments.papers.effect``) and is "inconclusive
(underpowered)" where nothing was detected and the paper's effect lies below it.

claim type → test → verdict (α = .05 throughout):

- ``*-best-head-insample`` ("disabling the best single head raises the dev score", Fig. 9, the
  head chosen and reported on the same dev set) → Westfall–Young max-statistic null
  (``experiments.kovaleva2019.maxt``): B = 10,000 resamples of the dev examples, one index draw
  shared by all N = L·H heads (72 MiniLM, 144 MPNet) and all seeds, each head's Δ* − Δ centred
  at its observed Δ (no head has an effect), the maximum over heads per seed averaged over the
  seeds as the claim's value (the mean over seeds of each seed's best Δ) is → ``best_of_n``:
  p = (1 + #{null ≥ observed}) / (1 + B), reproduced only when p < .05 *and* the held-out twin
  is reproduced; otherwise not reproduced. The detectable effect: the null's 95th percentile
  plus z_0.8 head standard errors (the seeds' median, / √seeds).
- ``*-best-head-heldout`` (the head selected on one half of dev, Δ on the other half) →
  ``directional`` on the claim's own interval, the seeds × examples percentile bootstrap of the
  seed-mean Δ (``ci_method = "seeds_examples"``: seeds and report examples resampled
  independently, Owen 2007's pigeonhole bootstrap, the seeds sharing the examples), 95 % →
  reproduced when the interval lies above 0.
- ``*-heads-holm`` / ``*-layers-holm`` ("some heads / layers improve when disabled", Fig. 9-10)
  → Westfall–Young step-down max-T (``step_down_max_t``) over every test of the family, seeds
  included (L·H or L units × the seeds), on the same joint resamples (two-sided: |Δ* − Δ|
  against |Δ|; adjusted p resolved to 1e-4, below α = .05, the threshold it is compared with;
  Holm on the rows' bootstrap p needed α / 720 = 6.9e-5, below their 1 / 10,000 resolution) →
  reproduced when some unit improves (p̃ < .05, Δ > 0) *and* the same unit's Δ is > 0 in every
  other seed; not reproduced when none improves or the improvement does not replicate in
  direction; inconclusive when a unit improves but the family has one seed (replication
  untestable). The detectable effect: the first step's critical |Δ| (the 95th percentile of
  the maximum over the family) plus z_0.8 times the family's median standard error. The
  claim's value (the share changed after Holm) is the stage's and stays.
- ``*-structured-share`` (the four structured types cover a large share of the maps, Fig. 2) →
  context: a descriptive share; its "uniform attention" baseline holds by construction (the
  reason says why).
- ``*-finetune-change`` ("the last two layers change most under fine-tuning", Fig. 5) →
  ``ordering``: the share of B = ``B_ORDER`` bootstrap resamples of the fine-tuning seeds × the
  dev examples (pigeonhole, as the held-out best head's) in which the two last layers have the two
  lowest mean cosines to the pretrained maps (≥ 95 % reproduced, ≤ 5 % not reproduced,
  inconclusive between).
- ``kovaleva-rules-held-out`` / ``kovaleva-cnn-held-out`` (the instruments labelling the pattern
  types; the paper's CNN from 400 hand-labelled maps) → ``directional``: paired bootstrap Δ of
  held-out agreement with the hand labels against the fitting fold's majority class, 95 % →
  reproduced when the interval lies above 0: the instrument labels better than chance.
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.stats import norm

from jattn.reproduce import claims as C
from experiments import papers
from experiments.papers import effect
from jattn.reproduce import studies
from experiments.kovaleva2019 import maxt as M
from jattn.reproduce.verdicts import (ALPHA, POWER, Evidence, Verdict, best_of_n, context, directional, ordering,
                                      powered, step_down_max_t)

PROVENANCE = ("post hoc: these rules were first committed in 170b1f4 (2026-11-28), after the Kovaleva records they "
              "judge (first committed in 05f91bd, 2026-11-26)")
__all__ = ["describe", "judge"]

B_ORDER = 2_000  # example resamples of the layer ordering: a share of 95 % resolved to ±0.5 %
ORDER_LEVEL = 0.95  # the ordering must hold in 95 % of resamples (the bootstrap analogue of α = .05)


def _kind(claim_id: str) -> str:
    for kind in ("best-head-insample", "best-head-heldout", "heads-holm", "layers-holm", "structured-share",
                 "finetune-change", "rules-held-out", "cnn-held-out"):
        if claim_id.endswith(kind):
            return kind
    raise ValueError(f"kovaleva claim {claim_id!r} has no decision rule")


def _twin(claim: dict, evidence: Evidence, kind: str, to: str) -> dict:
    return evidence.claims[claim["id"][: -len(kind)] + to]


def _heldout(claim: dict, evidence: Evidence) -> Verdict:
    how = "seeds × examples bootstrap" if claim["measure"]["ci_method"] == "seeds_examples" else "paired bootstrap"
    return directional(claim["value"], claim["ci"], what=f"held-out {claim['unit']} ({how})",
                       paper=effect(claim["id"]))


def _insample(claim: dict, evidence: Evidence) -> Verdict:
    fam = M.family(evidence, claim, "heads")
    S, U = fam.delta.shape
    observed = float(fam.delta.max(1).mean())  # the seed mean of each seed's best Δ
    if abs(observed - claim["value"]) > 1e-9:
        raise ValueError(f"{claim['id']}: its value {claim['value']:.6g} is not the seed mean of the best Δ in the "
                         f"sweep records ({observed:.6g}): the records are not those it was computed from. Fix: run "
                         "`jattn reproduce kovaleva`")
    maxima = fam.null.max(2)  # (B, S) each seed's best centred Δ* − Δ on every joint resample
    held = _heldout(_twin(claim, evidence, "best-head-insample", "best-head-heldout"), evidence)
    v = best_of_n(observed, maxima.mean(1), held, n=U,
                  what=f"heads (seed mean of each seed's best Δ, {claim['unit']}; Westfall–Young null, "
                       f"{len(maxima):,} joint resamples of the examples, p resolved to {1 / (1 + len(maxima)):.1g})",
                  se=float(np.median(fam.se, 1).mean()) / np.sqrt(S), paper=effect(claim["id"]))
    per_seed = "; ".join(f"seed {s}: {b:+.3f} vs {m:+.3f}"
                         for s, b, m in zip(fam.seeds, fam.delta.max(1), np.median(maxima, 0)))
    return Verdict(v.status, v.rule, f"{v.reason}. Per seed, best Δ vs the null's median maximum: {per_seed}")


def _holm(claim: dict, evidence: Evidence) -> Verdict:
    unit = "heads" if claim["id"].endswith("heads-holm") else "layers"
    fam = M.family(evidence, claim, unit)
    S, U = fam.delta.shape
    m, B = S * U, len(fam.null)
    delta = fam.delta.ravel()  # (m,) seed-major, as the keys below
    null = np.abs(fam.null.reshape(B, m))  # (B, m) two-sided: |Δ* − Δ|
    p = dict(zip([(u, s) for s in fam.seeds for u in fam.names], step_down_max_t(np.abs(delta), null)))
    d = dict(zip(p, delta))
    said = (f"Westfall–Young step-down max-T over {m} tests ({U} {unit} × {S} seed(s)), {B:,} joint resamples "
            f"of the examples (adjusted p resolved to {1 / (1 + B):.1g}; the claim's share is the stage's Holm count)")
    if raised := [k for k in p if d[k] > 0]:
        u, s = min(raised, key=lambda k: (p[k], -d[k]))
        said += (f"; the unit whose removal raises the metric with the smallest p̃: {u}, seed {s}, "
                 f"Δ {d[(u, s)]:+.3g}, p̃ = {p[(u, s)]:.3g}")
    improve = [k for k in p if p[k] < ALPHA and d[k] > 0]
    hurt = sum(1 for k in p if p[k] < ALPHA and d[k] < 0)
    said += f"; {len(improve)} improve, {hurt} hurt at family-wise α = {ALPHA}"
    critical = float(np.quantile(null.max(1), 1 - ALPHA))  # the first step's critical |Δ|
    mde = critical + float(norm.ppf(POWER)) * float(np.median(fam.se))
    if not improve:
        return powered(Verdict("not reproduced", "max-T", f"{said}: no unit improves over the whole family"), mde,
                       paper=effect(claim["id"]))
    if S < 2:
        return Verdict("inconclusive", "max-T", f"{said}: one seed, replication across seeds untestable")
    replicated = [k for k in improve if all(d[(k[0], s)] > 0 for s in fam.seeds)]
    if replicated:
        names = ", ".join(f"{u} (seed {s})" for u, s in replicated)
        return Verdict("reproduced", "max-T", f"{said}: {names} improve(s), Δ > 0 in every seed")
    names = ", ".join(f"{u} (seed {s})" for u, s in improve)
    return powered(Verdict("not reproduced", "max-T", f"{said}: {names} improve(s) but Δ ≤ 0 in another seed"), mde,
                   paper=effect(claim["id"]), detected=True)


def _structured(claim: dict, evidence: Evidence) -> Verdict:
    b = claim["baseline"]
    return context(f"structured share {claim['value']:.3f} against {b['value']:.3f} for uniform attention: a "
                   "descriptive share, no test. The baseline holds by construction: uniform attention over n tokens "
                   "puts 2/n of a row on [CLS]/[SEP] and about 3/(n − 2) of the rest on the diagonal, so the rules "
                   "call it structured only on sentences of under about 8 tokens, and any attention that "
                   "concentrates its mass beats it")


def _finetune_change(claim: dict, evidence: Evidence) -> Verdict:
    """Share of resamples of seeds × examples (the pigeonhole bootstrap of the held-out claims: the
    examples, shared by the seeds, and the seeds drawn independently) in which the last two layers
    have the two lowest mean cosines."""
    rows = evidence.rows(claim)
    seeds, index = sorted({r["seed"] for r in rows}), sorted({r["index"] for r in rows})
    k, n, L = len(seeds), len(index), len(rows[0]["per_layer"])
    cube = np.full((k, n, L), np.nan)  # (seeds, examples, layers) cosine to the pretrained maps
    for r in rows:
        cube[seeds.index(r["seed"]), index.index(r["index"])] = r["per_layer"]
    if np.isnan(cube).any():
        raise ValueError(f"{claim['id']}: every seed needs a row for every example")
    picked_examples, picked_seeds = C.pigeonhole_picks(n, k, B_ORDER)  # the held-out claims' draws
    examples, drawn = C.pick_counts(picked_examples, n), C.pick_counts(picked_seeds, k)  # (B, n), (B, k) draws of each
    means = np.einsum("bk,bn,knl->bl", drawn, examples, cube) / (k * n)  # (B, L)
    two_lowest = np.sort(np.argsort(means, 1)[:, :2], 1)  # (B, 2)
    holds = ((two_lowest[:, 0] == L - 2) & (two_lowest[:, 1] == L - 1)).mean()
    gap = means[:, : L - 2].min(1) - means[:, L - 2:].max(1)  # (B,) > 0 where the order holds
    overall = cube.mean((0, 1))  # (L,)
    observed = np.argsort(overall)[:3]
    v = ordering(float(holds), what=f"layers {L - 2}, {L - 1} the two most changed of {L} (seeds × examples)",
                 gap_se=float(np.std(gap)), level=ORDER_LEVEL)
    return Verdict(v.status, v.rule, f"{v.reason}; the three most changed over all seeds and examples: layers "
                   f"{', '.join(map(str, observed))} (cosine {', '.join(f'{x:.3f}' for x in overall[observed])})")


def _instrument(claim: dict, evidence: Evidence) -> Verdict:
    base = claim["baseline_measure"]["columns"]
    spec = {"statistic": claim["measure"]["statistic"], "columns": claim["measure"]["columns"],
            "against": {k: v for k, v in base.items() if claim["measure"]["columns"][k] != v}, "ci_method": "paired"}
    r = C.evaluate(evidence.rows(claim), spec)
    return directional(r["value"], r["ci"], what=f"held-out {claim['unit']} − {claim['baseline']['name']}")


JUDGES = {"best-head-insample": _insample, "best-head-heldout": _heldout, "heads-holm": _holm, "layers-holm": _holm,
          "structured-share": _structured, "finetune-change": _finetune_change, "rules-held-out": _instrument,
          "cnn-held-out": _instrument}

DIFFERS = {
    "best-head-insample": "all-mpnet-base-v2 (12 × 12 heads) or MiniLM (6 × 12) fine-tuned on SST-2 / CoLA with "
    "{seeds} seeds, not BERT-base on seven GLUE tasks; best of 144 / 72 heads per seed on the same dev "
    "examples as the paper (MPNet SST-2: 400 of the 872 dev sentences).",
    "best-head-heldout": "Not in the paper: the head is selected on one fixed half of dev and scored on the other; "
    "MPNet / MiniLM on SST-2 / CoLA, {seeds} seeds, not BERT-base on GLUE.",
    "heads-holm": "The paper reports Δs without a test; here paired bootstrap p per head and Holm over all heads × "
    "{seeds} seeds, on MPNet / MiniLM fine-tuned on SST-2 / CoLA, not BERT-base on GLUE.",
    "layers-holm": "The paper reports Δs without a test; here paired bootstrap p per layer and Holm over all layers × "
    "{seeds} seeds, on MPNet / MiniLM fine-tuned on SST-2 / CoLA, not BERT-base on GLUE.",
    "structured-share": "Types by threshold rules fitted on 72 maps of pretrained MiniLM labelled by one annotator, "
    "not the paper's 400 hand-labelled BERT-base maps and CNN; MPNet / MiniLM classifiers on "
    "SST-2 / CoLA ({seeds} seeds).",
    "finetune-change": "Cosine over real tokens only (the released code included padding), MPNet / MiniLM "
    "classifiers on SST-2 / CoLA ({seeds} seeds) against their sentence-encoder bases, not "
    "BERT-base on GLUE.",
    "rules-held-out": "The paper uses no rules; here threshold rules cross-fitted on two folds of 72 maps of "
    "pretrained MiniLM labelled by one annotator.",
    "cnn-held-out": "A 2-layer CNN cross-fitted on two folds of 72 maps of pretrained MiniLM (one annotator) plus "
    "rule-labelled maps, not the paper's CNN on 400 hand-labelled BERT-base maps.",
}


def judge(claim: dict, evidence: Evidence) -> Verdict:
    """The claim's verdict by the rule of its type (module docstring)."""
    return JUDGES[_kind(claim["id"])](claim, evidence)


FINDINGS = {  # the claim's kind -> the paper's finding it tests
    "best-head-insample": "disabling the best single head raises the dev score, chosen and scored on the same "
                          "examples as the paper did",
    "best-head-heldout": "disabling the best single head raises the dev score, held out",
    "heads-holm": "some heads raise the score when disabled, after Holm over heads and seeds",
    "layers-holm": "some layers raise the score when disabled, after Holm over layers and seeds",
    "structured-share": "the share of structured attention maps",
    "finetune-change": "the last two layers change most under fine-tuning",
    "rules-held-out": "the pattern-type instruments label held-out maps better than chance",
    "cnn-held-out": "the pattern-type instruments label held-out maps better than chance",
}


NAMES = {"mpnet": "MPNet", "minilm": "MiniLM", "sst2": "SST-2", "cola": "CoLA", "rules": "rules", "cnn": "CNN"}


def _on(claim_id: str) -> str:
    """The model and task (``kovaleva-<model>-<task>-...``), or the instrument (``kovaleva-cnn-...``)."""
    part = claim_id.split("-")
    return NAMES[part[1]] if part[1] in ("rules", "cnn") else f"{NAMES[part[1]]} {NAMES[part[2]]}"


def describe(claim: dict) -> dict[str, str]:
    kind = _kind(claim["id"])
    return {"paper": papers.for_claim(claim), "differs": DIFFERS[kind].format(seeds=claim["seeds"]),
            "finding": FINDINGS[kind], "on": _on(claim["id"])}


studies.register_rules("kovaleva", sys.modules[__name__])
