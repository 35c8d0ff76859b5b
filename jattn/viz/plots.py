"""Figures for per-(layer, head) statistics: heatmaps, Clark et al. 2019 Fig. 2/3/4-style
per-layer plots, the MDS map of heads (Fig. 6) and grids of attention maps. Layers and heads
are labelled 0-based.

Every function takes plain numpy arrays and a path, writes one PNG and returns the path. Each
figure is made to be read on its own: a title in words (a statistic key such as
``attn_to_cls`` in words: ``jattn.viz.words``), both axes labelled, a colour bar on
every image, legends outside the data; ``save`` stores the title in the PNG (``caption`` reads
it back, for a report's one-line captions).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LAYER, HEAD = "layer (0-based)", "head (0-based)"
BROAD_ENTROPY, POSITIONAL_MASS, SPECIAL_MASS = 3.8, 0.5, 0.6  # Clark et al. 2019, Fig. 6 colours


def figure_title(fig) -> str:
    """The figure's title in one line: the first line of its suptitle, else its axes' titles
    joined with "; "."""
    titles = [fig.get_suptitle().split("\n")[0]] if fig.get_suptitle() else []
    titles = titles or [ax.get_title() for ax in fig.axes if ax.get_title()]
    return "; ".join(" ".join(t.split()) for t in titles if t.strip())


def save(fig, path) -> Path:
    """Write ``fig`` as a PNG (110 dpi, tight), its title stored as the PNG's ``Title``, and close it."""
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Title": figure_title(fig)})
    plt.close(fig)
    return path


def caption(path) -> str:
    """The title ``save`` stored in a PNG ("" when it has none)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.info.get("Title", "")


def _legend_outside(ax) -> None:
    """The legend right of the axes, so that it covers no data."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def heatmap(values: np.ndarray, title: str, path, *, vmin: float | None = None, vmax: float | None = None,
            label: str | None = None, marks: np.ndarray | None = None) -> Path:
    """A layer × head grid (L, H) with the value in every cell (viridis; ``vmin``/``vmax`` fix
    the colour range, ``label`` names the colour bar). ``marks`` (L, H) bool: cells outlined.
    A statistic's title and unit in words: ``jattn.viz.words``."""
    L, H = values.shape
    fig, ax = plt.subplots(figsize=(0.55 * H + 2, 0.45 * L + 1.5))
    im = ax.imshow(values, cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
    _cells(ax, values, lambda v: "k" if np.isfinite(v) and im.norm(v) > 0.7 else "w", marks)  # dark on yellow
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
    _legend_outside(ax)
    return save(fig, path)


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
    ax.set(xlabel=LAYER, ylabel="mean row entropy (nats)", title="Attention entropy of each head, by layer",
           xticks=range(L), ylim=(0, 1.1 * max(top)))
    _legend_outside(ax)  # not over the uniform reference line
    return save(fig, path)


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
    behaviour when ``labels`` is given), each point labelled layer-head. points (L·H, 2)."""
    H = len(points) // num_layers
    panels = 1 if labels is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5.5), squeeze=False)
    ax = axes[0, 0]
    sc = ax.scatter(points[:, 0], points[:, 1], c=np.repeat(np.arange(num_layers), H), cmap="viridis", s=18)
    fig.colorbar(sc, ax=ax, label=LAYER, ticks=range(num_layers))
    ax.set(title="Coloured by layer")
    size = 7 if len(points) <= 48 else 5
    for k, (x, y) in enumerate(points):
        ax.annotate(f"{k // H}-{k % H}", (x, y), xytext=(2, 2), textcoords="offset points", fontsize=size)
    if labels is not None:
        ax = axes[0, 1]
        for i, label in enumerate(sorted(set(labels))):
            hit = labels == label
            count = f"{hit.sum()} head" + ("s" if hit.sum() != 1 else "")
            ax.scatter(points[hit, 0], points[hit, 1], s=18, color=f"C{i}", label=f"{label} ({count})")
        ax.set(title="Coloured by behaviour (Clark et al. 2019 thresholds)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    for ax in axes[0]:
        unit = "nats: JS summed over tokens"
        ax.set(xlabel=f"MDS dimension 1 ({unit})", ylabel=f"MDS dimension 2 ({unit})")
    fig.suptitle("Heads placed by MDS of the Jensen-Shannon divergence between their attention, summed over "
                 "tokens (Clark et al. 2019 §6); points: layer-head")
    return save(fig, path)


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


def token_ticks(ax, tokens: list[str], axis: str, most: int = 8, fontsize: float = 5) -> None:
    """Token names as tick labels on ``axis`` ("x" or "y"), at most ``most`` of them, evenly
    sampled (first and last kept) when the sequence is longer."""
    n = len(tokens)
    at = np.unique(np.linspace(0, n - 1, min(n, most)).round().astype(int)) if n else np.array([], int)
    names = [tokens[i] for i in at]
    if axis == "x":
        ax.set_xticks(at, names, rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(at, names, fontsize=fontsize)


def attention_grid(weights: np.ndarray, tokens: list[str], path, title: str) -> Path:
    """An (L, H, n, n) array as an L × H grid of attention maps (rows queries, columns keys),
    token names sampled on the outer panels, one colour bar for the weights."""
    L, H, n, _ = weights.shape
    fig, axes = plt.subplots(L, H, figsize=(1.5 * H + 1.5, 1.5 * L + 1.6), squeeze=False, layout="constrained")
    for l in range(L):
        for h in range(H):
            ax = axes[l, h]
            im = ax.imshow(weights[l, h], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if l == L - 1:
                token_ticks(ax, tokens, "x")
            if h == 0:
                token_ticks(ax, tokens, "y")
            if l == 0:
                ax.set_title(f"head {h}", fontsize=8)
            if h == H - 1:
                ax.yaxis.set_label_position("right")
                ax.set_ylabel(f"layer {l}", fontsize=8)
    fig.colorbar(im, ax=axes, label="attention weight α", shrink=0.6)
    fig.supxlabel("key token (column; layers and heads 0-based)", fontsize=9)
    fig.supylabel("query token (row)", fontsize=9)
    shown = " ".join(tokens) if len(tokens) <= 24 else " ".join(tokens[:24]) + " …"
    fig.suptitle(f"{title}\n{shown}", fontsize=9)
    return save(fig, path)
