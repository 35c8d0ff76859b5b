"""Where attribution patching's time goes: XLA's own per-operation times (``jax.profiler``) of the
corrupted forward and of the gradient that attribution patching takes (the corrupted forward with
a zero patch of every head's context, and the backward to those patches), on the inputs of
``bench_patching.py`` (MiniLM, 16 name-swap pairs):

    .venv/bin/python benchmarks/profile_attribution.py [--calls 10]   (run from benchmarks/)

Prints, per program, the operation time per call summed over XLA's threads and grouped by kind
(``ynn_fusion``: the matrix products, run by YNNPACK; the rest: slices, copies, zero-filled
buffers, element-wise fusions). The backward's products are what the floating-point count
predicts; what this separates is how much of the rest is the products and how much moving data.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import tempfile
from pathlib import Path

import numpy as np

from bench_patching import pairs  # benchmarks/ (the scripts run from their folder)


def op_times(trace_dir: Path, calls: int) -> collections.Counter:
    """{operation kind: ms per call} from a perfetto trace: XLA's operation events (the host-side
    spans, named with a ``$`` or after the runtime's own classes, left out)."""
    with gzip.open(next(trace_dir.rglob("perfetto_trace.json.gz"))) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    kinds = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(("$", "Thunk", "Pjit", "Slinky", "Common", "Parse")):
            kinds[re.sub(r"\.\d+$", "", e["name"])] += e.get("dur", 0) / 1e3 / calls  # µs -> ms per call
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=16)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    import jattn
    from jattn.nn import encoder
    from jattn.nn.interventions import Interventions
    from jattn.sweeps.patching import call_metric, paired_inputs

    model = jattn.load()
    c, p = model.config, model.params
    a, b = (({k: jnp.asarray(v) for k, v in x.items()}) for x in paired_inputs(model, *pairs(args.pairs)))
    w = np.random.default_rng(1).normal(size=c.hidden_size).astype(np.float32)

    def metric(out):
        return out["last_hidden_state"][:, 0] @ w  # (b,)

    clean_contexts = jax.jit(lambda p, x: encoder.forward(p, c, x, None, internals=("context",))[1]["context"])
    contexts = clean_contexts(p, a)  # (L, b, H, n, d_h)

    def total(t, p, x, cx):  # t (L, b, H, 1): every head's patch to the clean cx on the corrupted x, 0 = corrupted
        out, _ = encoder.forward(p, c, x, Interventions(patch={"context": (cx, t)}), internals=None)
        return call_metric(metric, out, None).sum()

    # parameters and contexts as arguments, as jattn.attribution_patch_heads has them (XLA could lay constants out anew)
    t0 = jnp.zeros((*contexts.shape[:3], 1))  # (L, b, H, 1)
    forward = jax.jit(lambda p, x: encoder.forward(p, c, x, None, internals=None)[0]["last_hidden_state"])  # (b, n, D)
    programs = {"forward": (forward, (p, b)),
                "gradient": (jax.jit(lambda t, p, x, cx: jax.grad(total)(t, p, x, cx)), (t0, p, b, contexts))}
    for name, (fn, inputs) in programs.items():
        jax.block_until_ready(fn(*inputs))  # compiled and warm
        with tempfile.TemporaryDirectory() as tmp:
            jax.profiler.start_trace(tmp, create_perfetto_trace=True)
            for _ in range(args.calls):
                jax.block_until_ready(fn(*inputs))
            jax.profiler.stop_trace()
            kinds = op_times(Path(tmp), args.calls)
        print(f"{name}: {sum(kinds.values()):.1f} ms of operations a call")
        for kind, ms in kinds.most_common(10):
            print(f"  {ms:6.1f} ms  {kind}")


if __name__ == "__main__":
    main()
