"""A GPT-2-small-shaped causal LM with random weights: jattn against Hugging Face PyTorch eager, in one run.

    .venv/bin/python benchmarks/bench_lm.py [--repeats 3] [--rounds 2] [--batch-size 4] [--length 128]
        [--pairs 4] [--sweep-length 16] [--note TEXT] [--out benchmarks/results/lm_gpt2_small.json]

(from the repository root). The model: ``GPT2LMHeadModel(GPT2Config(...))`` at GPT-2 small's shape
(12 layers × 12 heads, D 768, FFN 3,072, vocabulary 50,257, 1,024 positions; ``--layers``, ``--heads``,
``--hidden``, ``--ffn``, ``--vocab``, ``--positions`` shrink it, ``--tiny`` is the test's 2-layer shape),
HF's own initialisation, saved to a temporary folder and read back by ``jattn.load(folder,
tokenizer=False)`` and by HF with eager attention. Inputs: random token ids, no padding.

  (a) The forward returning every internal: jattn ``Model.forward(batch)``
      (``internals="all"``: α, values, contexts, head outputs, residuals, LayerNorm inputs and
      outputs, the FFN activation, the (L+1) hidden-state stack) against HF
      ``model(..., output_attentions=True, output_hidden_states=True)``; both return the next-token
      logits (b, n, V). ``--batch-size`` × ``--length`` tokens; the two alternated ``--repeats`` times
      after a warm-up (``bench_encoder.alternate``), medians.
  (b) Activation patching of every head (L·H), ``--pairs`` clean/corrupted pairs of ``--sweep-length``
      tokens (corrupted: the first half of the clean ids resampled); each head's output (its slice
      of the attention output projection's input) patched from the clean run into the corrupted run;
      metric: the logit difference of two fixed tokens at the last position, read as the final
      LayerNorm's output · (E[a] − E[b]) (the head is tied to the embeddings, E; no (b, n, V)
      logits on either side). ``jattn.patch_heads`` against a TransformerLens-style PyTorch hook
      loop on HF's GPT2Model (a clean forward recording every ``attn.c_proj`` input, a corrupted
      forward, then one corrupted forward per head with a forward pre-hook on ``attn.c_proj``
      writing the head's clean slice: L·H + 2 forwards) and against the same loop in nnsight
      (when installed). ``--rounds`` alternating rounds after jattn's compile, the fastest of each
      kept (bench_patching's statistic); the baseline is the faster of the two loops.

Both rows check their results: the largest absolute difference of the logits and α (a), of the
L × H effects between jattn and each loop (b), beside the largest value compared.

Bounds. (a): the forward's matrix products timed alone (``bench_encoder.gemm_bound``: the layer
stack, which is the same for a causal stack since both libraries compute the full n × n scores and
mask them; plus the tied LM head (b·n, D) @ (D, V), timed alone here the same way): HF's time over
them is the largest speed-up over HF that any float32 implementation can reach whose products run
at PyTorch's or XLA's speed; the lean forward's (no internals, no LM head) share of the stack's
XLA-GEMM bound in paired rounds. (b): layer evaluations, (L·H + 2)·L for the loop against
2L + H·L(L+1)/2 with prefix reuse (``jattn.sweeps.patching``), their ratio is what prefix reuse
alone saves; and the products of those layer evaluations at XLA's speed (``gemm_bound`` at the
sweep's shape, per layer), the time a prefix-reusing sweep at that speed needs at least when it
runs each variant on the pairs' rows alone (jattn batches ``H`` variants, so it can pass it).
Writes ``--out`` (JSON: machine, versions, load averages, every timing, ratios, differences).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_encoder import alternate, bound_share, cpu_model, gemm_bound  # benchmarks/ (scripts import each other)
from peak_memory import fastest

GPT2_SMALL = {"layers": 12, "heads": 12, "hidden": 768, "ffn": 3072, "vocab": 50257, "positions": 1024}
TINY = {"layers": 2, "heads": 4, "hidden": 32, "ffn": 64, "vocab": 128, "positions": 32, "batch_size": 2,
        "length": 8, "pairs": 2, "sweep_length": 6, "repeats": 1, "rounds": 2}


def save_gpt2(folder: Path, a) -> Path:
    """A random ``GPT2LMHeadModel`` of the shape in ``a`` saved to ``folder`` (weights and config)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    last = a.vocab - 1  # GPT-2's <|endoftext|> is the last id: its bos, eos and (by convention) pad
    config = GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.hidden, n_inner=a.ffn, vocab_size=a.vocab,
                        n_positions=a.positions, bos_token_id=last, eos_token_id=last, pad_token_id=last)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def random_batch(vocab: int, b: int, n: int, seed: int) -> dict:
    """Random ids (b, n) below the last id, every token real."""
    ids = np.random.default_rng(seed).integers(0, vocab - 1, (b, n)).astype(np.int32)  # (b, n)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def corrupt(batch: dict, vocab: int, seed: int) -> dict:
    """``batch`` with the ids of its first half of positions resampled (same length, same mask)."""
    ids = batch["input_ids"].copy()  # (b, n)
    half = ids.shape[1] // 2
    ids[:, :half] = np.random.default_rng(seed).integers(0, vocab - 1, (ids.shape[0], half))
    return {"input_ids": ids, "attention_mask": batch["attention_mask"]}


