"""Each registered method's own figures, keyed by the method's name (``jattn.analyses.registry``).

``FIGURES[name](stats, num_layers, folder[, labels])`` draws a method's figures from the finished
statistics (numpy arrays by statistic name) into ``folder`` and returns the PNG paths;
``jattn.viz.results.write_figures`` calls it after the generic per-head heatmaps. ``labels``
(taken by the figures that name token classes) renames [CLS] / [SEP] in a model's own terms
(``jattn.viz.words.special_names``).
``REPORTS[name](method, stats, folder)`` draws the figures of a method's report (its tables are
the method's ``write_report``) from the method's settings and its statistics. A method without
an entry draws no figures of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jattn.analyses.patterns import TYPES
from jattn.analyses.syntax import MIN_COUNT, DependencyCounts, head_roles
from jattn.nn.token_classes import CLASS_NAMES
from jattn.viz import plots, words


def mds_figures(stats: dict, num_layers: int, folder, labels: dict | None = None) -> list:
    """The MDS map of heads (Clark et al. 2019, Fig. 6), coloured by behaviour when the
    'weights' and 'entropy' statistics are there too (``labels`` as ``class_figures``)."""
    needed = ["entropy", "attn_prev", "attn_next", "attn_self", "attn_to_cls", "attn_to_sep", "attn_to_punct"]
    kinds = plots.behaviours(stats, labels) if all(k in stats for k in needed) else None
    return [plots.mds_scatter(stats["js_mds"], num_layers, folder / "mds_heads.png", kinds)]


def grad_figures(stats: dict, num_layers: int, folder, labels: dict | None = None) -> list:
    """Σ|∂L/∂α| by key class per layer (Clark et al. 2019, Fig. 3; ``labels`` as ``class_figures``)."""
    own = labels or {}
    labels = {f"grad_to_{c}": own.get(w, w) for c, w in zip(CLASS_NAMES, ("[CLS]", "[SEP]", '"." or ","', "other"))}
    return [plots.per_layer(stats, labels, "Gradient of the loss with respect to attention, by key class and layer",
                            "mean Σ |∂L/∂α|", folder / "grad_by_class.png")]


def lm_attention_figures(stats: dict, num_layers: int, folder) -> list:
    """Per layer, each head's and the mean share of the first, previous, own and other keys."""
    labels = {"lm_first_token": "first token", "lm_previous_token": "previous token", "lm_self": "self",
              "lm_other": "other"}
    return [plots.per_layer(stats, labels, "Where a causal LM's attention goes, by layer", words.SHARE,
                            folder / "lm_attention.png")]


def pattern_figures(stats: dict, num_layers: int, folder) -> list:
    """Per pattern type (Kovaleva et al. 2019), each head's share of maps of that type."""
    share = stats["pattern_share"]  # (L, H, 5)
    return [plots.heatmap(share[..., k], f"Share of each head's attention maps of type '{name}' (Kovaleva et al. 2019)",
                          folder / f"pattern_{k}_{name}.png", vmin=0.0, vmax=1.0, label="share of maps (0-1)")
            for k, name in enumerate(TYPES)]


def class_figures(prefix: str):
    """Figures of ``ClassAttention`` at one level: attention to token classes, positional.
    ``labels`` renames the classes ({"[CLS]": ..., "[SEP]": ...}: a translation model's terms);
    classes and positions without a statistic (absent from an attention type) are left out."""

    def figures(stats: dict, num_layers: int, folder, labels: dict | None = None) -> list:
        level, own = (" (word level)" if prefix else ""), labels or {}
        classes = {"attn_to_cls": "[CLS]", "attn_to_sep": "[SEP]", "attn_to_punct": '"." or ","',
                   "attn_to_other": "other"}
        classes = {k: own.get(v, v) for k, v in classes.items() if prefix + k in stats}
        positional = {k: v for k, v in {"attn_prev": "previous token", "attn_self": "self",
                                        "attn_next": "next token"}.items() if prefix + k in stats}
        paths = [plots.per_layer({k: stats[prefix + k] for k in classes}, classes,
                                 f"Attention to each class of key token, by layer{level}", words.SHARE,
                                 folder / f"{prefix}class_attention.png")]
        if positional:
            paths.append(plots.per_layer({k: stats[prefix + k] for k in positional}, positional,
                                         f"Attention to the previous token, itself and the next token, by layer"
                                         f"{level}", words.SHARE,
                                         folder / f"{prefix}positional.png"))
        return paths
    return figures


