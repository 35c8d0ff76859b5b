"""Norm-based vs weight-based attention on MiniLM (Kobayashi et al. 2020, §4: Fig. 2-4, §4.3).

Command (from the repository root):

    python experiments/kobayashi_norms.py [--segments 1000] [--model M]

Runs the streaming runner with the ``norms`` and ``norm-freq`` methods (the same as
``jattn analyze --format gap --methods norms,norm-freq --truncate``) over the first
``--segments`` GAP development paragraphs as ``[CLS] A [SEP] B [SEP]`` (≤ 128 tokens, longer
ones truncated), and writes experiments/results/kobayashi_norms/: results.json/.npz (every
statistic), figures/ (per-layer weight- vs norm-based attention to each token class; α vs ‖f‖
per head and class; mean ‖f(x)‖ per token id vs frequency rank; layer × head heatmaps),
table.md (the numbers the summary quotes). Runtime on 2 CPU cores: ~2 min.

Published (bert-base-uncased, Kobayashi et al. 2020): [CLS], [SEP] and punctuation receive
large α but small ‖α f‖ (α and ‖f‖ cancel); ‖f(x)‖ correlates with frequency rank
(Spearman ρ ≈ 0.75: rarer tokens, larger ‖f‖).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiment_data import data_file, gap_paragraphs, gap_study_arguments, write_table

REPO = Path(__file__).resolve().parents[1]
CLASSES = {"cls": "[CLS]", "sep": "[SEP]", "punct": '"." ","', "other": "other"}


def parse_args(argv=None):
    return gap_study_arguments(__doc__.split("\n\n")[0], REPO / "experiments" / "results" / "kobayashi_norms", argv)


def figures(stats: dict, ranks: np.ndarray, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jattn import plots

    folder.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, prefix, title in ((axes[0], "weight_to", "weight-based: Σ α"),
                              (axes[1], "norm_share_to", "norm-based: share of Σ ‖αf‖")):
        for i, (c, label) in enumerate(CLASSES.items()):
            v = stats[f"{prefix}_{c}"]  # (L, H)
            ax.plot(range(v.shape[0]), v.mean(1), "-o", color=f"C{i}", label=label)
        ax.set(xlabel=plots.LAYER, title=title, xticks=range(v.shape[0]))
    axes[0].set_ylabel("mean over rows, heads, segments")
    axes[1].legend(fontsize=8)
    fig.savefig(folder / "class_weight_vs_norm.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4))
    for i, (c, label) in enumerate(CLASSES.items()):
        ax.scatter(stats[f"received_{c}"].ravel(), stats[f"fnorm_{c}"].ravel(), s=10, color=f"C{i}", label=label)
    ax.set(xscale="log", xlabel="mean α received (one point per layer-head)", ylabel="mean ‖f(x)‖",
           title="α vs ‖f(x)‖ by token class")
    ax.legend(fontsize=8)
    fig.savefig(folder / "alpha_vs_fnorm.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fn = stats["freq_fnorm_by_id"]
    ok = ~np.isnan(fn) & ~np.isnan(ranks)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(ranks[ok], fn[ok], s=3, alpha=0.5)
    ax.set(xscale="log", xlabel="frequency rank (BERT pre-training data)", ylabel="mean ‖f(x)‖ (layers, heads)",
           title=f"‖f(x)‖ per token type; ρ = {float(stats['freq_fnorm_spearman_rank']):.2f} (types), "
                 f"{float(stats['freq_fnorm_spearman_rank_occurrences']):.2f} (occurrences)")
    fig.savefig(folder / "fnorm_vs_frequency.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def table(stats: dict) -> str:
    rows = ["| class | α (weight) | share of ‖αf‖ (norm) | raw Σ‖αf‖ | mean α received | mean ‖f(x)‖ |",
            "|---|---|---|---|---|---|"]
    for c, label in CLASSES.items():
        rows.append(f"| {label} | {stats[f'weight_to_{c}'].mean():.3f} | {stats[f'norm_share_to_{c}'].mean():.3f} | "
                    f"{stats[f'norm_to_{c}'].mean():.3f} | {np.nanmean(stats[f'received_{c}']):.4f} | "
                    f"{np.nanmean(stats[f'fnorm_{c}']):.3f} |")
    rows += ["", "Per layer (mean over heads), weight → norm share:", "",
             "| layer | " + " | ".join(CLASSES.values()) + " |", "|---" * (len(CLASSES) + 1) + "|"]
    for l in range(stats["weight_to_cls"].shape[0]):
        rows.append(f"| {l} | " + " | ".join(f"{stats[f'weight_to_{c}'][l].mean():.2f} → "
                                             f"{stats[f'norm_share_to_{c}'][l].mean():.2f}" for c in CLASSES) + " |")
    rows += ["", "| Spearman ρ vs frequency rank | BERT-data ranks, over types | BERT-data ranks, over occurrences | "
             "ranks counted in this corpus, over types |", "|---|---|---|---|"]
    for k, label in (("freq_fnorm", "mean ‖f(x)‖"), ("freq_alpha", "mean received α")):
        rows.append(f"| {label} | {float(stats[k + '_spearman_rank']):.3f} | "
                    f"{float(stats[k + '_spearman_rank_occurrences']):.3f} | {float(stats[k + '_spearman_corpus_rank']):.3f} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jattn
    from jattn.results import write_results
    from jattn.methods.norm_stats import NormClassAttention, NormFrequency
    from jattn.run import run_corpus

    model = jattn.load(args.model)
    corpus = gap_paragraphs(args.data_dir, args.segments)
    freq = NormFrequency(model.config.vocab_size, data_file(args.data_dir, "frequency/rank_count_ids.txt"))
    result = run_corpus(model, corpus, [NormClassAttention(), freq], batch_size=args.batch_size,
                        max_length=128, truncate=True)
    write_results(result, args.out, model.config.num_layers)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    figures(stats, freq.ranks, args.out / "figures")
    write_table(result, table(stats), args.out)
    return {"meta": result.meta, "stats": stats}


if __name__ == "__main__":
    main()