def torch_batch(batch: dict) -> dict:
    import torch

    return {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}


# ---------------------------------------------------------------- (a) the forward with every internal

def head_product_seconds(rows: int, D: int, V: int, repeats: int) -> dict:
    """The tied LM head's product (rows, D) @ (D, V) timed alone, fastest call, in PyTorch and in XLA
    (as ``gemm_bound`` times each product of the stack)."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    a, b = rng.random((rows, D), np.float32), rng.random((D, V), np.float32)  # (b·n, D), (D, V)
    mm = jax.jit(jnp.matmul)
    ta, tb, xa, xb = torch.tensor(a), torch.tensor(b), jnp.asarray(a), jnp.asarray(b)
    torch_seconds = fastest(lambda: ta @ tb, repeats)
    time.sleep(1.0)  # no PyTorch thread pool spinning while XLA's product runs
    xla_seconds = fastest(lambda: mm(xa, xb).block_until_ready(), repeats)
    return {"head_gflop": 2 * rows * D * V / 1e9, "head_torch_seconds": torch_seconds, "head_xla_seconds": xla_seconds}


def bench_forward(model, oracle, batch: dict, repeats: int, rounds: int) -> dict:
    """Row (a): jattn's forward with every internal and the logits against HF eager with every
    attention weight and hidden state, alternated; the results compared; the GEMM bounds."""
    import torch

    tb = torch_batch(batch)

    def ours():
        out = model.forward(batch)  # internals="all"
        return np.asarray(out.logits), np.asarray(out.attentions)  # (b, n, V), (L, b, H, n, n) on the host

    def lean():
        return np.asarray(model.forward(batch, internals=None).last_hidden_state)  # (b, n, D)

    def theirs():
        with torch.inference_mode():
            out = oracle(**tb, output_attentions=True, output_hidden_states=True)
        return out.logits.numpy(), np.stack([a.numpy() for a in out.attentions])  # (b, n, V), (L, b, H, n, n)

    (logits, weights), (ref_logits, ref_weights) = ours(), theirs()
    secs = alternate({"jattn_forward": ours, "hf": theirs}, repeats)
    c = model.config
    b, n = batch["input_ids"].shape
    r = {"batch": [b, n], **{f"{k}_seconds": v for k, v in secs.items()},
         **{f"{k}_tokens_per_s": b * n / v for k, v in secs.items()},
         "ratio_forward": secs["hf"] / secs["jattn_forward"],
         "max_abs_diff_logits": float(np.abs(logits - ref_logits).max()),
         "largest_logit": float(np.abs(ref_logits).max()),
         "max_abs_diff_weights": float(np.abs(weights - ref_weights).max())}
    r.update(gemm_bound(c, b, n, repeats, lean, rounds))  # the stack; the lean forward's share of its XLA bound
    r.update(head_product_seconds(b * n, c.hidden_size, c.vocab_size, repeats))
    torch_products = r["torch_gemm_seconds"] + r["head_torch_seconds"]  # the stack's products and the head's
    xla_products = r["xla_gemm_seconds"] + r["head_xla_seconds"]
    r["bound_torch_gemms"] = secs["hf"] / torch_products  # the best ratio over HF at PyTorch's GEMM speed
    r["bound_xla_gemms"] = secs["hf"] / xla_products  # at XLA's
    r["forward_of_xla_bound"] = xla_products / secs["jattn_forward"]  # the share of it the forward reaches
    r["hf_of_torch_bound"] = torch_products / secs["hf"]
    return r


# ---------------------------------------------------------------- (b) the all-heads patching sweep

def patch_each_head(projections, metric, clean: dict, corrupted: dict, heads: int) -> np.ndarray:
    """Effects (L, H) by a TransformerLens-style hook loop, on any device: a clean forward
    recording each output projection's input (b, n, H·d_h), a corrupted forward, then one
    corrupted forward per head with a pre-hook writing the head's clean slice; ``metric(inputs)``
    runs the model and gives (b,), the effect is its mean change."""
    import torch

    recorded = {}
    with torch.no_grad():
        handles = [p.register_forward_pre_hook(lambda m, x, l=l: recorded.__setitem__(l, x[0]))
                   for l, p in enumerate(projections)]
        metric(clean)
        for handle in handles:
            handle.remove()
        reference = metric(corrupted)  # (b,)
        effects = torch.zeros(len(projections), heads, device=reference.device)  # (L, H)
        for l, p in enumerate(projections):
            d = recorded[l].shape[-1] // heads
            for h in range(heads):
                def replace(m, x, s=slice(h * d, (h + 1) * d), src=recorded[l]):
                    x = x[0].clone()  # (b, n, H·d_h)
                    x[..., s] = src[..., s]
                    return (x,)

                handle = p.register_forward_pre_hook(replace)
                effects[l, h] = (metric(corrupted) - reference).mean()
                handle.remove()
    return effects.cpu().numpy()


def hook_sweep(base, clean: dict, corrupted: dict, direction, heads: int) -> np.ndarray:
    """``patch_each_head`` on HF's GPT2Model ``base`` (each ``attn.c_proj``); metric: the last
    position's final hidden state · ``direction`` (b,)."""
    return patch_each_head([block.attn.c_proj for block in base.h],
                           lambda inputs: base(**inputs).last_hidden_state[:, -1] @ direction, clean, corrupted, heads)


