"""MPNet forward at base scale: jattn (every internal, and lean) vs Hugging Face PyTorch eager.

    .venv/bin/python benchmarks/bench_mpnet.py [--repeats 5] [--batch-size 32] [--length 128]
        [--out benchmarks/results/mpnet.json]

The model is all-mpnet-base-v2 (12 x 12, D=768) from jattn's cache when it is fetched
(``jattn models fetch all-mpnet-base-v2``), else a random MPNet of that shape. Same inputs
(random token ids, no padding), the same threads for both; the entries are timed alternately in
one run (``bench_encoder.alternate``), so machine load hits all alike: read the ratios, not the
absolute rates. Entries: ``Model.forward`` with every internal returned to the host as HF returns
its attentions, called fresh and in a loop that hands each result back (``recycle=``: its memory
reused, no fresh pages to fault in; HF has no such option); ``internals=("weights",)``; the lean
forward (the last hidden state only); HF eager with ``output_attentions=True``. Beside each its minor page
faults a call (pages of fresh memory touched first), and the forward's matrix products alone
(``bench_encoder.gemm_bound``, which times the lean forward again beside XLA's products): the lean
forward's share of that bound says how close to the products' speed it runs. Whether freed memory
is kept for reuse (``jattn.host_memory``, set by the benchmark for every library in the process
unless ``JATTN_KEEP_FREED_MEMORY=0``) and ``GLIBC_TUNABLES`` are recorded with the results: they
change how many of those pages are fresh, for both libraries.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

# benchmarks/ (the scripts run from their folder)
from bench_encoder import alternate, bound_share, cpu_model, gemm_bound

NAME = "all-mpnet-base-v2"


def model_folder(tmp: Path) -> tuple[Path, str]:
    """The fetched all-mpnet-base-v2, else a random MPNet of its shape saved weights-only."""
    from jattn import artefacts
    from jattn.io.artefacts import is_made

    if is_made(NAME):
        return artefacts.path(NAME), NAME
    import torch
    from transformers import MPNetConfig, MPNetModel

    torch.manual_seed(0)
    MPNetModel(MPNetConfig(max_position_embeddings=514, layer_norm_eps=1e-5)).save_pretrained(tmp / "mpnet")
    return tmp / "mpnet", "MPNet base shape (random weights)"


def bench(folder: Path, batch_size: int, length: int, repeats: int) -> dict:
    import torch
    from transformers import MPNetModel

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured

    model = jattn.load(folder, tokenizer=False, use_cache=False)
    oracle = MPNetModel.from_pretrained(str(folder)).eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, model.config.vocab_size, (batch_size, length)).astype(np.int32)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    torch_batch = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}

    def ours():  # every internal computed and returned; α on the host as HF's
        out = model.forward(batch)
        return np.asarray(out.attentions), [np.asarray(v) for v in out.internals.values()]

    previous = {}

    def ours_recycled():  # the same in a loop that consumes each result, then hands it back
        out = model.forward(batch, recycle=previous.pop("out", None))
        views = np.asarray(out.attentions), [np.asarray(v) for v in out.internals.values()]  # on the host, as above
        del views  # consumed: no view may outlive the result handed back
        previous["out"] = out

    def ours_weights():
        return np.asarray(model.forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)

    def ours_lean():
        return np.asarray(model.forward(batch, internals=None).last_hidden_state)  # (b, n, D)

    def theirs():
        with torch.inference_mode():
            out = oracle(**torch_batch, output_attentions=True)
        return [a.numpy() for a in out.attentions]

    faults = {}
    secs = alternate({"jattn_forward": ours, "jattn_forward_recycled": ours_recycled, "jattn_weights": ours_weights,
                      "jattn_lean": ours_lean, "hf": theirs}, repeats, faults)
    tokens, c = batch_size * length, model.config
    result = {"model": f"L={c.num_layers} H={c.num_heads} D={c.hidden_size}", "batch": [batch_size, length],
              **{f"{k}_tokens_per_s": tokens / v for k, v in secs.items()},
              **{f"{k}_seconds": v for k, v in secs.items()},
              **{f"{k}_page_faults": v for k, v in faults.items()}}
    for k in ("forward", "forward_recycled", "weights", "lean"):
        result[f"ratio_{k}"] = secs["hf"] / secs[f"jattn_{k}"]  # > 1: jattn faster
    result.update(gemm_bound(c, batch_size, length, repeats, ours_lean))
    result["lean_of_torch_bound"] = result["torch_gemm_seconds"] / secs["jattn_lean"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default="benchmarks/results/mpnet.json")
    args = parser.parse_args()
    import jattn

    jattn.host_memory.keep_freed_memory()  # first: malloc set up before any library's threads allocate
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder, name = model_folder(Path(tmp))
        r = {"name": name, **bench(folder, args.batch_size, args.length, args.repeats)}
    print(f"{name}: HF eager {r['hf_tokens_per_s']:.0f} tok/s | jattn all internals {r['ratio_forward']:.2f}x HF "
          f"({r['ratio_forward_recycled']:.2f}x with recycle=), "
          f"weights only {r['ratio_weights']:.2f}x, lean {r['ratio_lean']:.2f}x | lean at "
          f"{r['lean_of_torch_bound']:.0%} of the torch-GEMM bound, of the XLA-GEMM bound {bound_share(r)}"
          f" | minor page faults a call: all internals {r['jattn_forward_page_faults']}, recycled "
          f"{r['jattn_forward_recycled_page_faults']}, lean {r['jattn_lean_page_faults']}, HF {r['hf_page_faults']}")
    meta = {"threads": args.threads, "cpu": cpu_model(), "repeats": args.repeats,
            "freed_memory_kept": jattn.host_memory.KEPT,
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "load_average_at_end": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": [r]}, indent=1))


if __name__ == "__main__":
    main()
