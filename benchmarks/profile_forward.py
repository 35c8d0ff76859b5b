"""Where the forward's time goes, jattn (XLA) beside Hugging Face eager (PyTorch), on one batch, on any CPU.

    .venv/bin/python benchmarks/profile_forward.py [--tiny] [--calls 3] [--repeats 3]
        [--batch-size 32] [--length 128] [--out benchmarks/results/profile_forward_<cpu>.json]

(from the repository root). Model: the embedded MiniLM (``jattn.load()``), batch 32 × 128 random
ids as ``bench_encoder.py`` uses; ``--tiny``: a random 2-layer BERT (D 32) on 2 × 16 ids, seconds.
Programs, each profiled over ``--calls`` calls after a warm-up:
  * jattn: the lean forward and the forward with every internal (``Model.forward``'s own jitted
    program, ``internals=None`` / ``"all"``); one importance step (the gradient w.r.t. per-token
    head gates of Σ [CLS]·w, ``jattn.sweeps.importance.gate_sums``); one attribution-patching step
    (``jattn.sweeps.patching._attribution``, the corrupted batch: the first half of the ids resampled);
  * HF eager: ``model(**batch, output_attentions=True)`` and the lean ``model(**batch)``.
XLA side: each ``jax.profiler`` trace event is an HLO instruction of the compiled module
(``lower().compile().as_text()``), classified by what it computes (``Hlo.group``): GEMM, softmax,
normalisation, activation, copies/transposes, internals written, other element-wise. The times are
thunk times summed over the threads that ran XLA's operations (concurrent thunks add; a GEMM's own
worker threads do not), beside each program's wall time. PyTorch side: ``torch.profiler``'s self
CPU time per operator (the calling thread: wall time of each operator), mapped to the same groups.
Bounds: GEMM FLOPs at each library's measured GEMM rate on the forward's shapes
(``bench_encoder.gemm_bound``), every other group's bytes (its operands and results: HLO shapes;
PyTorch's recorded input shapes, float32) at each library's streaming bandwidth (y = x + 1 on
128 MB). Writes ``--out`` (JSON) and prints the table; the machine (CPU model, cores, load average
at start and end: a load above the core count means other jobs shared the CPUs) and versions.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_encoder import alternate, cpu_model, cpu_slug, gemm_bound  # benchmarks/ (the scripts import each other)
from peak_memory import fastest
from profile_hlo import GROUPS, Hlo, hlo_op_times


def empty_groups() -> dict:
    return {g: {"ms": 0.0, "gflop": 0.0, "mb": 0.0} for g in GROUPS}


def xla_profile(compiled, args: tuple, calls: int) -> dict:
    """Per-group ms per call (thunk time), GFLOP and MB of ``compiled(*args)`` (``jit(f).lower(..).compile()``);
    its 12 longest instructions."""
    import jax

    hlo = Hlo(compiled.as_text())
    jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp, create_perfetto_trace=True)
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))
        jax.profiler.stop_trace()
        times = hlo_op_times(Path(tmp), calls, hlo.module)
    groups, top, written = empty_groups(), [], hlo.written()
    for name, (ms, per_call) in times.items():
        if (g := hlo.group(name, written)) is None:
            continue
        s = groups[g]
        s["ms"] += ms
        s["gflop"] += hlo.flops(name) * per_call / 1e9
        s["mb"] += hlo.bytes(name) * per_call / 1e6
        top.append([name, g, ms])
    return {"groups": groups, "top": sorted(top, key=lambda t: -t[2])[:12]}


TORCH_GROUPS = [("GEMM", r"addmm|mm|bmm|baddbmm|matmul|linear|einsum"), ("softmax", r"_?(log_)?softmax"),
                ("normalisation", r"(native_)?(layer|rms)_norm"), ("activation", r"gelu|tanh|sigmoid|silu|relu"),
                ("copies/transposes", r"copy_|clone|contiguous|cat|transpose|permute|t|view|_unsafe_view|reshape|"
                                      r"expand|as_strided|slice|select|unsqueeze|squeeze|split|narrow|detach|alias")]
VIEWS = re.compile(r"transpose|permute|t|view|_unsafe_view|reshape|expand|as_strided|slice|select|unsqueeze|"
                   r"squeeze|split|narrow|detach|alias")


def torch_profile(fn, calls: int) -> dict:
    """``xla_profile``'s record for a PyTorch callable: ``torch.profiler``'s self CPU time per aten
    operator; bytes from the recorded input shapes (float32; a view moves none; an element-wise
    result the size of the first input; ``copy_`` its two inputs)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for _ in range(calls):
            fn()
    groups, top = empty_groups(), collections.Counter()
    for e in prof.key_averages(group_by_input_shape=True):
        if not e.key.startswith("aten::"):
            continue
        op = e.key[len("aten::"):]
        g = next((g for g, p in TORCH_GROUPS if re.fullmatch(p, op)), "other element-wise")
        sizes = [4 * math.prod(s) for s in e.input_shapes if s and all(isinstance(d, int) for d in s)]
        moved = 0 if VIEWS.fullmatch(op) else sum(sizes) + (sizes[0] if sizes and op != "copy_" else 0)
        s = groups[g]
        s["ms"] += e.self_cpu_time_total / 1e3 / calls
        s["gflop"] += e.flops / 1e9 / calls
        s["mb"] += moved * e.count / calls / 1e6
        top[(e.key, g)] += e.self_cpu_time_total / 1e3 / calls
    return {"groups": groups, "top": [[k, g, ms] for (k, g), ms in top.most_common(12)]}


