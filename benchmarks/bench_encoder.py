"""Forward throughput with every attention weight returned: jattn vs Hugging Face PyTorch eager.

    .venv/bin/python benchmarks/bench_encoder.py [--repeats 5] [--out benchmarks/results/encoder.json]

Same inputs (batch 32 x 128 random token ids, no padding), same thread count (torch uses
``--threads``; XLA's CPU client uses the same cores), the two measured alternately in one run
so that machine load hits both alike. Models: the embedded MiniLM (6 x 12, D=384) and a
random bert-base-sized config (12 x 12, D=768). Reports tokens/s and the ratio (median of
``--repeats`` timed runs after a warm-up).
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


def time_it(fn, repeats: int) -> list[float]:
    fn()  # warm-up (compiles jattn)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def bench(folder: Path, batch_size: int, length: int, repeats: int) -> dict:
    import jax
    import torch
    from transformers import BertModel

    import jattn

    model = jattn.load(folder, use_cache=False)
    oracle = BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, model.config.vocab_size, (batch_size, length)).astype(np.int32)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    torch_batch = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}

    def ours():
        out = model.forward(batch)
        jax.block_until_ready((out.last_hidden_state, out.attentions))
        return np.asarray(out.attentions)  # (L, b, H, n, n) on the host

    def theirs():
        with torch.inference_mode():
            out = oracle(**torch_batch, output_attentions=True)
        return [a.numpy() for a in out.attentions]

    t_ours, t_theirs = [], []
    ours(), theirs()  # warm-up both
    for _ in range(repeats):  # alternate, so that load on the machine hits both alike
        t_ours += time_it(ours, 1)[-1:]
        t_theirs += time_it(theirs, 1)[-1:]
    tokens = batch_size * length
    c = model.config
    result = {
        "model": f"L={c.num_layers} H={c.num_heads} D={c.hidden_size}",
        "batch": [batch_size, length],
        "jattn_tokens_per_s": tokens / statistics.median(t_ours),
        "hf_tokens_per_s": tokens / statistics.median(t_theirs),
    }
    result["ratio"] = result["jattn_tokens_per_s"] / result["hf_tokens_per_s"]
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
            print(f"{name:20s} jattn {r['jattn_tokens_per_s']:8.0f} tok/s  HF eager {r['hf_tokens_per_s']:8.0f} "
                  f"tok/s  ratio {r['ratio']:.2f}x")
            results.append(r)
    meta = {"threads": args.threads, "cpu": platform.processor() or platform.machine(), "repeats": args.repeats}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
