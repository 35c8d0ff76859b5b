"""``jattn gates``'s output folder: results.json, report.md and the figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jattn.cli.reporting import table, write_report


def kept(point: dict) -> int:
    return sum(c["kept"] for c in point["counts"].values())


def tradeoff_figure(doc: dict, path: Path) -> Path:
    """The dev metric against the heads kept, one point per λ; the ungated model and the tolerance."""
    from jattn.viz.plots import plt, save

    pts = sorted(doc["points"], key=kept)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot([kept(p) for p in pts], [p["metric"] for p in pts], marker="o")
    for p in pts:
        ax.annotate(f"λ={p['lambda']:g}", (kept(p), p["metric"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    total = sum(c["heads"] for c in pts[0]["counts"].values())
    ax.axhline(doc["baseline_metric"], color="k", lw=0.8, label=f"ungated ({total} heads)")
    ax.axhline(doc["baseline_metric"] - doc["meta"]["tolerance"], color="k", lw=0.6, ls=":",
               label=f"ungated − {doc['meta']['tolerance']:g}")
    ax.set(xlabel="heads kept (evaluation gate > 0)", ylabel=doc["metric"], title="L0 gates: metric vs heads kept")
    ax.legend(fontsize=8)
    return save(fig, path)


def curve_figure(doc: dict, path: Path) -> Path:
    """Heads kept (all gated types) during training, per λ."""
    from jattn.viz.plots import plt, save

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for p in doc["points"]:
        steps = [c["step"] for c in p["curve"]]
        ax.plot(steps, [sum(c["heads_kept"].values()) for c in p["curve"]], label=f"λ={p['lambda']:g}")
    ax.set(xlabel="gate update", ylabel="heads kept", title="Heads kept during gate training")
    ax.legend(fontsize=8)
    return save(fig, path)


def write(folder: Path, doc: dict, model) -> list[Path]:
    """Everything ``jattn gates`` publishes, into ``folder``."""
    from jattn.viz import plots

    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    paths = [tradeoff_figure(doc, figures / "metric_vs_heads.png"), curve_figure(doc, figures / "heads_kept.png")]
    for p in doc["points"]:
        for kind in doc["gated"]:
            paths.append(plots.heatmap(np.asarray(p["gates"][kind]), f"{kind} attention: evaluation gates, "
                                       f"λ={p['lambda']:g}", figures / f"gates_{kind}_lam_{p['lambda']:g}.png",
                                       vmin=0.0, vmax=1.0))
    (folder / "results.json").write_text(json.dumps(doc, indent=1))
    name, kinds = doc["metric"], doc["gated"]
    rows = [[f"{p['lambda']:g}", *(f"{p['counts'][k]['kept']}/{p['counts'][k]['heads']}" for k in kinds),
             sum(p["counts"][k]["fractional"] for k in kinds), float(p["metric"]),
             float(p["metric"] - doc["baseline_metric"])] for p in doc["points"]]
    lines = [f"Model: {doc['meta']['model']}. Gates trained on {doc['meta']['examples']} examples "
             f"({doc['meta']['input']}), {doc['meta']['steps']} updates per λ, model frozen, penalty "
             f"{doc['meta']['normalisation']} (Voita et al. 2019). Metric: {name} on {doc['meta']['dev_examples']} "
             f"dev examples ({doc['meta']['dev']}); the ungated model scores {doc['baseline_metric']:.2f}.",
             "",
             "A head is kept when its evaluation gate is above 0; a fractional gate (strictly between 0 and 1) "
             "keeps the head with its output scaled by the gate. Heads kept per attention type:",
             "", *table(["λ", *(f"{k} kept" for k in kinds), "fractional gates", name, f"Δ {name}"], rows), ""]
    lam = doc["export_lambda"]
    lines.append(f"Within {doc['meta']['tolerance']:g} points of the ungated model, λ = {lam:g} keeps the fewest "
                 "heads" + (f" (exported to {doc['meta']['export']})." if doc["meta"]["export"] else ".")
                 if lam is not None else f"No λ stays within {doc['meta']['tolerance']:g} points of the ungated model.")
    write_report(folder, "L0 head gates", lines, paths)
    return paths
