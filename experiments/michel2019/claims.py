"""The Michel claims, table and figure of one model and task, from its curve stages (one per
fine-tuning seed; ``michel`` has the protocol). Every number here is computed from the per-example
predictions the curve stages saved; the claims' rows files hold the columns each claim reads,
``michel-<model>-<task>-curves.jsonl`` every prediction of every curve.
"""

from __future__ import annotations

import numpy as np

from jattn import stats
from jattn.reproduce.pipeline import Context
from experiments.michel2019 import curves as mc


def _decode(text: str) -> np.ndarray:
    return np.asarray([int(c) for c in text], np.int64)


def _curve(result: dict) -> dict:
    """One curve stage's result as arrays: gold (n,), {order: (shares, n)}."""
    return {"seed": result["seed"], "gold": _decode(result["gold"]), "shares": list(result["shares"]),
            "orders": {k: np.stack([_decode(s) for s in v]) for k, v in result["orders"].items()}}


def _randoms(c: dict) -> list[str]:
    return [k for k in c["orders"] if k.startswith("random-")]


def equivalent_share(shares, deltas: list[dict], tolerance: float) -> float:
    """The prunable share of one curve: the largest share up to which every point is shown within
    ``tolerance`` of the unpruned model, its paired 95 % interval of Δ inside ±``tolerance`` (two
    one-sided tests at 2.5 % each, Schuirmann 1987: the "no loss" rule of ``docs/STATISTICS.md``).
    An interval that only reaches 0 shows no such thing: a wide one reaches it too."""
    best = 0.0
    for share, d in zip(shares, deltas):
        if not -tolerance <= d["ci"][0] <= d["ci"][1] <= tolerance:
            break
        best = share
    return best


def summary(c: dict, task, tolerance: float) -> dict:
    """Per share: the metric of every order with the importance order's bootstrap CI, the paired
    Δ of every order against the unpruned model, and each order's prunable share."""
    gold, orders = c["gold"], c["orders"]
    unpruned = orders["importance"][0]
    out = {"seed": c["seed"], "level": {}, "delta": {}, "prunable": {}}
    for name, curve in orders.items():
        out["level"][name] = [task.metric(p, gold) for p in curve]
        out["delta"][name] = mc.step_deltas(task.metric, gold, curve, unpruned)
        out["prunable"][name] = equivalent_share(c["shares"], out["delta"][name], tolerance)
    out["ci"] = [list(stats.bootstrap_ci(lambda g, p: task.metric(p, g), gold, p)[1]) for p in orders["importance"]]
    return out


def _systems(orders: dict, names: list[str], share: int, i: int) -> list[int]:
    """Example i's predictions by the orders ``names`` at share index ``share`` (a list: R systems)."""
    return [int(orders[k][share, i]) for k in names]


def claim_rows(curves: list[dict], at_prune: float, at_random: float) -> tuple[list, list, list]:
    """(rows of the 40 % claim, rows of the 50 % claim, rows of the curves file) over every seed."""
    prune, versus, every = [], [], []
    for c in curves:
        o, randoms = c["orders"], _randoms(c)
        a, b = c["shares"].index(at_prune), c["shares"].index(at_random)
        for i, g in enumerate(c["gold"].tolist()):
            key = {"index": i, "seed": c["seed"], "gold": g}
            prune.append({**key, "unpruned": int(o["importance"][0, i]), "importance": int(o["importance"][a, i]),
                          "random": _systems(o, randoms, a, i)})
            versus.append({**key, "importance": int(o["importance"][b, i]), "random": _systems(o, randoms, b, i),
                           "random0": int(o[randoms[0]][b, i]), "random_others": _systems(o, randoms[1:], b, i)})
            every.append({**key, **{k: mc.digits(v[:, i]) for k, v in o.items()}})
    return prune, versus, every


