"""Figures of the Kobayashi et al. stages (matplotlib, Agg): class shares per layer, ‖f(x)‖ against
frequency rank, alignment AER per layer. Each function saves to ``path`` and returns it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jattn.analyses import CLASS_NAMES

LABELS = {"cls": "[CLS]", "sep": "[SEP]", "punct": '"." ","', "other": "other"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def class_shares(path: Path, model: str, layers: dict, rows: list[dict]) -> Path:
    """Per layer, the share of α (left) and of ‖αf‖ (right) going to each token class (mean over
    heads, rows and segments); dashed: the share uniform attention gives."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, key, title in ((axes[0], "weight", "weight-based: share of α"),
                           (axes[1], "norm", "norm-based: share of ‖αf(x)‖")):
        v = np.asarray(layers[key])  # (L, C)
        for k, c in enumerate(CLASS_NAMES):
            ax.plot(range(len(v)), v[:, k], "-o", color=f"C{k}", label=LABELS[c])
            ax.axhline(np.mean([r[f"uniform_{c}"] for r in rows]), color=f"C{k}", ls="--", lw=0.8)
        ax.set(xlabel="layer", title=title, xticks=range(len(v)))
    axes[0].set_ylabel(f"{model}: mean over heads, rows, segments")
    axes[1].legend(fontsize=8, title="dashed: uniform", title_fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def frequency(path: Path, model: str, rank: np.ndarray, mean_fnorm: np.ndarray, claim: dict) -> Path:
    """Mean ‖f(x)‖ per token type against its frequency rank (log scale)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(rank, mean_fnorm, s=3, alpha=0.4)
    ax.set(xscale="log", xlabel="frequency rank (1 = most frequent)", ylabel="mean ‖f(x)‖ per token type",
           title=f"{model}: ρ over occurrences = {claim['value']:.2f}")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def alignment(path: Path, table: list[dict], layers: int) -> Path:
    """AER per decoder layer of each map, AWO and AWI, beside the diagonal and eflomal (all pairs)."""
    from experiments.kobayashi2020.align import MAPS, SETTINGS, pooled_aer

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(10, 3.6), sharey=True)
    for ax, setting in zip(axes, SETTINGS):
        for k, name in enumerate(MAPS):
            ax.plot(range(layers), [100 * pooled_aer(table, f"{setting}/{name}/{l}") for l in range(layers)], "-o",
                    color=f"C{k}", label=name)
        for k, base in enumerate(("diagonal", "eflomal")):
            ax.axhline(100 * pooled_aer(table, base), color=f"C{k + 3}", ls="--", label=base)
        ax.set(xlabel="decoder layer", title=setting, xticks=range(layers))
    axes[0].set_ylabel("AER % (all pairs)")
    axes[-1].legend(fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
