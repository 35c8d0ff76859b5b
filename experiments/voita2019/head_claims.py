"""The Voita claims about the encoder heads themselves (``experiments.voita2019.roles`` computes them on the
unpruned model): whether LRP relevance follows confidence (§4, Fig. 1: "the most important heads
are confident"), against the same with gradient × input in place of LRP; whether the heads the L0
gates keep are more confident than those they close (§6, Fig. 8), against a random subset of the
same size; and the roles of the kept heads (a table and a figure; roles are corpus counts).
Intervals: bootstrap over test sentences (each row one sentence's per-head values).
"""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context
from experiments.common import TEST
from experiments.voita2019 import runs as V

PAPER_CONFIDENCE = ("Voita et al. 2019, §4.1 and Fig. 1 (WMT en-ru encoder): the heads LRP finds most relevant are "
                    "the most confident ones (shown per head, no statistic)")
PAPER_KEPT = ("Voita et al. 2019, §6, Fig. 8: the heads left by L0 pruning are the specialised (positional, "
              "syntactic, rare-word) and confident ones")


def claims(ctx: Context, heads: dict, runs: list[dict]) -> list[dict]:
    rows, n = heads["rows"], len(heads["rows"])
    protocol = (f"test {TEST} ({n} sentences) teacher-forced on the references; unpruned model; per sentence each "
                "encoder head's confidence (mean max weight over non-EOS rows) and relevance of the top-1 logit at "
                "every target position, each layer's heads scaled to sum to 1; the ρ over heads resamples the "
                "heads (B = 2000), a difference of means the sentences (B = 1000)")
    spec = lambda y: {"statistic": "head_spearman", "ci_method": "heads",  # noqa: E731
                      "columns": {"x": "confidence", "y": y}}
    out = [ctx.claim(id="voita-confidence-lrp", unit="spearman", rows=rows, n=n, seeds=1,
                     claim="Spearman ρ over the encoder heads between confidence and LRP relevance",
                     paper=PAPER_CONFIDENCE, measure=spec("lrp"), protocol=protocol,
                     baseline={"name": "the same with |gradient × input| relevance in place of LRP",
                               **spec("gradient_x_input")},
                     lrp_conservation_error=max(heads["lrp_conservation_error"]))]
    confidence = np.asarray([r["confidence"] for r in rows])  # (n, L·H)
    for r in runs:
        kept = np.asarray(r["gates"]["encoder"]).ravel() > 0  # (L·H,)
        k = int(kept.sum())
        if k in (0, kept.size):
            continue  # no pruned (or no kept) head to compare
        pick = np.zeros(kept.size, bool)
        pick[np.random.default_rng(k).choice(kept.size, k, replace=False)] = True
        difference = lambda m: confidence[:, m].mean(1) - confidence[:, ~m].mean(1)  # noqa: E731 (n,)
        table = [{"index": row["index"], "kept_minus_pruned": float(a), "random_minus_rest": float(b)}
                 for row, a, b in zip(rows, difference(kept), difference(pick))]
        mean = lambda c: {"statistic": "mean", "ci_method": "bootstrap", "columns": {"value": c}}  # noqa: E731
        c = ctx.claim(id=f"voita-kept-confidence-encoder-{V.lam_name(r['lam'])}", unit="confidence", rows=table,
                      n=n, seeds=1, paper=PAPER_KEPT, measure=mean("kept_minus_pruned"), protocol=protocol,
                      claim=f"mean confidence of the {k} encoder heads L0 keeps (λ {r['lam']:g}) minus that of the "
                            f"{kept.size - k} it closes",
                      baseline={"name": f"a random {k} of the {kept.size} heads (seeded) minus the rest",
                                **mean("random_minus_rest")}, open_heads=r["open_heads"],
                      fractional_gates=r["fractional_gates"])
        c["note"] = ("kept heads are more confident" if c["ci"][0] > 0 else
                     "kept heads are less confident" if c["ci"][1] < 0 else "no difference detected")
        out.append(c)
    return out


