"""Where attribution patching's time goes: XLA's own per-operation times (``jax.profiler``) of the
forward that is bench_patching's unit and of the whole attribution program (the clean pass, the
corrupted pass and the backward to every head's patch, ``jattn.sweeps.patching._attribution``), on
the inputs of ``bench_patching.py`` (MiniLM, 16 name-swap pairs):

    .venv/bin/python benchmarks/profile_attribution.py [--calls 10]   (run from benchmarks/)

Prints, per program, the wall time and the operation time per call summed over XLA's threads,
grouped by kind (``ynn_fusion``: the matrix products, run by YNNPACK; the rest: slices, copies,
element-wise fusions). Set beside the floating-point count, this separates how much of the time
above it is the products running slower and how much is moving data.
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_patching import pairs  # benchmarks/ (the scripts run from their folder)
from profile_hlo import CONTROL, hlo_op_times


def op_times(trace_dir: Path, calls: int) -> collections.Counter:
    """{operation kind: ms per call} from a perfetto trace: XLA's operation events
    (``profile_hlo.hlo_op_times``) by instruction name less its number; control flow left out (a
    ``while``'s event spans its body's events)."""
    kinds = collections.Counter()
    for name, (ms, _) in hlo_op_times(trace_dir, calls).items():
        if name.split(".")[0] not in CONTROL:
            kinds[re.sub(r"\.\d+$", "", name)] += ms
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=16)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.nn import encoder
    from jattn.nn.engine import layer_views
    from jattn.sweeps.patching import _attribution, paired_inputs

    model = jattn.load()
    c, p = model.config, model.params
    a, b = (({k: jnp.asarray(v) for k, v in x.items()}) for x in paired_inputs(model, *pairs(args.pairs)))
    w = np.random.default_rng(1).normal(size=c.hidden_size).astype(np.float32)

    def metric(out):
        return out["last_hidden_state"][:, 0] @ w  # (b,)

    forward = jax.jit(lambda p, x: encoder.forward(p, c, x, None, internals=None)[0]["last_hidden_state"])  # (b, n, D)
    programs = {"forward": (forward, (p, b)),
                "attribution": (lambda v, a, b: _attribution(v, c, a, b, metric, None), (layer_views(p), a, b))}
    for name, (fn, inputs) in programs.items():
        jax.block_until_ready(fn(*inputs))  # compiled and warm
        with tempfile.TemporaryDirectory() as tmp:
            jax.profiler.start_trace(tmp, create_perfetto_trace=True)
            start = time.perf_counter()
            for _ in range(args.calls):
                jax.block_until_ready(fn(*inputs))
            wall = (time.perf_counter() - start) / args.calls * 1e3
            jax.profiler.stop_trace()
            kinds = op_times(Path(tmp), args.calls)
        print(f"{name}: {wall:.1f} ms a call, {sum(kinds.values()):.1f} ms of operations")
        for kind, ms in kinds.most_common(10):
            print(f"  {ms:6.1f} ms  {kind}")


if __name__ == "__main__":
    main()
