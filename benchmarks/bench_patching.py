"""Activation patching of every head of MiniLM or all-mpnet-base-v2: jattn's compiled sweep vs a
PyTorch forward-hook loop vs nnsight, in one run on the same inputs; attribution patching in
forward-equivalents.

Command (from the repository root):

    python benchmarks/bench_patching.py [--model minilm|all-mpnet-base-v2] [--pairs 16] [--rounds 3]
        [--heads-per-step 12]

``all-mpnet-base-v2`` is read from jattn's cache (``jattn models fetch all-mpnet-base-v2``).

Inputs: ``--pairs`` name-swap pairs ("John gave the book to Mary because she asked ." vs the names
swapped; every name one word piece, so each pair tokenizes to equal lengths), one batch. Metric:
the [CLS] hidden state's projection on a fixed unit direction. Timed, in this one process, in
``--rounds`` alternating rounds (the fastest of each kept; the machine is shared; (d)'s two short
calls alternate 10 times a round):
  (a) ``jattn.patch_heads``: clean and corrupted forwards once, each layer's H variants re-run
      from the corrupted layer input (prefix reuse), ``--heads-per-step`` of them under vmap;
  (b) HF PyTorch (eager attention) hook loop: a clean forward recording every attention output
      projection's input, a corrupted forward, then one corrupted forward per head with a
      forward pre-hook writing the head's clean slice (L·H + 2 forwards);
  (c) the same loop in nnsight (``NNsight(model).trace``: save the clean inputs of the output
      projections, then one trace per head assigning the clean slice);
  (d) ``jattn.attribution_patch_heads`` (clean forward, corrupted forward + one backward), and one
      jitted corrupted forward of jattn (its time is the forward-equivalent unit). Beside its time
      in forwards, its floating-point operations in forwards (XLA's cost analysis of both
      compiled programs, each with its layers unrolled: the analysis counts a loop's body once):
      a little under 3, since the clean pass needs no last-layer FFN and the backward no
      first-layer attention scores.
Beside each time, the call's minor page faults (fresh memory touched first; ``jattn.host_memory``,
applied on import for every library in the process, keeps freed memory for reuse; run with
``JATTN_KEEP_FREED_MEMORY=0`` to see glibc's default). Prefix reuse alone bounds (a)'s saving over
a loop of full forwards by L·H·L / (H·Σ_l (L − l)) = 2L / (L + 1) layer evaluations (1.71 for
L = 6); the rest of the ratio is batching the heads and compiling the sweep. (a) and (b) are
checked to agree. Writes
benchmarks/results/bench_patching.json (MiniLM) or bench_patching_<model>.json and prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import timeit
from pathlib import Path

import numpy as np

from bench_encoder import cpu_model  # benchmarks/ (the scripts run from their folder)

REPO = Path(__file__).resolve().parents[1]
NAMES = ["John", "Mary", "Tom", "Anna", "James", "Sarah", "David", "Emma", "Paul", "Laura"]
TEMPLATES = ["{a} gave the book to {b} because she asked .", "{a} called {b} after the meeting ended .",
             "when {a} met {b} , he smiled .", "{a} and {b} went to the store , and {b} paid ."]


def pairs(n: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(0)
    clean, corrupted = [], []
    for i in range(n):
        a, b = rng.choice(NAMES, 2, replace=False)
        t = TEMPLATES[i % len(TEMPLATES)]
        clean.append(t.format(a=a, b=b))
        corrupted.append(t.format(a=b, b=a))
    return clean, corrupted


# Where each benchmarked HF model keeps its attention output projection (its input is the
# concatenated per-head context), as a module path and as the nnsight envoy path (nnsight's
# ``output`` attribute is the module's output, so a submodule named ``output`` is ``E_output``).
MODELS = {
    "minilm": {"hf": lambda hf, l: hf.encoder.layer[l].attention.output.dense,
               "nnsight": lambda nn, l: nn.encoder.layer[l].attention.E_output.dense},
    "all-mpnet-base-v2": {"hf": lambda hf, l: hf.encoder.layer[l].attention.attn.o,
                          "nnsight": lambda nn, l: nn.encoder.layer[l].attention.attn.o},
}


UNIT_CALLS = 10


def best(times: dict, key: str, seconds: float):
    times[key] = min(times.get(key, np.inf), seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heads-per-step", type=int, default=12)
    args = parser.parse_args()

    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import jax
    import torch
    from nnsight import NNsight
    from transformers import AutoModel

    from jattn import artefacts
    from jattn.models.load import default_model_path
    from jattn.nn import encoder
    from jattn.nn.engine import layer_views
    from jattn.sweeps.patching import _attribution, agreement, paired_inputs

    torch.set_num_threads(2)
    if args.model == "minilm":
        model, folder = jattn.load(), default_model_path()
    else:
        model, folder = jattn.load(args.model), artefacts.path(args.model)
    c = model.config
    L, H = c.num_layers, c.num_heads
    d = c.hidden_size // H
    clean, corrupted = pairs(args.pairs)
    w = np.random.default_rng(1).normal(size=c.hidden_size)
    w /= np.linalg.norm(w)
    w32, wt = w.astype(np.float32), torch.tensor(w, dtype=torch.float32)

    def metric(out):
        return out["last_hidden_state"][:, 0] @ w32

    a, b = paired_inputs(model, clean, corrupted)
    hf = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    ta, tb = ({k: torch.tensor(v, dtype=torch.long) for k, v in x.items()} for x in (a, b))
    projections = [MODELS[args.model]["hf"](hf, l) for l in range(L)]
    nn = NNsight(hf)
    envoy = MODELS[args.model]["nnsight"]

    def run_jattn():
        return jattn.patch_heads(model, a, b, metric, batch_size=args.pairs,
                                 heads_per_step=args.heads_per_step)["encoder"]

    def run_attribution():
        return jattn.attribution_patch_heads(model, a, b, metric, batch_size=args.pairs)["encoder"]

    def run_forward():
        return model.forward(b, internals=None).last_hidden_state.block_until_ready()

    def run_hooks():
        recorded, handles = {}, []
        for l, proj in enumerate(projections):
            handles.append(proj.register_forward_pre_hook(lambda m, x, l=l: recorded.__setitem__(l, x[0].clone())))
        with torch.no_grad():
            hf(**ta)
            for h in handles:
                h.remove()
            base = hf(**tb).last_hidden_state[:, 0] @ wt
            out = np.zeros((L, H))
            for l, proj in enumerate(projections):
                for h in range(H):
                    def replace(m, x, s=slice(h * d, (h + 1) * d), src=recorded[l]):
                        x = x[0].clone()
                        x[..., s] = src[..., s]
                        return (x,)

                    handle = proj.register_forward_pre_hook(replace)
                    out[l, h] = float((hf(**tb).last_hidden_state[:, 0] @ wt - base).mean())
                    handle.remove()
        return out

    def run_nnsight():
        # values leave a trace through containers made outside it (names bound inside a function's
        # trace block do not reach the function's frame)
        saved, box = [], {}
        with torch.no_grad():
            with nn.trace(**ta):
                for l in range(L):
                    saved.append(envoy(nn, l).input.save())
            with nn.trace(**tb):
                box["base"] = nn.output.last_hidden_state[:, 0].save()
            out = np.zeros((L, H))
            for l in range(L):
                for h in range(H):
                    with nn.trace(**tb):
                        x = envoy(nn, l).input
                        x[..., h * d:(h + 1) * d] = saved[l][..., h * d:(h + 1) * d]
                        box["patched"] = nn.output.last_hidden_state[:, 0].save()
                    out[l, h] = float(((box["patched"] - box["base"]) @ wt).mean())
        return out

    def flops(fn, *args):
        cost = fn.lower(*args).compile().cost_analysis()
        return float((cost[0] if isinstance(cost, list) else cost)["flops"])

    # The work attribution patching cannot avoid, in forwards: a clean forward (the heads'
    # outputs), a corrupted forward and a backward to the activations (about one forward's
    # products: no parameter gradients), i.e. about 3 less what no output needs (the clean pass's
    # last FFN, the backward's first-layer scores); XLA's count of its floating-point operations
    # over the forward's is that bound for this model and input (both unrolled: XLA counts a loop
    # body once).
    jb = {k: jax.numpy.asarray(v) for k, v in b.items()}
    forward_flops = flops(jax.jit(lambda p, x: encoder.forward(p, c, x, None, internals=None,
                                                               unroll=True)[0]["last_hidden_state"]),
                          model.params, jb)
    attribution_flops = flops(_attribution, model.layer_views(), c, {k: jax.numpy.asarray(v) for k, v in a.items()}, jb,
                              metric, None)

    # what Model.layer_views saves on each call after the first
    views_seconds = min(timeit.repeat(lambda: layer_views(model.params), number=1, repeat=20))
    runs = {"jattn_exact": run_jattn, "torch_hooks": run_hooks, "nnsight": run_nnsight,
            "jattn_attribution": run_attribution, "jattn_forward": run_forward}
    short = ("jattn_attribution", "jattn_forward")  # their ratio is the forward-equivalents
    results = {k: f() for k, f in runs.items()}  # warm-up: compiles, first-touch allocations
    times, faults = {}, {}
    for _ in range(args.rounds):
        for call in range(UNIT_CALLS):
            for key, f in runs.items():
                if call > 0 and key not in short:
                    continue
                f0, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
                results[key] = jax.block_until_ready(f())
                best(times, key, time.perf_counter() - start)
                faults[key] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0  # the same every call
    exact, hooks, ns = (np.asarray(results[k]) for k in ("jattn_exact", "torch_hooks", "nnsight"))
    faster = min(times["torch_hooks"], times["nnsight"])
    record = {
        "model": "all-MiniLM-L6-v2" if args.model == "minilm" else args.model, "pairs": args.pairs,
        "tokens": int(a["input_ids"].shape[1]),
        "layers": L, "heads": H, "heads_per_step": args.heads_per_step, "rounds": args.rounds,
        "seconds": {k: round(v, 4) for k, v in times.items()},
        "minor_page_faults": faults,
        "layer_views_seconds_uncached": round(views_seconds, 5),
        "freed_memory_kept": jattn.host_memory.KEPT,  # for every library in this process
        "speedup_vs_torch_hooks": round(times["torch_hooks"] / times["jattn_exact"], 2),
        "speedup_vs_nnsight": round(times["nnsight"] / times["jattn_exact"], 2),
        "speedup_vs_faster_of_the_two": round(faster / times["jattn_exact"], 2),
        "prefix_reuse_bound": round(2 * L / (L + 1), 3),
        "attribution_forward_equivalents": round(times["jattn_attribution"] / times["jattn_forward"], 2),
        "attribution_flops_in_forwards": round(attribution_flops / forward_flops, 2),
        "attribution_speedup_vs_torch_hooks": round(times["torch_hooks"] / times["jattn_attribution"], 1),
        "attribution_vs_exact": agreement(results["jattn_attribution"], exact),
        "max_abs_diff_jattn_vs_torch_hooks": float(np.abs(exact - hooks).max()),
        "max_abs_diff_jattn_vs_nnsight": float(np.abs(exact - ns).max()),
        "largest_effect": float(np.abs(exact).max()),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "versions": {"jax": jax.__version__, "torch": torch.__version__,
                     "nnsight": __import__("nnsight").__version__},
    }
    name = "bench_patching.json" if args.model == "minilm" else f"bench_patching_{args.model}.json"
    out = REPO / "benchmarks" / "results" / name
    out.write_text(json.dumps(record, indent=2) + "\n")
    print("| what | seconds |\n| --- | --- |")
    for k, v in record["seconds"].items():
        print(f"| {k} | {v} |")
    print(json.dumps({k: v for k, v in record.items() if k != "seconds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