def nnsight_sweep(traced, clean: dict, corrupted: dict, direction, heads: int) -> np.ndarray:
    """``hook_sweep`` in nnsight: ``traced`` is ``NNsight(GPT2Model)``; one trace saves the clean
    ``attn.c_proj`` inputs, one the corrupted metric, then one trace per head assigns its slice."""
    import torch

    L = len(traced.h)
    d = direction.shape[0] // heads
    saved, box = [], {}  # values leave a trace through containers made outside it
    with torch.no_grad():
        with traced.trace(**clean):
            for l in range(L):
                saved.append(traced.h[l].attn.c_proj.input.save())  # (b, n, H·d_h)
        with traced.trace(**corrupted):
            box["base"] = traced.output.last_hidden_state[:, -1].save()  # (b, D)
        effects = np.zeros((L, heads))
        for l in range(L):
            for h in range(heads):
                with traced.trace(**corrupted):
                    x = traced.h[l].attn.c_proj.input  # (b, n, H·d_h)
                    x[..., h * d:(h + 1) * d] = saved[l][..., h * d:(h + 1) * d]
                    box["patched"] = traced.output.last_hidden_state[:, -1].save()  # (b, D)
                effects[l, h] = float(((box["patched"] - box["base"]) @ direction).mean())
    return effects


def nnsight_model(base):
    """``NNsight(base)``, or the reason nnsight is not timed."""
    try:
        from nnsight import NNsight
    except ImportError as e:
        return None, f"nnsight is not installed ({e}); pip install nnsight==0.8.1"
    return NNsight(base), None


