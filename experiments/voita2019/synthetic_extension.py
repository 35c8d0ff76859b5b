"""Rule 3's extension of the λ grid for the seed it censored, fixed before any run at these λ.

Why. The first pass (``synthetic_runs`` at ``synthetic_plan.LAMS``, 0.0002-0.1; its 37 records
committed before this module) censored seed 1: its fewest open encoder heads within 1 BLEU (2 of
24) come from the grid's largest λ, 0.1, which keeps more than one head, so k_1 is an upper bound
and rule 4 could not test that seed. Seeds 0 and 2 are not censored (k_0 = 5 and k_2 = 4 at λ 0.05;
their λ 0.1 runs keep 3 heads each and fall outside the threshold), so their grids stand.

The extension (``EXTENDED``), as the plan's rule 3 asks ("the grid extended by a rule committed
before the rerun"):

1. Seed 1 gets gate runs at λ 0.2, 0.5 and 1.0: the grid's steps of about ×2 continued to ten
   times its end. Each run is the first pass's (``synthetic_runs.gate_stage``: the same model,
   updates, gate and model learning rates, decoding), so it is keyed as one of them would be.
2. Its all-gates-open control trained as long: ``voita.synthetic-control-s1-extended``, a run of
   its own (``synthetic_runs.control_stage``), translating the test set at every update count the
   new runs stopped at; each new run is set beside it, the first pass's beside ``-control-s1``.
3. Rules 3 and 4 then read each seed's whole grid (``grid``): the plan's λ and the seed's
   extension. Seed 1 is censored again only if its fewest heads come from λ 1.0 keeping more than
   one head; the verdict is then inconclusive and no further λ is run.

Stages: the registered synthetic stages (``synthetic_runs.stages``) with these three gate runs and
the control inserted before the claims, and ``voita.synthetic-claims`` reading every seed's grid.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage
from experiments.voita2019 import runs as R
from experiments.voita2019 import synthetic as S
from experiments.voita2019 import synthetic_runs as SR

EXTENDED = {1: (0.2, 0.5, 1.0)}  # seed -> the λ added to its grid (module docstring)


def grid(params: dict, seed: int) -> list[float]:
    """Seed ``seed``'s λ under the claims stage's ``params``: the plan's, then its extension."""
    return [*params["lams"], *params["extended"].get(str(seed), [])]


def control_name(seed: int) -> str:
    return SR.control_name(seed) + "-extended"


def _control_of(ctx: Context, seed: int, lam: float) -> dict:
    """The control trained as long as the run at ``lam``: the first pass's, or the extension's."""
    return ctx.result(SR.control_name(seed) if lam in ctx.params["lams"] else control_name(seed))


def measured(ctx: Context) -> tuple[list[dict], list]:
    """Every gate run of every seed's grid (Δ BLEU vs the seed's unpruned model, the control's Δ at
    as many updates, the run's Δ vs that control: ``synthetic_runs._measured``'s numbers) and each
    seed's head confidences. It repeats ``_measured``'s loop with each seed's own grid and the
    control chosen per λ: one function for both would edit ``synthetic_runs``, whose source every
    first-pass stage's key hashes (37 records, about 5 h of runs)."""
    runs, confidence = [], []
    for seed in range(len(SR.MODELS)):
        base = ctx.result(f"voita.synthetic-unpruned-s{seed}")
        unpruned = R.read_translations(ctx, base["translations"])
        confidence.append(np.asarray(base["confidence"]).ravel().tolist())
        for lam in grid(ctx.params, seed):
            g = ctx.result(SR.gate_name(seed, lam))
            trained = R.read_translations(ctx, _control_of(ctx, seed, lam)["translations"][str(g["steps"])])
            rows = [{"ref": r, "gated": h, "unpruned": u, "control": c} for r, h, u, c in
                    zip(base["refs"], R.read_translations(ctx, g["translations"]), unpruned, trained)]
            delta, versus, control_delta = (SR._delta(rows, "gated", "unpruned"), SR._delta(rows, "gated", "control"),
                                            SR._delta(rows, "control", "unpruned"))
            runs.append({"seed": seed, "lam": lam, "open": g["open_heads"], "steps": g["steps"],
                         "fractional_gates": g["fractional_gates"], "gates": np.asarray(g["gates"]).ravel().tolist(),
                         "delta": delta["value"], "ci": delta["ci"], "vs_control": versus["value"],
                         "vs_control_ci": versus["ci"], "control_delta": control_delta["value"],
                         "control_ci": control_delta["ci"]})
    return runs, confidence


def claims_stage(ctx: Context) -> dict:
    """The synthetic claims (``synthetic_runs._claims``, judged by ``synthetic.judge``) on every
    seed's grid; none where the precondition is unmet (the claims then carry it, NaN numbers)."""
    pre = ctx.result(SR.PRE)
    runs, confidence = measured(ctx) if pre["status"] == S.NEEDED else ([], [None] * len(SR.MODELS))
    carried = {"precondition": pre, "runs": runs, "confidence": confidence,
               "heads": len(confidence[0]) if confidence[0] is not None else 24, "seed_count": len(SR.MODELS)}
    return {**carried, "claims": SR._claims(ctx, carried), "table": SR._table(pre, runs)}


def stages(profile: Profile) -> list[Stage]:
    """``synthetic_runs.stages`` with each extended seed's gate runs and control before the claims,
    which read every seed's grid (none in the quick profile)."""
    first = SR.stages(profile)
    if not first:
        return first
    by_name, added = {s.name: s for s in first}, []
    for seed, lams in EXTENDED.items():
        template = by_name[SR.gate_name(seed, SR.params(profile)["lams"][0])]  # the same params, code, model, needs
        added += [dataclasses.replace(template, name=SR.gate_name(seed, lam),
                                      run=SR.when_needed(SR.gate_stage(seed, lam))) for lam in lams]
        added.append(dataclasses.replace(
            by_name[SR.control_name(seed)], name=control_name(seed),
            run=SR.when_needed(SR.control_stage(seed, list(lams))),
            needs=(SR.PRE, *(SR.gate_name(seed, lam) for lam in lams))))
    claims = by_name[SR.CLAIMS]
    out = first[:-1] + added
    return out + [dataclasses.replace(
        claims, run=claims_stage, needs=tuple(s.name for s in out),
        params={**claims.params, "extended": {str(s): list(lams) for s, lams in EXTENDED.items()}},
        code=claims.code + ("experiments.voita2019.synthetic_extension",))]
