"""SST-2 and CoLA (GLUE; Wang et al. 2019) as (sentence, label) lists, from the data folder
(``jattn data fetch sst2 cola``; ``$JATTN_DATA``) or any folder laid out the same way.

SST-2 (Socher et al. 2013): ``train.tsv`` (67,349) and ``dev.tsv`` (872), header ``sentence	label``.
CoLA (Warstadt et al. 2019): ``in_domain_train.tsv`` (8,551), ``in_domain_dev.tsv`` (527),
``out_of_domain_dev.tsv`` (515), no header, columns source, label, original label, sentence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["accuracy", "matthews_corr", "METRICS", "read_task"]

FILES = {
    "sst2": {"train": "train.tsv", "dev": "dev.tsv"},
    "cola": {"train": "in_domain_train.tsv", "dev": "in_domain_dev.tsv", "dev_out": "out_of_domain_dev.tsv"},
}
METRICS = {"sst2": "accuracy", "cola": "matthews_corr"}


def data_root() -> Path:
    """The data folder: ``$JATTN_DATA``, else the user cache (see ``jattn data path``)."""
    from jattn.io.manifest import data_dir

    return data_dir()


def read_task(name: str, split: str, root: Path | None = None) -> list[tuple[str, int]]:
    """The (sentence, label) pairs of task ``name`` ("sst2" | "cola") and ``split``."""
    if name not in FILES:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(FILES)}")
    if split not in FILES[name]:
        raise ValueError(f"task {name} has splits {', '.join(FILES[name])}, not {split!r}")
    if root is None:
        from jattn.io.manifest import data_path

        root = data_path(name).parent  # names `jattn data fetch NAME` when the task is not there
    path = Path(root) / name / FILES[name][split]
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found. Fix: `jattn data fetch {name} --data-dir {root}`, or pass "
                                f"a folder with {name}/{FILES[name][split]}")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if name == "sst2":
                if i == 1 and cols[0] == "sentence":
                    continue
                text, label = cols[0].strip(), cols[-1]
            else:
                text, label = cols[3].strip() if len(cols) > 3 else "", cols[1] if len(cols) > 1 else ""
            if not text or label not in ("0", "1"):
                raise ValueError(f"{path}:{i}: expected a sentence and a 0/1 label, got {line.strip()[:80]!r}")
            rows.append((text, int(label)))
    return rows


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(gold)))


def matthews_corr(pred: np.ndarray, gold: np.ndarray) -> float:
    """Matthews correlation of binary predictions (CoLA's metric); 0 when a margin is empty."""
    p, g = np.asarray(pred).astype(bool), np.asarray(gold).astype(bool)
    tp, tn = float(np.sum(p & g)), float(np.sum(~p & ~g))
    fp, fn = float(np.sum(p & ~g)), float(np.sum(~p & g))
    den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / den) if den else 0.0


def metric(name: str):
    """The task's dev metric as a function (pred, gold) -> float."""
    return {"accuracy": accuracy, "matthews_corr": matthews_corr}[METRICS[name]]
