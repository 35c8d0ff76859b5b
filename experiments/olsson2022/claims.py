"""The induction study's claims, table and figure from its per-model stages (definitions and
decision rules: ``experiments.olsson2022.study``'s docstring)."""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context

PAPER = {
    "icl": "Olsson et al. 2022 §2: models with induction heads predict the second copy of a repeated random "
           "sequence far better than the first (the in-context learning they measure as a loss drop along the "
           "context); models without them cannot",
    "induction-head": "Olsson et al. 2022, Elhage et al. 2021: 2-layer attention-only models form induction heads "
                      "(in the second layer), attending from a token to the one after its earlier occurrence",
    "previous-token-head": "Elhage et al. 2021: the induction heads' keys are written by previous-token heads of "
                           "the layer below, which attend from each token to the one before it",
    "path": "Elhage et al. 2021 (K-composition, read from the weights), Olsson et al. 2022 (ablations): the "
            "induction head finds its target through the previous-token head's output in its keys",
}
TITLE = {"attn-only": "2-layer attention-only GPT-2", "gpt2": "2-layer GPT-2 with MLPs"}


def _random_other(rng, n: int, pool: list[int]) -> np.ndarray:
    """One head per sequence drawn uniformly from ``pool`` (flat head indices). -> (n,) int"""
    return np.asarray(pool)[rng.integers(0, len(pool), n)]


def _rows(r: dict) -> dict[str, list[dict]]:
    """Per-sequence rows of one model (seed), one list per claim, with the random-head baselines
    drawn with a fixed generator per seed."""
    L, H = r["shape"]
    li, hi = r["induction_head"]
    lp, hp = r["previous_head"]
    I, P = li * H + hi, lp * H + hp
    ind, prev = np.asarray(r["induction"]), np.asarray(r["previous_token"])  # (N, L·H)
    n, seed = len(ind), r["seed"]
    rng = np.random.default_rng(seed)
    rand_i = _random_other(rng, n, [k for k in range(L * H) if k != I])
    out = {"icl": [{"seed": seed, "index": i, "drop": f[0] - s[0], "control_drop": cf[0] - cs[0]}
                   for i, (f, s, cf, cs) in enumerate(zip(r["first"], r["second"], r["control_first"],
                                                          r["control_second"]))],
           "induction-head": [{"seed": seed, "index": i, "named": ind[i, I], "random": ind[i, rand_i[i]]}
                              for i in range(n)]}
    below = [k for k in range(li * H) if k != P]  # I lies in a layer ≥ 1: never empty with H ≥ 2
    rand_p = _random_other(rng, n, below)
    out["previous-token-head"] = [{"seed": seed, "index": i, "named": prev[i, P], "random": prev[i, rand_p[i]]}
                                  for i in range(n)]
    k, q = np.asarray(r["path_k"]), np.asarray(r["path_q"])  # (N, L·H)
    out["path"] = [{"seed": seed, "index": i, "named": k[i, P], "random": k[i, rand_p[i]], "named_via_query": q[i, P]}
                   for i in range(n)]
    return out


def _claim(ctx: Context, kind: str, what: str, rows: list[dict], seeds: int, protocol: str) -> dict:
    spec = {"icl": ("in-context drop: loss on the first copy − loss on the second copy", "nats", "drop",
                    "control_drop", "the same drop on 'A B' (no repeat)", 1),
            "induction-head": ("the named induction head's induction score (attention to the token after the "
                               "current token's earlier occurrence)", "attention weight", "named", "random",
                               "a random other head", 1),
            "previous-token-head": ("the named previous-token head's previous-token score", "attention weight",
                                    "named", "random", "a random other head of the layers below the induction head", 1),
            "path": ("path patching: the previous-token head's effect through the induction head's keys on m, the "
                     "second copy's mean next-token log-probability ('B A' → 'A A')", "nats", "named", "random",
                     "a random other head of the layers below the induction head, through the same keys", -1)}
    claim, unit, col, base, base_name, sign = spec[what]
    out = ctx.claim(
        id=f"induction-{kind}-{what}",
        claim=f"{TITLE[kind]}: {claim}",
        paper=PAPER[what],
        unit=unit,
        rows=rows,
        n=len(rows),
        seeds=seeds,
        measure={"statistic": "mean", "columns": {"value": col}, "ci_method": "seeds"},
        baseline={"name": base_name, "columns": {"value": base}},
        protocol=protocol,
    )
    out["note"] = f"the paper's direction: {'above' if sign > 0 else 'below'} the baseline (t over {seeds} seeds)"
    return out


