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

import math
import textwrap
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
            label: str | None = None, marks: np.ndarray | None = None, columns: tuple[str, list | None] = (HEAD, None),
            note: str | None = None) -> Path:
    """A layer × head grid (L, H) with the value in every cell (viridis; ``vmin``/``vmax`` fix
    the colour range, ``label`` names the colour bar). ``marks`` (L, H) bool: cells outlined.
    ``columns``: what the columns are, (axis label, tick names or None for 0-based numbers), for a
    statistic per layer and something else than a head (a key token class). ``note``: a line of
    text under the figure. A statistic's title and unit in words: ``jattn.viz.words``."""
    L, H = values.shape
    fig, ax = plt.subplots(figsize=(0.55 * H + 2, 0.45 * L + 1.5))
    im = ax.imshow(values, cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
    _cells(ax, values, lambda v: "k" if np.isfinite(v) and im.norm(v) > 0.7 else "w", marks)  # dark on yellow
    ax.set(xlabel=columns[0], ylabel=LAYER, title=title, yticks=range(L))
    ax.set_xticks(range(H), [str(c) for c in (columns[1] if columns[1] is not None else range(H))])
    fig.colorbar(im, ax=ax, label=label)
    if note:
        ax.annotate(textwrap.fill(note, int(12 * (0.55 * H + 2))), (0.5, 0), xycoords=ax.xaxis.label, xytext=(0, -4),
                    textcoords="offset points", ha="center", va="top", fontsize=7)  # under the x label
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


def behaviours(stats: dict[str, np.ndarray], names: dict | None = None) -> np.ndarray:
    """A label per head (flattened l·H + h) by Clark's thresholds, first rule that holds wins:
    entropy > 3.8 broad; prev/next/self mass > 0.5; [CLS]/[SEP]/punctuation mass > 0.6 (``names``
    renames [CLS] and [SEP]: ``jattn.viz.words.special_names``)."""
    names = names or {}
    L, H = stats["entropy"].shape
    labels = np.full(L * H, "other", dtype=object)
    rules = [("attends broadly", stats["entropy"] > BROAD_ENTROPY)]
    rules += [(f"attends to {w}", stats[f"attn_{w}"] > POSITIONAL_MASS) for w in ("prev", "next", "self")]
    rules += [(f"attends to {w}", stats[f"attn_to_{k}"] > SPECIAL_MASS)
              for k, w in (("cls", names.get("[CLS]", "[CLS]")), ("sep", names.get("[SEP]", "[SEP]")),
                           ("punct", "punctuation"))]
    for label, hit in reversed(rules):  # earlier rules overwrite later ones
        labels[hit.ravel()] = label
    return labels


def mds_scatter(points: np.ndarray, num_layers: int, path, labels: np.ndarray | None = None) -> Path:
    """Clark Fig. 6: heads embedded by MDS of their JS distances, coloured by layer (and, in a
    second panel, by behaviour when ``labels`` is given); in every panel each head named layer-head
    beside its point (``name_points``). points (L·H, 2)."""
    H = len(points) // num_layers
    panels = 1 if labels is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5.5), squeeze=False)
    ax = axes[0, 0]
    sc = ax.scatter(points[:, 0], points[:, 1], c=np.repeat(np.arange(num_layers), H), cmap="viridis", s=18)
    fig.colorbar(sc, ax=ax, label=LAYER, ticks=range(num_layers))
    ax.set(title="Coloured by layer")
    if labels is not None:
        ax = axes[0, 1]
        for i, label in enumerate(sorted(set(labels))):
            hit = labels == label
            count = f"{hit.sum()} head" + ("s" if hit.sum() != 1 else "")
            ax.scatter(points[hit, 0], points[hit, 1], s=18, color=f"C{i}", label=f"{label} ({count})")
        ax.set(title="Coloured by behaviour (Clark et al. 2019 thresholds)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    unit = "nats: JS summed over tokens"
    for ax in axes[0]:
        ax.set(xlabel=f"MDS dimension 1 ({unit})", ylabel=f"MDS dimension 2 ({unit})")
        ax.margins(0.12)  # room for the names of the outer points
    fig.suptitle("Heads placed by MDS of the Jensen-Shannon divergence between their attention, summed over "
                 "tokens (Clark et al. 2019 §6); points: layer-head")
    names = [f"{k // H}-{k % H}" for k in range(len(points))]
    for ax in axes[0]:
        name_points(ax, points, names, 7 if len(points) <= 48 else 5)
    return save(fig, path)


_OFFSETS = [(dx * r, dy * r, "left" if dx > 0 else "right" if dx < 0 else "center",
             "bottom" if dy > 0 else "top" if dy < 0 else "center")
            for r in (3, 7, 12) for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (0, 1.5), (0, -1.5), (1.5, 0),
                                               (-1.5, 0))]  # in points: near the point first


