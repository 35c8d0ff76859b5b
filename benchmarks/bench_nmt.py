"""Seq2seq throughput: jattn vs Hugging Face PyTorch (eager) on the same Marian checkpoints.

    .venv/bin/python benchmarks/bench_nmt.py [--repeats 5] [--threads 2] [--out benchmarks/results/nmt.json]

Two measurements per model, on the same random source batch (16 sentences, lengths 12..32,
right-padded) and the same thread count (torch ``set_num_threads``; XLA's CPU client uses the
same cores), jattn and HF alternated in each repeat so that machine load hits both alike:

* teacher-forced forward returning every attention map of the three types (HF:
  ``output_attentions=True``; jattn: the full internals pytree) — target tokens/s;
* beam-4 decoding to ``max_length`` 32 (HF ``generate(num_beams=4)``; jattn ``generate``,
  compiled once per shape) — generated tokens/s; the token ids are checked to be equal.

Models: random Marian configs "tiny" (2+2 layers, D=64, V=1k) and "small" (3+3, D=256, H=4,
FFN 1024, V=8k: a Multi30k-sized caption model). Reports the median of
``--repeats`` timed runs after a warm-up and the ratio jattn / HF.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIGS = {
    "tiny": dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256),
    "small": dict(vocab_size=8000, d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024),
}


def make_model(folder: Path, name: str):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    kw = CONFIGS[name]
    V = kw["vocab_size"]
    model = MarianMTModel(MarianConfig(pad_token_id=V - 1, decoder_start_token_id=V - 1, eos_token_id=0,
                                       forced_eos_token_id=0, max_position_embeddings=128, scale_embedding=True,
                                       activation_function="relu", **kw))
    model.save_pretrained(str(folder))
    return MarianMTModel.from_pretrained(str(folder), attn_implementation="eager").eval()


def inputs(V: int, b: int = 16, s: int = 32, t: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(12, s + 1, b)
    ids = np.full((b, s), V - 1)
    mask = np.zeros((b, s), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = rng.integers(1, V - 1, n), 1
    dec = rng.integers(1, V - 1, (b, t))
    dec[:, 0] = V - 1
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(name: str, repeats: int, max_length: int) -> dict:
    import jax
    import torch


    with tempfile.TemporaryDirectory() as tmp:
        hf = make_model(Path(tmp), name)
        from jattn import families
        from jattn.io.hf import read_config, read_state_dict
        from jattn.families.marian.convert import convert
        from jattn.models.seq2seq import Seq2SeqModel

        config = families.get("marian").config_from_hf(read_config(Path(tmp)))
        ours = Seq2SeqModel(config, convert(read_state_dict(Path(tmp)), config))
    batch = inputs(config.src_vocab_size)
    tb = {k: torch.tensor(v) for k, v in batch.items()}

    def jattn_forward():
        out = ours.forward(batch)
        jax.block_until_ready((out.logits, out.internals))

    def hf_forward():
        with torch.no_grad():
            hf(**tb, output_attentions=True, use_cache=False)

    def jattn_beam():
        return ours.generate(batch["input_ids"], batch["attention_mask"], num_beams=4, max_length=max_length).sequences

    def hf_beam():
        with torch.no_grad():
            return hf.generate(input_ids=tb["input_ids"], attention_mask=tb["attention_mask"], num_beams=4,
                               max_length=max_length, do_sample=False, early_stopping=False).numpy()

    same = bool(np.array_equal(jattn_beam(), hf_beam()))  # also the warm-up / compile
    gen = jattn_beam()
    generated = int((gen[:, 1:] != config.pad_token_id).sum())
    jattn_forward(), hf_forward()
    times = {"jattn_forward": [], "hf_forward": [], "jattn_beam4": [], "hf_beam4": []}
    for _ in range(repeats):
        times["jattn_forward"].append(timed(jattn_forward))
        times["hf_forward"].append(timed(hf_forward))
        times["jattn_beam4"].append(timed(jattn_beam))
        times["hf_beam4"].append(timed(hf_beam))
    med = {k: statistics.median(v) for k, v in times.items()}
    target_tokens = int(batch["decoder_input_ids"].size)
    res = {
        "config": CONFIGS[name],
        "batch": list(batch["input_ids"].shape),
        "target_length": target_tokens // 16,
        "forward_tokens_per_s": {
            "jattn": target_tokens / med["jattn_forward"],
            "hf": target_tokens / med["hf_forward"],
        },
        "beam4_generated_tokens_per_s": {"jattn": generated / med["jattn_beam4"], "hf": generated / med["hf_beam4"]},
        "beam4_same_ids_as_hf": same,
        "median_s": med,
    }
    res["forward_ratio"] = med["hf_forward"] / med["jattn_forward"]
    res["beam4_ratio"] = med["hf_beam4"] / med["jattn_beam4"]
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--models", nargs="+", default=list(CONFIGS))
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "nmt.json")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    results = {"machine": platform.processor() or platform.machine(), "threads": args.threads,
               "repeats": args.repeats, "models": {}}
    for name in args.models:
        r = bench(name, args.repeats, args.max_length)
        results["models"][name] = r
        print(f"{name}: forward+internals {r['forward_tokens_per_s']['jattn']:.0f} vs "
              f"{r['forward_tokens_per_s']['hf']:.0f} tok/s (x{r['forward_ratio']:.2f}); beam-4 "
              f"{r['beam4_generated_tokens_per_s']['jattn']:.0f} vs {r['beam4_generated_tokens_per_s']['hf']:.0f} "
              f"tok/s (x{r['beam4_ratio']:.2f}); same ids: {r['beam4_same_ids_as_hf']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
