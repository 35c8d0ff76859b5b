"""Mixing ratios with residual and LayerNorm on MiniLM (Kobayashi et al. 2021, Table 1, §5).

Command (from the repository root):

    python experiments/kobayashi_mixing.py [--segments 1000] [--model M]

Runs the runner's ``mixing`` method (= ``jattn analyze --format gap --methods mixing
--truncate``) over the first ``--segments`` GAP development paragraphs as
``[CLS] A [SEP] B [SEP]`` (≤ 128 tokens): 12% of each segment's non-special tokens replaced
by [MASK] (seed 0, per segment), mean mixing ratio over all real tokens and layers of Attn-W,
Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N, per layer, and the Spearman ρ of the per-type mean
ratio against the frequency rank. Writes experiments/results/kobayashi_mixing/{results.json,
results.npz, table.md, figures/mixing_per_layer.png}. Runtime on 2 CPU cores: ~2 min.

Published (bert-base-uncased, Table 1, mean %): Attn-W 96.41, Attn-N 85.28, AttnRes-W 48.21,
AttnRes-N 22.25, AttnResLn-N 18.75; Spearman vs frequency rank: AttnRes-N −0.839,
AttnResLn-N −0.544.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiment_data import data_file, gap_paragraphs, gap_study_arguments, write_table

REPO = Path(__file__).resolve().parents[1]
PAPER = {"attn_w": 96.41, "attn_n": 85.28, "attnres_w": 48.21, "attnres_n": 22.25, "attnresln_n": 18.75}
PAPER_RHO = {"attnres_n": -0.839, "attnresln_n": -0.544}
NAMES = {"attn_w": "Attn-W", "attn_n": "Attn-N", "attnres_w": "AttnRes-W", "attnres_n": "AttnRes-N",
         "attnresln_n": "AttnResLn-N"}


def parse_args(argv=None):
    return gap_study_arguments(__doc__.split("\n\n")[0], REPO / "experiments" / "results" / "kobayashi_mixing", argv)


def table(stats: dict) -> str:
    rows = ["| method | mean mixing ratio % (ours) | bert-base (paper) | Spearman vs freq. rank, types (ours) | "
            "occurrences (ours) | paper |", "|---|---|---|---|---|---|"]
    fmt = lambda key: f"{float(stats[key]):.3f}" if key in stats else ""
    for k, name in NAMES.items():
        rows.append(f"| {name} | {100 * float(stats[f'mixing_{k}_mean']):.2f} | {PAPER[k]} | "
                    f"{fmt(f'mixing_{k}_spearman_rank')} | {fmt(f'mixing_{k}_spearman_rank_occurrences')} | "
                    f"{PAPER_RHO.get(k, '')} |")
    L = len(stats["mixing_attn_w"])
    rows += ["", "| layer (0-based) | " + " | ".join(NAMES.values()) + " |", "|---" * (len(NAMES) + 1) + "|"]
    for l in range(L):
        rows.append(f"| {l} | " + " | ".join(f"{100 * stats[f'mixing_{k}'][l]:.1f}" for k in NAMES) + " |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> dict:
    args = parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import jattn
    from jattn import plots
    from jattn.results import write_results
    from jattn.methods.norm_stats import MixingRatio
    from jattn.run import run_corpus

    model = jattn.load(args.model)
    corpus = gap_paragraphs(args.data_dir, args.segments)
    result = run_corpus(model, corpus, [MixingRatio(model, mask_rate=0.12, seed=0,
                                                       rank_file=data_file(args.data_dir, "frequency/rank_count_ids.txt"))],
                        batch_size=args.batch_size, max_length=128, truncate=True)
    write_results(result, args.out, model.config.num_layers)
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
