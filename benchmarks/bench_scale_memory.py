"""Memory at scale: the peak host memory of an analysis or a sweep on a large causal LM, above the
loaded model, beside the bound a layerwise run needs (one layer's attention weights, α (b, H, n, n)
float32, and the checkpoint).

    python benchmarks/bench_scale_memory.py --case lm-attention --tokens 4096
    python benchmarks/bench_scale_memory.py --case importance --tokens 1024

The checkpoint is ``benchmarks/bench_scale.py``'s (``--shape 0.67b``: hidden 2,048, 12 layers, 32
heads, 8 KV heads, 1.34 GB in bfloat16; made once under ``--cache``), loaded by ``jattn.load`` in
its own dtype (``--dtype float32``: widened as it loads). Each case runs in a fresh interpreter
(``PROBE``): the imports, the load, then the resident set as the baseline, then one random text of
``--tokens`` tokens through ``run_corpus`` with ``LMAttention`` (``lm-attention``) or through
``jattn.importance`` (``importance``: every head's gradient, the next-token loss); the peak
(``VmHWM``) minus the baseline is reported. ``--compile`` reports instead XLA's buffer
assignment of the case's jitted step (``memory_analysis``: temporary bytes, without running it),
quick to compare at a mid-size length. ``--shape tiny`` runs in seconds (the test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import SHAPES, checkpoint_bytes, make_checkpoint  # noqa: E402

PROBE = r"""
import json, resource, sys, time
import numpy as np
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
folder, case, n, compile_only, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
import jax, jax.numpy as jnp, jattn
from jattn.analyses.lm_attention import LMAttention
from jattn.runner import loop
from jattn.sweeps.importance import HeadImportance
model = jattn.load(folder, tokenizer=False, **({} if dtype == "stored" else {"dtype": getattr(jnp, dtype)}))
jax.block_until_ready(jax.tree.leaves(model.params))
ids = np.random.default_rng(0).integers(3, model.config.vocab_size, (1, n)).astype(np.int32)
batch = {"input_ids": ids, "attention_mask": np.ones((1, n), np.int32)}
base = rss(); t0 = time.perf_counter()
method = LMAttention() if case == "lm-attention" else HeadImportance(model)
if compile_only:  # the step's buffers as XLA assigns them, not run
    from jattn.runner.batcher import batches
    from jattn.runner.inputs import corpus
    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    step, _, _ = loop.make_step(model, [method], mesh)
    host, _ = next(batches(model, corpus(model, batch, False), 1, n, False, False, (0, 1), 1, [], None))
    arrays = {k: v for k, v in host.arrays().items() if v is not None}
    m = step.lower(model.params, arrays, {method.name: method.prepare(host)}).compile().memory_analysis()
    out = {"temp_bytes": m.temp_size_in_bytes, "argument_bytes": m.argument_size_in_bytes,
           "output_bytes": m.output_size_in_bytes}
elif case == "lm-attention":
    loop.run_corpus(model, batch, [method], batch_size=1, max_length=n, progress=False)
    out = {}
else:
    jattn.importance(model, batch, batch_size=1, max_length=n, progress=False)
    out = {}
with open("/proc/self/status") as f:  # VmHWM, this program's peak: ru_maxrss keeps the parent's from before exec
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
c = model.config
print(json.dumps({**out, "seconds": time.perf_counter() - t0, "peak_above_model": peak - base,
                  "layer_weights_bytes": c.num_heads * n * n * 4, "loaded_bytes": base}))
"""


def measure(folder: Path, case: str, tokens: int, compile_only: bool, dtype: str = "stored") -> dict:
    """One case in a fresh interpreter (``PROBE``) -> its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this checkout's jattn
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder), case, str(tokens), str(int(compile_only)), dtype],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{case} at {tokens} tokens failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("lm-attention", "importance"), default="lm-attention")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--shape", choices=sorted(SHAPES["llama"]), default="0.67b")
    parser.add_argument("--compile", action="store_true", help="XLA's buffer sizes of the step, not run")
    parser.add_argument("--dtype", choices=("stored", "float32"), default="stored",
                        help="the parameters' dtype: the checkpoint's (bfloat16), or float32 (no per-program cast)")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("JATTN_CACHE", "~/.cache/jattn")).expanduser()
                        / "bench_scale")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    folder = make_checkpoint(args.shape, args.cache)
    r = {"case": args.case, "tokens": args.tokens, "shape": args.shape, "checkpoint_bytes": checkpoint_bytes(folder),
         "dtype": args.dtype,
         **measure(folder, args.case, args.tokens, args.compile, args.dtype)}
    gib = 2**30
    what = (f"temp {r['temp_bytes'] / gib:.2f} GiB" if args.compile else
            f"peak {r['peak_above_model'] / gib:.2f} GiB above the loaded model, {r['seconds']:.0f} s")
    print(f"{args.case} at {args.tokens} tokens: {what}; one layer's α {r['layer_weights_bytes'] / gib:.2f} GiB, "
          f"checkpoint {r['checkpoint_bytes'] / gib:.2f} GiB")
    if args.out:
        args.out.write_text(json.dumps(r, indent=1) + "\n")
    return r


if __name__ == "__main__":
    main()
