"""A run's results as files a person can open: ``results.json``, ``results.npz`` and ``figures/``.

``write_files(result, folder, num_layers, meta)`` writes ``results.json`` (every statistic:
nested-list value, shape, description; plus ``meta``), ``results.npz`` and ``figures/*.png``
(a heatmap of every (L, H) statistic, then each method's own figures, ``jattn.viz.figures``),
after ``jattn.io.results.check_finite``; ``jattn.io.results.Output`` publishes the folder as a
whole.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np

from jattn.io.results import Output, check_finite, to_json
from jattn.viz import plots, words
from jattn.viz.figures import FIGURES


def write_files(result, folder: Path, num_layers: int, meta: dict | None = None) -> list[Path]:
    """Write results.json, results.npz and figures/ into ``folder``; returns the figure paths."""
    check_finite(result, num_layers)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    doc = {k: {"value": to_json(v), "shape": list(v.shape), "description": result.statistics[k].description}
           for k, v in stats.items()}
    doc["meta"] = {**result.meta, **(meta or {}), "complete": True}
    with open(folder / "results.npz", "wb") as f:
        np.savez(f, **stats)
    figures = write_figures(stats, num_layers, folder / "figures", [m for m in result.totals if m != "_meta"])
    (folder / "results.json").write_text(json.dumps(doc, indent=1))
    return figures


def write_figures(stats: dict[str, np.ndarray], num_layers: int, folder: Path, methods=(),
                  labels: dict | None = None) -> list[Path]:
    """A heatmap of every (L, H) statistic, then the figures of each method in ``methods`` (method
    names) that has figures (``jattn.viz.figures.FIGURES``). ``labels``: names of token classes
    in the model's own terms ({"[CLS]": ..., "[SEP]": ...}), for the figures that take them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [plots.heatmap(v, words.title(k), folder / f"heatmap_{k}.png", label=words.unit(k))
             for k, v in stats.items()
             if v.ndim == 2 and v.shape[0] == num_layers]
    for name in methods:
        figures = FIGURES.get(name)
        if figures is not None:
            named = labels and "labels" in inspect.signature(figures).parameters
            paths += figures(stats, num_layers, folder, **({"labels": labels} if named else {}))
    return paths


def write_results(result, out, num_layers: int, meta: dict | None = None) -> list[Path]:
    """Write a run's results folder ``out`` as a whole (``Output`` + ``write_files``),
    replacing what was there: for scripts whose ``out`` is their own folder."""
    with Output(out, overwrite=True) as output:
        paths = output.write(lambda folder: [p.relative_to(folder) for p in
                                             write_files(result, folder, num_layers, meta)])
        return [output.out / p for p in paths]
