"""Word alignment from an NMT model's cross-attention: weights vs norms (Kobayashi et al. 2020, §6).

Command (from the repository root; needs the fr→en model of experiments/train_nmt_multi30k.py):

    python experiments/kobayashi_alignment.py [--model checkpoints/nmt_multi30k/model]

Teacher-forces each Hansards pair (French source, English target, 447 pairs from
``../shared/data/alignment/enfr.*``; the gold is English–French, 1-based, so it is swapped),
reads every decoder layer's cross-attention, aggregates to words (sum over source subwords,
mean over target subwords), links each English word to its argmax French word (no link when
the argmax is the source EOS), and scores AER against the sure/possible gold, pooled over the
corpus. Two readings of the decoder rows: AWO (row t outputs target word t) and AWI (row t
takes target word t as input). Two maps: head-averaged weights ᾱ and the summed norm
‖Σ_h α f_h(x_j)‖; per head: α_h vs ‖α_h f_h(x_j)‖. Text is NFKC-normalised and lowercased
like the model's training data (``--cased`` to keep case).

Writes experiments/results/kobayashi_alignment/{aer.json, table.md}. Runtime: ~1 min.
Reference (Kobayashi et al. 2020, Table 4: de-en, 6+6 layers, 4 heads, 5 seeds, AER %):
AWO best layer 47.7 (weights) vs 41.4 (norms); AWI best layer 29.8 vs 25.0.
"""

from __future__ import annotations

import argparse
import json
import unicodedata
from pathlib import Path

import jax
import numpy as np

from experiment_data import add_data_dir, data_file

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("AWO", "AWI")
METHODS = ("weights", "norms")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=REPO / "checkpoints" / "nmt_multi30k" / "model")
    add_data_dir(p)
    p.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "kobayashi_alignment")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--cased", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="first N pairs only (smoke test)")
    return p.parse_args(argv)


def encode_pairs(model, pairs, cased: bool):
    """-> list of dicts: source/target token ids (with EOS) and the word index of each token."""
    from jattn.methods.alignment import subword_words

    tok = model.tokenizer
    norm = lambda w: unicodedata.normalize("NFKC", w if cased else w.lower())
    src_enc = lambda w: tok(norm(w), add_special_tokens=False)["input_ids"]
    tgt_enc = lambda w: tok(text_target=norm(w), add_special_tokens=False)["input_ids"]
    out = []
    for en, fr in pairs:
        s_ids, s_word = subword_words(src_enc, fr)
        t_ids, t_word = subword_words(tgt_enc, en)
        out.append({"src": s_ids + [tok.eos_token_id], "src_word": s_word + [-1],
                    "tgt": t_ids + [tok.eos_token_id], "tgt_word": t_word + [-1]})
    return out


