"""Loading at scale: a random Llama-shaped checkpoint saved by ``save_pretrained`` in bfloat16 as
sharded safetensors (as the hub ships such models), loaded by ``jattn.load`` and by HF
``from_pretrained(dtype=bfloat16)`` in the same run, each in a fresh process: wall time and peak
host memory above the process's baseline (resident set after the imports), beside the
checkpoint's bytes (the physical bound of a load that keeps its dtype); then the first forward
of one 128-token row, its time and the peak after it. HF's ``from_pretrained`` maps the shards
and reads a weight's pages only when it is first used, so its load time and memory leave out
what its first forward then reads; jattn's load reads, converts (transposes) and places every
tensor, and its first forward includes compiling it. Compare load + first forward.

    python benchmarks/bench_scale.py --shape 0.67b --mesh 1 8 --out benchmarks/results/bench_scale.json

Families and shapes (``SHAPES``, ``--family``): ``llama`` (a decoder LM; ``0.67b`` is the model of the scale
issue: hidden 2,048, 12 layers, 32 heads, 8 KV heads, FFN 5,632, vocabulary 32,000; 1.34 GB in bfloat16,
three shards), ``xlm-roberta`` (an encoder of XLM-R XL's proportions: width, heads, FFN 4x, its 250,002-token
vocabulary at the larger sizes) and ``nllb`` (an M2M-100 translation model of NLLB's proportions: NLLB-600M's
shape is ``0.6b``, NLLB-1.3B's ``1.3b``); ``tiny`` runs in seconds (the tests). Checkpoints are made once and
kept under ``--cache``. ``orbax`` rows restore the same parameters from jattn's orbax conversion cache
(``jattn.load(use_cache=True)``, made by a first call) straight onto the devices, beside the safetensors stream
(``jattn`` rows). ``--mesh N`` loads onto an N-device mesh (``model`` axis N) of faked CPU devices
(``--xla_force_host_platform_device_count``).

``--analyses`` measures instead the forward with attention weights at ``--lengths`` tokens, head importance
over all heads at ``--importance-tokens`` and an all-heads patching sweep, jattn beside HF in the same run
(``bench_scale_analyses``); ``--plot`` draws peak memory against n and against parameters from the JSONs:

    python benchmarks/bench_scale.py --family llama --shape 0.1b --analyses \
        --out benchmarks/results/bench_scale_analyses_llama_0.1b.json
    python benchmarks/bench_scale.py --plot benchmarks/results/bench_scale_memory.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=8, intermediate_size=128, vocab_size=512,
            shard="200KB")
SHAPES = {
    "llama": {
        "tiny": dict(TINY, num_key_value_heads=4),  # 0.1b: heads and KV heads divisible by an 8-device mesh
        "0.1b": dict(hidden_size=768, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                     intermediate_size=2048, vocab_size=32000, shard="100MB"),
        "0.67b": dict(hidden_size=2048, num_hidden_layers=12, num_attention_heads=32, num_key_value_heads=8,
                      intermediate_size=5632, vocab_size=32000, shard="500MB"),
        # the device check's (an accelerator's): Llama 3.2 1B's shape (head untied: 1.5B) and Llama 3 8B's
        "1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                   intermediate_size=8192, vocab_size=128256, shard="2GB"),
        "8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   intermediate_size=14336, vocab_size=128256, shard="5GB"),
    },
    "xlm-roberta": {  # XL: hidden 2,560, 36 layers, 32 heads, FFN 10,240, vocabulary 250,880
        "tiny": TINY,
        "0.1b": dict(hidden_size=768, num_hidden_layers=6, num_attention_heads=16, intermediate_size=3072,
                     vocab_size=64000, shard="100MB"),
        "0.5b": dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, intermediate_size=4096,
                     vocab_size=250002, shard="500MB"),
        "1b": dict(hidden_size=2048, num_hidden_layers=12, num_attention_heads=32, intermediate_size=8192,
                   vocab_size=250002, shard="1GB"),
    },
    "nllb": {  # NLLB-600M: d 1,024, 12 + 12 layers, 16 heads, FFN 4,096, vocabulary 256,206
        "tiny": TINY,
        "0.1b": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
                     vocab_size=64000, shard="100MB"),
        "0.6b": dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=16, intermediate_size=4096,
                     vocab_size=256206, shard="500MB"),
        "1.3b": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192,
                     vocab_size=256206, shard="1GB"),
    },
}


# Run in a fresh interpreter: imports, then the baseline resident set, then the load; prints JSON.
PROBE = r"""
import json, resource, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
def hwm():  # this program's peak resident set (VmHWM): ru_maxrss would keep the parent's from before exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
folder, who, devices, family = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if who == "hf":
    import torch, transformers
    auto = {"llama": transformers.AutoModelForCausalLM, "xlm-roberta": transformers.AutoModel,
            "nllb": transformers.AutoModelForSeq2SeqLM}[family]
    base = rss(); t0 = time.perf_counter()
    model = auto.from_pretrained(folder, dtype=torch.bfloat16)
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
else:
    import jax, jattn, jattn.models
    mesh = jax.make_mesh((1, devices), ("data", "model")) if devices > 1 else None
    base = rss(); t0 = time.perf_counter()
    model = jattn.load(folder, tokenizer=False, mesh=mesh, use_cache=who == "orbax")
    jax.block_until_ready(jax.tree.leaves(model.params))
    dtypes = sorted({str(p.dtype) for p in jax.tree.leaves(model.params)})