def entropy_figures(prefix: str):
    """Figure of ``Entropy`` at one level: mean row entropy per layer vs the uniform reference
    (and the [CLS] row's, where there is one; ``labels`` as ``class_figures``)."""

    def figures(stats: dict, num_layers: int, folder, labels: dict | None = None) -> list:
        cls = (labels or {}).get("[CLS]", "[CLS]")
        return [plots.entropy_plot(stats[prefix + "entropy"], stats.get(prefix + "entropy_cls"),
                                   float(stats[prefix + "entropy_uniform"]), folder / f"{prefix}entropy.png",
                                   f"{cls} row")]
    return figures


def dependency_figures(counts: DependencyCounts, folder, min_count: int = MIN_COUNT) -> list[Path]:
    """A layer × head heatmap of the better-direction accuracy per tabulated relation, and the
    head-role map (``jattn.analyses.syntax``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    acc, _, total = counts.accuracy()
    names = counts.relations + ("all",)
    paths = []
    for r in np.flatnonzero(total >= min_count):
        safe = names[r].replace(":", "_")
        paths.append(plots.heatmap(acc[:, :, :, r].max(0), f"{names[r]}: dependency accuracy (%) of each head, "
                                   f"better direction (n={int(total[r])})", folder / f"dependency_{safe}.png",
                                   label="dependency accuracy (%)"))
    paths.append(role_map(head_roles(counts, min_count), folder / "head_roles.png"))
    return paths


def role_map(roles: dict, path) -> Path:
    """One layer × head grid coloured by role, each cell labelled (prev/next, relation)."""
    import matplotlib.pyplot as plt

    kinds = ["other", "positional", "syntactic", "positional+syntactic"]
    code = np.vectorize(kinds.index)(roles["role"])  # (L, H)
    L, H = code.shape
    fig, ax = plt.subplots(figsize=(0.8 * H + 2, 0.55 * L + 1.5))
    cmap = plt.get_cmap("Set2", len(kinds))
    ax.imshow(code, cmap=cmap, vmin=-0.5, vmax=len(kinds) - 0.5, aspect="auto")
    for l in range(L):
        for h in range(H):
            label = "\n".join(x for x in (roles["positional"][l, h][:4], roles["relation"][l, h]) if x)
            ax.text(h, l, label, ha="center", va="center", fontsize=5)
    for i, k in enumerate(kinds):
        ax.scatter([], [], color=cmap(i), marker="s", label=f"{k} ({int((code == i).sum())})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set(xlabel=plots.HEAD, ylabel=plots.LAYER, xticks=range(H), yticks=range(L),
           title="Head roles (Voita et al. 2019): positional ≥ 90% prev/next word; "
                 "syntactic ≥ 10 points over the best offset")
    return plots.save(fig, path)


def syntax_report_figures(method, stats: dict, folder) -> list[Path]:
    """The figures of the dependency report (``jattn.analyses.syntax.DependencyHeads``): per
    tabulated relation a heatmap, and the head-role map."""
    return dependency_figures(method.counts(stats), folder, method.min_count)


FIGURES = {
    "js": mds_figures,
    "grad": grad_figures,
    "lm-attention": lm_attention_figures,
    "patterns": pattern_figures,
    "weights": class_figures(""),
    "entropy": entropy_figures(""),
    "word-weights": class_figures("word_"),
    "word-entropy": entropy_figures("word_"),
}
REPORTS = {"syntax": syntax_report_figures}
