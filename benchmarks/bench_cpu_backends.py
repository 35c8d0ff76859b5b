"""Which GEMM backend and chunk size serve the forward best on this CPU: XLA:CPU's dot backends
(YNNPACK fusions, its default; the Eigen dots with them off; the XNNPACK and oneDNN options) and
the encoder's chunk size, each in a fresh process, alternated over rounds on the same machine.

    .venv/bin/python benchmarks/bench_cpu_backends.py [--rounds 2] [--calls 10]
        [--out benchmarks/results/cpu_backends_<cpu>.json]

(from the repository root, on a quiet machine). Per variant: the GEMM rate (GFLOP/s, fastest of
``--calls`` calls) of each of MiniLM's products at batch 32 × 128 whole (4,096 rows, the batched
attention products (384, 128, 32) × (384, 32, 128) and (384, 128, 128) × (384, 128, 32)) and per
1,024-row chunk (the encoder's default chunk on CPU, ``jattn.nn.engine``), and the lean forward
(``Model.forward(internals=None)``, fastest and median of ``--calls``). XLA reads its flags when it
starts, so each variant is its own process; the rounds alternate the variants, so a drift of the
machine's speed hits them alike. The flags are XLA's and process-wide: jattn sets none, a user
chooses them with ``XLA_FLAGS`` before JAX starts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {  # name -> XLA_FLAGS
    "default (YNNPACK dots)": "",
    "Eigen dots (YNNPACK off)": "--xla_cpu_experimental_ynn_fusion_type=",
    "XNNPACK on": "--xla_cpu_use_xnnpack=true",
    "oneDNN dot fusions": "--xla_cpu_experimental_onednn_fusion_type=dot",
}
CHUNKS = (1024, 2048, 0)  # token rows a layer runs at once (0: the whole batch)
SHAPES = [((4096, 384), (384, 384)), ((4096, 384), (384, 1536)), ((4096, 1536), (1536, 384)),
          ((384, 128, 32), (384, 32, 128)), ((384, 128, 128), (384, 128, 32)),
          ((1024, 384), (384, 384)), ((1024, 384), (384, 1536)), ((1024, 1536), (1536, 384)),
          ((96, 128, 32), (96, 32, 128)), ((96, 128, 128), (96, 128, 32))]


def probe(calls: int) -> dict:
    """In this process (its XLA_FLAGS and JATTN_CHUNK_ROWS already set): each product's GEMM rate and
    the lean forward."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jattn

    mm, rng, rates = jax.jit(jnp.matmul), np.random.default_rng(0), {}
    for sa, sb in SHAPES:
        a, b = jnp.asarray(rng.random(sa, np.float32)), jnp.asarray(rng.random(sb, np.float32))
        mm(a, b).block_until_ready()
        best = min(timed(lambda: mm(a, b).block_until_ready()) for _ in range(calls))
        rates[f"{sa} x {sb}"] = 2 * float(np.prod(sa)) * sb[-1] / best / 1e9
    model = jattn.load()
    ids = rng.integers(1000, 20000, size=(32, 128))  # (b, n) random ids, as bench_encoder.py uses
    batch = {"input_ids": jnp.asarray(ids), "attention_mask": jnp.ones((32, 128), jnp.int32)}
    lean = lambda: jax.block_until_ready(model.forward(batch, internals=None).last_hidden_state)
    lean()
    times = [timed(lean) for _ in range(calls)]
    return {"gemm_gflops": rates, "lean_fastest_s": min(times), "lean_median_s": statistics.median(times)}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--out", help="the JSON (default benchmarks/results/cpu_backends_<cpu>.json)")
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)  # a child process: its chunk rows
    args = parser.parse_args(argv)
    if args.probe is not None:
        os.environ["JATTN_CHUNK_ROWS"] = str(args.probe)  # read when the forward is traced
        print(json.dumps(probe(args.calls)))
        return {}
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    from bench_encoder import cpu_model, cpu_slug  # benchmarks/ (the scripts run from their folder)

    cpu = cpu_model()
    out = Path(args.out or f"benchmarks/results/cpu_backends_{cpu_slug()}.json")
    runs = {f"{v} | chunk {c}": [] for v in args.variants for c in CHUNKS}
    load_start = os.getloadavg()
    for r in range(args.rounds):
        for key in runs:
            variant, chunk = key.split(" | chunk ")
            env = dict(os.environ, XLA_FLAGS=VARIANTS[variant])
            done = subprocess.run([sys.executable, __file__, "--probe", chunk, "--calls", str(args.calls)],
                                  env=env, capture_output=True, text=True, check=True)
            runs[key].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}: {key}: lean {runs[key][-1]['lean_fastest_s'] * 1e3:.0f} ms", flush=True)
    median = lambda rs, f: statistics.median(f(x) for x in rs)  # noqa: E731  over the rounds
    summary = {key: {"lean_fastest_ms": median(rs, lambda x: x["lean_fastest_s"]) * 1e3,
                     "gemm_gflops": {s: median(rs, lambda x: x["gemm_gflops"][s]) for s in rs[0]["gemm_gflops"]}}
               for key, rs in runs.items()}
    result = {"machine": {"cpu": cpu, "cores": os.cpu_count(), "load_average_at_start": load_start,
                          "load_average_at_end": os.getloadavg(), "python": platform.python_version()},
              "variants": VARIANTS, "summary": summary, "runs": runs,
              "command": "python benchmarks/bench_cpu_backends.py " + " ".join(argv or sys.argv[1:])}
    out.write_text(json.dumps(result, indent=1))
    for key, s in summary.items():
        rates = " ".join(f"{v:4.0f}" for v in s["gemm_gflops"].values())
        print(f"{key:45s} lean {s['lean_fastest_ms']:6.0f} ms   GFLOP/s {rates}")
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
