"""What keeping freed memory (``jattn.host_memory``) costs code outside XLA: a fast tokenizer's
batch call, whose threads allocate many small strings (with one arena for every thread, the
setting's first form, they shared its lock and the call took 1.71× as long).

    .venv/bin/python benchmarks/bench_host_memory.py [--sentences 60000] [--repeats 5]
        [--out benchmarks/results/host_memory.json]

Each setting runs in a fresh interpreter (``JATTN_KEEP_FREED_MEMORY`` 1 and 0, alternated twice,
since ``malloc`` is set up on import): the embedded MiniLM's tokenizer (HF ``tokenizers``, its
thread pool on every core) on ``--sentences`` random 8-24-word sentences of its vocabulary,
padded and cut to 64 tokens; the fastest of ``--repeats`` calls. What the setting gains inside
XLA is in ``bench_patching.py``, ``bench_mpnet.py`` and ``bench_output_memory.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys, time
import numpy as np
import jattn
jattn.host_memory.keep_freed_memory()
from transformers import AutoTokenizer
from jattn.models.load import default_model_path
n, repeats = int(sys.argv[1]), int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(str(default_model_path()))
words = [w for w in tok.get_vocab() if w.isalpha()]
rng = np.random.default_rng(0)
lines = [" ".join(rng.choice(words, rng.integers(8, 25))) for _ in range(n)]
best = float("inf")
for _ in range(repeats):
    start = time.perf_counter()
    tok(lines, padding=True, truncation=True, max_length=64)
    best = min(best, time.perf_counter() - start)
print(jattn.host_memory.KEPT, best)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=60000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/host_memory.json")
    args = parser.parse_args()
    seconds = {"kept": [], "glibc_default": []}
    for _ in range(2):
        for keep, name in (("1", "kept"), ("0", "glibc_default")):
            out = subprocess.run([sys.executable, "-c", PROBE, str(args.sentences), str(args.repeats)],
                                 env={**os.environ, "JATTN_KEEP_FREED_MEMORY": keep}, capture_output=True,
                                 text=True, check=True).stdout.split()
            assert out[0] == ("True" if keep == "1" else "False"), out
            seconds[name].append(float(out[1]))
    record = {"sentences": args.sentences, "repeats": args.repeats, "tokenizer_seconds": seconds,
              "kept_over_default": min(seconds["kept"]) / min(seconds["glibc_default"]),
              "cores": os.cpu_count()}
    print(json.dumps(record, indent=1))
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
