"""Forward throughput with every attention weight returned: jattn vs Hugging Face PyTorch eager.

    .venv/bin/python benchmarks/bench_encoder.py [--repeats 5] [--out benchmarks/results/encoder.json]

Same inputs (batch 32 x 128 random token ids, no padding), same thread count (torch uses
``--threads``; XLA's CPU client uses the same cores), the two measured alternately in one run
so that machine load hits both alike. Models: the embedded MiniLM (6 x 12, D=384) and a
random bert-base-sized config (12 x 12, D=768). Reports tokens/s and the ratio (median of
``--repeats`` timed runs after a warm-up) for two jattn entry points:
  * ``Model.forward``: every internal returned to the caller (values, contexts, residuals, ...);
  * ``jit(forward) -> (hidden, attentions)``: what HF returns, as a user's own jitted function.
It also measures the ceiling that bounds any ratio: the FFN-shaped matmul (b·n, D) @ (D, 4D)
in XLA and in PyTorch, in GFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def alternate(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, run in turn ``repeats`` times after a warm-up."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def matmul_ceiling(rows: int, d: int, repeats: int) -> dict:
    """GFLOP/s of (rows, d) @ (d, 4d) in float32: XLA vs PyTorch."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    a, b = rng.random((rows, d), np.float32), rng.random((d, 4 * d), np.float32)
    ja, jb, ta, tb = jnp.asarray(a), jnp.asarray(b), torch.tensor(a), torch.tensor(b)
    mm = jax.jit(jnp.matmul)
    secs = alternate({"xla": lambda: mm(ja, jb).block_until_ready(), "torch": lambda: ta @ tb}, repeats)
    flops = 2 * rows * d * 4 * d
    return {f"{k}_matmul_gflops": flops / v / 1e9 for k, v in secs.items()}


def bench(folder: Path, batch_size: int, length: int, repeats: int) -> dict:
    from functools import partial

    import jax
    import torch
    from transformers import BertModel

    import jattn
    from jattn.nn import encoder

    model = jattn.load(folder, use_cache=False)
    oracle = BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, model.config.vocab_size, (batch_size, length)).astype(np.int32)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    torch_batch = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}

    def ours():
        out = model.forward(batch)
        return np.asarray(out.attentions)  # (L, b, H, n, n) on the host, all internals computed

    @partial(jax.jit, static_argnames="config")
    def slim(params, config, inputs):
        outputs, internals = encoder.forward(params, config, inputs)
        return outputs["last_hidden_state"], internals["weights"]

    inputs = model.check_batch(batch)

    def ours_slim():
        hidden, attentions = slim(model.params, model.config, inputs)
        return np.asarray(hidden), np.asarray(attentions)  # (b, n, D), (L, b, H, n, n)

    def theirs():
        with torch.inference_mode():
            out = oracle(**torch_batch, output_attentions=True)
        return [a.numpy() for a in out.attentions]

    secs = alternate({"jattn_forward": ours, "jattn_jit": ours_slim, "hf": theirs}, repeats)
    tokens = batch_size * length
    c = model.config
    result = {"model": f"L={c.num_layers} H={c.num_heads} D={c.hidden_size}", "batch": [batch_size, length],
              **{f"{k}_tokens_per_s": tokens / v for k, v in secs.items()}}
    result["ratio_forward"] = secs["hf"] / secs["jattn_forward"]
    result["ratio_jit"] = secs["hf"] / secs["jattn_jit"]
    result.update(matmul_ceiling(tokens, c.hidden_size, repeats))
    result["ratio_matmul"] = result["xla_matmul_gflops"] / result["torch_matmul_gflops"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default="benchmarks/results/encoder.json")
    args = parser.parse_args()
    import torch
    from transformers import BertConfig, BertModel

    from jattn.load import default_model_path

    torch.set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        base = Path(tmp) / "bert-base-random"
        BertModel(BertConfig()).save_pretrained(base)  # bert-base-uncased's shape, random weights
        for name, folder in (("all-MiniLM-L6-v2", default_model_path()), ("bert-base (random)", base)):
            if folder == base:
                for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                    (base / f).write_bytes((default_model_path() / f).read_bytes())
            r = {"name": name, **bench(folder, args.batch_size, args.length, args.repeats)}
            print(f"{name:20s} HF eager {r['hf_tokens_per_s']:6.0f} tok/s | jattn Model.forward "
                  f"{r['jattn_forward_tokens_per_s']:6.0f} ({r['ratio_forward']:.2f}x) | jattn jit "
                  f"{r['jattn_jit_tokens_per_s']:6.0f} ({r['ratio_jit']:.2f}x) | matmul XLA "
                  f"{r['xla_matmul_gflops']:.0f} vs torch {r['torch_matmul_gflops']:.0f} GFLOP/s "
                  f"({r['ratio_matmul']:.2f}x)")
            results.append(r)
    meta = {"threads": args.threads, "cpu": platform.processor() or platform.machine(), "repeats": args.repeats,
            "load_average_at_end": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
