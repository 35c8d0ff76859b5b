"""The stage records on disk (``<out>/stages/<name>.json``): read, written atomically as JSON, with
the machine a stage ran on and the training time of the models it read."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

__all__ = ["load", "read", "write"]


def path(out: Path, name: str) -> Path:
    return out / "stages" / f"{name}.json"


def read(out: Path, name: str) -> dict | None:
    """Stage ``name``'s record, or None when it has none."""
    file = path(out, name)
    return json.loads(file.read_text()) if file.is_file() else None


def write(out: Path, record: dict) -> dict:
    """Write ``record`` atomically; returns it as read back (JSON types)."""
    file = path(out, record["name"])
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1, default=json_default) + "\n")
        os.replace(tmp, file)
    finally:  # a stop (KeyboardInterrupt) between the two leaves no half-made record behind
        tmp.unlink(missing_ok=True)
    return json.loads(file.read_text())


def load(out: Path, names: list[str]) -> dict[str, dict]:
    """The records of the stages ``names`` (those that have one), in that order."""
    return {n: r for n in names if (r := read(out, n)) is not None}


def machine() -> str:
    """``platform`` facts of the machine a stage ran on (for its runtime)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def models_seconds(names) -> dict[str, float]:
    """{model: its training seconds} for the trained models among ``names`` (downloads left out):
    what a record adds to its stage's runtime for the models made before the stage ran."""
    from jattn.models.artefacts import training_seconds

    return {m: s for m in names if (s := training_seconds(m)) is not None}


def json_default(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"a stage result holds {type(value).__name__}, which JSON cannot store")