def name_points(ax, points: np.ndarray, names: list[str], fontsize: float) -> None:
    """Every point's name beside it, placed so that names overlap neither each other nor the points
    where there is room: points closer than a name's height share one label (their names joined by
    ", "), and each label goes to the first of 24 offsets around its points (nearest first) where its
    box overlaps no label placed before, no point and nothing outside the axes (else the first
    offset). points (n, 2) in data coordinates."""
    fig = ax.figure
    ax.autoscale_view()
    renderer = fig.canvas.get_renderer()
    xy = ax.transData.transform(points)  # (n, 2) display pixels
    near = 1.2 * fontsize * fig.dpi / 72  # a name's height in pixels
    groups: list[list[int]] = []
    for i in np.lexsort((-xy[:, 1], xy[:, 0])):
        group = next((g for g in groups if np.hypot(*(xy[g[0]] - xy[i])) < near), None)
        if group is None:
            groups.append([i])
        else:
            group.append(i)
    frame, placed = ax.get_window_extent(renderer), []
    for group in groups:
        text = "\n".join(", ".join(names[i] for i in group[j:j + 4]) for j in range(0, len(group), 4))
        anchor = points[group].mean(0)  # (2,)
        for k, (dx, dy, ha, va) in enumerate(_OFFSETS):
            label = ax.annotate(text, anchor, xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                                ha=ha, va=va)
            box = label.get_window_extent(renderer)
            free = not any(box.overlaps(b) for b in placed) and box.count_contains(xy) == 0
            if free and frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1):
                break
            label.remove()
        else:
            dx, dy, ha, va = _OFFSETS[0]
            label = ax.annotate(text, anchor, xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                                ha=ha, va=va)
            box = label.get_window_extent(renderer)
        placed.append(box)


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


LEGIBLE = 40  # the most token names one axis of an attention map shows


def token_step(n: int) -> int:
    """Every how many tokens an axis of ``n`` tokens is labelled: 1 up to ``LEGIBLE`` tokens."""
    return max(1, math.ceil(n / LEGIBLE))


def token_ticks(ax, tokens: list[str], axis: str, fontsize: float = 5) -> None:
    """Token names as tick labels on ``axis`` ("x" or "y"): every token of a sequence of at most
    ``LEGIBLE`` tokens; of a longer one every k-th (``token_step``), named "position token", the
    others identified by position in ``token_list``."""
    k = token_step(len(tokens))
    at = np.arange(0, len(tokens), k)
    names = [tokens[i] if k == 1 else f"{i} {tokens[i]}" for i in at]
    if axis == "x":
        ax.set_xticks(at, names, rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(at, names, fontsize=fontsize)


def token_list(tokens: list[str], width: int = 10**9) -> str:
    """Every token after its 0-based position, "0 [CLS] · 1 the · 2 cat", in lines of at most
    ``width`` characters (a position never apart from its token)."""
    lines = [""]
    for i, t in enumerate(tokens):
        entry = f"{i} {t}"
        if lines[-1] and len(lines[-1]) + 3 + len(entry) > width:
            lines.append("")
        lines[-1] += (" · " if lines[-1] else "") + entry
    return "\n".join(lines)


def attention_grid(weights: np.ndarray, tokens: list[str], path, title: str) -> Path:
    """An (L, H, n, n) array as an L × H grid of attention maps (rows queries, columns keys), one
    colour bar for the weights. The outer panels name every token (panels grow with the sentence);
    past ``LEGIBLE`` tokens they name every k-th, by position and name, and the title lists every
    token by position; else it gives the sentence."""
    L, H, n, _ = weights.shape
    side = max(1.5, 0.075 * min(n, LEGIBLE))  # inches per panel: about 5 points per token name
    width = side * H + 1.5
    fig, axes = plt.subplots(L, H, figsize=(width, side * L + 1.6), squeeze=False, layout="constrained")
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
    chars = int(14 * width)  # characters of 9-point text across the figure
    shown = (textwrap.fill(" ".join(tokens), chars) if token_step(n) == 1
             else "tokens by position: " + token_list(tokens, chars))
    fig.suptitle(f"{title}\n{shown}", fontsize=9)
    return save(fig, path)