def _within_seeds(rows: list, measure: dict) -> dict:
    """Each seed's own paired bootstrap interval (reported beside a t-interval over seeds)."""
    from jattn.reproduce.claims import evaluate

    out = {}
    for seed in sorted({r["seed"] for r in rows}):
        e = evaluate([r for r in rows if r["seed"] == seed], {**measure, "ci_method": "bootstrap"})
        out[str(seed)] = {"value": e["value"], "ci": e["ci"]}
    return out


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def claims_stage(model: str, task, names: list[str], tolerance: float, at_prune: float, at_random: float):
    def run(ctx: Context) -> dict:
        from jattn.reproduce.claims import write_rows

        curves = [_curve(ctx.result(n)) for n in names]
        first = ctx.result(names[0])
        sums = [summary(c, task, tolerance) for c in curves]
        prune, versus, every = claim_rows(curves, at_prune, at_random)
        path = ctx.out / "predictions" / f"michel-{model}-{task.name}-curves.jsonl"
        write_rows(path, every)
        n, k, randoms = len(curves[0]["gold"]), len(curves), _randoms(curves[0])
        method = "seeds" if k >= 2 else "bootstrap"
        interval = ("Student-t over fine-tuning seeds (each seed's paired bootstrap beside it)" if k >= 2
                    else "paired bootstrap over dev examples (B = 1000)")
        protocol = (f"importance ({first['importance_examples']} random training sentences, token estimator, per-layer "
                    f"L2) estimated once on the unpruned model; dev {n} sentences; {len(randoms)} random orders; "
                    f"{k} seed(s); Δ interval: {interval}; {model} on {task.name}, not BERT-base on MNLI")
        prunable = {"rule": f"largest share up to which every point's paired 95 % CI of Δ vs unpruned lies within "
                            f"±{100 * tolerance:.0f} point (equivalence, two one-sided tests)",
                    "importance": [s["prunable"]["importance"] for s in sums],
                    "random": [[s["prunable"][r] for r in randoms] for s in sums]}
        measure = {"statistic": task.statistic, "columns": {"gold": "gold", "pred": "importance",
                                                            "reference": "unpruned"}, "ci_method": method}
        one = ctx.claim(
            id=f"michel-{model}-{task.name}-prune40", rows=prune, n=n, seeds=k, unit=f"Δ {task.unit}",
            claim=f"{model} {task.name}: {at_prune:.0%} of heads pruned by importance, Δ dev {task.unit} vs unpruned",
            paper=f"{task.paper}: about 40 % of heads prunable without noticeable loss",
            measure=measure, protocol=protocol, prunable_share=prunable,
            baseline={"name": f"{len(randoms)} random orders (mean), Δ vs unpruned",
                      "columns": {"gold": "gold", "pred": "random", "reference": "unpruned"}},
            **({"within_seed": _within_seeds(prune, measure)} if k >= 2 else {}))
        one["note"] = (
            f"Δ {_pts(one['value'])} points. Prunable share (rule in prunable_share): importance "
            f"{prunable['importance']}, random orders {prunable['random']}"
        )
        measure = {
            "statistic": task.statistic,
            "columns": {"gold": "gold", "pred": "importance", "reference": "random"},
            "ci_method": method,
        }
        two = ctx.claim(
            id=f"michel-{model}-{task.name}-vs-random50",
            rows=versus,
            n=n,
            seeds=k,
            unit=f"Δ {task.unit}",
            claim=f"{model} {task.name}: at {at_random:.0%} pruned, importance order vs random orders, "
                  f"Δ dev {task.unit}",
            paper=f"{task.paper}: pruning by importance (random orders are not in the paper; STATISTICS §4's baseline)",
            measure=measure,
            protocol=protocol,
            baseline={
                "name": "random order 0 vs the other random orders",
                "columns": {"gold": "gold", "pred": "random0", "reference": "random_others"},
            },
            **({"within_seed": _within_seeds(versus, measure)} if k >= 2 else {}),
        )
        two["note"] = f"Δ {_pts(two['value'])} points."
        figure = _figure(ctx, model, task, curves, sums)
        return {"claims": [one, two], "figures": [figure], "curves": ctx.relative(path),
                "table": _table(model, task, curves, sums, ctx.relative(path), tolerance)}

    return run


def _table(model: str, task, curves: list, sums: list, path: str, tolerance: float) -> str:
    """Per share and seed: the importance order's metric with its bootstrap CI and its paired Δ vs
    unpruned with CI; the random orders' mean Δ and range; the prunable shares."""
    randoms = _randoms(curves[0])
    head = "| pruned |" + "".join(f" s{s['seed']} importance: {task.unit} [CI], Δ [CI] | s{s['seed']} random: mean Δ "
                                  f"(min, max) |" for s in sums)
    lines = [f"{model} on {task.name}, ×100 (Δ in points); rows file `{path}` (per example and order, one character "
             f"per share 0 %, 10 %, …, 100 %).", "", head, "|---|" + "---|---|" * len(sums)]
    for j, share in enumerate(curves[0]["shares"]):
        cells = []
        for s in sums:
            d, ci = s["delta"]["importance"][j], s["ci"][j]
            rd = [s["delta"][r][j]["delta"] for r in randoms]
            cells.append(f" {100 * s['level']['importance'][j]:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}], "
                         f"{_pts(d['delta'])} [{_pts(d['ci'][0])}, {_pts(d['ci'][1])}] | {_pts(np.mean(rd))} "
                         f"({_pts(min(rd))}, {_pts(max(rd))}) |")
        lines.append(f"| {share:.0%} |" + "".join(cells))
    lines += ["", f"Prunable share (every point up to it within ±{100 * tolerance:.0f} point of unpruned: its "
              "paired 95 % CI of Δ inside the margin): " + "; ".join(
        f"seed {s['seed']}: importance {s['prunable']['importance']:.0%}, random orders "
        + ", ".join(f"{s['prunable'][r]:.0%}" for r in randoms) for s in sums) + "."]
    return "\n".join(lines)


def _figure(ctx: Context, model: str, task, curves: list, sums: list) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False, sharey=True)
    for ax, c, s in zip(axes[0], curves, sums):
        x = 100 * np.asarray(c["shares"])
        band = np.asarray([s["level"][r] for r in _randoms(c)])  # (orders, shares)
        for row in band:
            ax.plot(x, 100 * row, color="grey", lw=0.6, alpha=0.6)
        ax.fill_between(x, 100 * band.min(0), 100 * band.max(0), color="grey", alpha=0.2,
                        label=f"{len(band)} random orders")
        ci = 100 * np.asarray(s["ci"])
        ax.fill_between(x, ci[:, 0], ci[:, 1], color="C0", alpha=0.25)
        ax.plot(x, 100 * np.asarray(s["level"]["importance"]), "o-", color="C0", ms=3, label="importance (95 % CI)")
        ax.axhline(100 * s["level"]["importance"][0], color="k", ls=":", lw=0.8, label="unpruned")
        ax.set_title(f"{model} {task.name}, seed {c['seed']}", fontsize=9)
        ax.set_xlabel("% of heads pruned")
    axes[0][0].set_ylabel(f"dev {task.unit} ×100")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, f"{model}-{task.name}.png")
