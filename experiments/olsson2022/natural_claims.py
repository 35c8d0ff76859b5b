"""The claims, table and figure of the induction study on natural-text LMs from its per-model stages
(definitions: ``experiments.olsson2022.natural``'s docstring; decision rules:
``experiments.olsson2022.natural_verdicts``)."""

from __future__ import annotations

import numpy as np

from experiments.olsson2022.claims import PAPER, _ci
from jattn.reproduce.pipeline import Context

TITLE = {"attn-only": "2-layer attention-only GPT-2 trained on natural text only",
         "gpt2": "2-layer GPT-2 with MLPs trained on natural text only"}
WHAT = ("icl", "induction-head", "induction-head-control", "induction-head-chance", "previous-token-head",
        "previous-token-head-chance", "path")
# claim -> (what is measured, unit, the baseline's name); measure column "named", baseline column "baseline"
SPEC = {
    "icl": ("in-context drop on repeated random tokens: loss on the first copy − loss on the second copy", "nats",
            "the same drop on 'A B' (no repeat)"),
    "induction-head": ("the named induction head's induction score", "attention weight",
                       "the mean of the other heads of its layer"),
    "induction-head-control": ("the named induction head's induction score on 'A A'", "attention weight",
                               "the same head at the same positions of 'A B' (no earlier occurrence)"),
    "induction-head-chance": ("the named induction head's induction score", "attention weight",
                              "uniform causal attention's score (exact)"),
    "previous-token-head": ("the named previous-token head's previous-token score", "attention weight",
                            "the mean of the other heads of its layer"),
    "previous-token-head-chance": ("the named previous-token head's previous-token score", "attention weight",
                                   "uniform causal attention's score (exact)"),
    "path": ("path patching: the previous-token head's effect through the keys of all induction heads on m, the "
             "second copy's mean next-token log-probability ('B A' → 'A A')", "nats",
             "half the whole in-context effect on m, m('B A') − m('A A')"),
}


def _others(values: np.ndarray, layer: int, head: int, H: int) -> np.ndarray:
    """The mean over the other heads of ``layer``. values (N, L·H) -> (N,)"""
    cols = [layer * H + h for h in range(H) if h != head]
    return values[:, cols].mean(1)


def rows_of(r: dict, share: float) -> dict[str, list[dict]]:
    """Per-sequence rows of one model (seed), one list per claim: {"seed", "index", "named", "baseline"}."""
    L, H = r["shape"]
    (li, hi), (lp, hp) = r["induction_head"], r["previous_head"]
    I, P = li * H + hi, lp * H + hp
    ind, prev = np.asarray(r["induction"]), np.asarray(r["previous_token"])  # (N, L·H)
    drop = np.asarray(r["first"])[:, 0] - np.asarray(r["second"])[:, 0]  # (N,)
    control = np.asarray(r["control_first"])[:, 0] - np.asarray(r["control_second"])[:, 0]
    n = len(ind)
    pairs = {
        "icl": (drop, control),
        "induction-head": (ind[:, I], _others(ind, li, hi, H)),
        "induction-head-control": (ind[:, I], np.asarray(r["induction_on_control"])[:, I]),
        "induction-head-chance": (ind[:, I], np.full(n, r["chance"]["induction"])),
        "previous-token-head": (prev[:, P], _others(prev, lp, hp, H)),
        "previous-token-head-chance": (prev[:, P], np.full(n, r["chance"]["previous_token"])),
        "path": (np.asarray(r["path_k"])[:, P], share * np.asarray(r["whole"])[:, 0]),
    }
    return {what: [{"seed": r["seed"], "index": i, "named": float(a[i]), "baseline": float(b[i])} for i in range(n)]
            for what, (a, b) in pairs.items()}


def _claim(ctx: Context, kind: str, what: str, rows: list[dict], seeds: int, protocol: str) -> dict:
    claim, unit, base_name = SPEC[what]
    paper = PAPER[what.removesuffix("-control").removesuffix("-chance")]
    out = ctx.claim(id=f"induction-natural-{kind}-{what}", claim=f"{TITLE[kind]}: {claim}", paper=paper, unit=unit,
                    rows=rows, n=len(rows), seeds=seeds,
                    measure={"statistic": "mean", "columns": {"value": "named"}, "ci_method": "seeds"},
                    baseline={"name": base_name, "columns": {"value": "baseline"}}, protocol=protocol)
    out["note"] = f"the paper's direction: {'below' if what == 'path' else 'above'} the baseline (t over {seeds} seeds)"
    return out


