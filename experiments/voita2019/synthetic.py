"""The decision rules of the Voita claims on the synthetic clause language, as functions of numbers:
``synthetic_plan``'s rules 1, 3 and 4, fixed there before any gate run on this setting, each
tested on synthetic inputs (``tests/reproduce/test_voita_synthetic.py``). The stages that feed
them are ``synthetic_runs``.

- ``precondition`` (rule 1): per seed Δ_s = BLEU(control s) − BLEU(model s); the encoder's
  self-attention is *needed* when the 95 % Student-t interval of the mean Δ lies wholly below
  −``BLEU_THRESHOLD``, *not needed* when its 90 % interval lies wholly above it, else
  *inconclusive*.
- ``fewest_heads`` (rule 3, one seed): the fewest open encoder heads among the λ runs whose
  paired-bootstrap Δ BLEU vs the unpruned model has its 95 % interval's lower end above
  −``BLEU_THRESHOLD``; censored when no run is within the threshold, or when the count comes
  from the largest λ and that run keeps more than one head (a larger λ might keep fewer).
  ``fewest_verdict``: across the seeds, reproduced when every seed keeps at most ``KEPT_SHARE``
  of the heads, not reproduced when every seed keeps more, inconclusive when they disagree or
  a seed is censored.
- ``kept_confidence`` (rule 4): per seed, at the λ run that gives its count, the one-sided
  permutation p of the kept heads' mean confidence against ``SUBSETS`` random same-size subsets
  (``verdicts.subset_p``, the Multi30k study's test); the seeds' p Holm-corrected
  (``jattn.stats.holm``, α = .05); reproduced when every seed's is rejected, not reproduced when
  none is, else inconclusive ("k of n").

Both claims are judged only where the precondition says "needed": "not needed" makes them not
applicable, "inconclusive" inconclusive; while a model of the plan is not made (``MISSING``:
``models_missing``, rule 1 needs every seed) they are inconclusive, naming the models and the
``jattn models make`` command.

The claims (``judge``, the study's rules module dispatches ``voita-synthetic-*`` here): each claim
carries what its rule reads (the precondition, every gate run's open heads, gates and Δ BLEU vs
its seed's unpruned model, each seed's head confidences), so that editing a rule re-judges it
without rerunning a stage. Rule 3's Δ is against the unpruned model of that seed, as the plan
writes it; the all-gates-open control trained as long (rule 2) is reported beside it (the Δ of
the control vs the unpruned model, and of the gate run vs the control, in the claim and the
table), not used as the reference. ``voita-synthetic-precondition`` is context (the numbers of
rule 1); ``…-fewest-heads`` is rule 3; ``…-kept-confidence`` rule 4. A "not reproduced" states
its minimum detectable effect: for rule 3 one head (each seed's count is read exactly from its
runs), for rule 4 the largest over the seeds of the permutation null's critical value at
α / seeds plus z_0.8 null standard deviations, less the null mean.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from jattn import stats
from jattn.reproduce import claims as C
from jattn.reproduce import verdicts as V
from jattn.reproduce.verdicts import Verdict
from experiments.voita2019.synthetic_plan import BLEU_THRESHOLD, KEPT_SHARE, SUBSETS

NEEDED, NOT_NEEDED, UNDECIDED, MISSING = "needed", "not needed", "inconclusive", "models not made"
PREFIX = "voita-synthetic-"  # the ids of the claims these rules judge
PROVENANCE = ("written before the records: synthetic_plan's rules were committed in e970e48 before any gate run on "
              "the clause language, and the claims that apply them before their stages first ran")


def _ci(ci) -> str:
    return f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _seeds_t(rows: list[dict], level: float) -> dict:
    """The mean of the per-seed Δ and its Student-t interval (``jattn.stats.t_interval``), as a claim
    over seeds computes it (``ci_method`` "seeds")."""
    return C.evaluate(rows, {"statistic": "mean", "ci_method": "seeds", "columns": {"value": "delta"}}, level)


def precondition(model_bleu, control_bleu, threshold: float = BLEU_THRESHOLD) -> dict:
    """Rule 1 on the test BLEU of each seed's model and control (seed s at index s): ``{"status":
    NEEDED | NOT_NEEDED | UNDECIDED, "deltas", "mean", "ci95", "ci90", "said"}``."""
    model, control = np.asarray(model_bleu, float), np.asarray(control_bleu, float)
    if model.shape != control.shape or model.ndim != 1:
        raise ValueError(f"one BLEU per seed for the models and the controls, got {model.shape} and {control.shape}")
    deltas = control - model
    rows = [{"seed": s, "delta": d} for s, d in enumerate(deltas.tolist())]
    at95 = _seeds_t(rows, 0.95)
    mean, ci95, ci90 = at95["value"], at95["ci"], _seeds_t(rows, 0.90)["ci"]
    status = NEEDED if ci95[1] < -threshold else NOT_NEEDED if ci90[0] > -threshold else UNDECIDED
    said = (f"BLEU of the control without encoder self-attention minus the model's, per seed "
            f"{', '.join(f'{d:+.2f}' for d in deltas)}; mean {mean:+.2f}, 95 % t-interval {_ci(ci95)}, 90 % "
            f"{_ci(ci90)} ({len(deltas)} seeds); threshold −{threshold:g} BLEU")
    return {"status": status, "deltas": deltas.tolist(), "mean": mean, "ci95": list(ci95), "ci90": list(ci90),
            "said": said}


def models_missing(missing: list[str]) -> dict:
    """Rule 1's result while models of the plan are not made: ``{"status": MISSING, "missing",
    "said"}`` (naming the command that makes them)."""
    return {"status": MISSING, "missing": list(missing),
            "said": f"models not made: {', '.join(missing)}; rule 1 needs every seed's model and control. Fix: run "
                    f"`jattn models make {' '.join(missing)}`"}


def _unmet(pre: dict) -> Verdict | None:
    """The verdict of a claim under rule 1 when the encoder's self-attention is not shown needed."""
    if pre["status"] == MISSING:
        return Verdict("inconclusive", "models not made", pre["said"])
    if pre["status"] == NOT_NEEDED:
        return V.not_applicable(f"the encoder's self-attention is not needed on this setting: {pre['said']}")
    if pre["status"] == UNDECIDED:
        return Verdict("inconclusive", "precondition", f"whether the encoder's self-attention is needed is "
                       f"undecided: {pre['said']}")
    return None


