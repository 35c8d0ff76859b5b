"""Figures for per-(layer, head) statistics: heatmaps, Clark et al. 2019 Fig. 2/3/4-style
per-layer plots, and the MDS map of heads (Fig. 6). Layers and heads are labelled 0-based.

Every function takes plain numpy arrays and a path, writes one PNG and returns the path.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

__all__ = ["heatmap", "save", "signed_bars", "signed_heatmap"]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LAYER, HEAD = "layer (0-based)", "head (0-based)"
BROAD_ENTROPY, POSITIONAL_MASS, SPECIAL_MASS = 3.8, 0.5, 0.6  # Clark et al. 2019, Fig. 6 colours


def save(fig, path) -> Path:
    """Write ``fig`` as a PNG (110 dpi, tight) and close it."""
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


_save = save


def heatmap(values: np.ndarray, title: str, path, *, vmin: float | None = None, vmax: float | None = None,
            label: str | None = None, marks: np.ndarray | None = None) -> Path:
    """A layer × head grid (L, H) with the value in every cell (viridis; ``vmin``/``vmax`` fix
    the colour range, ``label`` names the colour bar). ``marks`` (L, H) bool: cells outlined."""
    L, H = values.shape
    fig, ax = plt.subplots(figsize=(0.55 * H + 2, 0.45 * L + 1.5))
    im = ax.imshow(values, cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
    _cells(ax, values, lambda v: "w", marks)
    ax.set(xlabel=HEAD, ylabel=LAYER, title=title, xticks=range(H), yticks=range(L))
    fig.colorbar(im, ax=ax, label=label)
    return save(fig, path)


def signed_heatmap(values: np.ndarray, title: str, path, *, label: str, marks: np.ndarray | None = None) -> Path:
    """A layer × head grid (L, H) of signed changes: a diverging colormap (RdBu) with limits
    symmetric about 0, so white is no change, red a loss and blue a gain. ``marks`` (L, H) bool:
    cells outlined (e.g. changes that survive a multiple-test correction)."""
    L, H = values.shape
    finite = np.abs(values[np.isfinite(values)])
    limit = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    fig, ax = plt.subplots(figsize=(0.55 * H + 2, 0.45 * L + 1.5))
    im = ax.imshow(values, cmap="RdBu", aspect="auto", vmin=-limit, vmax=limit)
    _cells(ax, values, lambda v: "w" if abs(v) > 0.6 * limit else "k", marks)
    ax.set(xlabel=HEAD, ylabel=LAYER, title=title, xticks=range(H), yticks=range(L))
    fig.colorbar(im, ax=ax, label=label)
    return save(fig, path)


def _cells(ax, values: np.ndarray, color, marks) -> None:
    """Each cell's value as text; outlined where ``marks``."""
    L, H = values.shape
    for l in range(L):
        for h in range(H):
            ax.text(h, l, f"{values[l, h]:.2g}", ha="center", va="center", fontsize=6, color=color(values[l, h]))
            if marks is not None and marks[l, h]:
                ax.add_patch(plt.Rectangle((h - 0.5, l - 0.5), 1, 1, fill=False, lw=1.5, ec="k"))


