"""Before/after table for a code change: the benchmarks' own ratios, run on two checkouts.

Each benchmark already measures jattn against its baseline (HF PyTorch, the plain forward, the
original formulation) in one run, so its ratios survive machine load better than times do.
Run every benchmark on the old and the new checkout, alternating (a git worktree per commit,
its own ``PYTHONPATH``), several rounds, writing ``DIR/{before,after}_{bench}_{round}.json``:

    git worktree add /tmp/before <old commit>; git worktree add /tmp/after <new commit>
    cd /tmp/before && PYTHONPATH=$PWD python benchmarks/bench_encoder.py --models minilm --out DIR/before_encoder_1.json
    ...  (bench_nmt.py --out, bench_norms.py (copy benchmarks/results/bench_norms.json), bench_analysis.py --json,
          bench_importance.py --out, bench_disable.py (copy benchmarks/results/disable.json),
          bench_output_memory.py --out DIR/{before,after}_outputmemory_{round}.json)

then ``python benchmarks/before_after.py DIR [--out table.json]`` prints, per ratio, the median
over rounds of each version and after ÷ before (> 1: the new code is faster relative to the
baseline, except for the cost ratios marked "lower is better").
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _encoder(d: dict) -> dict:
    out = {}
    for r in d["results"]:
        tag = "MiniLM" if "MiniLM" in r["name"] else "bert-base"
        for key in (
            "ratio_forward",
            "ratio_jit",
            "ratio_weights",
            "ratio_lean",
            "weights_over_lean_seconds",
            "weights_recycled_over_lean_seconds",
            "bound_torch_gemms",
            "bound_xla_gemms",
            "lean_of_torch_bound",
            "lean_of_xla_bound",
        ):
            if key in r:
                out[f"encoder {tag}: {key}"] = r[key]
    return out


def _nmt(d: dict) -> dict:
    return {f"nmt {name}: {key}": m[key] for name, m in d["models"].items() for key in ("forward_ratio", "beam4_ratio")}


def _norms(d: dict) -> dict:
    out = {}
    for model in dict.fromkeys(r["model"] for r in d["rows"]):
        sec = {r["kind"]: r["sec_per_call"] / r["batch"] for r in d["rows"] if r["model"] == model}  # per sequence
        out[f"norms {model}: norms_over_forward (lower is better)"] = sec["norms"] / sec["forward"]
        out[f"norms {model}: speedup_over_original"] = sec["original"] / sec["norms"]
    return out


def _analysis(d: dict) -> dict:
    out = {f"analysis: {k}": d[k] for k in ("speedup_stats", "speedup_stats-nojs") if k in d}
    if "overhead" in d:
        out["analysis: stats_nojs_overhead (lower is better)"] = d["overhead"]["overhead"]
    if "forward" in d and "original" in d:
        out["analysis: forward_speedup_over_original"] = d["original"]["seconds"] / d["forward"]["seconds"]
    return out


def _importance(d: dict) -> dict:
    return {f"importance: {part}_speedup_over_hf": d[part]["speedup"] for part in ("importance", "curve") if part in d}


def _disable(d: dict) -> dict:
    return {f"disable: {key}": d[key] for key in ("ratio_loop_over_batched", "ratio_hf_loop_over_batched")}


def _output_memory(d: dict) -> dict:
    return {f"output memory: {kind}_over_lean (lower is better)": d[kind]["over_lean"]
            for kind in ("weights", "weights_recycled")}


READERS = {"encoder": _encoder, "encoderbase": _encoder, "nmt": _nmt, "norms": _norms, "analysis": _analysis,
           "importance": _importance, "disable": _disable, "outputmemory": _output_memory}


def collect(folder: Path) -> dict:
    """{version: {metric: [value per round]}} from ``folder``'s JSON files."""
    values: dict = {"before": {}, "after": {}}
    for path in sorted(folder.glob("*.json")):
        version, bench = path.stem.split("_")[:2]
        version = {"pre": "before", "post": "after"}.get(version, version)
        if version in values and bench in READERS:
            for key, v in READERS[bench](json.loads(path.read_text())).items():
                values[version].setdefault(key, []).append(v)
    return values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    values = collect(args.folder)
    rows = []
    print("| ratio | before (median, rounds) | after (median, rounds) | after ÷ before |\n|---|---|---|---|")
    for key in sorted(values["before"].keys() | values["after"].keys()):
        b, a = values["before"].get(key, []), values["after"].get(key, [])
        mb, ma = (statistics.median(x) if x else None for x in (b, a))
        change = ma / mb if mb and ma else None
        rows.append({"ratio": key, "before": b, "after": a, "before_median": mb, "after_median": ma,
                     "after_over_before": change})
        fmt = lambda m, x: "–" if m is None else f"{m:.3f} ({len(x)})"
        print(f"| {key} | {fmt(mb, b)} | {fmt(ma, a)} | {'–' if change is None else f'{change:.3f}'} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