def fewest_heads(runs: list[dict], threshold: float = BLEU_THRESHOLD) -> dict:
    """Rule 3 for one seed. ``runs``: one per λ, ``{"lam", "open" (open encoder heads), "ci" (95 %
    paired-bootstrap interval of Δ BLEU vs the unpruned model)}``. Returns ``{"k", "lam" (the run
    giving k: the largest λ among those that keep k), "censored" (None, or why), "within" (the λ
    runs within the threshold)}``; ``k`` None when no run is within it."""
    if not runs:
        raise ValueError("no λ run to read the fewest heads from")
    within = sorted((r for r in runs if r["ci"][0] > -threshold), key=lambda r: r["lam"])
    if not within:
        worst = max(runs, key=lambda r: r["ci"][0])
        return {"k": None, "lam": None, "within": [], "censored": f"no λ run within {threshold:g} BLEU (the closest, "
                f"λ {worst['lam']:g}, {worst['open']} heads: Δ interval {_ci(worst['ci'])})"}
    k = min(r["open"] for r in within)
    lam = max(r["lam"] for r in within if r["open"] == k)
    largest = max(r["lam"] for r in runs)
    censored = (f"the fewest ({k} heads) come from the largest λ ({largest:g}), which keeps more than one head"
                if lam == largest and k > 1 else None)
    return {"k": int(k), "lam": lam, "within": [r["lam"] for r in within], "censored": censored}


def fewest_verdict(seeds: list[dict], heads: int, pre: dict, share: float = KEPT_SHARE) -> Verdict:
    """Rule 3 across the seeds (``seeds``: ``fewest_heads`` per seed, of ``heads`` encoder heads)."""
    if (unmet := _unmet(pre)) is not None:
        return unmet
    counted = "; ".join(f"seed {s}: " + (f"{f['k']} of {heads} (λ {f['lam']:g})" if f["k"] is not None else "none")
                        + (f", censored: {f['censored']}" if f["censored"] else "") for s, f in enumerate(seeds))
    said = f"fewest encoder heads within {BLEU_THRESHOLD:g} BLEU per seed: {counted}; limit {share:g} × {heads}"
    if censored := [s for s, f in enumerate(seeds) if f["censored"]]:
        return Verdict("inconclusive", "fewest heads, censored", f"{said}; seed(s) {censored} censored: the grid "
                       "is extended by a rule committed before the rerun")
    shares = [f["k"] / heads for f in seeds]
    if max(shares) <= share:
        return Verdict("reproduced", "fewest heads across seeds", f"{said}: every seed keeps at most {share:.0%}")
    if min(shares) > share:
        return V.powered(Verdict("not reproduced", "fewest heads across seeds", f"{said}: every seed keeps more than "
                                 f"{share:.0%}"), 1.0, detected=True)  # one head: each count is read exactly
    return Verdict("inconclusive", "fewest heads across seeds", f"{said}: the seeds disagree")