def bandwidth(megabytes: int, repeats: int) -> dict:
    """GB/s of y = x + 1 over ``megabytes`` of float32 (read + write), fastest call, in each library."""
    import jax
    import torch

    x = np.ones(megabytes * 2**18, np.float32)
    moved = 2 * x.nbytes / 1e9
    t, out = torch.from_numpy(x), torch.empty(x.shape)
    xla = fastest(lambda f=jax.jit(lambda v: v + 1.0), v=jax.numpy.asarray(x): f(v).block_until_ready(), repeats)
    return {"torch_bandwidth_gb_s": moved / fastest(lambda: torch.add(t, 1.0, out=out), repeats),
            "xla_bandwidth_gb_s": moved / xla, "bandwidth_megabytes": megabytes}


def programs(model, batch: dict, oracle, tiny: bool):
    """({name: (fn, args)} jitted jattn programs, {name: fn} PyTorch ones) on ``batch``."""
    import jax.numpy as jnp
    import torch

    from jattn.models.encoder import _forward
    from jattn.nn import encoder
    from jattn.nn.interventions import Interventions
    from jattn.sweeps.importance import gate_sums
    from jattn.sweeps.patching import _attribution

    c, x = model.config, model.check_batch(batch)
    iv = model.check_interventions(None, x["attention_mask"].shape)
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.normal(size=c.hidden_size).astype(np.float32))
    ids = np.array(batch["input_ids"])
    half = ids[:, 1:ids.shape[1] // 2]  # (b, n/2 - 1) a view: the first half after [CLS] resampled
    half[...] = rng.integers(0 if tiny else 1000, c.vocab_size, half.shape)
    corrupted = model.check_batch({**batch, "input_ids": ids})

    def metric(out):
        return out["last_hidden_state"][:, 0] @ w  # (b,) [CLS] · w

    def importance(params, x):  # Σ|ξ ∂L/∂ξ| per head at token gates, as jattn.importance runs a custom loss
        b = x["input_ids"].shape[0]

        def total(gates):
            out, _ = encoder.forward(params, c, x, Interventions(head_gates=gates["encoder"]), internals=None)
            return metric(out).sum()

        masks = {"encoder": jnp.ones((b, c.num_layers, c.num_heads))}  # (b, L, H) every head kept
        return gate_sums(total, masks, {"encoder": x["attention_mask"] > 0}, jnp.ones(b, bool), "token")

    jattn_programs = {
        "jattn lean": (lambda p, x, iv: _forward(p, c, x, iv, jnp.float32, ()), (model.forward_params(), x, iv)),
        "jattn all internals": (
            lambda p, x, iv: _forward(p, c, x, iv, jnp.float32, "all"),
            (model.forward_params(), x, iv),
        ),
        "jattn importance": (importance, (model.params, x)),
        "jattn attribution": (
            lambda v, a, b: _attribution(v, c, a, b, metric, None),
            (model.layer_views(), x, corrupted),
        ),
    }
    tb = {k: torch.tensor(np.asarray(v), dtype=torch.long) for k, v in batch.items()}

    def hf(**kw):
        with torch.inference_mode():
            return oracle(**tb, **kw)

    return jattn_programs, {"HF attentions": lambda: hf(output_attentions=True), "HF lean": hf}


def tiny_bert(folder: Path) -> Path:
    """A random 2-layer BERT (4 heads, D 32, FFN 48, vocabulary 1,000) saved to ``folder``."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=64)).save_pretrained(folder)
    return folder


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="a random 2-layer BERT on 2 x 16 ids (the test's shape; overrides the shape flags)")
    parser.add_argument("--calls", type=int, default=3, help="profiled calls per program, after a warm-up")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls for the wall times and the GEMM rates")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="PyTorch's threads")
    parser.add_argument("--out", help="the JSON (default benchmarks/results/profile_forward_<cpu>[_tiny].json)")
    args = parser.parse_args(argv)
    for flag in ("calls", "repeats", "batch_size", "length", "threads"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.tiny:
        args.batch_size, args.length = 2, 16
    args.out = Path(args.out or f"benchmarks/results/profile_forward_{cpu_slug()}{'_tiny' if args.tiny else ''}.json")
    if args.out.is_dir():
        parser.error(f"--out {args.out} is a folder. Fix: give a file name ending in .json")
    return args


def versions() -> dict:
    import jax
    import jaxlib
    import torch
    import transformers

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "transformers": transformers.__version__}


def main(argv=None) -> dict:
    args = parse(argv)
    load_at_start = os.getloadavg()
    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import jax
    import torch
    from transformers import BertModel

    from jattn.models.load import default_model_path

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_bert(Path(tmp) / "tiny") if args.tiny else default_model_path()
        model = jattn.load(folder, tokenizer=False, use_cache=False)
        oracle = BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    c = model.config
    ids = np.random.default_rng(0).integers(0 if args.tiny else 1000, c.vocab_size, (args.batch_size, args.length))
    batch = {"input_ids": ids.astype(np.int32), "attention_mask": np.ones_like(ids, np.int32),
             "token_type_ids": np.zeros_like(ids, np.int32)}
    ours, theirs = programs(model, batch, oracle, args.tiny)
    compiled = {name: jax.jit(fn).lower(*inputs).compile() for name, (fn, inputs) in ours.items()}
    profiles = {name: xla_profile(f, ours[name][1], args.calls) for name, f in compiled.items()}
    profiles.update({name: torch_profile(fn, args.calls) for name, fn in theirs.items()})
    calls = {name: (lambda f=f, a=ours[name][1]: jax.block_until_ready(f(*a))) for name, f in compiled.items()}
    walls = alternate({**calls, **theirs}, args.repeats)
    rates = gemm_bound(c, args.batch_size, args.length, args.repeats, calls["jattn lean"], rounds=2)
    rates.update(bandwidth(4 if args.tiny else 128, args.repeats))
    for name, p in profiles.items():
        side = "torch" if name.startswith("HF") else "xla"
        gflops, gb_s = rates[f"{side}_gemm_gflops"], rates[f"{side}_bandwidth_gb_s"]
        for g, s in p["groups"].items():
            s["bound_ms"] = 1e3 * (s["gflop"] / gflops if g == "GEMM" else s["mb"] / 1e3 / gb_s)
            s["of_bound"] = s["bound_ms"] / s["ms"] if s["ms"] else None
        p.update(library=side, wall_ms=1e3 * walls[name], ops_ms=sum(s["ms"] for s in p["groups"].values()))
    load_at_end, cores = os.getloadavg(), os.cpu_count()
    record = {
        "model": "random BERT L=2 H=4 D=32 (--tiny)" if args.tiny else "all-MiniLM-L6-v2",
        "shape": f"L={c.num_layers} H={c.num_heads} D={c.hidden_size} F={c.intermediate_size}",
        "batch": [args.batch_size, args.length], "calls": args.calls, "repeats": args.repeats,
        "machine": {"cpu": cpu_model(), "cores": cores, "torch_threads": args.threads,
                    "load_average_at_start": load_at_start, "load_average_at_end": load_at_end,
                    "shared": max(load_at_start[0], load_at_end[0]) > cores,
                    "freed_memory_kept": jattn.host_memory.KEPT},
        "versions": versions(), "rates": {k: v for k, v in rates.items() if k != "bound_rounds"},
        "programs": profiles,
        "times": "ms per call; XLA: thunk time summed over its threads; PyTorch: self CPU time of the calling thread",
        "command": "python benchmarks/profile_forward.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(f".{args.out.name}.partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, args.out)  # never a half-written profile
    report(record)
    return record


def report(r: dict) -> None:
    """The table: per group and program, ms per call and the share of it the bound explains."""
    m, names = r["machine"], list(r["programs"])
    print(f"{r['model']} ({r['shape']}), batch {r['batch'][0]} x {r['batch'][1]}; {m['cpu']}, {m['cores']} cores, "
          f"load {m['load_average_at_start'][0]:.1f} -> {m['load_average_at_end'][0]:.1f}; "
          + ", ".join(f"{k} {v}" for k, v in r["versions"].items()))
    if m["shared"]:
        print("NOTE: the load average exceeded the core count: other jobs shared the CPUs; not a quiet profile")
    q = r["rates"]
    print(f"GEMM rates: XLA {q['xla_gemm_gflops']:.0f}, torch {q['torch_gemm_gflops']:.0f} GFLOP/s; bandwidth: "
          f"XLA {q['xla_bandwidth_gb_s']:.1f}, torch {q['torch_bandwidth_gb_s']:.1f} GB/s. Cells: ms per call "
          f"(bound / time). {r['times']}")
    print(f"{'group':20s}" + "".join(f"{n:>22s}" for n in names))
    for g in GROUPS:
        cells = [r["programs"][n]["groups"][g] for n in names]
        print(f"{g:20s}" + "".join(f"{s['ms']:12.2f} ({s['of_bound']:5.0%})" if s["ms"] else f"{'-':>22s}"
                                   for s in cells))
    for key, label in (("ops_ms", "sum of operations"), ("wall_ms", "wall (median)")):
        print(f"{label:20s}" + "".join(f"{r['programs'][n][key]:22.2f}" for n in names))


if __name__ == "__main__":
    main()
