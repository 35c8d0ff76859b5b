"""The all-internals forward alone, for an A/B of two checkouts: MiniLM (the embedded model), 32 ×
128 random token ids, ``Model.forward`` with every internal and its attention weights fetched to
the host (what ``bench_encoder.py`` times as ``jattn_forward``), the median of ``--calls`` calls
after 3 warm-up calls. No baseline in the process, so nothing but this call's own variation
enters; run it alternately in the two checkouts, several times each:

    for r in 1 2 3 4 5; do for v in before after; do
        (cd /tmp/$v && PYTHONPATH=$PWD python benchmarks/ab_forward.py --label $v); done; done
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--label", default="")
    args = p.parse_args()
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured

    model = jattn.load()
    ids = np.random.default_rng(0).integers(1000, 20000, (32, 128))
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    for _ in range(3):
        np.asarray(model.forward(batch).attentions)  # (L, b, H, n, n)
    seconds = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        np.asarray(model.forward(batch).attentions)
        seconds.append(time.perf_counter() - t0)
    print(f"{args.label} {1000 * np.median(seconds):.0f} ms", flush=True)


if __name__ == "__main__":
    main()
