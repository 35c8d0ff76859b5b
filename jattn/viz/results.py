"""A run's results as files a person can open: ``results.json``, ``results.npz`` and ``figures/``.

``write_files(result, folder, num_layers, meta)`` writes ``results.json`` (every statistic:
nested-list value, shape, description; plus ``meta``), ``results.npz`` and ``figures/*.png``
(a heatmap of every statistic per layer and head or per layer and token class, each distinct one
once, then each method's own figures, ``jattn.viz.figures``),
after ``jattn.io.results.check_finite``; ``jattn.io.results.Output`` publishes the folder as a
whole.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np

from jattn.io.results import Output, check_finite, to_json
from jattn.nn.token_classes import CLASS_NAMES
from jattn.viz import plots, words
from jattn.viz.figures import FIGURES


def write_files(result, folder: Path, num_layers: int, meta: dict | None = None,
                labels: dict | None = None) -> list[Path]:
    """Write results.json, results.npz and figures/ into ``folder``; returns the figure paths.
    ``labels``: the model's names of [CLS] and [SEP], for the figures (``write_figures``) and the
    statistics' descriptions in results.json."""
    check_finite(result, num_layers)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    described = {k: words.rename(s.description, labels) for k, s in result.statistics.items()}
    doc = {k: {"value": to_json(v), "shape": list(v.shape), "description": described[k]} for k, v in stats.items()}
    doc["meta"] = {**result.meta, **(meta or {}), "complete": True}
    with open(folder / "results.npz", "wb") as f:
        np.savez(f, **stats)
    figures = write_figures(stats, num_layers, folder / "figures", [m for m in result.totals if m != "_meta"],
                            labels, {k: s.description for k, s in result.statistics.items()})
    (folder / "results.json").write_text(json.dumps(doc, indent=1))
    return figures


CLASS_WORDS = ("[CLS]", "[SEP]", '"." or ","', "other")  # the token classes, CLASS_NAMES order
SHAPE = re.compile(r"\((L\w*), ([^,)]+)\)")  # a description's shape: "(L, H)", "(L, 4)"


def columns(key: str, value: np.ndarray, num_layers: int, description: str | None = None,
            labels: dict | None = None) -> tuple[str, list | None] | None:
    """What the columns of a statistic with a row per layer are, (axis label, tick names; None: 0-based
    numbers): heads for a per-head statistic (its description's shape "(L, H)"), token classes for
    a per-layer statistic over the classes (a key ending "_class", shape "(L, 4)"); None for any other
    statistic. Without a description, a 2-D statistic with a row per layer is per head unless its key
    says classes."""
    if value.ndim != 2 or value.shape[0] != num_layers:
        return None
    shape = SHAPE.search(description or "")
    classes = key.endswith("_class") and value.shape[1] == len(CLASS_NAMES)
    if classes and (shape is None or shape[2] == str(len(CLASS_NAMES))):
        return "token class", [words.rename(w, labels) for w in CLASS_WORDS]
    return (plots.HEAD, None) if shape is None or shape[2] == "H" else None


def write_figures(stats: dict[str, np.ndarray], num_layers: int, folder: Path, methods=(),
                  labels: dict | None = None, descriptions: dict | None = None) -> list[Path]:
    """A heatmap of every statistic per layer and head or per layer and token class (``columns``;
    ``descriptions`` by statistic name give their shapes), a statistic equal to one drawn before
    named under that one's heatmap, not drawn again; then the figures of each method in ``methods``
    (method names) that has figures (``jattn.viz.figures.FIGURES``). ``labels``: names of token
    classes in the model's own terms ({"[CLS]": ..., "[SEP]": ...}), for the titles and the
    figures that take them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, tuple] = {}  # key -> (values, their columns, the keys of equal statistics)
    for k, v in stats.items():
        cols = columns(k, v, num_layers, (descriptions or {}).get(k), labels)
        if cols is None:
            continue
        same = next((d for d in drawn.values() if d[0].shape == v.shape and d[1] == cols
                     and np.allclose(d[0], v, rtol=1e-5, atol=1e-7, equal_nan=True)), None)
        if same is not None:
            same[2].append(k)
        else:
            drawn[k] = (v, cols, [])
    paths = [plots.heatmap(v, words.title(k, labels), folder / f"heatmap_{k}.png", label=words.unit(k),
                           columns=cols, note=("Equal values, not drawn again: " + "; ".join(
                               f"{words.title(o, labels)} ({o})" for o in equal)) if equal else None)
             for k, (v, cols, equal) in drawn.items()]
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