def _ci(values) -> str:
    from jattn import stats

    value, (lo, hi) = stats.mean_ci(np.asarray(values, float))
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def _table(kind: str, results: list[dict]) -> str:
    lines = [f"{TITLE[kind]}: heads named on the selection sequences, measured on the evaluation sequences "
             "(mean over sequences, 95 % bootstrap interval over sequences).", "",
             "| seed | induction head (layer-head) | its score | previous-token head | its score | in-context drop "
             "(nats) | P → I keys (nats) | P → I queries (nats) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        L, H = r["shape"]
        (li, hi), (lp, hp) = r["induction_head"], r["previous_head"]
        ind = np.asarray(r["induction"])[:, li * H + hi]
        drop = np.asarray(r["first"])[:, 0] - np.asarray(r["second"])[:, 0]
        prev = np.asarray(r["previous_token"])[:, lp * H + hp]
        k, q = (np.asarray(r[f"path_{x}"])[:, lp * H + hp] for x in "kq")
        lines.append(f"| {r['seed']} | {li}-{hi} | {_ci(ind)} | {lp}-{hp} | {_ci(prev)} | {_ci(drop)} | {_ci(k)} | "
                     f"{_ci(q)} |")
    return "\n".join(lines)


def _figure(ctx: Context, kind: str, results: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(13, 2.2 * len(results) + 0.6), squeeze=False)
    for row, r in zip(axes, results):
        L, H = r["shape"]
        panels = (("induction score", np.asarray(r["induction"]).mean(0), "viridis", "mean attention weight"),
                  ("previous-token score", np.asarray(r["previous_token"]).mean(0), "viridis", "mean attention weight"),
                  ("path effect via the induction head's keys", np.asarray(r["path_k"]).mean(0), "RdBu_r",
                   "Δ mean log p, second copy (nats)"))
        for ax, (title, m, cmap, unit) in zip(row, panels):
            m = m.reshape(L, H)
            lim = np.abs(m).max() or 1.0
            im = ax.imshow(m, cmap=cmap, aspect="auto", **({"vmin": -lim, "vmax": lim} if cmap == "RdBu_r" else {}))
            ax.set(title=f"seed {r['seed']}: {title}", xlabel="head", ylabel="layer", yticks=range(L))
            fig.colorbar(im, ax=ax, label=unit)
    fig.suptitle(f"{TITLE[kind]}: detectors and path patching (evaluation sequences)")
    fig.tight_layout()
    return ctx.save_figure(fig, f"{kind}_heads.png", dpi=90)


def claims_stage(kind: str, measured: tuple[str, ...]):
    def run(ctx: Context) -> dict:
        results = [ctx.result(name) for name in measured]
        rows = {k: [] for k in ("icl", "induction-head", "previous-token-head", "path")}
        for r in results:
            for k, v in _rows(r).items():
                rows[k] += v
        n = len(results[0]["induction"])
        protocol = (f"{len(results)} training seeds × {n} evaluation sequences of random tokens repeated once (BOS + "
                    "2T); heads named on separate selection sequences; Student-t interval over seeds of each seed's "
                    "mean. Deviations: models trained here (no released checkpoints offline), half their training "
                    "sequences repeated random segments")
        claims = [_claim(ctx, kind, what, rows[what], len(results), protocol) for what in rows]
        return {"claims": claims, "figures": [_figure(ctx, kind, results)], "table": _table(kind, results)}

    return run