seconds = time.perf_counter() - t0
peak = hwm()
ids = [[(7 * i) % 500 + 1 for i in range(128)]]  # one 128-token row: the first forward reads every weight
t1 = time.perf_counter()
seq2seq = {"decoder_input_ids": ids, "decoder_attention_mask": [[1] * 128]} if family == "nllb" else {}
if who == "hf":
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), **{k: torch.tensor(v) for k, v in seq2seq.items()})
        out[0].float().sum().item()
else:
    import numpy as np
    batch = {"input_ids": np.array(ids, np.int32), "attention_mask": np.ones((1, 128), np.int32),
             **{k: np.array(v, np.int32) for k, v in seq2seq.items()}}
    jax.block_until_ready(jax.tree.leaves(model.forward(batch, internals=None)))
forward = time.perf_counter() - t1
after = hwm()
print(json.dumps({"seconds": seconds, "peak_above_baseline": peak - base, "dtypes": dtypes,
                  "first_forward_seconds": forward, "peak_above_baseline_after_forward": after - base}))
"""


def make_checkpoint(shape: str, cache: Path, family: str = "llama") -> Path:
    """The random bfloat16 checkpoint of ``family`` at ``shape`` (made once): ``save_pretrained`` with shards. Its
    random initialisation runs on the GPU when torch has one (an 8B model's takes minutes on the CPU)."""
    folder = cache / f"{family}-{shape}-bf16"
    if (folder / "DONE").is_file():
        return folder
    import torch
    import transformers as T

    spec = dict(SHAPES[family][shape])
    shard = spec.pop("shard")
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = _random_model(T, family, spec)
    model.to(torch.bfloat16).save_pretrained(folder, max_shard_size=shard)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next process on this GPU loads the checkpoint
    (folder / "DONE").write_text("made by benchmarks/bench_scale.py\n")
    return folder


def _random_model(T, family: str, spec: dict):
    """HF's randomly initialised float32 model of ``family`` with the shape ``spec`` (on torch's current device)."""
    if family == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(**spec, max_position_embeddings=8192, tie_word_embeddings=False))
    if family == "xlm-roberta":
        return T.XLMRobertaModel(T.XLMRobertaConfig(**spec, max_position_embeddings=514), add_pooling_layer=False)
    d, L, H, F = (spec[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"))
    config = T.M2M100Config(vocab_size=spec["vocab_size"], d_model=d, encoder_layers=L, decoder_layers=L,
                            encoder_attention_heads=H, decoder_attention_heads=H, encoder_ffn_dim=F,
                            decoder_ffn_dim=F, max_position_embeddings=1024, scale_embedding=True)
    return T.M2M100ForConditionalGeneration(config)


def measure(folder: Path, who: str, devices: int = 1, family: str = "llama") -> dict:
    root, folder = Path(__file__).resolve().parents[1], folder.resolve()
    env = {**os.environ, "PYTHONPATH": str(root),  # this checkout's jattn
           "JATTN_CACHE": str(folder.parent / "jattn-cache")}  # the orbax conversion cache beside the checkpoint
    if devices > 1:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    out = subprocess.run([sys.executable, "-c", PROBE, str(folder), who, str(devices), family], env=env,
                         capture_output=True, text=True, cwd=root)  # python -c puts its cwd first on sys.path
    if out.returncode:
        raise RuntimeError(f"{who} load failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def checkpoint_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def run(shape: str, meshes: list[int], cache: Path, repeats: int = 1, family: str = "llama") -> dict:
    folder = make_checkpoint(shape, cache, family)
    size = checkpoint_bytes(folder)
    rows = []
    for who, devices in [("hf", 1)] + [(w, d) for d in meshes for w in ("jattn", "orbax")]:
        if who == "orbax":  # the conversion cache made first (jattn.load(use_cache=True) converts and saves)
            measure(folder, who, 1, family)
        for r in range(repeats):
            m = measure(folder, who, devices, family)
            rows.append({"who": who, "devices": devices, "repeat": r, **m,
                         "memory_over_checkpoint": m["peak_above_baseline"] / size,
                         "load_and_forward_seconds": m["seconds"] + m["first_forward_seconds"]})
    hf = min(r["seconds"] for r in rows if r["who"] == "hf")
    for r in rows:
        r["seconds_over_hf"] = r["seconds"] / hf
    return {"family": family, "shape": shape, "config": SHAPES[family][shape], "checkpoint_bytes": size,
            "shards": len(list(folder.glob("*.safetensors"))), "cpu": _cpu(), "cores": os.cpu_count(),
            "rows": rows}


def analyses(args) -> dict:
    """``--analyses``: bench_scale_analyses.run on this family's checkpoint, with the machine beside it."""
    import bench_scale_analyses

    folder = make_checkpoint(args.shape, args.cache, args.family)
    spec = SHAPES[args.family][args.shape]
    lengths = [n for n in args.lengths if n <= max_tokens(args.family)]
    result = {"family": args.family, "shape": args.shape, "config": spec, "checkpoint_bytes": checkpoint_bytes(folder),
              "cpu": _cpu(), "cores": os.cpu_count(), "lengths_past_the_position_table": sorted(
                  set(args.lengths) - set(lengths)),
              **bench_scale_analyses.run(folder, args.family, spec, lengths, args.mesh,
                                         min(args.importance_tokens, max_tokens(args.family)), tuple(args.patch))}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def max_tokens(family: str) -> int:
    """The longest input of the family's position table (make_checkpoint's; XLM-R's first two are padding)."""
    return {"llama": 8192, "xlm-roberta": 512, "nllb": 1024}[family]


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(SHAPES), default="llama")
    parser.add_argument("--shape", default="0.67b", help="one of SHAPES[family]: " + "; ".join(
        f"{f}: {', '.join(s)}" for f, s in SHAPES.items()))
    parser.add_argument("--mesh", type=int, nargs="+", default=[1, 8], help="device counts to load onto")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("JATTN_CACHE", "~/.cache/jattn")).expanduser()
                        / "bench_scale")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--analyses", action="store_true", help="forward with attention weights, importance, patching")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192], help="the forward's tokens")
    parser.add_argument("--importance-tokens", type=int, default=1024)
    parser.add_argument("--patch", type=int, nargs=2, default=[2, 64], metavar=("PAIRS", "TOKENS"))
    parser.add_argument("--plot", type=Path, help="draw the memory plot from benchmarks/results/bench_scale_*.json")
    args = parser.parse_args(argv)
    if args.plot:
        from bench_scale_plot import plot

        return plot(Path(__file__).resolve().parent / "results", args.plot)
    if args.shape not in SHAPES[args.family]:
        parser.error(f"--shape {args.shape} is not a shape of --family {args.family}: {', '.join(SHAPES[args.family])}")
    if args.analyses:
        return analyses(args)
    result = run(args.shape, args.mesh, args.cache, args.repeats, args.family)
    print(f"{result['family']} {result['shape']}: {result['checkpoint_bytes'] / 2**30:.2f} GiB in "
          f"{result['shards']} shards; {result['cpu']}, {result['cores']} cores")
    for r in result["rows"]:
        print(f"{r['who']:6s} devices {r['devices']}: load {r['seconds']:6.1f} s ({r['seconds_over_hf']:.2f}x HF), "
              f"peak {r['peak_above_baseline'] / 2**30:.2f} GiB above baseline "
              f"({r['memory_over_checkpoint']:.2f}x the checkpoint), {r['dtypes']}; first forward (128 tokens) "
              f"{r['first_forward_seconds']:.1f} s, peak then {r['peak_above_baseline_after_forward'] / 2**30:.2f} GiB")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
