"""Device-aware pieces of benchmarks/device_check.py: the shapes, random HF folders, synchronised
timers, the GEMM rates, and the HF PyTorch baselines that the CPU benchmarks run on host tensors
(bench_importance.hf_importance, bench_disable.hf_loop, bench_patching's hook loop) rewritten to keep
every tensor on the oracle's device. What runs unchanged on any device is imported from the CPU
benchmarks (bench_encoder.alternate, peak_memory.fastest, bench_lm.save_gpt2 / random_batch /
corrupt, bench_nmt.inputs, bench_importance.hf_batches) and from tests/ (hf_head_gates, tolerance)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]  # the CPU benchmarks and the test oracles

from bench_encoder import alternate  # noqa: E402  (median seconds of functions run in turn)
from peak_memory import fastest  # noqa: E402  (the fastest of repeated calls)
from tolerance import model_terms, tolerance  # noqa: E402  (tests/tolerance.py: the float32 error model)

# Full shapes (one GPU) and the --tiny ones (CPU, seconds). bert: BERT-base; marian: Marian-base
# (opus-mt's 6 + 6 layers, D 512, 8 heads, FFN 2,048, 58,101 tokens); gpt2: GPT-2 small.
SHAPES = {
    "full": dict(bert=dict(layers=12, heads=12, hidden=768, ffn=3072), batch=(32, 128), repeats=5, gemm_n=8192,
                 marian=dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=58101), marian_batch=(16, 64, 64),
                 gpt2=dict(layers=12, heads=12, hidden=768, ffn=3072, vocab=50257, positions=1024), lm_batch=(8, 256),
                 sentences=256, words=24, sweep_batch=32, pairs=16, pair_length=32),
    "tiny": dict(bert=dict(layers=2, heads=4, hidden=32, ffn=64), batch=(4, 16), repeats=2, gemm_n=256,
                 marian=dict(d_model=32, layers=2, heads=4, ffn=64, vocab=128), marian_batch=(2, 12, 10),
                 gpt2=dict(layers=2, heads=4, hidden=32, ffn=64, vocab=128, positions=32), lm_batch=(2, 12),
                 sentences=8, words=6, sweep_batch=8, pairs=4, pair_length=16),  # pairs: the batch's shape
}


class Device:
    """Where PyTorch runs (CUDA when JAX runs on a GPU and torch sees one, else the CPU) and how
    each library's work is waited for, so that a timed call ends when its results exist."""

    def __init__(self):
        import jax
        import torch

        self.backend = jax.default_backend()
        self.torch = "cuda" if self.backend == "gpu" and torch.cuda.is_available() else "cpu"

    def torch_sync(self):
        import torch

        if self.torch == "cuda":
            torch.cuda.synchronize()

    def to_torch(self, batch: dict) -> dict:
        import torch

        return {k: torch.as_tensor(np.asarray(v), dtype=torch.long, device=self.torch) for k, v in batch.items()}

    def memory(self) -> dict:
        """Peak device bytes: JAX's since the process began (memory_stats, None where the backend
        has none, as on CPU), torch's since the last call (max_memory_allocated, then reset)."""
        import jax
        import torch

        try:
            stats = jax.devices()[0].memory_stats() or {}
        except Exception:  # backends without allocator statistics
            stats = {}
        peak_torch = None
        if self.torch == "cuda":
            peak_torch = int(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        return {"jax_peak_bytes": stats.get("peak_bytes_in_use"), "torch_peak_bytes": peak_torch}


def check(actual, desired, terms: int, scale=None) -> dict:
    """max |actual − desired| beside tests/tolerance.py's bound ulps · EPS · sqrt(terms) · scale
    (scale: max |desired| unless given)."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    if scale is None:
        scale = float(np.abs(desired).max()) or 1.0
    err, tol = float(np.abs(actual - desired).max()), float(tolerance(scale, terms))
    return {"max_abs_err": err, "tolerance": tol, "terms": int(terms), "scale": scale, "ok": err <= tol}


# ---------------------------------------------------------------------------------- the models

def save_bert(folder: Path, s: dict) -> Path:
    """A random BERT (sequence classifier, 2 labels) of shape ``s`` with MiniLM's WordPiece files."""
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from jattn.models.load import default_model_path

    torch.manual_seed(0)
    config = BertConfig(hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                        intermediate_size=s["ffn"], num_labels=2)
    BertForSequenceClassification(config).save_pretrained(folder)
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(default_model_path() / f, folder / f)
    return folder


def save_marian(folder: Path, s: dict) -> Path:
    """A random MarianMTModel of shape ``s`` (as bench_nmt.make_model: pad = start = V − 1, EOS 0)."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    V = s["vocab"]
    MarianMTModel(MarianConfig(
        vocab_size=V, d_model=s["d_model"], encoder_layers=s["layers"], decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"], encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"], pad_token_id=V - 1, decoder_start_token_id=V - 1, eos_token_id=0,
        forced_eos_token_id=0, max_position_embeddings=512, scale_embedding=True)).save_pretrained(folder)
    return folder


def save_lm(folder: Path, s: dict) -> Path:
    from bench_lm import save_gpt2

    return save_gpt2(folder, SimpleNamespace(**s))


def padded(batch: dict) -> dict:
    """``batch`` with shorter rows: row i keeps n − 3i tokens (at least 2), padding after."""
    ids = batch["input_ids"]
    lengths = np.maximum(ids.shape[1] - 3 * np.arange(len(ids)), 2)
    mask = (np.arange(ids.shape[1])[None] < lengths[:, None]).astype(np.int32)
    return {**batch, "input_ids": np.where(mask == 1, ids, 0).astype(np.int32), "attention_mask": mask}


def forward_gflop(L: int, D: int, F: int, rows: int, n: int, b: int) -> float:
    """Matrix-product GFLOP of L encoder-style layers (bench_encoder.gemm_bound's products)."""
    return L * (2 * rows * (4 * D * D + 2 * D * F) + 4 * b * n * n * D) / 1e9


# ---------------------------------------------------------------------------------- GEMM bound

def gemm_rates(n: int, repeats: int, dev: Device) -> dict:
    """TFLOP/s of an (n, n) @ (n, n) product, fastest call: JAX and torch in float32 (JAX at the
    run's 'highest' precision, and with TF32 as JAX's GPU default computes it), bfloat16 on GPU."""
    import jax
    import jax.numpy as jnp
    import torch

    flop = 2.0 * n ** 3
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    out = {"n": n}
    dtypes = {"fp32": (jnp.float32, torch.float32)}
    if dev.backend == "gpu":
        dtypes["bf16"] = (jnp.bfloat16, torch.bfloat16)
    for name, (jd, td) in dtypes.items():
        xa, xb = jnp.asarray(a, jd), jnp.asarray(b, jd)
        mm = jax.jit(jnp.matmul)
        out[f"jax_{name}_tflops"] = flop / fastest(lambda: mm(xa, xb).block_until_ready(), repeats) / 1e12
        ta, tb = torch.tensor(a, dtype=td, device=dev.torch), torch.tensor(b, dtype=td, device=dev.torch)

        def torch_mm():
            ta @ tb
            dev.torch_sync()

        out[f"torch_{name}_tflops"] = flop / fastest(torch_mm, repeats) / 1e12
    tf32 = jax.jit(lambda x, y: jnp.matmul(x, y, precision="tensorfloat32"))
    xa, xb = jnp.asarray(a), jnp.asarray(b)
    out["jax_fp32_default_precision_tflops"] = flop / fastest(lambda: tf32(xa, xb).block_until_ready(), repeats) / 1e12
    out.setdefault("jax_bf16_tflops", None)
    out.setdefault("torch_bf16_tflops", None)
    return out


# ---------------------------------------------------------------------------------- HF baselines

def texts(tokenizer, count: int, words: int, seed: int = 0) -> list[tuple[str, int]]:
    """``count`` (sentence, label) pairs of words/2..words random whole-word vocabulary entries."""
    vocab = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2)
    rng = np.random.default_rng(seed)
    return [(" ".join(rng.choice(vocab, int(rng.integers(words // 2, words + 1)))), int(rng.integers(0, 2)))
            for _ in range(count)]


def hf_device_batches(tokenizer, data, batch: int, dev: Device) -> list:
    """bench_importance.hf_batches (the length-sorted batches), moved to the oracle's device."""
    from bench_importance import hf_batches

    return [({k: v.to(dev.torch) for k, v in enc.items()}, labels.to(dev.torch), idx)
            for enc, labels, idx in hf_batches(tokenizer, data, batch)]


def hf_importance(hf, batches, L: int, H: int) -> np.ndarray:
    """bench_importance.hf_importance at the all-ones mask, its tensors on the oracle's device:
    per-token gates (L, b, H, n) through hooks, one backward per batch, Σ|ξ ∂L/∂ξ| over real tokens
    over the tokens (examples for the last layer), then per-layer L2 normalisation."""
    import torch

    from hf_head_gates import gated

    total, tokens, examples = 0.0, 0.0, 0.0
    for enc, labels, _ in batches:
        b, n = enc["input_ids"].shape
        gates = torch.ones(L, b, H, n, device=labels.device, requires_grad=True)  # (L, b, H, n)
        with gated(hf, {"encoder": gates}):
            logits = hf(**enc).logits
        torch.nn.functional.cross_entropy(logits, labels, reduction="sum").backward()
        real = enc["attention_mask"].float()  # (b, n)
        total = total + torch.einsum("lbhn,bn->lh", (gates.grad * gates.detach()).abs(), real)
        tokens, examples = tokens + float(real.sum()), examples + b
    count = torch.full((L, 1), tokens, device=labels.device)
    count[-1] = examples
    imp = (total / count).cpu().numpy()
    hf.zero_grad(set_to_none=True)
    return imp / (np.linalg.norm(imp, axis=1, keepdims=True) + 1e-20)


def hf_disable_loop(hf, batches, N: int, L: int, H: int) -> np.ndarray:
    """The original study's loop (bench_disable.hf_loop) on the device: the intact evaluation,
    then one complete evaluation per head made uniform over real tokens -> predictions (L, H, N)."""
    import torch

    from hf_head_gates import disabled

    def evaluate(off):  # (L, H) bool on the device -> (N,)
        out = np.zeros(N, np.int64)
        with torch.no_grad(), disabled(hf, off):
            for enc, _, idx in batches:
                out[idx] = hf(**enc).logits.argmax(-1).cpu().numpy()
        return out

    device = batches[0][1].device
    evaluate(torch.zeros(L, H, dtype=torch.bool, device=device))
    preds = np.zeros((L, H, N), np.int64)
    for l in range(L):
        for h in range(H):
            off = torch.zeros(L, H, dtype=torch.bool, device=device)
            off[l, h] = True
            preds[l, h] = evaluate(off)
    return preds


def hf_patch_loop(hf, clean: dict, corrupted: dict, direction, H: int) -> np.ndarray:
    """bench_patching's hook loop on any device (``bench_lm.patch_each_head`` on the encoder's
    attention output projections); metric: [CLS] final hidden state · direction (b,)."""
    from bench_lm import patch_each_head
    from hf_head_gates import output_projections

    base = getattr(hf, hf.base_model_prefix)
    return patch_each_head(output_projections(hf)["encoder"],
                           lambda inputs: base(**inputs).last_hidden_state[:, 0] @ direction, clean, corrupted, H)


def hf_models(cls, folder: Path, dev: Device) -> dict:
    """{"eager": ..., "sdpa": ... or None} of one folder, eval mode, on the oracle's device."""
    models = {"eager": cls.from_pretrained(str(folder), attn_implementation="eager").eval().to(dev.torch)}
    try:
        models["sdpa"] = cls.from_pretrained(str(folder), attn_implementation="sdpa").eval().to(dev.torch)
    except (ValueError, ImportError):  # the family has no SDPA path
        models["sdpa"] = None
    return models


__all__ = ["Device", "SHAPES", "alternate", "check", "fastest", "forward_gflop", "gemm_rates", "hf_device_batches",
           "hf_disable_loop", "hf_importance", "hf_models", "hf_patch_loop", "model_terms", "padded", "save_bert",
           "save_lm", "save_marian", "texts"]
