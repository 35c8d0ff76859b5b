"""Mixing ratios with residual and LayerNorm on MiniLM (Kobayashi et al. 2021, Table 1, §5).

Command (from the repository root):

    python experiments/kobayashi_mixing.py [--segments 1000] [--model M]

Runs the runner's ``mixing`` method (= ``jattn analyze --format gap --methods mixing
--truncate``) over the first ``--segments`` GAP development paragraphs as
``[CLS] A [SEP] B [SEP]`` (≤ 128 tokens): 12% of each segment's non-special tokens replaced
by [MASK] (seed 0, per segment), mean mixing ratio over all real tokens and layers of Attn-W,
Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N, per layer, and the Spearman ρ of the per-type mean
ratio against the frequency rank. Then the paper's frequency protocol (Table 2; their
emnlp2021 src/relation_with_freq.py): a second, **unmasked** pass (``jattn.norms(...,
residual=True)`` batch by batch, ``jattn.analyses.norm_occurrences``) streams each occurrence's
own layer-mean ratio to disk, and ``spearman_freq_unmasked`` is the Spearman ρ of it against
the frequency rank over every real token ([CLS]/[SEP] included, unranked ids at the bottom
rank), one value per measure (order: Attn-W, Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N).
Writes experiments/results/kobayashi_mixing/{results.json, results.npz, table.md,
figures/mixing_per_layer.png}. Runtime on 2 CPU cores: ~4 min.

Published (bert-base-uncased, Table 1, mean %): Attn-W 96.41, Attn-N 85.28, AttnRes-W 48.21,
AttnRes-N 22.25, AttnResLn-N 18.75; Table 2, Spearman vs frequency rank (unmasked, own values
per occurrence): AttnRes-N −0.839, AttnResLn-N −0.544.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiment_data import data_file, gap_paragraphs, gap_study_arguments, write_study, write_table

REPO = Path(__file__).resolve().parents[1]
PAPER = {"attn_w": 96.41, "attn_n": 85.28, "attnres_w": 48.21, "attnres_n": 22.25, "attnresln_n": 18.75}
PAPER_RHO = {"attnres_n": -0.839, "attnresln_n": -0.544}
NAMES = {"attn_w": "Attn-W", "attn_n": "Attn-N", "attnres_w": "AttnRes-W", "attnres_n": "AttnRes-N",
         "attnresln_n": "AttnResLn-N"}


def parse_args(argv=None):
    return gap_study_arguments(__doc__.split("\n\n")[0], REPO / "experiments" / "results" / "kobayashi_mixing", argv)


def table(stats: dict) -> str:
    rows = ["Mixing ratios: 12% masked input. Spearman ρ vs frequency rank: (a) the paper's protocol — unmasked "
            "input, each occurrence its own layer-mean ratio, all tokens, unranked ids at the bottom rank; (b) 12% "
            "masked, per-type means, over ranked types; (c) 12% masked, each occurrence its type's mean.", "",
            "| method | mean mixing ratio % (ours, masked) | bert-base (paper) | ρ (a) unmasked, own values | "
            "ρ (b) masked, types | ρ (c) masked, type-mean per occurrence | paper ρ (a) |",
            "|---|---|---|---|---|---|---|"]
    fmt = lambda key: f"{float(stats[key]):.3f}" if key in stats else ""
    for m, (k, name) in enumerate(NAMES.items()):
        rows.append(f"| {name} | {100 * float(stats[f'mixing_{k}_mean']):.2f} | {PAPER[k]} | "
                    f"{float(stats['spearman_freq_unmasked'][m]):.3f} | "
                    f"{fmt(f'mixing_{k}_spearman_rank')} | {fmt(f'mixing_{k}_spearman_rank_occurrences')} | "
                    f"{PAPER_RHO.get(k, '')} |")
    L = len(stats["mixing_attn_w"])
    rows += ["", "| layer (0-based) | " + " | ".join(NAMES.values()) + " |", "|---" * (len(NAMES) + 1) + "|"]
    for l in range(L):
        rows.append(f"| {l} | " + " | ".join(f"{100 * stats[f'mixing_{k}'][l]:.1f}" for k in NAMES) + " |")
    return "\n".join(rows) + "\n"


def unmasked_spearman(model, corpus, ranks: np.ndarray, tokens: int, batch_size: int):
    """Kobayashi et al. 2021, Table 2: Spearman ρ of each occurrence's own layer-mean mixing
    ratio (unmasked input) vs frequency rank, all tokens, per measure. -> Statistic (5,)"""
    import tempfile

    from jattn.analyses.base import Statistic
    from jattn.analyses.norm_occurrences import occurrence_pass, spearman_authors

    with tempfile.TemporaryDirectory(prefix="kobayashi_mixing_occ-") as tmp:
        log = occurrence_pass(model, corpus, tmp, residual=True, batch_size=batch_size, max_length=128)
        if log.count != tokens:
            raise RuntimeError(f"the occurrence pass saw {log.count} tokens, the runner {tokens}: the two "
                               "tokenizations differ")
        occ = log.read()
        rho = [spearman_authors(np.asarray(occ[f"mixing_{k}"]), np.asarray(occ["ids"]), ranks) for k in NAMES]
    return Statistic(np.array(rho), f"(5,) Spearman ρ of each occurrence's own mixing ratio (mean over layers; "
                     f"unmasked input) vs frequency rank over all {log.count} real tokens ([CLS]/[SEP] included, "
                     "ids absent from the rank file at the bottom rank; Kobayashi et al. 2021 Table 2's protocol), "
                     "in the order " + ", ".join(NAMES.values()))


def main(argv=None) -> dict:
    args = parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import jattn
    from jattn.viz import plots
    from jattn.analyses.norm_stats import MixingRatio, read_ranks
    from jattn.runner import run_corpus

    model = jattn.load(args.model)
    corpus = gap_paragraphs(args.data_dir, args.segments)
    rank_file = data_file(args.data_dir, "frequency/rank_count_ids.txt")
    result = run_corpus(model, corpus, [MixingRatio(model, mask_rate=0.12, seed=0, rank_file=rank_file)],
                        batch_size=args.batch_size, max_length=128, truncate=True)
    result.statistics["spearman_freq_unmasked"] = unmasked_spearman(
        model, corpus, read_ranks(rank_file, model.config.vocab_size), result.meta["tokens"],
        min(args.batch_size, 16))
    write_study(result, args.out, model.config.num_layers)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, name in NAMES.items():
        ax.plot(100 * stats[f"mixing_{k}"], "-o", label=name)
    ax.set(xlabel=plots.LAYER, ylabel="mean mixing ratio (%)", title="mixing ratio per layer (12% masked)")
    ax.legend(fontsize=8)
    fig.savefig(args.out / "figures" / "mixing_per_layer.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    write_table(result, table(stats), args.out)
    return {"meta": result.meta, "stats": stats}


if __name__ == "__main__":
    main()