def per_layer(stats: dict[str, np.ndarray], labels: dict[str, str], title: str, ylabel: str, path) -> Path:
    """Clark Fig. 2 style: for each statistic, the mean over heads per layer (line) and every
    head (dots). stats: name -> (L, H)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (name, label) in enumerate(labels.items()):
        v = stats[name]  # (L, H)
        L, H = v.shape
        color = f"C{i}"
        ax.plot(range(L), v.mean(1), "-o", color=color, label=label)
        ax.scatter(np.repeat(np.arange(L), H) + 0.08 * (i - len(labels) / 2), v.ravel(), s=6, color=color, alpha=0.4)
    ax.set(xlabel=LAYER, ylabel=ylabel, title=title, xticks=range(L))
    ax.legend(fontsize=8)
    return _save(fig, path)


def entropy_plot(entropy: np.ndarray, entropy_cls: np.ndarray | None, uniform: float, path,
                 cls_label: str = "[CLS] row") -> Path:
    """Clark Fig. 4: each head's mean row entropy per layer, the [CLS] row's (None: a model
    without one), and the uniform reference."""
    L, H = entropy.shape
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.repeat(np.arange(L), H)
    ax.scatter(x - 0.1, entropy.ravel(), s=10, label="all rows")
    if entropy_cls is not None:
        ax.scatter(x + 0.1, entropy_cls.ravel(), s=10, label=cls_label)
    ax.axhline(uniform, ls="--", color="k", lw=1, label="uniform attention (mean log n)")
    top = [uniform, float(np.nanmax(entropy))] + ([float(np.nanmax(entropy_cls))] if entropy_cls is not None else [])
    ax.set(xlabel=LAYER, ylabel="mean entropy (nats)", title="Attention entropy per head", xticks=range(L),
           ylim=(0, 1.1 * max(top)))
    ax.legend(fontsize=8)
    return _save(fig, path)


def behaviours(stats: dict[str, np.ndarray]) -> np.ndarray:
    """A label per head (flattened l·H + h) by Clark's thresholds, first rule that holds wins:
    entropy > 3.8 broad; prev/next/self mass > 0.5; [CLS]/[SEP]/punctuation mass > 0.6."""
    L, H = stats["entropy"].shape
    labels = np.full(L * H, "other", dtype=object)
    rules = [("attends broadly", stats["entropy"] > BROAD_ENTROPY)]
    rules += [(f"attends to {w}", stats[f"attn_{w}"] > POSITIONAL_MASS) for w in ("prev", "next", "self")]
    rules += [(f"attends to {w}", stats[f"attn_to_{k}"] > SPECIAL_MASS)
              for k, w in (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", "punctuation"))]
    for label, hit in reversed(rules):  # earlier rules overwrite later ones
        labels[hit.ravel()] = label
    return labels


def mds_scatter(points: np.ndarray, num_layers: int, path, labels: np.ndarray | None = None) -> Path:
    """Clark Fig. 6: heads embedded by MDS of their JS distances, coloured by layer (and by
    behaviour when ``labels`` is given). points (L·H, 2)."""
    H = len(points) // num_layers
    panels = 1 if labels is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.5), squeeze=False)
    ax = axes[0, 0]
    sc = ax.scatter(points[:, 0], points[:, 1], c=np.repeat(np.arange(num_layers), H), cmap="viridis", s=18)
    fig.colorbar(sc, ax=ax, label=LAYER, ticks=range(num_layers))
    ax.set(title="Heads by Jensen-Shannon distance (MDS), by layer")
    if labels is not None:
        ax = axes[0, 1]
        for i, label in enumerate(sorted(set(labels))):
            hit = labels == label
            ax.scatter(points[hit, 0], points[hit, 1], s=18, color=f"C{i}", label=f"{label} ({hit.sum()})")
        ax.set(title="... by behaviour (Clark et al. thresholds)")
        ax.legend(fontsize=7)
    for k, (x, y) in enumerate(points):
        axes[0, 0].annotate(f"{k // H}-{k % H}", (x, y), fontsize=4, alpha=0.6)
    return _save(fig, path)


def signed_bars(values: np.ndarray, low: np.ndarray, high: np.ndarray, title: str, ylabel: str, path,
                marks: np.ndarray | None = None) -> Path:
    """Signed changes per layer (L,) as bars from 0 with their intervals [low, high]: red a loss,
    blue a gain (the colours of ``signed_heatmap``); ``marks`` (L,) bool: bars with a black edge."""
    L = len(values)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    colors = [plt.get_cmap("RdBu")(0.15 if v < 0 else 0.85) for v in values]
    edges = ["k" if marks is not None and marks[l] else "none" for l in range(L)]
    ax.bar(range(L), values, color=colors, edgecolor=edges, linewidth=1.5)
    ax.errorbar(range(L), values, yerr=[values - low, high - values], fmt="none", ecolor="k", capsize=3, lw=0.8)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xlabel=LAYER, ylabel=ylabel, title=title, xticks=range(L))
    return save(fig, path)
