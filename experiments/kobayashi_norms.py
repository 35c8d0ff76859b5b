"""Norm-based vs weight-based attention on MiniLM (Kobayashi et al. 2020, §4: Fig. 2-4, §4.3).

Command (from the repository root):

    python experiments/kobayashi_norms.py [--segments 1000] [--model M]

Runs the streaming runner with the ``norms`` and ``norm-freq`` methods (the same as
``jattn analyze --format gap --methods norms,norm-freq --truncate``) over the first
``--segments`` GAP development paragraphs as ``[CLS] A [SEP] B [SEP]`` (≤ 128 tokens, longer
ones truncated), and writes experiments/results/kobayashi_norms/: results.json/.npz (every
statistic), figures/ (per-layer weight- vs norm-based attention to each token class; α vs ‖f‖
per head and class; mean ‖f(x)‖ per token id vs frequency rank; layer × head heatmaps),
table.md (the numbers the summary quotes). Then a second pass (``jattn.norms`` batch by
batch, ``jattn.analyses.norm_occurrences``) streams each token occurrence's own ‖f(x)‖ (mean
over heads and layers) and received α to disk and computes the authors' statistic:
``spearman_freq_occurrence_authors`` = Spearman ρ(‖f(x)‖ of each occurrence, its id's
frequency rank) over every real token, [CLS]/[SEP] included, ids missing from the rank file at
the bottom rank (their code, emnlp2020 exp1_bert/relation_with_freq.py); the per-type ρ is
``spearman_freq_type``. The occurrences are kept in occurrences.npz. Runtime on 2 CPU cores:
~4 min.

Published (bert-base-uncased, Kobayashi et al. 2020): [CLS], [SEP] and punctuation receive
large α but small ‖α f‖ (α and ‖f‖ cancel); ‖f(x)‖ correlates with frequency rank
(Spearman ρ ≈ 0.75 over occurrences: rarer tokens, larger ‖f‖).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiment_data import data_file, gap_paragraphs, gap_study_arguments, write_study, write_table

REPO = Path(__file__).resolve().parents[1]
CLASSES = {"cls": "[CLS]", "sep": "[SEP]", "punct": '"." ","', "other": "other"}


def parse_args(argv=None):
    return gap_study_arguments(__doc__.split("\n\n")[0], REPO / "experiments" / "results" / "kobayashi_norms", argv)


def figures(stats: dict, ranks: np.ndarray, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jattn.viz import plots

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
           title=f"‖f(x)‖ per token type; ρ = {float(stats['spearman_freq_type']):.2f} (types), "
                 f"{float(stats['spearman_freq_occurrence_authors']):.2f} (occurrences, own values)")
    fig.savefig(folder / "fnorm_vs_frequency.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def table(stats: dict) -> str:
    rows = ["Shares: per head (Σ_j∈c ‖α_h f_h‖ / Σ_j ‖α_h f_h‖, then the mean over heads) and summed over heads "
            "(Σ_j∈c ‖Σ_h α_h f_h‖ / Σ_j ‖Σ_h α_h f_h‖); both averaged over query rows, sequences and layers.", "",
            "| class | α (weight) | share of ‖αf‖, per head | share of ‖Σ_h αf‖, summed over heads | raw Σ‖αf‖ | "
            "mean α received | mean ‖f(x)‖ |", "|---|---|---|---|---|---|---|"]
    for c, label in CLASSES.items():
        rows.append(f"| {label} | {stats[f'weight_to_{c}'].mean():.3f} | {stats[f'norm_share_to_{c}'].mean():.3f} | "
                    f"{stats[f'norm_summed_share_to_{c}'].mean():.3f} | "
                    f"{stats[f'norm_to_{c}'].mean():.3f} | {np.nanmean(stats[f'received_{c}']):.4f} | "
                    f"{np.nanmean(stats[f'fnorm_{c}']):.3f} |")
    rows += ["", "Per layer (mean over heads), weight → norm share:", "",
             "| layer | " + " | ".join(CLASSES.values()) + " |", "|---" * (len(CLASSES) + 1) + "|"]
    for l in range(stats["weight_to_cls"].shape[0]):
        rows.append(f"| {l} | " + " | ".join(f"{stats[f'weight_to_{c}'][l].mean():.2f} → "
                                             f"{stats[f'norm_share_to_{c}'][l].mean():.2f}" for c in CLASSES) + " |")
    rows += ["", "Spearman ρ vs frequency rank (BERT-data ranks unless stated). Authors' protocol: each occurrence "
             "its own value, all tokens, unranked ids at the bottom rank. Type-mean weighting: each occurrence its "
             "type's mean value (ranked ids only).", "",
             "| quantity | occurrences, authors' protocol | over types | occurrences, type-mean weighting | "
             "ranks counted in this corpus, over types |", "|---|---|---|---|---|"]
    for k, own, label in (("freq_fnorm", "spearman_freq_occurrence_authors", "‖f(x)‖ (mean over layers, heads)"),
                          ("freq_alpha", "spearman_freq_alpha_occurrence_authors", "received α")):
        rows.append(f"| {label} | {float(stats[own]):.3f} | {float(stats[k + '_spearman_rank']):.3f} | "
                    f"{float(stats[k + '_spearman_rank_occurrences']):.3f} | "
                    f"{float(stats[k + '_spearman_corpus_rank']):.3f} |")
    return "\n".join(rows) + "\n"


def occurrence_statistics(model, corpus, ranks: np.ndarray, stats: dict, tokens: int, batch_size: int,
                          keep: Path) -> dict:
    """The authors' occurrence-level Spearman ρ (own value per occurrence) from a streamed pass;
    the (id, ‖f‖, α) occurrences are saved to ``keep`` (.npz). -> {name: Statistic}"""
    import tempfile

    from jattn.analyses.base import Statistic
    from jattn.analyses.norm_occurrences import occurrence_pass, spearman_authors

    from jattn.analyses.base import CLASS_NAMES
    from jattn.runner import token_classes

    share = np.zeros((len(CLASS_NAMES), model.config.num_layers))  # Σ over sequences of the row-mean share
    sequences = 0

    def summed_share(norms, inputs):  # share of ‖Σ_h α f‖ per token class, mean over real rows, per sequence
        nonlocal sequences
        mask = inputs["attention_mask"]  # (b, n)
        real = (mask > 0).astype(np.float64)  # (b, n)
        sn = np.asarray(norms["summed_norm"], np.float64)  # (L, b, q, k), padding 0
        total = np.where(sn.sum(-1) > 0, sn.sum(-1), 1.0)  # (L, b, q)
        cls = token_classes(model.tokenizer, inputs["input_ids"], mask)  # (b, n)
        rows = np.maximum(real.sum(-1), 1.0)  # (b,)
        for c in range(len(CLASS_NAMES)):
            to_c = np.einsum("lbqk,bk->lbq", sn, (cls == c).astype(np.float64)) / total  # (L, b, q)
            share[c] += (np.einsum("lbq,bq->lb", to_c, real) / rows).sum(1)  # padding rows: 0
        sequences += int((real.sum(-1) > 0).sum())

    with tempfile.TemporaryDirectory(prefix="kobayashi_norms_occ-") as tmp:
        log = occurrence_pass(model, corpus, tmp, residual=False, batch_size=batch_size, max_length=128,
                              on_batch=summed_share)
        if log.count != tokens:
            raise RuntimeError(f"the occurrence pass saw {log.count} tokens, the runner {tokens}: the two "
                               "tokenizations differ")
        occ = {k: np.array(v) for k, v in log.read().items()}
    np.savez_compressed(keep, **occ)
    n = len(occ["ids"])
    tail = (f" over {n} token occurrences, each its own value, [CLS]/[SEP] included, ids absent from the rank "
            "file at the bottom rank (the protocol of Kobayashi et al. 2020's code)")
    out = {f"norm_summed_share_to_{c}": Statistic(
        share[k] / sequences, f"(L,) Σ_j∈{c} ‖Σ_h α f(x_j)‖ / Σ_j ‖Σ_h α f(x_j)‖ (summed over heads, then the "
        "norm); mean over real query rows, then over sequences") for k, c in enumerate(CLASS_NAMES)}
    return out | {
        "spearman_freq_occurrence_authors": Statistic(
            np.array(spearman_authors(occ["fnorm"], occ["ids"], ranks)),
            "() Spearman ρ of ‖f(x)‖ (mean over heads and layers) vs frequency rank" + tail),
        "spearman_freq_alpha_occurrence_authors": Statistic(
            np.array(spearman_authors(occ["alpha"], occ["ids"], ranks)),
            "() Spearman ρ of the received α (mean over layers, heads, query rows) vs frequency rank" + tail),
        "spearman_freq_type": Statistic(
            np.array(stats["freq_fnorm_spearman_rank"]),
            "() Spearman ρ of the per-type mean ‖f(x)‖ vs frequency rank, over token types seen in the corpus "
            "and in the rank file (= freq_fnorm_spearman_rank)")}


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jattn
    from jattn.analyses.norm_stats import NormClassAttention, NormFrequency, read_ranks
    from jattn.runner import run_corpus

    model = jattn.load(args.model)
    corpus = gap_paragraphs(args.data_dir, args.segments)
    rank_file = data_file(args.data_dir, "frequency/rank_count_ids.txt")
    ranks = read_ranks(rank_file, model.config.vocab_size)
    result = run_corpus(model, corpus, [NormClassAttention(), NormFrequency(model.config.vocab_size, rank_file)],
                        batch_size=args.batch_size, max_length=128, truncate=True)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    occ_file = args.out.parent / f".{args.out.name}-occurrences.npz"  # moved into out once it is written
    result.statistics.update(occurrence_statistics(model, corpus, ranks, stats, result.meta["tokens"],
                                                   min(args.batch_size, 16), occ_file))
    write_study(result, args.out, model.config.num_layers)
    occ_file.replace(args.out / "occurrences.npz")
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    figures(stats, ranks, args.out / "figures")
    write_table(result, table(stats), args.out)
    return {"meta": result.meta, "stats": stats}


if __name__ == "__main__":
    main()
