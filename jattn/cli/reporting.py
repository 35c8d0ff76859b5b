"""What every command's output folder shares: the metric's name on one scale, report.md.

One scale for every task metric a command reports: accuracy in % (0-100), Matthews
correlation ×100 (-100 to 100), BLEU (0-100, sacreBLEU). ``metric_name`` is the label every
output (results.json, report.md, figure axes, the line printed at the end) carries.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

SCALE = 100.0  # classification metrics are reported ×100: accuracy in %, MCC ×100
NAMES = {"accuracy": "accuracy (%)", "matthews_corr": "MCC ×100", "bleu": "BLEU (greedy decoding)"}


def metric_name(metric: str) -> str:
    """'accuracy' -> 'accuracy (%)', 'matthews_corr' -> 'MCC ×100', 'bleu' -> 'BLEU (greedy decoding)'."""
    if metric not in NAMES:
        raise ValueError(f"unknown metric {metric!r}. Fix: choose from {', '.join(NAMES)}")
    return NAMES[metric]


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table; floats with two decimals."""
    cell = lambda v: f"{v:.2f}" if isinstance(v, (float, np.floating)) else str(v)
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]


def write_report(folder: Path, title: str, lines: list[str], figures: list[Path]) -> Path:
    """``folder/report.md``: a title, ``lines`` (Markdown) and links to ``figures``."""
    folder = Path(folder)
    links = [f"- [{Path(p).name}]({Path(p).relative_to(folder)})" for p in figures]
    text = "\n".join([f"# {title}", "", *lines, "", "## Figures", "", *(links or ["(none)"]), ""])
    path = folder / "report.md"
    path.write_text(text, encoding="utf-8")
    return path


PER_HEAD = re.compile(r"\(L\w*, H\)")  # a per-head statistic's shape in its description: "(L, H)"


def heads(cells: list[dict], keys=("layer", "head")) -> str:
    """[{'layer': 1, 'head': 2, ...}] -> '1-2, ...' (0-based layer-head)."""
    return ", ".join("-".join(str(c[k]) for k in keys if k in c) for c in cells) or "none"


def top_heads(stat: np.ndarray, k: int = 3) -> str:
    """The k largest entries of an (L, H) statistic as 'layer-head (value)', 0-based; NaN left out."""
    flat = [i for i in np.argsort(np.nan_to_num(stat, nan=-np.inf), axis=None)[::-1] if np.isfinite(stat.flat[i])][:k]
    return ", ".join(f"{l}-{h} ({stat[l, h]:.3g})" for l, h in (np.unravel_index(i, stat.shape) for i in flat))


def statistics_lines(statistics: dict, labels: dict | None = None) -> list[str]:
    """A table of every statistic of a run (``Statistic`` objects): its description ([CLS] and
    [SEP] renamed by ``labels``), and for a per-head one (its description's shape "(L, H)") the mean
    over heads and the 3 largest heads; for another array its shape, a scalar its value."""
    from jattn.viz.words import rename

    rows = []
    for name, s in statistics.items():
        v = np.asarray(s.value, np.float64)
        desc = rename(s.description, labels).replace("|", "/")
        if v.ndim == 2 and PER_HEAD.search(s.description):
            rows.append([name, desc, f"{np.nanmean(v):.3g}" if np.isfinite(v).any() else "-", top_heads(v)])
        elif v.ndim == 0:
            rows.append([name, desc, f"{float(v):.3g}", ""])
        else:
            rows.append([name, desc, f"shape {tuple(v.shape)}", ""])
    return table(["statistic", "what (shape, definition)", "mean over heads / value", "largest heads (layer-head)"],
                 rows)
