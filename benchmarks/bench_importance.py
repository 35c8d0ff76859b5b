"""Head importance and pruning curves (Michel et al. 2019): jattn vs Hugging Face PyTorch with
head gates inserted by forward hooks (tests/hf_head_gates.py) and autograd, same inputs, one run.

Command (from the repository root):

    nice -n 10 python benchmarks/bench_importance.py [--sentences 872] [--curve-sentences 872] [--batch 32] \\
        [--step 0.05]

Model: the SST-2 fine-tuned MiniLM (the artefact minilm-sst2) if it is made, else MiniLM with a
random 2-class head (speed does not depend on the head's values). Data: SST-2 dev (872 sentences).
  (1) importance, token estimator (|ξ ∂L/∂ξ| per token, the authors' code): ``jattn.importance``
      (warm: its second call; the first, with compiles, is reported too) vs HF: the same
      length-sorted batches of ``--batch`` sentences, per-token gates (L, b, H, n) through hooks,
      one backward per batch, Σ|grad| over real tokens, the same normalisation;
  (2) the full pruning curve, importance re-estimated before every step (``--step`` 0.05: 18 steps
      on 72 heads, 19 points), dev accuracy after every step: ``jattn.pruning_curve`` vs the loop
      the original code runs (HF importance under the mask, mask the k lowest, HF evaluation);
  (3) ``--parts batch``: one fixed batch (``--batch`` × ``--length`` tokens, best of 10 calls):
      forward alone, and the token gates' gradient — jattn jitted (``encoder.classify``, the last
      layer on [CLS] only, as ``jattn.importance`` runs a classifier); HF with its parameters requiring
      gradients (as the original code and part (1) run it) and with them frozen (gates only).
Each side runs in its own process; peak memory = VmHWM reset (Linux clear_refs) before the timed
part, minus the RSS just before it. Both sides' results are compared (importance max |Δ|, curve
max |Δ accuracy|). Writes benchmarks/results/bench_importance.json (keeping parts not re-run) and
prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from peak_memory import fastest, measure  # benchmarks/peak_memory.py (the scripts run from their folder)

REPO = Path(__file__).resolve().parents[1]


def dev(n: int) -> list[tuple[str, int]]:
    from jattn.io import glue

    return glue.read_task("sst2", "dev")[:n]


# ---- jattn -------------------------------------------------------------------------------------

def jattn_child(args) -> dict:
    if args.part == "batch":
        return jattn_batch_child(args)
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.sweeps.pruning_curve import classification_metric, prune

    model, data = jattn.load(args.folder), dev(args.sentences if args.part == "importance" else args.curve_sentences)
    if args.part == "importance":
        run = lambda: jattn.importance(model, data, estimator="token", batch_size=args.batch, progress=False)
        first, _, _ = measure(run)
        seconds, peak, imp = measure(run)
        return {"first_call_s": first, "seconds": seconds, "peak_mb": peak, "importance": imp["encoder"].tolist()}
    metric = classification_metric(model, data, batch_size=args.batch)
    seconds, peak, curve = measure(lambda: prune(model, data, metric, estimator="token", schedule="reestimate",
                                                 step=args.step, batch_size=args.batch))
    return {"seconds": seconds, "peak_mb": peak, "curve": curve}


def fixed_batch(args):
    """(ids (b, n), labels (b,)) numpy: random in-vocabulary ids, seeded (speed ignores values)."""
    rng = np.random.default_rng(0)
    return rng.integers(1000, 5000, (args.batch, args.length)), rng.integers(0, 2, args.batch)


def jattn_batch_child(args) -> dict:
    import jax
    import jax.numpy as jnp

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.nn.interventions import Interventions
    from jattn.nn import encoder

    model = jattn.load(args.folder)
    ids, labels = fixed_batch(args)
    batch = {"input_ids": jnp.asarray(ids, jnp.int32), "attention_mask": jnp.ones(ids.shape, jnp.int32),
             "token_type_ids": jnp.zeros(ids.shape, jnp.int32)}
    L, H = model.config.num_layers, model.config.num_heads

    def loss(gates):  # summed cross-entropy at per-token gates (L, b, H, n), as jattn.importance computes it
        logits = encoder.classify(model.params, model.config, batch, Interventions(head_gates=gates))  # (b, C)
        logp = jax.nn.log_softmax(logits)  # (b, classes)
        return -jnp.take_along_axis(logp, jnp.asarray(labels)[:, None], 1).sum()

    gates = jnp.ones((L, *ids.shape[:1], H, ids.shape[1]))
    forward, grad = jax.jit(loss), jax.jit(jax.grad(loss))
    return {"forward_ms": 1e3 * fastest(lambda: forward(gates).block_until_ready(), 10),
            "grad_ms": 1e3 * fastest(lambda: grad(gates).block_until_ready(), 10)}


# ---- Hugging Face PyTorch with hook gates --------------------------------------------------------

def hf_batches(tokenizer, data, batch):
    """The same length-sorted batches of ``batch`` sentences, padded to the batch's longest:
    yields (tokenizer output, labels (b,), corpus indices (b,))."""
    import torch

    lengths = [len(tokenizer(t)["input_ids"]) for t, _ in data]
    order = np.argsort(lengths, kind="stable")
    for i in range(0, len(order), batch):
        idx = order[i:i + batch]
        enc = tokenizer([data[j][0] for j in idx], padding=True, return_tensors="pt")
        yield enc, torch.tensor([data[j][1] for j in idx]), idx


def hf_importance(hf, batches, mask) -> np.ndarray:
    """Token estimator at head mask ``mask`` (L, H): Σ over real tokens of |ξ ∂L_s/∂ξ|, divided
    by tokens (examples for the last layer), per-layer L2 — as jattn.sweeps.importance."""
    import torch

    from hf_head_gates import gated

    L, H = mask.shape
    total, tokens, examples = np.zeros((L, H)), 0.0, 0.0
    m = torch.tensor(mask, dtype=torch.float32)
    for enc, labels, _ in batches:
        b, n = enc["input_ids"].shape
        gates = (m[:, None, :, None] * torch.ones(L, b, H, n)).requires_grad_(True)  # (L, b, H, n)
        with gated(hf, {"encoder": gates}):
            logits = hf(**enc).logits
        torch.nn.functional.cross_entropy(logits, labels, reduction="sum").backward()
        real = enc["attention_mask"].float()  # (b, n)
        total += torch.einsum("lbhn,bn->lh", (gates.grad * gates.detach()).abs(), real).numpy()
        tokens, examples = tokens + float(real.sum()), examples + b
    count = np.full((L, 1), tokens)
    count[-1] = examples
    imp = total / count
    return imp / (np.linalg.norm(imp, axis=1, keepdims=True) + 1e-20)


def hf_accuracy(hf, batches, mask) -> float:
    import torch

    from hf_head_gates import gated

    right = total = 0
    with torch.no_grad(), gated(hf, {"encoder": torch.tensor(mask, dtype=torch.float32)}):
        for enc, labels, _ in batches:
            right += int((hf(**enc).logits.argmax(-1) == labels).sum())
            total += len(labels)
    return 100.0 * right / total


def hf_batch_child(hf, args) -> dict:
    import torch

    from hf_head_gates import gated

    ids, labels = (torch.tensor(a, dtype=torch.long) for a in fixed_batch(args))
    L, H = hf.config.num_hidden_layers, hf.config.num_attention_heads

    def forward():
        with torch.no_grad():
            hf(input_ids=ids)

    def grad(weights: bool):
        for param in hf.parameters():
            param.requires_grad_(weights)
        gates = torch.ones(L, *ids.shape[:1], H, ids.shape[1], requires_grad=True)  # (L, b, H, n)
        with gated(hf, {"encoder": gates}):
            logits = hf(input_ids=ids).logits
        torch.nn.functional.cross_entropy(logits, labels, reduction="sum").backward()
        hf.zero_grad(set_to_none=True)

    return {"forward_ms": 1e3 * fastest(forward, 10), "grad_ms": 1e3 * fastest(lambda: grad(True), 10),
            "grad_gates_only_ms": 1e3 * fastest(lambda: grad(False), 10), "torch_threads": torch.get_num_threads()}


def hf_child(args) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    sys.path.insert(0, str(REPO / "tests"))
    from jattn.sweeps.pruning_curve import choose

    hf = AutoModelForSequenceClassification.from_pretrained(args.folder, attn_implementation="eager").eval()
    if args.part == "batch":
        return hf_batch_child(hf, args)
    tokenizer = AutoTokenizer.from_pretrained(args.folder)
    n = args.sentences if args.part == "importance" else args.curve_sentences
    batches = list(hf_batches(tokenizer, dev(n), args.batch))
    L, H = hf.config.num_hidden_layers, hf.config.num_attention_heads
    if args.part == "importance":
        seconds, peak, imp = measure(lambda: hf_importance(hf, batches, np.ones((L, H))))
        return {"seconds": seconds, "peak_mb": peak, "importance": imp.tolist(),
                "torch_threads": torch.get_num_threads()}

    def loop():
        kept = np.ones(L * H)
        curve = [[0.0, hf_accuracy(hf, batches, kept.reshape(L, H))]]
        k, layer_of = max(1, round(args.step * L * H)), np.repeat(np.arange(L), H)
        while True:
            scores = hf_importance(hf, batches, kept.reshape(L, H)).ravel()
            chosen = choose(scores, kept, layer_of, k, False)
            if not chosen:
                return curve
            kept[chosen] = 0.0
            curve.append([float(1 - kept.mean()), hf_accuracy(hf, batches, kept.reshape(L, H))])

    seconds, peak, curve = measure(loop)
    return {"seconds": seconds, "peak_mb": peak, "curve": curve}


# ---- driver ---------------------------------------------------------------------------------------

def classifier_folder(tmp: Path) -> tuple[str, str]:
    from jattn import artefacts
    from jattn.io.artefacts import is_made

    if is_made("minilm-sst2"):
        return str(artefacts.path("minilm-sst2")), "minilm-sst2 (fine-tuned)"
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.training.finetune import save_classifier, with_classifier

    save_classifier(with_classifier(jattn.load(), 2, 0), tmp / "minilm-random-head")
    return str(tmp / "minilm-random-head"), "MiniLM with a random 2-class head"


def child(side: str, part: str, folder: str, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        side,
        "--part",
        part,
        "--folder",
        folder,
        "--sentences",
        str(args.sentences),
        "--length",
        str(args.length),
        "--curve-sentences",
        str(args.curve_sentences),
        "--batch",
        str(args.batch),
        "--step",
        str(args.step),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=872)
    p.add_argument("--curve-sentences", type=int, default=872, help="SST-2 dev sentences for the curve part")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--step", type=float, default=0.05)
    p.add_argument("--length", type=int, default=40, help="tokens per row of the fixed batch (part batch)")
    p.add_argument("--parts", nargs="+", default=["importance", "curve"], choices=["importance", "curve", "batch"])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bench_importance.json")
    p.add_argument("--child", choices=["jattn", "hf"], help=argparse.SUPPRESS)
    p.add_argument("--part", choices=["importance", "curve", "batch"], help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps((jattn_child if args.child == "jattn" else hf_child)(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder, what = classifier_folder(Path(tmp))
        report = {"model": what, "sentences": args.sentences, "curve_sentences": args.curve_sentences,
                  "batch": args.batch, "step": args.step}
        for part in args.parts:
            j, h = child("jattn", part, folder, args), child("hf", part, folder, args)
            if part == "batch":
                report["fixed_batch"] = row = {"shape": [args.batch, args.length], "jattn": j, "hf": h,
                                      "forward_speedup": round(h["forward_ms"] / j["forward_ms"], 2),
                                      "grad_speedup": round(h["grad_ms"] / j["grad_ms"], 2),
                                      "grad_speedup_gates_only": round(h["grad_gates_only_ms"] / j["grad_ms"], 2)}
                print(f"| batch {args.batch}x{args.length} | forward {j['forward_ms']:.0f} vs {h['forward_ms']:.0f} ms"
                      f" | gate gradient {j['grad_ms']:.0f} vs {h['grad_ms']:.0f} ms (HF gates only "
                      f"{h['grad_gates_only_ms']:.0f} ms) |", flush=True)
                continue
            row = {"jattn_s": round(j["seconds"], 2), "hf_s": round(h["seconds"], 2),
                   "speedup": round(h["seconds"] / j["seconds"], 2),
                   "jattn_peak_mb": round(j["peak_mb"], 1), "hf_peak_mb": round(h["peak_mb"], 1)}
            if part == "importance":
                row["jattn_first_call_s"] = round(j["first_call_s"], 2)
                row["max_abs_diff"] = float(np.abs(np.array(j["importance"]) - np.array(h["importance"])).max())
            else:
                row["points"] = len(j["curve"])
                row["max_abs_diff_accuracy"] = max(abs(a[1] - b[1]) for a, b in zip(j["curve"], h["curve"])) \
                    if len(j["curve"]) == len(h["curve"]) else None
                row["curves"] = {"jattn": j["curve"], "hf": h["curve"]}
            report[part] = row
            print(f"| {part} | jattn {row['jattn_s']} s | HF {row['hf_s']} s | ×{row['speedup']} | peak "
                  f"{row['jattn_peak_mb']} vs {row['hf_peak_mb']} MB |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.is_file():  # keep the parts not re-run
        report = {**json.loads(args.out.read_text()), **report}
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
