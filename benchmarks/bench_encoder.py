"""Forward throughput with every attention weight returned: jattn vs Hugging Face PyTorch eager.

    .venv/bin/python benchmarks/bench_encoder.py [--repeats 5] [--out benchmarks/results/encoder.json]

Same inputs (batch 32 x 128 random token ids, no padding), same thread count (torch uses
``--threads``; XLA's CPU client uses the same cores), the two measured alternately in one run
so that machine load hits both alike. Models: the embedded MiniLM (6 x 12, D=384) and a
random bert-base-sized config (12 x 12, D=768). Reports tokens/s and the ratio (median of
``--repeats`` timed runs after a warm-up) for four jattn entry points:
  * ``Model.forward``: every internal returned to the caller (values, contexts, residuals, ...);
  * ``Model.forward(internals=("weights",))``: the attention weights only (what HF returns);
    and the same with ``recycle=`` the previous result (its memory reused: no fresh pages);
  * ``Model.forward(internals=None)``: the lean forward, the last hidden state only;
  * ``jit(forward) -> (hidden, attentions)``: what HF returns, as a user's own jitted function.
It also times the forward's matrix products alone (``gemm_bound``), in PyTorch and in XLA: HF's
time divided by that is the largest speed-up over HF any float32 implementation can reach
whose products run at that speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from peak_memory import fastest  # benchmarks/peak_memory.py (the scripts run from their folder)


def alternate(fns: dict, repeats: int, faults: dict | None = None, fastest: dict | None = None) -> dict[str, float]:
    """Median seconds of each function, run in turn ``repeats`` times after a warm-up; into
    ``faults``, when given, the median count of minor page faults of each (a page of fresh memory
    touched for the first time: what writing results into new memory costs beyond the writes);
    into ``fastest``, when given, each one's fastest call (to set beside ``gemm_bound``'s)."""
    for fn in fns.values():
        fn()
    times, counts = {k: [] for k in fns}, {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
            counts[k].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    if faults is not None:
        faults.update({k: int(statistics.median(v)) for k, v in counts.items()})
    if fastest is not None:
        fastest.update({k: min(v) for k, v in times.items()})
    return {k: statistics.median(v) for k, v in times.items()}


def gemm_bound(config, batch_size: int, length: int, repeats: int, lean, rounds: int = 8) -> dict:
    """Time the matrix products of one forward pass alone, in PyTorch and in XLA, float32, and
    the lean forward ``lean`` (a function) beside XLA's.

    Per layer: Q, K, V and output projections (b·n, D) @ (D, D), the FFN (b·n, D) @ (D, F) and
    (b·n, F) @ (F, D), and the attention products (b·H, n, d_h) @ (b·H, d_h, n) and
    (b·H, n, n) @ (b·H, n, d_h); L times. No implementation whose products are no faster than
    these can beat HF by more than t_HF / t_products: that ratio bounds any speed-up target.
    Each product is timed alone (a jitted sequence of equal products would be CSE'd) and its
    fastest call counts, which errs toward a higher bound.

    The lean forward's share of the XLA bound is measured like with like, in ``rounds`` rounds:
    each times XLA's products and then ``lean`` (``repeats`` calls each, no PyTorch thread pool
    spinning between), so that a drift of the machine's speed, which moves the bound by up to
    10 % between runs, hits both sides of a round's ratio alike. Per round: the products' time
    over the lean forward's fastest call (``lean_fastest_of_xla_bound``, the bound's own
    statistic) and over its median call (``lean_of_xla_bound``); reported as the mean over the
    rounds with a 95 % t-interval (``jattn.stats.t_interval``), the rounds beside them.
    """
    import jax
    import jax.numpy as jnp
    import torch

    from jattn.stats import t_interval

    L, H, D, F = config.num_layers, config.num_heads, config.hidden_size, config.intermediate_size
    rows, bh, d = batch_size * length, batch_size * H, D // H
    shapes = [((rows, D), (D, D))] * 4 + [((rows, D), (D, F)), ((rows, F), (F, D)),
                                          ((bh, length, d), (bh, d, length)), ((bh, length, length), (bh, length, d))]
    rng = np.random.default_rng(0)
    mm = jax.jit(jnp.matmul)
    operands = [(rng.random(sa, np.float32), rng.random(sb, np.float32)) for sa, sb in shapes]
    torch_products = [(lambda a=torch.tensor(a), b=torch.tensor(b): a @ b) for a, b in operands]
    xla_products = [(lambda a=jnp.asarray(a), b=jnp.asarray(b): mm(a, b).block_until_ready()) for a, b in operands]
    time.sleep(1.0)
    torch_seconds = L * sum(fastest(fn, repeats) for fn in torch_products)  # one product at a time, L layers
    time.sleep(1.0)  # each library in its own block: no thread pool of the other spinning
    xla, lean_median, lean_fastest = [], [], []
    for _ in range(rounds):
        xla.append(L * sum(fastest(fn, repeats) for fn in xla_products))
        lean_median.append(alternate({"lean": lean}, repeats, fastest=(best := {}))["lean"])
        lean_fastest.append(best["lean"])
    xla_seconds = statistics.median(xla)
    share, share_ci = t_interval(np.array(xla) / np.array(lean_median))
    share_fastest, share_fastest_ci = t_interval(np.array(xla) / np.array(lean_fastest))
    flops = L * sum(2 * np.prod(a) * b[-1] for a, b in shapes)
    return {"gemm_gflop": flops / 1e9, "torch_gemm_seconds": torch_seconds, "xla_gemm_seconds": xla_seconds,
            "torch_gemm_gflops": flops / torch_seconds / 1e9, "xla_gemm_gflops": flops / xla_seconds / 1e9,
            "jattn_lean_alone_seconds": statistics.median(lean_median),
            "jattn_lean_alone_fastest_seconds": statistics.median(lean_fastest),
            "lean_of_xla_bound": share, "lean_of_xla_bound_ci95": share_ci,
            "lean_fastest_of_xla_bound": share_fastest, "lean_fastest_of_xla_bound_ci95": share_fastest_ci,
            "bound_rounds": {"xla_gemm_seconds": xla, "lean_median_seconds": lean_median,
                             "lean_fastest_seconds": lean_fastest}}


def bound_share(r: dict) -> str:
    """The lean forward's shares of the XLA-GEMM bound as ``gemm_bound`` measures them, for a log line."""
    lo, hi = r["lean_fastest_of_xla_bound_ci95"]
    return (f"{r['lean_fastest_of_xla_bound']:.1%} [{lo:.1%}, {hi:.1%}] (fastest calls), "
            f"{r['lean_of_xla_bound']:.1%} (median calls), {len(r['bound_rounds']['xla_gemm_seconds'])} rounds")


