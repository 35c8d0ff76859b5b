"""Corpus-analysis throughput and peak memory on MiniLM: jattn vs its plain forward vs the original pipeline.

    python benchmarks/bench_analysis.py --segments 1000          # ~5-15 min on 2 busy CPU cores

Modes, each in its own subprocess (so peak RSS is its own):
  forward     jattn's plain jitted forward over the same length-bucketed batches (hidden states fetched)
  stats       jattn.runner.loop.run_corpus with all weight statistics + entropy + JS distances
  stats-nojs  the same without JS distances
  overhead    forward and stats-nojs alternately in one process, ``--rounds`` times: the median
              ratio, which machine load cannot skew the way separate runs can
  original    how Clark et al. worked: HF PyTorch ``output_attentions=True`` in batches of 32, keep
              every (L, H, n, n) map, then the weight statistics + entropies in numpy per example
              (no JS: its numpy cost is timed on the first ``--original-js`` examples and extrapolated)
Corpus: the first 1,600 GAP development paragraphs that are a sentence pair of ≤ 128 tokens (as
the Clark stage of ``jattn reproduce`` reads them), repeated up to N. jattn modes
first run one batch per bucket length as warm-up (compile; persistent compilation cache), then
time the full corpus. Prints a Markdown table; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def corpus(model, n: int):
    from jattn.io.manifest import data_path
    from jattn.io.readers import read
    from jattn.io.tokenize import tokenize

    pool = []
    for ex in read(data_path("gap") / "gap-development.tsv", "gap"):  # jattn data fetch gap
        if len(pool) == 1600:
            break
        if ex.b is not None and tokenize(model.tokenizer, [(ex.a, ex.b)], max_length=10**9).lengths[0] <= 128:
            pool.append(ex)
    return [pool[i % len(pool)] for i in range(n)]


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def warmup_subset(model, examples, batch_size):
    """batch_size examples per bucket length, so every shape compiles before timing."""
    from jattn.io.tokenize import tokenize
    from jattn.runner import buckets

    sizes = buckets(128)
    picked = {}
    for ex in examples[:400]:
        n = tokenize(model.tokenizer, [(ex.a, ex.b)], max_length=10**9).lengths[0]
        picked.setdefault(next(s for s in sizes if s >= n), []).append(ex)
    return [ex for group in picked.values() for ex in group[:batch_size]]


def run_jattn(mode: str, n: int, batch_size: int, rounds: int) -> dict:
    import jax

    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="jattn-bench-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.analyses.distance import JSDistance
    from jattn.analyses.weights import ClassAttention, Entropy
    from jattn.nn import encoder
    from jattn.runner import run_corpus
    from jattn.runner.batcher import batches as _batches

    model = jattn.load()
    examples = corpus(model, n)
    base = peak_mb()
    fwd = jax.jit(lambda p, b: encoder.forward(p, model.config, b)[0]["last_hidden_state"])

    def forward(exs):
        for host, _ in _batches(model, exs, batch_size, 128, False, False, (0, 1), batch_size * 16, []):
            arrays = host.arrays()
            np.asarray(fwd(model.params, {k: arrays[k] for k in ("input_ids", "attention_mask", "token_type_ids")}))

    def analysis(methods):
        return lambda exs: run_corpus(model, exs, methods, batch_size=batch_size, progress=False)

    stats_nojs = analysis([ClassAttention(), Entropy()])
    go = {"forward": forward, "stats-nojs": stats_nojs, "stats": analysis([ClassAttention(), Entropy(), JSDistance()]),
          "overhead": None}[mode]
    warm_set = warmup_subset(model, examples, batch_size)
    if mode == "overhead":  # forward and statistics alternately in one process: their ratio, robust to load
        for fn in (forward, stats_nojs):
            fn(warm_set)
        times = {"forward": [], "stats-nojs": []}
        for _ in range(rounds):
            for name, fn in (("forward", forward), ("stats-nojs", stats_nojs)):
                t0 = time.perf_counter()
                fn(examples)
                times[name].append(time.perf_counter() - t0)
        med = {k: float(np.median(v)) for k, v in times.items()}
        return {"seconds": med["stats-nojs"], "forward_seconds": med["forward"], "rounds": times,
                "overhead": med["stats-nojs"] / med["forward"] - 1, "peak_mb": peak_mb(), "base_mb": base}
    t0 = time.perf_counter()
    go(warm_set)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    go(examples)
    return {"seconds": time.perf_counter() - t0, "warmup_seconds": warm, "peak_mb": peak_mb(), "base_mb": base}


def original_stats(A: np.ndarray, classes: np.ndarray) -> dict:
    """Clark-style numpy statistics for one example: A (L, H, n, n), classes (n,)."""
    n = A.shape[-1]
    out = {f"to_{c}": A[..., classes == c].sum(-1).mean(-1) for c in range(4)}
    out["prev"] = np.diagonal(A, -1, -2, -1).mean(-1)
    out["next"] = np.diagonal(A, 1, -2, -1).mean(-1)
    out["self"] = np.diagonal(A, 0, -2, -1).mean(-1)
    S = 0.9999 * A + 0.0001 / n
    ent = -(S * np.log(S)).sum(-1)  # (L, H, n)
    out["entropy"], out["entropy_cls"] = ent.mean(-1), ent[..., 0]
    return out


def original_js(A: np.ndarray) -> np.ndarray:
    """Clark's released JS loop for one example: each head against all heads, summed over rows."""
    K = A.shape[0] * A.shape[1]
    S = (0.999 * A + 0.001 / A.shape[-1]).reshape(K, *A.shape[2:])
    D = np.zeros((K, K))
    for a in range(K):
        p, q = S[a][None], S
        m = (p + q) / 2
        D[a] = 0.5 * ((p * np.log(p / m)).sum((1, 2)) + (q * np.log(q / m)).sum((1, 2)))
    return D


