"""Norm analysis (Kobayashi et al. 2020) throughput and peak memory, in one run.

Command (from the repository root):

    python benchmarks/bench_norms.py [--batch 32] [--length 128] [--reps 3] [--orig-seqs 4]

Compares, on MiniLM (6×12, D=384) and a random bert-base config (12×12, D=768), with a batch
of GAP paragraphs truncated to ``--length`` real tokens (no padding):
  (a) jattn's plain jitted forward (``EncoderModel.forward``'s compiled function, all internals
      returned);
  (b) ``jattn.norms``' compiled core: weights, ‖f‖, α‖f‖, ‖Σ_h αf‖ (head Gram matrices);
  (c) the original formulation: HF PyTorch with forward hooks + the explicit (b, H, n, n, D)
      αf product per layer (Kobayashi et al.'s released code), at batch 1 as the authors ran it.
(a) and (b) run in one process, alternating call by call, and each reports its fastest call:
the machine is shared, so alternating keeps their ratio fair when the load changes. (c) runs
in its own process. Peak memory: VmHWM is reset before each timed call (Linux clear_refs), so
"Δ peak" = peak RSS during the call minus the RSS just before it. XLA's compiled temp buffer
size is reported for (a) and (b). Writes benchmarks/results/bench_norms.json and prints a
Markdown table. Runtime on 2 shared CPU cores: ~10 min. Linux only (reads /proc/self).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from peak_memory import measure  # benchmarks/peak_memory.py (the scripts run from their folder)

REPO = Path(__file__).resolve().parents[1]


def texts(count: int) -> list[str]:
    import csv

    from jattn.io.manifest import data_path

    with open(data_path("gap") / "gap-development.tsv", newline="", encoding="utf-8") as f:  # jattn data fetch gap
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [r["Text"] for r in rows[:count]]


def make_bert_base(folder: Path) -> None:
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    from jattn.models.load import default_model_path

    torch.manual_seed(0)
    BertModel(BertConfig(), add_pooling_layer=False).save_pretrained(folder)  # bert-base shape
    src = default_model_path()
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / f).exists():
            shutil.copy(src / f, folder / f)


def load(model_path: str, n: int, length: int):
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured

    model = jattn.load(model_path or None, use_cache=False)
    long = [t for t in texts(400) if len(model.tokenizer(t)["input_ids"]) >= length]
    if len(long) < n:
        raise SystemExit(f"only {len(long)} GAP texts have ≥ {length} tokens")
    return model, model.tokenize(long[:n], max_length=length, truncate=True, pad_to=length)


def child_jattn(model_path: str, batch: int, length: int, reps: int) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from jattn import Interventions
    from jattn.analyses import norms as N
    from jattn.models.encoder import _forward

    model, data = load(model_path, batch, length)
    inputs = model.check_batch(data)
    L, H = model.config.num_layers, model.config.num_heads
    iv = Interventions(head_gates=jnp.ones((L, H)), disabled_heads=jnp.zeros((L, H), bool))
    args = {"forward": (_forward, (model.params, model.config, inputs, iv, jnp.float32, "all")),
            "norms": (N.encoder_norms, (model.params, model.config, inputs, False))}
    temp, best, peak = {}, {k: float("inf") for k in args}, {k: 0.0 for k in args}
    for kind, (fn, a) in args.items():
        temp[kind] = fn.lower(*a).compile().memory_analysis().temp_size_in_bytes / 2**20
        jax.block_until_ready(fn(*a))  # compile + warm-up
    for _ in range(reps):
        for kind, (fn, a) in args.items():
            sec, mb, _ = measure(lambda: jax.block_until_ready(fn(*a)))
            best[kind], peak[kind] = min(best[kind], sec), max(peak[kind], mb)
    return [{"kind": k, "batch": batch, "seq_per_s": batch / best[k], "sec_per_call": best[k],
             "delta_peak_mb": peak[k], "xla_temp_mb": temp[k]} for k in args]


def child_original(model_path: str, length: int, seqs: int) -> list[dict]:
    import torch
    from transformers import BertModel

    torch.set_num_threads(2)
    model, data = load(model_path, seqs, length)
    hf = BertModel.from_pretrained(model.source, attn_implementation="eager").eval()
    values = {}
    for l, layer in enumerate(hf.encoder.layer):
        layer.attention.self.value.register_forward_hook(lambda m, i, o, l=l: values.__setitem__(l, o))
    H, D = hf.config.num_attention_heads, hf.config.hidden_size
    d = D // H

    def original(ids):
        with torch.no_grad():
            out = hf(input_ids=ids, output_attentions=True)
            res = []
            for l, layer in enumerate(hf.encoder.layer):
                v = values[l].view(ids.shape[0], -1, H, d).permute(0, 2, 1, 3)  # (b, H, n, d)
                w = layer.attention.output.dense.weight.view(D, H, d)
                f = torch.einsum("bhsv,dhv->bhsd", v, w)  # (b, H, n, D)
                af = torch.einsum("bhks,bhsd->bhksd", out.attentions[l], f)  # (b, H, n, n, D)
                res.append((f.norm(dim=-1), af.norm(dim=-1), af.sum(1).norm(dim=-1)))
            return res

    ids = torch.tensor(data.input_ids, dtype=torch.long)
    original(ids[:1])  # warm-up
    times, peaks = [], []
    for k in range(seqs):
        sec, mb, _ = measure(lambda: original(ids[k:k + 1]))
        times.append(sec)
        peaks.append(mb)
    return [
        {
            "kind": "original",
            "batch": 1,
            "seq_per_s": len(times) / sum(times),
            "sec_per_call": sum(times) / len(times),
            "delta_peak_mb": max(peaks),
            "xla_temp_mb": float("nan"),
        }
    ]


def main() -> None:
    p = argparse.ArgumentParser(description="norm analysis vs forward vs original formulation")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--orig-seqs", type=int, default=4)
    p.add_argument("--child", nargs=2, metavar=("KIND", "MODEL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        kind, path = args.child
        path = "" if path == "minilm" else path
        rows = (child_jattn(path, args.batch, args.length, args.reps) if kind == "jattn"
                else child_original(path, args.length, args.orig_seqs))
        print(json.dumps(rows))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        make_bert_base(Path(tmp))
        for name, path in (("MiniLM-L6 (D=384)", "minilm"), ("bert-base random (D=768)", tmp)):
            for kind in ("jattn", "original"):
                cmd = [sys.executable, __file__, "--child", kind, path, "--batch", str(args.batch),
                       "--length", str(args.length), "--reps", str(args.reps), "--orig-seqs", str(args.orig_seqs)]
                out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
                if out.returncode:
                    raise SystemExit(f"{name} {kind} failed:\n{out.stderr[-3000:]}")
                for row in json.loads(out.stdout.strip().splitlines()[-1]):
                    row["model"] = name
                    rows.append(row)
                    print(f"{name:26s} {row['kind']:9s} {row['seq_per_s']:8.2f} seq/s  "
                          f"Δpeak {row['delta_peak_mb']:7.0f} MB", flush=True)
    dest = REPO / "benchmarks" / "results" / "bench_norms.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"args": vars(args), "load_average": os.getloadavg(), "rows": rows}, indent=1))
    print("\n| model | method | batch | seq/s | Δ peak RSS MB | XLA temp MB |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['kind']} | {r['batch']} | {r['seq_per_s']:.2f} | {r['delta_peak_mb']:.0f} | "
              f"{r['xla_temp_mb']:.0f} |")
    for name in dict.fromkeys(r["model"] for r in rows):
        by = {r["kind"]: r for r in rows if r["model"] == name}
        over = by["forward"]["seq_per_s"] / by["norms"]["seq_per_s"] - 1
        speed = by["norms"]["seq_per_s"] / by["original"]["seq_per_s"]
        print(f"{name}: norms cost {over:+.0%} over the plain forward; {speed:.1f}× the original's throughput")
    print(f"load average during the run: {os.getloadavg()}")


if __name__ == "__main__":
    main()
