"""Analyses at scale, beside Hugging Face in the same run (``benchmarks/bench_scale.py --analyses``):
the forward with attention weights at n tokens, head importance over all heads and an all-heads
activation-patching sweep, each case in a fresh process (``child``): the model loaded in float32
(XLA:CPU computes bfloat16 in float32 anyway, GUIDE: Precision), the inputs made, then the resident
set as the baseline; the case's first call (jattn: compiling included) and, unless ``calls`` is 1,
its second; the peak (``VmHWM``) above the baseline.

Cases (``who``):
  forward  jattn ``model.forward(batch, internals=("weights",))`` (every layer's α kept), HF eager
           ``output_attentions=True``; jattn-layerwise (causal LMs): ``run_corpus`` with
           ``lm-attention``, which reduces each layer's α inside the layer loop (GUIDE, Memory at scale)
  importance  ``jattn.importance(estimator="batch")`` against HF autograd through head gates
           (tests/hf_head_gates.gated): one backward pass, |∂loss/∂ξ_h|, each layer L2-normalised
  patching  ``jattn.patch_heads`` against the hook loop (tests/hf_head_gates.hf_patch_loop): one
           corrupted forward per head plus two

Bounds beside them: memory, the bytes of what the case keeps (every layer's α, L·b·H·n²·4; one
layer's for the layerwise run); time, the forward's matrix-product FLOP at the GEMM rate measured in
the same run (patching: the forward count times jattn's lean forward; importance: forward and
backward, three lean forwards). A case whose kept α cannot fit in the memory available is not run
into the out-of-memory killer: HF's is recorded as what it needs; jattn's own refusal (it checks
before computing) is recorded as jattn says it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFUSALS = ("of memory available", "data-parallel devices")  # jattn's messages (engine.check_fits, the runner)
FAMILY_HF = {"llama": "AutoModelForCausalLM", "xlm-roberta": "AutoModel", "nllb": "AutoModelForSeq2SeqLM"}


# ------------------------------------------------------------------------- shapes and bounds

def attention_layers(family: str, spec: dict) -> int:
    """Attention layers that keep an (H, n, n) α per row: a translation model's encoder, decoder
    and cross attention (source and target both n tokens here)."""
    return spec["num_hidden_layers"] * (3 if family == "nllb" else 1)


def kept_weights_bytes(family: str, spec: dict, n: int, b: int = 1) -> int:
    """Every layer's attention weights in float32: L·b·H·n²·4."""
    return attention_layers(family, spec) * b * spec["num_attention_heads"] * n * n * 4


def layer_weights_bytes(spec: dict, n: int, b: int = 1) -> int:
    return b * spec["num_attention_heads"] * n * n * 4