def run_original(n: int, batch_size: int, js_examples: int) -> dict:
    import torch
    from transformers import BertModel

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.models.load import default_model_path
    from jattn.runner import token_classes

    torch.set_num_threads(2)
    model = jattn.load()
    tmodel = BertModel.from_pretrained(str(default_model_path()), attn_implementation="eager").eval()
    examples = corpus(model, n)
    base = peak_mb()
    t0 = time.perf_counter()
    maps, classes = [], []
    with torch.no_grad():
        for start in range(0, n, batch_size):
            batch = model.tokenize([(e.a, e.b) for e in examples[start:start + batch_size]])
            out = tmodel(input_ids=torch.tensor(batch.input_ids, dtype=torch.long),
                         attention_mask=torch.tensor(batch.attention_mask, dtype=torch.long),
                         token_type_ids=torch.tensor(batch.token_type_ids, dtype=torch.long), output_attentions=True)
            att = torch.stack(out.attentions, 1).numpy()  # (b, L, H, n, n)
            for r, length in enumerate(batch.lengths):
                maps.append(att[r, :, :, :length, :length].copy())  # keep every map, as the original did
                classes.append(token_classes(model.tokenizer, batch.input_ids[r:r + 1, :length],
                                             batch.attention_mask[r:r + 1, :length])[0])
    extract = time.perf_counter() - t0
    per_example = [original_stats(A, c) for A, c in zip(maps, classes)]
    averages = {k: np.mean([s[k] for s in per_example], 0) for k in per_example[0]}  # noqa: F841
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    for A in maps[:js_examples]:
        original_js(A)
    js_per_example = (time.perf_counter() - t1) / max(js_examples, 1)
    return {"seconds": seconds, "extract_seconds": extract, "peak_mb": peak_mb(), "base_mb": base,
            "maps_mb": sum(A.nbytes for A in maps) / 2**20, "js_seconds_per_example": js_per_example}


def worker(mode: str, n: int, batch_size: int, js_examples: int, rounds: int) -> None:
    res = run_original(n, batch_size, js_examples) if mode == "original" else run_jattn(mode, n, batch_size, rounds)
    print("RESULT " + json.dumps(res))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--segments", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--modes", default="forward,stats,stats-nojs,original,overhead")
    p.add_argument("--rounds", type=int, default=3, help="alternations of forward and statistics in 'overhead'")
    p.add_argument("--original-js", type=int, default=10, help="examples to time the original's numpy JS on")
    p.add_argument("--json", type=Path)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.segments, args.batch_size, args.original_js, args.rounds)
    results = {}
    for mode in args.modes.split(","):
        out = subprocess.run([sys.executable, __file__, "--worker", mode, "--segments", str(args.segments),
                              "--batch-size", str(args.batch_size), "--original-js", str(args.original_js),
                              "--rounds", str(args.rounds)],
                             capture_output=True, text=True)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode or not line:
            raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
        results[mode] = json.loads(line[0][7:])
        r = results[mode]
        print(f"{mode}: {args.segments / r['seconds']:.1f} ex/s, {r['seconds']:.1f} s, peak RSS {r['peak_mb']:.0f} MB "
              f"(after loading {r['base_mb']:.0f} MB)", flush=True)
    print("\n| mode | segments | seconds | examples/s | peak RSS (MB) |\n|---|---|---|---|---|")
    for mode, r in results.items():
        print(
            f"| {mode} | {args.segments} | {r['seconds']:.1f} | {args.segments / r['seconds']:.1f} "
            f"| {r['peak_mb']:.0f} |"
        )
    if "overhead" in results:
        o = results["overhead"]
        print(f"\nstatistics without JS over the plain forward, alternated in one process ({args.rounds} rounds, "
              f"medians {o['seconds']:.1f} s vs {o['forward_seconds']:.1f} s): {o['overhead']:+.1%}")
    if "original" in results:
        o = results["original"]
        full = o["seconds"] + o["js_seconds_per_example"] * args.segments
        print(f"\noriginal: maps kept {o['maps_mb']:.0f} MB; numpy JS {o['js_seconds_per_example']:.2f} s/example "
              f"(x{args.segments} = {o['js_seconds_per_example'] * args.segments:.0f} s if run)")
        for mode, label in (("stats", "all statistics + JS, vs the original with JS"),
                            ("stats-nojs", "statistics without JS, vs the original without JS")):
            if mode in results:
                base = full if mode == "stats" else o["seconds"]
                results[f"speedup_{mode}"] = base / results[mode]["seconds"]
                print(f"{label}: {results[f'speedup_{mode}']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"segments": args.segments, **results}, indent=1))


if __name__ == "__main__":
    main()
