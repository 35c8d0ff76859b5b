"""Run the main job on the embedded default: attention maps and per-head summaries of a sample.

Loads the model (default: the embedded all-MiniLM-L6-v2), runs it over the bundled sample
(300 UD English EWT sentences), and writes to ``--out``:
  * ``attention_maps_<k>.png``: every (layer, head) attention map of sample sentence k;
  * ``head_summary.json``: per (layer, head) means over all sample sentences, real tokens only.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm


def sample_sentences() -> list[str]:
    """The bundled sample: 300 sentences of UD English EWT dev (CC BY-SA 4.0)."""
    text = resources.files("jattn.data").joinpath("sample/sentences.txt").read_text()
    return [line for line in text.splitlines() if line.strip()]


@jax.jit
def head_sums(weights, input_ids, mask, cls_id, sep_id):
    """Per-(layer, head) sums over sequences of per-sequence means over real query rows.

    weights (L, b, H, n, n), mask (b, n). Returns (L, H) sums of: attention to [CLS], to [SEP],
    maximum weight (Voita et al. 2019's confidence), row entropy in nats.
    """
    m = mask.astype(weights.dtype)  # (b, n)
    rows = m.sum(-1)  # (b,) real query rows per sequence

    def per_seq_mean(x):  # x (L, b, H, n) per query row -> (L, H) sum over b of the row mean
        return jnp.einsum("lbhi,bi->lh", x, m / rows[:, None])

    to_cls = weights @ (input_ids == cls_id).astype(weights.dtype)[None, :, None, :, None]  # (L, b, H, n, 1)
    to_sep = weights @ (input_ids == sep_id).astype(weights.dtype)[None, :, None, :, None]  # (L, b, H, n, 1)
    entropy = -jnp.sum(weights * jnp.log(jnp.where(weights > 0, weights, 1.0)), -1)  # (L, b, H, n)
    return {
        "attn_to_cls": per_seq_mean(to_cls[..., 0]),
        "attn_to_sep": per_seq_mean(to_sep[..., 0]),
        "max_weight": per_seq_mean(weights.max(-1)),
        "entropy": per_seq_mean(entropy),
    }


def attention_grid(weights: np.ndarray, tokens: list[str], path: Path, title: str) -> None:
    """Plot an (L, H, n, n) array as an L × H grid of maps; axes are 0-based layer/head."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L, H, n, _ = weights.shape
    fig, axes = plt.subplots(L, H, figsize=(1.4 * H, 1.4 * L + 0.8), squeeze=False)
    for l in range(L):
        for h in range(H):
            ax = axes[l, h]
            ax.imshow(weights[l, h], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if l == L - 1:
                ax.set_xlabel(f"head {h}", fontsize=8)
            if h == 0:
                ax.set_ylabel(f"layer {l}", fontsize=8)
    shown = " ".join(tokens) if len(tokens) <= 24 else " ".join(tokens[:24]) + " …"
    fig.suptitle(f"{title}\nrows = queries, columns = keys (0-based layer/head)\n{shown}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded MiniLM)")
    parser.add_argument("--out", default="results/demo", help="output folder")
    parser.add_argument("--maps", type=int, default=3, help="number of sentences to draw")
    parser.add_argument("--batch-size", type=int, default=32)


def run(args) -> None:
    import jattn

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = jattn.load(args.model)
    tok = model.tokenizer
    name = "all-MiniLM-L6-v2 (embedded default)" if args.model is None else str(args.model)
    sentences = sample_sentences()
    order = np.argsort([len(s) for s in sentences])  # similar lengths per batch: less padding
    totals, count = None, 0
    for start in tqdm(range(0, len(order), args.batch_size), desc="demo", unit="batch"):
        texts = [sentences[i] for i in order[start:start + args.batch_size]]
        longest = max(len(ids) for ids in tok(texts)["input_ids"])
        batch = model.tokenize(texts, pad_to=-(-longest // 32) * 32)  # few shapes: few compiles
        weights = model.forward(batch).attentions  # (L, b, H, n, n)
        sums = head_sums(weights, batch.input_ids, batch.attention_mask, tok.cls_token_id, tok.sep_token_id)
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
        count += len(batch.input_ids)
    summary = {
        "model": model.source,
        "num_sentences": count,
        "description": "per (layer, head), 0-based: mean over sentences of the mean over real query "
                       "rows; attn_to_cls/sep = attention mass on [CLS]/[SEP], max_weight = largest "
                       "weight in the row, entropy = row entropy in nats",
        **{k: np.round(np.asarray(v) / count, 6).tolist() for k, v in totals.items()},
    }
    (out / "head_summary.json").write_text(json.dumps(summary, indent=1))
    for k in range(args.maps):
        batch = model.tokenize([sentences[k]])
        weights = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
        tokens = tok.convert_ids_to_tokens(batch.input_ids[0].tolist())
        attention_grid(weights, tokens, out / f"attention_maps_{k}.png", name + f": sentence {k}")
    print(f"wrote {out}/head_summary.json and {args.maps} attention-map grids")