def kept_confidence(seeds: list[tuple | None], pre: dict, subsets: int = SUBSETS,
                    alpha: float = V.ALPHA) -> tuple[Verdict, list[dict]]:
    """Rule 4. ``seeds``: per seed ``(confidence, kept)`` (per encoder head: mean confidence on the
    unpruned model, and whether the λ run giving the seed's fewest count keeps it), or None where
    the seed has no such run (censored). Returns the verdict and per seed ``{"kept", "observed",
    "null_mean", "p", "rejected"}`` (None for a seed not tested)."""
    from experiments.voita2019.verdicts import subset_p  # the Multi30k test; imported once studies are registered

    if (unmet := _unmet(pre)) is not None:
        return unmet, [None] * len(seeds)
    tested = []
    for pair in seeds:
        if pair is None:
            tested.append(None)
            continue
        confidence, kept = np.asarray(pair[0], float).ravel(), np.asarray(pair[1], bool).ravel()
        if kept.sum() in (0, kept.size):
            tested.append(None)
            continue
        observed, p, null = subset_p(confidence, kept, subsets)
        critical = float(np.quantile(null, 1 - alpha / len(seeds)))  # Holm's first step
        tested.append({"kept": int(kept.sum()), "heads": kept.size, "observed": observed,
                       "null_mean": float(null.mean()), "p": p,
                       "mde": critical - float(null.mean()) + float(np.std(null)) * NormalDist().inv_cdf(V.POWER)})
    ps = [t["p"] for t in tested if t is not None]
    rejected = iter(stats.holm(ps, alpha).tolist() if ps else [])
    for t in tested:
        if t is not None:
            t["rejected"] = next(rejected)
    said = "; ".join(f"seed {s}: " + ("not tested (no λ run gives its count, or it keeps none or all heads)"
                                      if t is None else f"{t['kept']} of {t['heads']} kept, mean confidence "
                                      f"{t['observed']:.3f} vs {t['null_mean']:.3f} for random same-size subsets, "
                                      f"p = {t['p']:.2g}" + (" (rejected)" if t["rejected"] else ""))
                     for s, t in enumerate(tested))
    k = sum(t["rejected"] for t in tested if t is not None)
    said = f"{said}; Holm over {len(ps)} seed(s), α = {alpha:g}: {k} of {len(seeds)}"
    if len(ps) < len(seeds):
        return Verdict("inconclusive", "permutation, Holm", f"{said}, not every seed tested"), tested
    status = "reproduced" if k == len(seeds) else "not reproduced" if k == 0 else "inconclusive"
    mde = max(t["mde"] for t in tested)  # in mean confidence
    return V.powered(Verdict(status, "permutation, Holm", said), mde), tested


def _seed_runs(claim: dict, seed: int) -> list[dict]:
    return [r for r in claim["runs"] if r["seed"] == seed]


def judge(claim: dict) -> Verdict:
    """The verdict of a ``voita-synthetic-*`` claim from what it carries (module docstring)."""
    pre, kind = claim["precondition"], claim["id"].removeprefix(PREFIX)
    if kind == "precondition":
        return V.context(f"the encoder's self-attention is {pre['status']}: {pre['said']}")
    if (unmet := _unmet(pre)) is not None:
        return unmet
    fewest = [fewest_heads(_seed_runs(claim, s)) for s in range(claim["seed_count"])]
    if kind == "fewest-heads":
        return fewest_verdict(fewest, claim["heads"], pre)
    if kind == "kept-confidence":
        pairs = []
        for s, f in enumerate(fewest):
            run = next((r for r in _seed_runs(claim, s) if r["lam"] == f["lam"]), None)
            pairs.append(None if f["censored"] or run is None else
                         (claim["confidence"][s], np.asarray(run["gates"], float) > 0))
        return kept_confidence(pairs, pre)[0]
    raise ValueError(f"no synthetic rule judges {claim['id']}")
