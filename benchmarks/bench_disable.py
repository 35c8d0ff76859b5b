"""The full single-head + whole-layer disabling sweep (Kovaleva et al. 2019): batched with prefix
reuse vs the straightforward loop, in one run.

Command (from the repository root):

    nice -n 10 python benchmarks/bench_disable.py [--examples 872] [--model checkpoints/minilm-sst2]

On MiniLM with a classification head (``--model``: the fine-tuned SST-2 folder when it exists,
else CoLA's, else the embedded MiniLM with a fresh random head — the timing does not depend on the
head's values) over the first ``--examples`` SST-2 dev sentences, 72 heads + 6 layers, uniform mode:
  (a) ``jattn.methods.disable.disable_sweep`` (unit head, then unit layer): one intact forward per
      batch, each layer's variants re-run from ``hidden_states[l]`` under vmap, [CLS]-row last layer;
  (b) ``sweep_by_loop``: one complete evaluation per disabled head or layer through the jitted full
      forward with ``Interventions`` (78 evaluations), as the original study ran it.
Both are compiled first on one batch per bucket length (so compile time is not timed), then timed
once each, alternating (a) (b) (a) (b) and keeping each one's fastest: the machine is shared.
Peak memory: "Δ peak" = peak RSS during the call minus the RSS just before it (Linux VmHWM reset).
The two must give the same predictions (checked). Writes benchmarks/results/disable.json and
prints a Markdown table. Linux only (reads /proc/self).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from peak_memory import measure  # benchmarks/peak_memory.py (the scripts run from their folder)

REPO = Path(__file__).resolve().parents[1]


def classifier(path):
    import jattn
    from jattn.finetune import with_classifier

    for folder in ([Path(path)] if path else [REPO / "checkpoints" / f"minilm-{t}" for t in ("sst2", "cola")]):
        if (folder / "DONE").is_file() or (path and folder.is_dir()):
            return jattn.load(folder), str(folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder)
    return with_classifier(jattn.load(), 2), "embedded MiniLM + random 2-class head"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=872)
    p.add_argument("--model", default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args(argv)

    from jattn.data.glue import read_task
    from jattn.methods.disable import disable_sweep, sweep_by_loop
    from jattn.run import buckets

    model, name = classifier(args.model)
    dev = read_task("sst2", "dev")[:args.examples]
    kw = dict(mode="uniform", batch_size=args.batch_size, progress=False)

    def batched():
        return [disable_sweep(model, dev, "accuracy", unit=u, **kw) for u in ("head", "layer")]

    def loop():
        return [sweep_by_loop(model, dev, "accuracy", unit=u, **kw) for u in ("head", "layer")]

    lengths = model.tokenize([t for t, _ in dev], max_length=128).lengths
    sizes = buckets(128)
    warm = [dev[int(np.flatnonzero([next(s for s in sizes if s >= n) == b for n in lengths])[0])]
            for b in sorted({next(s for s in sizes if s >= n) for n in lengths})]  # one example per bucket
    t0 = time.perf_counter()
    for u in ("head", "layer"):
        disable_sweep(model, warm, "accuracy", unit=u, **kw)
        sweep_by_loop(model, warm, "accuracy", unit=u, **kw)
    compile_s = time.perf_counter() - t0
    runs = {"batched": [], "loop": []}
    outputs = {}
    for _ in range(args.reps):
        for key, fn in (("batched", batched), ("loop", loop)):
            sec, mem, outputs[key] = measure(fn)
            runs[key].append((sec, mem))
            print(f"{key}: {sec:.1f} s, Δ peak {mem:.0f} MB", flush=True)
    for a, b in zip(outputs["batched"], outputs["loop"]):
        assert np.array_equal(a.predictions, b.predictions) and a.baseline == b.baseline, "the two sweeps disagree"
    best = {k: min(v) for k, v in runs.items()}
    record = {"model": name, "examples": len(dev), "heads": 72, "layers": 6, "mode": "uniform",
              "batch_size": args.batch_size, "compile_seconds_both_warmup": round(compile_s, 1),
              "batched_seconds": round(best["batched"][0], 2), "loop_seconds": round(best["loop"][0], 2),
              "ratio_loop_over_batched": round(best["loop"][0] / best["batched"][0], 2),
              "batched_peak_delta_mb": round(max(m for _, m in runs["batched"]), 1),
              "loop_peak_delta_mb": round(max(m for _, m in runs["loop"]), 1),
              "all_runs": runs, "baseline_accuracy": outputs["batched"][0].baseline}
    out = REPO / "benchmarks" / "results" / "disable.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n| sweep ({len(dev)} SST-2 dev, 72 heads + 6 layers) | seconds | Δ peak RSS MB |\n|---|---|---|\n"
          f"| batched, prefix reuse | {record['batched_seconds']} | {record['batched_peak_delta_mb']} |\n"
          f"| loop, one evaluation per unit | {record['loop_seconds']} | {record['loop_peak_delta_mb']} |\n"
          f"\nratio {record['ratio_loop_over_batched']}× -> {out}")


if __name__ == "__main__":
    main()
