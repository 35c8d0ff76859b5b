"""What returning the attention weights costs beyond the lean forward, and how much of it is fresh memory.

    .venv/bin/python benchmarks/bench_output_memory.py [--rounds 4] [--out benchmarks/results/output_memory.json]

MiniLM (the embedded model), 32 × 128 random token ids. Alternated in one process, each a median
of 8 calls per round: the lean forward (``internals=None``), ``internals=("weights",)`` into fresh
memory, and the same with ``recycle=`` the previous result (its buffers donated, so α is written
into memory already mapped). Beside each time: the minor page faults a call takes
(``getrusage``), i.e. the 4 KiB pages the kernel maps on first write. The physical reference: numpy
writing α's bytes into an array already mapped (memory bandwidth alone). Whether freed memory is
kept for reuse (``jattn.host_memory``; ``JATTN_KEEP_FREED_MEMORY=0`` for glibc's default) is recorded:
with it, a fresh result takes the memory the previous one freed, and ``recycle=`` does not help.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np


def per_call(fn, calls: int = 8) -> tuple[float, float]:
    """Median seconds and minor page faults of ``fn`` over ``calls`` calls (after two warm-ups)."""
    fn(), fn()
    secs, faults = [], []
    for _ in range(calls):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return float(np.median(secs)), float(np.median(faults))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default="benchmarks/results/output_memory.json")
    args = parser.parse_args()

    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import jax

    model = jattn.load(use_cache=False)
    ids = np.random.default_rng(0).integers(1000, model.config.vocab_size, (32, 128)).astype(np.int32)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    previous = {}

    def recycled():
        out = model.forward(batch, internals=("weights",), recycle=previous.pop("out", None))
        jax.block_until_ready(out.attentions)
        previous["out"] = out

    c = model.config
    alpha = np.zeros(c.num_layers * 32 * c.num_heads * 128 * 128, np.float32)  # α's bytes, mapped once
    fns = {"lean": lambda: jax.block_until_ready(model.forward(batch, internals=None).last_hidden_state),
           "weights": lambda: jax.block_until_ready(model.forward(batch, internals=("weights",)).attentions),
           "weights_recycled": recycled,
           "numpy_rewrite_alpha_bytes": lambda: alpha.fill(1.0)}
    rounds = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, fn in fns.items():
            rounds[k].append(per_call(fn))
    result = {"alpha_mb": alpha.nbytes / 1e6, "rounds": args.rounds,
              "freed_memory_kept": jattn.host_memory.KEPT}
    for k, values in rounds.items():
        result[k] = {"seconds": float(np.median([s for s, _ in values])),
                     "minor_faults": float(np.median([f for _, f in values]))}
    lean = result["lean"]["seconds"]
    for k in ("weights", "weights_recycled"):
        result[k]["over_lean"] = result[k]["seconds"] / lean
        result[k]["extra_faults"] = result[k]["minor_faults"] - result["lean"]["minor_faults"]
    for k in fns:
        r = result[k]
        print(f"{k:26s} {r['seconds'] * 1e3:7.1f} ms  {r['minor_faults']:7.0f} faults/call"
              + (f"  ÷ lean {r['over_lean']:.3f} ({r['extra_faults']:+.0f} faults)" if "over_lean" in r else ""))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