def parameters(family: str, spec: dict) -> int:
    """Parameter count (weights of the products and the token tables; norms and biases left out)."""
    D, F, L, V = (spec[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"))
    if family == "llama":
        kv = D // spec["num_attention_heads"] * spec["num_key_value_heads"]
        return L * (2 * D * D + 2 * D * kv + 3 * D * F) + 2 * V * D
    if family == "xlm-roberta":
        return L * (4 * D * D + 2 * D * F) + V * D
    return L * (4 * D * D + 2 * D * F) + L * (8 * D * D + 2 * D * F) + V * D  # tied embeddings and head


def forward_gflop(family: str, spec: dict, n: int, b: int = 1) -> float:
    """The forward's matrix products: 2 · (weights but the input table) · tokens, plus 4·n²·D per
    attention layer and row (scores and context; a causal mask's half is computed anyway)."""
    D, V = spec["hidden_size"], spec["vocab_size"]
    weights = parameters(family, spec) - V * D  # a token table is gathered, not multiplied (llama's head counts)
    if family == "nllb":
        weights += V * D  # the tied output projection
    return (2 * weights * b * n + 4 * attention_layers(family, spec) * b * n * n * D) / 1e9


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def gemm_gflops(n: int = 2048, repeats: int = 3) -> float:
    """float32 GFLOP/s of an (n, n) product in JAX, the fastest call: the run's own rate."""
    import jax
    import jax.numpy as jnp

    a = jnp.asarray(np.random.default_rng(0).random((n, n), np.float32))
    mm = jax.jit(jnp.matmul)
    mm(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


# ------------------------------------------------------------------------- the child process

def tokens(family: str, vocab: int, b: int, n: int, seed: int) -> dict:
    """Random ids (b, n) every token real; a translation model's targets of n tokens as ``labels``."""
    rng = np.random.default_rng(seed)
    batch = {"input_ids": rng.integers(4, vocab - 1, (b, n)).astype(np.int32), "attention_mask": np.ones((b, n),
                                                                                                        np.int32)}
    if family == "nllb":
        batch["labels"] = rng.integers(4, vocab - 1, (b, n)).astype(np.int32)
    return batch


def corrupted(batch: dict, vocab: int, seed: int) -> dict:
    """``batch`` with its first half of source positions resampled (same length, same mask)."""
    ids = batch["input_ids"].copy()
    half = ids.shape[1] // 2
    ids[:, :half] = np.random.default_rng(seed).integers(4, vocab - 1, (ids.shape[0], half))
    return {**batch, "input_ids": ids}


def decoder_inputs(batch: dict, start: int) -> dict:
    """A translation batch with the decoder's inputs: start, then the targets but the last (HF's shift)."""
    if "labels" not in batch:
        return batch
    labels = batch["labels"]
    dec = np.concatenate([np.full((len(labels), 1), start, np.int32), labels[:, :-1]], 1)
    return {**batch, "decoder_input_ids": dec, "decoder_attention_mask": np.ones_like(dec)}


def load(spec: dict):
    """The model of ``spec``: HF eager on ``torch_device``, or jattn on JAX's default devices (a mesh
    of ``devices`` on the ``model`` axis), in ``dtype`` (float32 unless given)."""
    dtype = spec.get("dtype", "float32")
    if spec["who"] == "hf":
        import torch
        import transformers

        cls = getattr(transformers, FAMILY_HF[spec["family"]])
        model = cls.from_pretrained(spec["folder"], dtype=getattr(torch, dtype), attn_implementation="eager")
        return model.to(spec.get("torch_device", "cpu")).eval()
    import jax
    import jax.numpy as jnp

    import jattn

    mesh = jax.make_mesh((1, spec["devices"]), ("data", "model")) if spec["devices"] > 1 else None
    return jattn.load(spec["folder"], tokenizer=False, mesh=mesh, dtype=getattr(jnp, dtype))


def direction(D: int):
    w = np.random.default_rng(1).normal(size=D)
    return (w / np.linalg.norm(w)).astype(np.float32)


def jattn_metric(family: str, D: int):
    """The patching metric, (b,): the last position's logit of token 5 (LMs, translation), [CLS]'s
    final hidden state along a fixed unit direction (the encoder, which has no head here)."""
    if family == "xlm-roberta":
        w = direction(D)
        return lambda out: out["last_hidden_state"][:, 0] @ w
    key = "lm_logits" if family == "llama" else "logits"
    return lambda out: out[key][:, -1, 5]


def hf_metric(family: str, D: int):
    import torch

    if family == "xlm-roberta":
        w = torch.tensor(direction(D))
        return lambda out: out.last_hidden_state[:, 0] @ w.to(out.last_hidden_state)
    return lambda out: out.logits[:, -1, 5]


def encoder_loss(D: int):
    """The bare encoder's importance loss (it has no head): [CLS]'s final hidden state · a unit direction."""
    w = direction(D)
    return lambda params, config, outputs, batch: outputs["last_hidden_state"][:, 0] @ w


def hf_importance(hf, family: str, batch: dict, L: int, H: int) -> dict:
    """|∂loss/∂ξ_h| at ξ = 1 by one backward through HF with gates on every attention type, each layer
    L2-normalised (jattn's ``estimator="batch"`` on one batch): {type: (L, H)}."""
    import torch

    from hf_head_gates import gated

    kinds = ("encoder", "decoder", "cross") if family == "nllb" else ("encoder",)
    gates = {k: torch.ones(L, H, requires_grad=True, device=hf.device, dtype=hf.dtype) for k in kinds}
    t = to_torch(batch, hf.device)
    with gated(hf, gates):
        if family == "xlm-roberta":
            hidden = hf(**t).last_hidden_state[:, 0]
            loss = (hidden @ torch.tensor(direction(hf.config.hidden_size)).to(hidden)).sum()
        else:
            loss = hf(**{"labels": t["input_ids"], **t}).loss  # a translation batch holds its labels
    loss.backward()
    out = {}
    for k, g in gates.items():
        imp = g.grad.abs().float().cpu().numpy()
        out[k] = imp / (np.linalg.norm(imp, axis=1, keepdims=True) + 1e-20)
    return out


def to_torch(batch: dict, device) -> dict:
    import torch

    return {k: torch.tensor(v, dtype=torch.long, device=device) for k, v in batch.items()}


def sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def case_calls(spec: dict, model, cfg: dict):
    """The case's function (one call -> its result as numpy, or None) and the lean forward (no attention weights
    kept): jattn's for every case (the bounds), HF's for its forward case (None for its others). jattn's forward
    and lean forward compute in ``spec["compute_dtype"]`` where it is given (float32 otherwise)."""
    family, who, case, n, b = spec["family"], spec["who"], spec["case"], spec["n"], spec["b"]
    V, D, L, H = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    batch = tokens(family, V, b, n, seed=0)
    if who == "hf":
        import torch

        from hf_head_gates import hf_patch_loop

        start, device = getattr(model.config, "decoder_start_token_id", None), model.device
        t = to_torch({k: v for k, v in decoder_inputs(batch, start).items() if k != "labels"}, device)
        if case == "forward":
            def forward(**options):
                with torch.no_grad():
                    return float(model(**t, **options)[0].float().sum())
            return lambda: forward(output_attentions=True), forward
        if case == "importance":
            return lambda: hf_importance(model, family, batch, L, H), None
        tc = to_torch({k: v for k, v in decoder_inputs(corrupted(batch, V, 2), start).items() if k != "labels"}, device)
        kinds = {"encoder": H, "decoder": H, "cross": H} if family == "nllb" else {"encoder": H}
        return lambda: hf_patch_loop(model, t, tc, hf_metric(family, D), kinds), None

    import jax
    import jax.numpy as jnp

    import jattn

    start = getattr(model.config, "decoder_start_token_id", None)
    fwd = {k: v for k, v in decoder_inputs(batch, start).items() if k != "labels"}
    arithmetic = {"compute_dtype": getattr(jnp, spec["compute_dtype"])} if "compute_dtype" in spec else {}
    lean = lambda: jax.block_until_ready(jax.tree.leaves(model.forward(fwd, internals=None, **arithmetic)))  # noqa: E731
    if who == "jattn-layerwise":
        from jattn.analyses.lm_attention import LMAttention
        from jattn.runner.loop import run_corpus

        return lambda: run_corpus(model, batch, [LMAttention()], batch_size=b, max_length=n, progress=False), lean
    if case == "forward":
        keep = ("weights",)
        return lambda: jax.block_until_ready(jax.tree.leaves(model.forward(fwd, internals=keep, **arithmetic))), lean
    if case == "importance":
        loss = encoder_loss(D) if family == "xlm-roberta" else None
        examples = decoder_inputs(batch, start)  # a translation batch: its labels, and the decoder's inputs
        return lambda: jattn.importance(model, examples, loss=loss, estimator="batch", batch_size=b, max_length=n,
                                        progress=False), lean
    bad = {k: v for k, v in decoder_inputs(corrupted(batch, V, 2), start).items() if k != "labels"}
    return lambda: jattn.patch_heads(model, fwd, bad, jattn_metric(family, D), batch_size=b), lean


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def child(spec: dict) -> dict:
    """One case in this (fresh) process: load, baseline, the calls; -> seconds, peak, result."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]
    if spec["who"] == "hf":
        import torch  # noqa: F401
    model = load(spec)
    call, lean = case_calls(spec, model, spec["config"])
    base, times, result = rss(), [], None
    try:
        for _ in range(spec["calls"]):
            t0 = time.perf_counter()
            result = call()
            times.append(time.perf_counter() - t0)
    except ValueError as e:  # jattn's refusal before computing: what it keeps cannot fit, a batch the mesh cannot split
        if not any(why in str(e) for why in REFUSALS):
            raise
        return {"refused": str(e), "peak_above_baseline": hwm() - base}
    out = {"first_call_seconds": times[0], "seconds": min(times[1:] or times), "peak_above_baseline": hwm() - base}
    if lean is not None and spec["case"] != "forward":
        lean()
        t0 = time.perf_counter()
        lean()
        out["lean_forward_seconds"] = time.perf_counter() - t0
    if isinstance(result, dict):  # importance and patching: {type: (L, H)}
        out["result"] = {k: np.asarray(v).tolist() for k, v in result.items()}
    return out


def measure(spec: dict) -> dict:
    """``child(spec)`` in a fresh interpreter (8 faked CPU devices where ``devices`` is 8)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if spec["devices"] > 1:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={spec['devices']}"
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_scale_analyses as A; " \
           "import json; print(json.dumps(A.child(json.loads(sys.argv[1]))))"
    out = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{spec['who']} {spec['case']} at n={spec['n']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------- the plan

def forward_row(folder: Path, family: str, spec: dict, who: str, n: int, devices: int, calls: int) -> dict:
    """One forward case: run, or for HF, recorded as what it needs where its kept α cannot fit."""
    kept = kept_weights_bytes(family, spec, n)
    row = {"case": "forward", "who": who, "n": n, "devices": devices, "kept_weights_bytes": kept,
           "layer_weights_bytes": layer_weights_bytes(spec, n), "gflop": forward_gflop(family, spec, n)}
    free = available_bytes()
    if who == "hf" and 1.5 * kept > free:  # α kept, plus the layer's scores and softmax in flight
        return {**row, "not_run": f"needs {1.5 * kept / 2**30:.1f} GiB (every layer's float32 α "
                                  f"{kept / 2**30:.1f} GiB, and one layer's scores in flight), "
                                  f"{free / 2**30:.1f} GiB available"}
    if who == "jattn-layerwise" and 4 * row["layer_weights_bytes"] > free:
        return {**row, "not_run": f"needs about {4 * row['layer_weights_bytes'] / 2**30:.1f} GiB (four layers' α), "
                                  f"{free / 2**30:.1f} GiB available"}
    return {**row, **measure(dict(folder=str(folder), family=family, config=spec, who=who, case="forward", n=n, b=1,
                                  devices=devices, calls=calls))}


def sweep_row(folder: Path, family: str, spec: dict, case: str, who: str, n: int, b: int, devices: int,
              calls: int) -> dict:
    r = measure(dict(folder=str(folder), family=family, config=spec, who=who, case=case, n=n, b=b, devices=devices,
                     calls=calls))
    heads = attention_layers(family, spec) * spec["num_attention_heads"]
    return {"case": case, "who": who, "n": n, "b": b, "devices": devices, "heads": heads,
            "forwards": heads + 2 if case == "patching" else 3, **r}


def plan(family: str, spec: dict, lengths: list[int], meshes: list[int], importance_n: int, patch: tuple[int, int]):
    """(case, who, n, devices) in run order; a family without a causal mask has no layerwise row."""
    whos = ["hf", "jattn"] + (["jattn-layerwise"] if family == "llama" else [])
    rows = [("forward", w, n, 1) for n in lengths for w in whos]
    rows += [("forward", w, n, d) for d in meshes if d > 1 for n in lengths for w in whos if w != "hf"]
    for case, n in (("importance", importance_n), ("patching", patch[1])):
        rows += [(case, "hf", n, 1)] + [(case, "jattn", n, d) for d in meshes]
    return rows


def run(folder: Path, family: str, spec: dict, lengths: list[int], meshes: list[int], importance_n: int,
        patch: tuple[int, int], calls: int = 2, log=print) -> dict:
    rows = []
    for case, who, n, devices in plan(family, spec, lengths, meshes, importance_n, patch):
        t0 = time.perf_counter()
        if case == "forward":
            r = forward_row(folder, family, spec, who, n, devices, calls if n < 8192 else 1)
        else:
            r = sweep_row(folder, family, spec, case, who, n, patch[0] if case == "patching" else 1, devices, calls)
        rows.append(r)
        log(describe(r) + f" [{time.perf_counter() - t0:.0f} s]")
    rate = gemm_gflops()
    compare(rows, rate)
    return {"gemm_gflops": rate, "parameters": parameters(family, spec), "rows": rows,
            "available_bytes_at_end": available_bytes()}


def compare(rows: list[dict], rate: float) -> None:
    """Each row's bounds, and each jattn row against HF's of its case and length: seconds and peak
    memory over HF's (HF ÷ jattn would hide which is larger), the largest |Δ| of the sweep's result."""
    hf = {(r["case"], r["n"]): r for r in rows if r["who"] == "hf"}
    for r in rows:
        if r["case"] == "forward":
            r["bound_seconds"] = r["gflop"] / rate
        elif "lean_forward_seconds" in r:
            r["bound_seconds"] = r["forwards"] * r["lean_forward_seconds"]
        base = hf.get((r["case"], r["n"]))
        if r["who"] == "hf" or base is None or "seconds" not in r or "seconds" not in base:
            continue
        r["seconds_over_hf"] = r["seconds"] / base["seconds"]
        r["peak_over_hf"] = r["peak_above_baseline"] / base["peak_above_baseline"]
        if "result" in r and "result" in base:
            r["max_abs_diff_vs_hf"] = max(float(np.abs(np.subtract(r["result"][k], base["result"][k])).max())
                                          for k in base["result"])


def describe(r: dict) -> str:
    head = f"{r['case']:10s} {r['who']:15s} n={r['n']:5d} devices {r['devices']}: "
    if "not_run" in r:
        return head + "not run, " + r["not_run"]
    if "refused" in r:
        return head + "refused by jattn: " + r["refused"][:160]
    return head + (f"{r['seconds']:.2f} s (first call {r['first_call_seconds']:.2f} s), "
                   f"peak {r['peak_above_baseline'] / 2**30:.2f} GiB above the loaded model")