def table(heads: dict, runs: list[dict]) -> str:
    """Markdown: roles of all encoder heads and of those each λ of the encoder setting keeps; LRP's
    conservation check."""
    roles = np.asarray(heads["roles"], dtype=object)  # (L, H)
    names = sorted(set(roles.ravel()) - {"other"}) + ["other"]
    count = lambda m: " | ".join(str(int(((roles == x) & m).sum())) for x in names)  # noqa: E731
    lines = [f"Encoder head roles on the test sources ({heads['sentences']} sentences; "
             f"{heads['mapped_to_tokens']} with the parse mapped to tokens; relations "
             f"{', '.join(heads['relations'])} with ≥ {heads['min_relation_count']} dependents; "
             f"{heads['rare_word_sentences']} sentences with a rare token).", "",
             "| heads | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names),
             f"| all ({roles.size}) | {count(np.ones(roles.shape, bool))} |"]
    for r in sorted((r for r in runs if r["setting"] == "encoder"), key=lambda r: r["lam"]):
        kept = np.asarray(r["gates"]["encoder"]) > 0
        lines.append(f"| kept at λ {r['lam']:g} ({int(kept.sum())}) | {count(kept)} |")
    top = lambda key: float(np.max(heads[key]))  # noqa: E731  the largest over the L × H heads
    confidence = np.asarray(heads["confidence"]["encoder"])
    margin = (f"{top('margin'):+.1f} points" if np.isfinite(top("margin")) else
              "none (no relation with enough dependents)")
    lines += ["", f"Largest over the {roles.size} heads: share of rows whose argmax is the previous token "
              f"{top('previous'):.0%}, the next token {top('next'):.0%} (a positional head: ≥ 90 %), the rarest "
              f"token {top('rare'):.0%} (a rare-word head: > 50 %); best syntactic margin over the offset baseline "
              f"{margin} (a syntactic head: ≥ +10); confidence {confidence.min():.2f}-{confidence.max():.2f}."]
    worst = max(heads["lrp_conservation_error"])
    lines += ["", f"LRP conservation: the largest |Σ relevance at a layer's input / explained predictions − 1| over "
              f"sentences and layers is {worst:.1e}; relevance passed through the residual stream per layer (mean "
              f"share): {', '.join(f'{x:.2f}' for x in heads['lrp_residual_share'])}. LRP covers the encoder heads "
              "only (the decoder is one block in the propagation), so no decoder or cross-attention relevance is "
              "reported."]
    return "\n".join(lines)


def roles_figure(ctx: Context, heads: dict, runs: list[dict]) -> str:
    """Encoder heads by role, with confidence and LRP per head, and the heads each encoder λ keeps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = np.asarray(heads["roles"], dtype=object)
    L, H = roles.shape
    names = sorted(set(roles.ravel()))
    runs = sorted((r for r in runs if r["setting"] == "encoder"), key=lambda r: r["lam"])
    fig, axes = plt.subplots(1, 3 + len(runs), figsize=(2.2 * (3 + len(runs)), 0.35 * L + 1.6), squeeze=False)
    ax = axes[0][0]
    ax.imshow(np.vectorize(names.index)(roles), cmap="Set2", vmin=0, vmax=max(len(names) - 1, 1), aspect="auto")
    for l in range(L):
        for h in range(H):
            ax.text(h, l, roles[l, h][:3], ha="center", va="center", fontsize=5)
    ax.set_title("role", fontsize=8)
    for ax, key, title in ((axes[0][1], None, "confidence"), (axes[0][2], "lrp", "LRP (layer sums to 1)")):
        ax.imshow(np.asarray(heads["confidence"]["encoder"] if key is None else heads[key]), cmap="viridis",
                  aspect="auto")
        ax.set_title(title, fontsize=8)
    for ax, r in zip(axes[0][3:], runs):
        ax.imshow(np.asarray(r["gates"]["encoder"]) > 0, cmap="Greys", vmin=0, vmax=1, aspect="auto")
        ax.set_title(f"kept at λ {r['lam']:g}", fontsize=8)
    for ax in axes[0]:
        ax.set_xticks(range(H))
        ax.set_yticks(range(L))
        ax.tick_params(labelsize=6)
    axes[0][0].set_ylabel("encoder layer")
    fig.supxlabel("head", fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "encoder-heads.png")