def make_batch(items, pad_id: int, start_id: int):
    b, s, t = len(items), max(len(x["src"]) for x in items), max(len(x["tgt"]) for x in items)
    batch = {k: np.full((b, n), v, np.int32) for k, n, v in
             (("input_ids", s, pad_id), ("attention_mask", s, 0), ("decoder_input_ids", t, pad_id),
              ("decoder_attention_mask", t, 0))}
    for k, x in enumerate(items):
        batch["input_ids"][k, :len(x["src"])] = x["src"]
        batch["attention_mask"][k, :len(x["src"])] = 1
        dec = [start_id] + x["tgt"][:-1]  # teacher forcing: shift right
        batch["decoder_input_ids"][k, :len(dec)] = dec
        batch["decoder_attention_mask"][k, :len(dec)] = 1
    return batch


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jattn
    from jattn.methods import alignment as AL
    from jattn.methods.norms import attention_norms, over_layers

    if not (args.model / "config.json").is_file():
        raise SystemExit(f"no model at {args.model}: train it with experiments/train_nmt_multi30k.py")
    model = jattn.load(str(args.model))
    pairs = AL.read_parallel(data_file(args.data_dir, "alignment/enfr.src-tgt"))  # (English, French)
    gold = [(AL.swap(s), AL.swap(p)) for s, p in AL.read_gold(data_file(args.data_dir, "alignment/enfr.gold"), one_based=True)]
    if args.limit:
        pairs, gold = pairs[:args.limit], gold[:args.limit]
    items = encode_pairs(model, pairs, args.cased)
    limit = model.config.max_length
    skipped = [k for k, x in enumerate(items) if max(len(x["src"]), len(x["tgt"])) > limit]
    if skipped:  # longer than the model's positions: left out of the AER, and reported
        print(f"skipping {len(skipped)} pairs longer than the model's {limit} positions: {skipped[:10]}...")
        keep = [k for k in range(len(items)) if k not in set(skipped)]
        items, gold = [items[k] for k in keep], [gold[k] for k in keep]
    tok = model.tokenizer
    cross_norms = jax.jit(lambda it, qm, km: over_layers(attention_norms, it, qm, km))

    L = H = None
    links: dict = {}  # (setting, method, layer, head or -1) -> list of link sets, corpus order
    order = sorted(range(len(items)), key=lambda k: len(items[k]["src"]) + len(items[k]["tgt"]))
    for start in range(0, len(order), args.batch_size):
        idx = order[start:start + args.batch_size]
        batch = make_batch([items[k] for k in idx], tok.pad_token_id, model.config.decoder_start_token_id)
        res = model.forward(batch)
        out = {k: np.asarray(v) for k, v in cross_norms(res.internals["cross"], batch["decoder_attention_mask"],
                                                          batch["attention_mask"]).items()}
        L, H = out["weights"].shape[0], out["weights"].shape[2]
        maps = {"weights": (out["weights"].mean(2), out["weights"]),  # (L, b, t, s), (L, b, H, t, s)
                "norms": (out["summed_norm"], out["weighted_norm"])}
        for r, k in enumerate(idx):
            x = items[k]
            s, t = len(x["src"]), len(x["tgt"])
            src_word = np.array(x["src_word"])
            for setting in SETTINGS:
                rows = AL.decoder_rows(x["tgt_word"], setting, t)
                for method, (layer_map, head_map) in maps.items():
                    for l in range(L):
                        for h in range(-1, H):
                            att = layer_map[l, r, :t, :s] if h < 0 else head_map[l, r, h, :t, :s]
                            a = AL.hard_alignment(AL.word_map(att, rows, src_word))
                            links.setdefault((setting, method, l, h), [None] * len(items))[k] = a
    aer = {key: AL.aer(v, gold) for key, v in links.items()}
    return report(args, aer, L, H, len(items), len(skipped))


def report(args, aer: dict, L: int, H: int, n_pairs: int, n_skipped: int) -> dict:
    table = {}
    for setting in SETTINGS:
        for method in METHODS:
            per_layer = [100 * aer[(setting, method, l, -1)] for l in range(L)]
            per_head = [[100 * aer[(setting, method, l, h)] for h in range(H)] for l in range(L)]
            best = int(np.argmin(per_layer))
            bh = np.unravel_index(np.argmin(per_head), (L, H))
            table[f"{setting}/{method}"] = {
                "layer_mean": float(np.mean(per_layer)), "best_layer": best, "best_layer_aer": per_layer[best],
                "per_layer": per_layer, "per_head": per_head,
                "best_head": [int(bh[0]), int(bh[1])], "best_head_aer": per_head[bh[0]][bh[1]]}
    result = {"model": str(args.model), "pairs": n_pairs, "pairs_skipped_too_long": n_skipped, "aer_percent": table,
              "reference_kobayashi2020_table4": {"AWO/weights": 47.7, "AWO/norms": 41.4,
                                                 "AWI/weights": 29.8, "AWI/norms": 25.0}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "aer.json").write_text(json.dumps(result, indent=1))
    lines = ["| setting | map | AER layer-mean | best layer (0-based) | AER best layer | best head (l-h) | AER best head | paper, best layer |",
             "|---|---|---|---|---|---|---|---|"]
    for key, row in table.items():
        ref = result["reference_kobayashi2020_table4"][key]
        lines.append(f"| {key.split('/')[0]} | {key.split('/')[1]} | {row['layer_mean']:.1f} | {row['best_layer']} | "
                     f"{row['best_layer_aer']:.1f} | {row['best_head'][0]}-{row['best_head'][1]} | "
                     f"{row['best_head_aer']:.1f} | {ref} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
