"""What the GAP claims stage of the patching study shows beside its claims: the maps of exact and
attribution patching and of Clark's weight-based score with their scatter over heads (a figure),
and the heads of largest exact effect (a Markdown table for the REPORT).
"""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context


def figure(ctx: Context, model: str, maps: dict, rho: float) -> str:
    """The three (L, H) ``maps`` side by side and Clark's score against the exact effect per head
    (``rho`` their Spearman ρ), saved as ``<model>_maps.png``; the path relative to the output folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    for ax, (title, m, cmap) in zip(axes, (("exact patching effect (mean Δm)", maps["exact"], "RdBu_r"),
                                          ("attribution patching estimate", maps["attribution"], "RdBu_r"),
                                          ("Clark: share pronoun → right name", maps["clark"], "viridis"))):
        lim = np.abs(m).max() or 1.0
        im = ax.imshow(m, cmap=cmap, aspect="auto", **({"vmin": -lim, "vmax": lim} if cmap == "RdBu_r" else {}))
        ax.set(title=title, xlabel="head (0-based)", ylabel="layer (0-based)")
        fig.colorbar(im, ax=ax)
    axes[3].scatter(maps["clark"].ravel(), maps["exact"].ravel(), s=12)
    axes[3].set(title=f"per head: Spearman ρ = {rho:.2f}", xlabel="Clark weight-based score",
                ylabel="exact patching effect")
    fig.suptitle(f"{model}: head patching vs weight-based coreference heads (GAP pairs)")
    fig.tight_layout()
    path = ctx.figure(f"{model}_maps.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path.relative_to(ctx.out))


def table(model, maps, holm, clean, corr, rho_abs: float, seconds) -> str:
    """``maps`` (L, H) mean exact and attribution effects and Clark scores, ``holm`` (L, H) the heads
    Holm rejects, ``rho_abs`` ρ(|mean effect|, mean Clark score) over heads."""
    L, H = maps["exact"].shape
    order = np.argsort(-np.abs(maps["exact"]).ravel())[:5]  # the largest effects of either sign
    best = np.unravel_index(int(np.argmax(maps["clark"])), (L, H))
    lines = [f"{model}: {len(clean)} pairs, mean m clean {clean.mean():.3f}, corrupted {corr.mean():.3f}; "
             f"sweeps measured {seconds:.0f} s. Heads whose exact effect ≠ 0 after Holm–Bonferroni over {L * H} "
             f"heads (paired bootstrap, GAP pages resampled): {int(holm.sum())}. ρ(|effect|, Clark score) = "
             f"{rho_abs:.3f}. Clark's best head "
             f"{best[0]}-{best[1]}: score {maps['clark'][best]:.2f}, effect {maps['exact'][best]:.3f}.", "",
             "| head (layer-head, 0-based) | exact effect | attribution | Clark score | Holm |",
             "|---|---|---|---|---|"]
    for k in order:
        l, h = divmod(int(k), H)
        lines.append(f"| {l}-{h} | {maps['exact'][l, h]:.3f} | {maps['attribution'][l, h]:.3f} | "
                     f"{maps['clark'][l, h]:.2f} | {'yes' if holm[l, h] else 'no'} |")
    return "\n".join(lines)