def layer_evaluations(L: int, H: int) -> dict:
    """Layer passes of the sweep: a loop of patched forwards, (L·H + 2)·L; with prefix reuse,
    2L for the clean and corrupted forwards and H·(L − l) for each layer l's variants."""
    return {"loop": (L * H + 2) * L, "prefix_reuse": 2 * L + H * L * (L + 1) // 2}


def bench_sweep(model, oracle, clean: dict, corrupted: dict, a: int, b: int, repeats: int, rounds: int) -> dict:
    """Row (b): ``jattn.patch_heads`` against the hook loop and nnsight, rounds alternated, the
    fastest call of each; the effects compared; the bounds of the ratio."""
    import jax.numpy as jnp
    import torch

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured

    c = model.config
    L, H = c.num_layers, c.num_heads
    embeddings = oracle.transformer.wte.weight.detach()  # (V, D), tied to the LM head
    direction = embeddings[a] - embeddings[b]  # (D,) logit(a) − logit(b) = final hidden · direction
    direction_jax = jnp.asarray(direction.numpy())

    def metric(out):
        return out["last_hidden_state"][:, -1] @ direction_jax  # (b,)

    base = oracle.transformer
    tc, tr = torch_batch(clean), torch_batch(corrupted)
    traced, why_not = nnsight_model(base)
    pairs = len(clean["input_ids"])
    runs = {"jattn": lambda: jattn.patch_heads(model, clean, corrupted, metric, batch_size=pairs)["encoder"],
            "torch_hooks": lambda: hook_sweep(base, tc, tr, direction, H)}
    if traced is not None:
        runs["nnsight"] = lambda: nnsight_sweep(traced, tc, tr, direction, H)
    results = {"jattn": runs["jattn"]()}  # warm-up: compiles (PyTorch's loops compile nothing, row (a) ran the model)
    times = {k: [] for k in runs}
    for i in range(rounds):
        for k, f in runs.items():
            start = time.perf_counter()
            results[k] = np.asarray(f())  # (L, H)
            times[k].append(time.perf_counter() - start)
            print(f"patching round {i + 1}: {k} {times[k][-1]:.2f} s", file=sys.stderr, flush=True)
    best = {k: min(v) for k, v in times.items()}
    baseline = min((k for k in runs if k != "jattn"), key=best.get)
    with torch.no_grad():  # the metric read through the LM head's logits, once, on the corrupted run
        logits = oracle(**tr).logits[:, -1]  # (b, V)
    via_head = (logits[:, a] - logits[:, b]).numpy()
    hidden = model.forward(corrupted, internals=None).last_hidden_state  # (b, n, D)
    via_direction = np.asarray(metric({"last_hidden_state": hidden}))  # (b,)
    evals = layer_evaluations(L, H)
    sweep_shape = gemm_bound(c, *clean["input_ids"].shape, repeats,
                             lambda: np.asarray(model.forward(clean, internals=None).last_hidden_state), rounds)
    floor = sweep_shape["xla_gemm_seconds"] / L * evals["prefix_reuse"]  # XLA products of jattn's layer passes
    r = {"pairs": pairs, "tokens": int(clean["input_ids"].shape[1]),
         "target_tokens": [a, b], "rounds": rounds, "seconds": best, "seconds_per_round": times,
         "baseline": baseline, "nnsight_not_timed": why_not,
         "speedup_vs_torch_hooks": best["torch_hooks"] / best["jattn"],
         "speedup_vs_baseline": best[baseline] / best["jattn"],
         "layer_evaluations": evals, "prefix_reuse_bound": evals["loop"] / evals["prefix_reuse"],
         "xla_gemm_seconds_per_layer": sweep_shape["xla_gemm_seconds"] / L,
         "torch_gemm_seconds_per_layer": sweep_shape["torch_gemm_seconds"] / L,
         "prefix_reuse_xla_gemm_floor_seconds": floor,
         "jattn_of_xla_floor": floor / best["jattn"],
         "bound_vs_baseline_at_xla_gemms": best[baseline] / floor,
         "loop_of_torch_floor": sweep_shape["torch_gemm_seconds"] / L * evals["loop"] / best["torch_hooks"],
         "max_abs_diff_jattn_vs_torch_hooks": float(np.abs(results["jattn"] - results["torch_hooks"]).max()),
         "largest_effect": float(np.abs(results["torch_hooks"]).max()),
         "max_abs_diff_metric_direction_vs_lm_head": float(np.abs(via_direction - via_head).max()),
         "effects_jattn": results["jattn"].tolist()}
    if traced is not None:
        r["speedup_vs_nnsight"] = best["nnsight"] / best["jattn"]
        r["max_abs_diff_jattn_vs_nnsight"] = float(np.abs(results["jattn"] - results["nnsight"]).max())
    return r


# ---------------------------------------------------------------- the run

def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in GPT2_SMALL.items():
        parser.add_argument(f"--{k}", type=int, default=v)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--sweep-length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="calls per timed block of the forward and the bounds")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the sweeps and of the bounds' pairing")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--note", default="", help="a remark on the machine stored in the JSON (e.g. other jobs)")
    parser.add_argument("--tiny", action="store_true", help="the test's shape (2 layers × 4 heads, D 32); "
                                                              "overrides the shape, size and repeat flags")
    parser.add_argument("--out", default="benchmarks/results/lm_gpt2_small.json")
    args = parser.parse_args(argv)
    if args.tiny:
        vars(args).update(TINY)
    return args