def _table(kind: str, results: list[dict]) -> str:
    lines = [f"{TITLE[kind]}: heads named on the selection sequences, measured on the evaluation sequences (mean "
             "over sequences, 95 % bootstrap interval over sequences); the training curve's last point.", "",
             "| seed | I | its score | other heads of its layer | P | its score | induction heads | in-context drop "
             "(nats) | P → induction keys (nats) | whole effect (nats) | last in-context drop in training | "
             "last validation loss |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        L, H = r["shape"]
        (li, hi), (lp, hp) = r["induction_head"], r["previous_head"]
        ind, prev = np.asarray(r["induction"]), np.asarray(r["previous_token"])
        drop = np.asarray(r["first"])[:, 0] - np.asarray(r["second"])[:, 0]
        last = r["curve"][-1]
        heads = ", ".join(f"{l}-{h}" for l, h in r["induction_heads"])
        lines.append(f"| {r['seed']} | {li}-{hi} | {_ci(ind[:, li * H + hi])} | {_ci(_others(ind, li, hi, H))} | "
                     f"{lp}-{hp} | {_ci(prev[:, lp * H + hp])} | {heads} | {_ci(drop)} | "
                     f"{_ci(np.asarray(r['path_k'])[:, lp * H + hp])} | {_ci(np.asarray(r['whole'])[:, 0])} | "
                     f"{last['in_context_drop']:.3f} | {last['val_text_loss']:.3f} |")
    return "\n".join(lines)


def _figure(ctx: Context, kind: str, results: list[dict]) -> str:
    """Per seed: every head's induction score on 'A A' and on 'A B', and the training curves (the
    in-context drop on repeated tokens and the validation loss against the step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(13, 2.3 * len(results) + 0.6), squeeze=False)
    for row, r in zip(axes, results):
        L, H = r["shape"]
        for ax, (title, key) in zip(row, (("induction score, 'A A'", "induction"),
                                          ("induction score, 'A B' (control)", "induction_on_control"))):
            im = ax.imshow(np.asarray(r[key]).mean(0).reshape(L, H), cmap="viridis", aspect="auto", vmin=0, vmax=1)
            ax.set(title=f"seed {r['seed']}: {title}", xlabel="head", ylabel="layer", yticks=range(L))
            fig.colorbar(im, ax=ax, label="mean attention weight")
        steps = [p["step"] for p in r["curve"]]
        ax = row[2]
        ax.plot(steps, [p["in_context_drop"] for p in r["curve"]], label="in-context drop, repeated tokens")
        ax.plot(steps, [p["val_text_loss"] for p in r["curve"]], label="validation loss, captions")
        ax.set(title=f"seed {r['seed']}: training", xlabel="step", ylabel="nats")
        ax.legend(fontsize=7)
    fig.suptitle(f"{TITLE[kind]}: induction scores and training curves")
    fig.tight_layout()
    return ctx.save_figure(fig, f"natural_{kind}_heads.png", dpi=90)


def claims_stage(kind: str, measured: tuple[str, ...]):
    def run(ctx: Context) -> dict:
        results = [ctx.result(name) for name in measured]
        rows = {k: [] for k in WHAT}
        for r in results:
            for k, v in rows_of(r, ctx.params["share"]).items():
                rows[k] += v
        n = len(results[0]["induction"])
        protocol = (f"{len(results)} training seeds × {n} evaluation sequences of random tokens repeated once (BOS + "
                    "2T); heads named on separate selection sequences; Student-t interval over seeds of each seed's "
                    "mean. Deviations: models trained here on natural English text only (no released checkpoints "
                    "offline; no repeated segments in training)")
        claims = [_claim(ctx, kind, what, rows[what], len(results), protocol) for what in WHAT]
        return {"claims": claims, "figures": [_figure(ctx, kind, results)], "table": _table(kind, results)}

    return run
