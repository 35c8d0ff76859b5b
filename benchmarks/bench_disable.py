"""The full single-head + whole-layer disabling sweep (Kovaleva et al. 2019): batched with prefix
reuse vs the straightforward loop — jattn's own, and the original study's in HF PyTorch — in one run.

Command (from the repository root):

    nice -n 10 python benchmarks/bench_disable.py [--examples 872] [--model minilm-sst2]

On MiniLM with a classification head (``--model``: an HF classifier folder; default the fine-tuned
artefact minilm-sst2 when it is made, else the embedded MiniLM with a random 2-class head saved to
a temporary folder — the timing does not depend on the head's values) over the first ``--examples``
SST-2 dev sentences, 72 heads + 6 layers, uniform mode:
  (a) ``jattn.sweeps.disable.disable`` (unit head, then unit layer): one intact forward per
      batch, each layer's variants re-run from ``hidden_states[l]`` one after another in one
      compiled call, [CLS]-row last layer;
  (b) ``sweep_by_loop``: one complete evaluation per disabled head or layer through the jitted full
      forward with ``Interventions`` (78 evaluations + 2 intact), jattn's engine;
  (c) the same loop as the original study ran it, in HF PyTorch (eager attention): one complete
      evaluation per unit, the head made uniform over real tokens by the hooks of
      tests/hf_head_gates.py (tested equal to ``disabled_heads``), batches padded to their longest.
(a) and (b) are compiled first on one batch per bucket length (so compile time is not timed), then
timed once each, alternating (a) (b) (a) (b) and keeping each one's fastest: the machine is shared.
(c) runs once, in its own process (PyTorch's and XLA's thread pools slow each other).
Peak memory: "Δ peak" = peak RSS during the call minus the RSS just before it (Linux VmHWM reset).
(a) and (b) must give the same predictions (checked); (c)'s disagreements with (a) are counted
(float32 near-ties). Writes benchmarks/results/disable.json and prints a Markdown table. Linux
only (reads /proc/self).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from peak_memory import measure  # benchmarks/peak_memory.py (the scripts run from their folder)

REPO = Path(__file__).resolve().parents[1]


def hf_loop(folder: str, examples: int, batch_size: int) -> dict:
    """(c): the original study's loop in HF PyTorch, timed in this (child) process."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from bench_importance import dev, hf_batches

    sys.path.insert(0, str(REPO / "tests"))
    from hf_head_gates import disabled

    hf = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    data = dev(examples)
    batches = list(hf_batches(AutoTokenizer.from_pretrained(folder), data, batch_size))
    L, H = hf.config.num_hidden_layers, hf.config.num_attention_heads

    def evaluate(off):  # (L, H) bool -> predictions (N,)
        out = np.zeros(len(data), np.int64)
        with torch.no_grad(), disabled(hf, off):
            for enc, _, idx in batches:
                out[idx] = hf(**enc).logits.argmax(-1).numpy()
        return out

    def sweep():
        preds = {}
        for unit, masks in (("head", np.eye(H, dtype=bool)), ("layer", np.ones((1, H), bool))):
            evaluate(np.zeros((L, H), bool))  # the intact evaluation, as sweep_by_loop runs it
            preds[unit] = np.zeros((L, len(masks), len(data)), np.int64)
            for l in range(L):
                for v, m in enumerate(masks):
                    off = np.zeros((L, H), bool)
                    off[l] = m
                    preds[unit][l, v] = evaluate(off)
        return preds

    seconds, peak, preds = measure(sweep)
    return {"seconds": seconds, "peak_mb": peak, "torch_threads": torch.get_num_threads(),
            "predictions": {u: p.tolist() for u, p in preds.items()}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=872)
    p.add_argument("--model", default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--hf-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hf_child:
        print(json.dumps(hf_loop(args.model, args.examples, args.batch_size)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    from bench_importance import classifier_folder

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.io.glue import read_task
    from jattn.sweeps.disable import disable, sweep_by_loop
    from jattn.runner import buckets

    folder, name = (args.model, args.model) if args.model else classifier_folder(Path(tmp))
    model = jattn.load(folder)
    dev = read_task("sst2", "dev")[:args.examples]
    kw = dict(mode="uniform", batch_size=args.batch_size, progress=False)

    def batched():
        return [disable(model, dev, "accuracy", unit=u, **kw) for u in ("head", "layer")]

    def loop():
        return [sweep_by_loop(model, dev, "accuracy", unit=u, **kw) for u in ("head", "layer")]

    lengths = model.tokenize([t for t, _ in dev], max_length=128).lengths
    sizes = buckets(128)
    warm = [dev[int(np.flatnonzero([next(s for s in sizes if s >= n) == b for n in lengths])[0])]
            for b in sorted({next(s for s in sizes if s >= n) for n in lengths})]  # one example per bucket
    t0 = time.perf_counter()
    for u in ("head", "layer"):
        disable(model, warm, "accuracy", unit=u, **kw)
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
    cmd = [sys.executable, __file__, "--hf-child", "--model", folder, "--examples", str(args.examples),
           "--batch-size", str(args.batch_size)]
    hf = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    print(f"HF loop: {hf['seconds']:.1f} s, Δ peak {hf['peak_mb']:.0f} MB", flush=True)
    disagree = sum(int((np.asarray(hf["predictions"][r.unit]).reshape(r.predictions.shape) != r.predictions).sum())
                   for r in outputs["batched"])
    best = {k: min(v) for k, v in runs.items()}
    record = {
        "model": name,
        "examples": len(dev),
        "heads": 72,
        "layers": 6,
        "mode": "uniform",
        "batch_size": args.batch_size,
        "compile_seconds_both_warmup": round(compile_s, 1),
        "batched_seconds": round(best["batched"][0], 2),
        "loop_seconds": round(best["loop"][0], 2),
        "ratio_loop_over_batched": round(best["loop"][0] / best["batched"][0], 2),
        "batched_peak_delta_mb": round(max(m for _, m in runs["batched"]), 1),
        "loop_peak_delta_mb": round(max(m for _, m in runs["loop"]), 1),
        "hf_loop_seconds": round(hf["seconds"], 2),
        "hf_loop_peak_delta_mb": round(hf["peak_mb"], 1),
        "ratio_hf_loop_over_batched": round(hf["seconds"] / best["batched"][0], 2),
        "hf_predictions_differing": disagree,
        "predictions_compared": 78 * len(dev),
        "torch_threads": hf["torch_threads"],
        "all_runs": runs,
        "baseline_accuracy": outputs["batched"][0].baseline,
    }
    out = REPO / "benchmarks" / "results" / "disable.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n| sweep ({len(dev)} SST-2 dev, 72 heads + 6 layers) | seconds | Δ peak RSS MB |\n|---|---|---|\n"
          f"| batched, prefix reuse | {record['batched_seconds']} | {record['batched_peak_delta_mb']} |\n"
          f"| loop, one evaluation per unit (jattn) | {record['loop_seconds']} | {record['loop_peak_delta_mb']} |\n"
          f"| loop, one evaluation per unit (HF PyTorch, hooks) | {record['hf_loop_seconds']} | "
          f"{record['hf_loop_peak_delta_mb']} |\n"
          f"\nratio {record['ratio_loop_over_batched']}× (jattn loop), {record['ratio_hf_loop_over_batched']}× "
          f"(HF loop; {disagree} of {record['predictions_compared']} predictions differ) -> {out}")


if __name__ == "__main__":
    main()