def versions() -> dict:
    import jax
    import torch
    import transformers

    v = {"jax": jax.__version__, "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        v["nnsight"] = __import__("nnsight").__version__
    except ImportError:
        v["nnsight"] = None
    return v


def main(argv=None) -> dict:
    args = parse(argv)
    load_at_start = os.getloadavg()
    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import torch
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_gpt2(Path(tmp) / "gpt2", args)
        model = jattn.load(folder, tokenizer=False)
        oracle = GPT2LMHeadModel.from_pretrained(str(folder), attn_implementation="eager").eval()
        forward = bench_forward(model, oracle, random_batch(args.vocab, args.batch_size, args.length, seed=0),
                                args.repeats, args.rounds)
        print(f"forward: jattn {forward['ratio_forward']:.2f}x HF", file=sys.stderr, flush=True)
        clean = random_batch(args.vocab, args.pairs, args.sweep_length, seed=1)
        sweep = bench_sweep(model, oracle, clean, corrupt(clean, args.vocab, seed=2), 0, 1, args.repeats, args.rounds)
    c = model.config
    record = {
        "model": f"GPT-2 (random) L={c.num_layers} H={c.num_heads} D={c.hidden_size} F={c.intermediate_size} "
                 f"V={c.vocab_size} positions={c.max_length}",
        "forward": forward, "patching": sweep,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads,
                    "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg(),
                    "note": args.note, "freed_memory_kept": jattn.host_memory.KEPT},
        "versions": versions(), "repeats": args.repeats, "rounds": args.rounds,
        "command": "python benchmarks/bench_lm.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    report(record)
    return record


def report(r: dict) -> None:
    """The rows as log lines."""
    f, s = r["forward"], r["patching"]
    print(f"{r['model']}, {f['batch'][0]} x {f['batch'][1]} tokens: HF eager {f['hf_seconds']:.3f} s, jattn every "
          f"internal {f['jattn_forward_seconds']:.3f} s ({f['ratio_forward']:.2f}x HF); bound "
          f"{f['bound_torch_gemms']:.2f}x at torch's GEMM speed, {f['bound_xla_gemms']:.2f}x at XLA's; lean stack of "
          f"the XLA bound {bound_share(f)}; "
          f"max |Δ| logits {f['max_abs_diff_logits']:.2e}, α {f['max_abs_diff_weights']:.2e}")
    times = ", ".join(f"{k} {v:.3f} s" for k, v in s["seconds"].items())
    print(f"patching {s['pairs']} pairs x {s['tokens']} tokens: {times}; jattn {s['speedup_vs_baseline']:.2f}x the "
          f"faster loop ({s['baseline']}); prefix-reuse bound {s['prefix_reuse_bound']:.2f}x, jattn at "
          f"{s['jattn_of_xla_floor']:.0%} of its XLA-GEMM floor; max |Δ| vs hooks "
          f"{s['max_abs_diff_jattn_vs_torch_hooks']:.2e} (largest effect {s['largest_effect']:.2e})")


if __name__ == "__main__":
    main()
