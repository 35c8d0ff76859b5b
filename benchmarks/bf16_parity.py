"""What ``compute_dtype=jnp.bfloat16`` costs in parity against float32 on real weights: the embedded
all-MiniLM-L6-v2 on the first ``--sentences`` SST-2 dev sentences (the data folder of ``jattn data``,
``$JATTN_DATA``), one batch.

    .venv/bin/python benchmarks/bf16_parity.py [--sentences 64] [--out benchmarks/results/bf16_parity.json]

Writes the largest |Δα| over every layer, head and real query-key pair, the largest |Δh| of the last
hidden state over real tokens divided by its largest |h|, and the smallest per-token cosine of the
two states (``docs/GUIDE.md``, Precision). Numbers of this kind, not a speed: bfloat16 is for
accelerators with bfloat16 units.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import jattn
from jattn.io import glue, manifest


def parity(model, texts: list[str]) -> dict:
    """bfloat16 against float32 on one batch of ``texts``."""
    batch = model.batch(texts)
    a, b = model.forward(batch), model.forward(batch, compute_dtype=jnp.bfloat16)
    real = np.asarray(batch["attention_mask"], bool)  # (b, n)
    pair = real[:, None, :, None] & real[:, None, None, :]  # (b, 1, n, n) real query and key
    alpha = np.abs(np.asarray(b.attentions, np.float64) - np.asarray(a.attentions, np.float64))  # (L, b, H, n, n)
    x = np.asarray(a.last_hidden_state, np.float64)[real]  # (tokens, D)
    y = np.asarray(b.last_hidden_state, np.float64)[real]  # (tokens, D)
    cosine = (x * y).sum(-1) / np.linalg.norm(x, axis=-1) / np.linalg.norm(y, axis=-1)  # (tokens,)
    return {"sentences": len(texts), "tokens": int(real.sum()),
            "alpha_max_abs_diff": float(np.where(pair[None], alpha, 0.0).max()),
            "hidden_max_abs_diff_over_max_abs": float(np.abs(y - x).max() / np.abs(x).max()),
            "hidden_min_cosine": float(cosine.min())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bf16_parity.json"))
    args = parser.parse_args()
    dev = glue.read_task("sst2", "dev", root=manifest.data_dir())
    if args.sentences > len(dev):
        raise SystemExit(f"--sentences {args.sentences}: SST-2 dev has {len(dev)}")
    out = {"model": "all-MiniLM-L6-v2 (embedded)", "data": f"SST-2 dev, first {args.sentences}",
           **parity(jattn.load(), [t for t, _ in dev[: args.sentences]])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
