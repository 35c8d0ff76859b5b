"""The memory plot of ``benchmarks/bench_scale.py --plot PNG``, drawn from the committed JSONs under
benchmarks/results/: (left) peak host memory above the loaded model of the forward with attention
weights against the tokens n, jattn keeping every layer's α, jattn reducing each layer in the layer
loop (``lm-attention``) and HF eager ``output_attentions``, beside every layer's α and one layer's
(dashed: what a run not made would keep); (right) peak host memory against the parameter count:
loading (``bench_scale_F_S.json``: HF ``from_pretrained``, jattn's stream, each with its first forward)
and head importance over all heads (``bench_scale_analyses_F_S.json``)."""

from __future__ import annotations

import json
from pathlib import Path

GIB = 2**30
STYLE = {"hf": ("HF eager, output_attentions", "tab:red", "o"),
         "jattn": ("jattn, every layer's α kept", "tab:blue", "s"),
         "jattn-layerwise": ("jattn, lm-attention (layerwise)", "tab:green", "^")}


def forward_panel(ax, analyses: list[dict]) -> None:
    for result in analyses:
        rows = [r for r in result["rows"] if r["case"] == "forward" and r["devices"] == 1]
        if len({r["n"] for r in rows}) < 2:
            continue
        for who, (label, color, marker) in STYLE.items():
            done = sorted((r["n"], r["peak_above_baseline"] / GIB) for r in rows if r["who"] == who and "seconds" in r)
            if done:
                ax.plot(*zip(*done), marker=marker, color=color, label=f"{label}, {result['family']} {result['shape']}")
        skipped = [(r["n"], r["kept_weights_bytes"] / GIB) for r in rows if r["who"] != "jattn-layerwise"
                   and "seconds" not in r]
        if skipped:
            ax.plot(*zip(*skipped), ls="none", marker="x", ms=9, color="k",
                    label="not run (HF) or refused (jattn): every layer's α")
        bound = sorted((r["n"], r["kept_weights_bytes"] / GIB, r["layer_weights_bytes"] / GIB) for r in rows)
        ns = [b[0] for b in bound]
        ax.plot(ns, [b[1] for b in bound], "k--", lw=1, label="every layer's α (L·H·n²·4 bytes)")
        ax.plot(ns, [b[2] for b in bound], "k:", lw=1, label="one layer's α")
    ax.set(xscale="log", yscale="log", xlabel="tokens n (one row)", ylabel="peak above the loaded model, GiB",
           title="forward with attention weights (1 device)")
    ax.legend(fontsize=7)


def parameter_panel(ax, loads: list[dict], analyses: list[dict]) -> None:
    from bench_scale_analyses import parameters

    points: dict[str, list] = {}  # one point per family and shape: three families, not one curve
    for result in loads:
        p = parameters(result["family"], result["config"]) / 1e9
        for r in result["rows"]:
            if r["devices"] == 1 and r["repeat"] == 0 and r["who"] in ("hf", "jattn"):
                name = "HF from_pretrained + first forward" if r["who"] == "hf" else "jattn load + first forward"
                points.setdefault(name, []).append((p, r["peak_above_baseline_after_forward"] / GIB))
    for result in analyses:
        p = parameters(result["family"], result["config"]) / 1e9
        for r in result["rows"]:
            if r["case"] == "importance" and r["devices"] == 1 and "seconds" in r:
                points.setdefault(f"{'HF' if r['who'] == 'hf' else 'jattn'} importance, all heads", []).append(
                    (p, r["peak_above_baseline"] / GIB))
    for name, xy in sorted(points.items()):
        ax.plot(*zip(*sorted(xy)), marker="o", ls="none", ms=7, label=name)
    ax.set(xscale="log", yscale="log", xlabel="parameters, billions", ylabel="peak above baseline, GiB",
           title="against parameters (three families)")
    ax.legend(fontsize=7)


def plot(results: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    read = lambda pattern: [json.loads(p.read_text()) for p in sorted(results.glob(pattern))]  # noqa: E731
    analyses = read("bench_scale_analyses_*.json")
    loads = [r for r in read("bench_scale_*.json") if r.get("rows") and "repeat" in r["rows"][0]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    forward_panel(left, analyses)
    parameter_panel(right, loads, analyses)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")
    return out