def bench(folder: Path, batch_size: int, length: int, repeats: int) -> dict:
    from functools import partial

    import jax
    import torch
    from transformers import BertModel

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
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

    def ours_weights():
        return np.asarray(model.forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)

    previous = {}

    def ours_weights_recycled():  # a loop that consumes each result, then hands it back
        out = model.forward(batch, internals=("weights",), recycle=previous.pop("out", None))
        total = float(np.asarray(out.attentions)[:, :, :, 0].sum())  # read on the host; the view dies here
        previous["out"] = out
        return total

    def ours_lean():
        return np.asarray(model.forward(batch, internals=None).last_hidden_state)  # (b, n, D)

    def theirs():
        with torch.inference_mode():
            out = oracle(**torch_batch, output_attentions=True)
        return [a.numpy() for a in out.attentions]

    secs = alternate({"jattn_forward": ours, "jattn_weights": ours_weights,
                      "jattn_weights_recycled": ours_weights_recycled, "jattn_lean": ours_lean,
                      "jattn_jit": ours_slim, "hf": theirs}, repeats)
    tokens = batch_size * length
    c = model.config
    result = {"model": f"L={c.num_layers} H={c.num_heads} D={c.hidden_size}", "batch": [batch_size, length],
              **{f"{k}_tokens_per_s": tokens / v for k, v in secs.items()}}
    result["ratio_forward"] = secs["hf"] / secs["jattn_forward"]
    result["ratio_jit"] = secs["hf"] / secs["jattn_jit"]
    result["ratio_weights"] = secs["hf"] / secs["jattn_weights"]
    result["ratio_lean"] = secs["hf"] / secs["jattn_lean"]
    result["weights_over_lean_seconds"] = secs["jattn_weights"] / secs["jattn_lean"]  # target <= 1.05
    result["weights_recycled_over_lean_seconds"] = secs["jattn_weights_recycled"] / secs["jattn_lean"]
    result.update({f"{k}_seconds": v for k, v in secs.items()})
    result.update(gemm_bound(c, batch_size, length, repeats, ours_lean))
    result["bound_torch_gemms"] = secs["hf"] / result["torch_gemm_seconds"]  # best ratio at PyTorch's GEMM speed
    result["bound_xla_gemms"] = secs["hf"] / result["xla_gemm_seconds"]  # best ratio at XLA's GEMM speed
    # share of the bound the lean forward reaches = the products' time / the lean forward's time
    result["lean_of_torch_bound"] = result["torch_gemm_seconds"] / secs["jattn_lean"]
    return result


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what ``platform`` knows."""
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cpu_slug() -> str:
    """``cpu_model`` as a file-name part: "Intel(R) Xeon(R) Processor" -> "intel-xeon-processor"."""
    import re

    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"\((r|tm)\)", "", cpu_model().lower())).strip("-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default="benchmarks/results/encoder.json")
    parser.add_argument("--models", nargs="+", choices=("minilm", "bert-base"), default=["minilm", "bert-base"])
    args = parser.parse_args()
    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import torch
    from transformers import BertConfig, BertModel

    from jattn.models.load import default_model_path

    torch.set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        base = Path(tmp) / "bert-base-random"
        BertModel(BertConfig()).save_pretrained(base)  # bert-base-uncased's shape, random weights
        for name, folder in (("all-MiniLM-L6-v2", default_model_path()), ("bert-base (random)", base)):
            if ("minilm" if folder != base else "bert-base") not in args.models:
                continue
            if folder == base:
                for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                    (base / f).write_bytes((default_model_path() / f).read_bytes())
            r = {"name": name, **bench(folder, args.batch_size, args.length, args.repeats)}
            print(
                f"{name:20s} HF eager {r['hf_tokens_per_s']:6.0f} tok/s | jattn Model.forward "
                f"{r['jattn_forward_tokens_per_s']:6.0f} ({r['ratio_forward']:.2f}x) | jattn jit "
                f"{r['jattn_jit_tokens_per_s']:6.0f} ({r['ratio_jit']:.2f}x) | the forward's GEMMs alone: "
                f"XLA {r['xla_gemm_gflops']:.0f}, torch {r['torch_gemm_gflops']:.0f} GFLOP/s -> no implementation "
                f"exceeds {r['bound_torch_gemms']:.2f}x HF at torch's GEMM speed, {r['bound_xla_gemms']:.2f}x at XLA's"
                f" | internals=('weights',) {r['ratio_weights']:.2f}x, lean {r['ratio_lean']:.2f}x "
                f"(weights/lean time {r['weights_over_lean_seconds']:.3f}, recycled "
                f"{r['weights_recycled_over_lean_seconds']:.3f}); lean at {r['lean_of_torch_bound']:.0%} "
                f"of the torch-GEMM bound, of the XLA-GEMM bound {bound_share(r)}"
            )
            results.append(r)
    meta = {"threads": args.threads, "cpu": cpu_model(), "repeats": args.repeats,
            "freed_memory_kept": jattn.host_memory.KEPT,
            "load_average_at_end": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
