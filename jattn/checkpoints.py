"""Orbax save/restore of converted params, and the conversion cache keyed by source content."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import jax
import numpy as np

CONVERSION_VERSION = "1"  # bump when a converter's output layout changes


def default_cache_dir() -> Path:
    """``$JATTN_CACHE``, else ``checkpoints/`` of a source checkout, else ``~/.cache/jattn``."""
    if os.environ.get("JATTN_CACHE"):
        return Path(os.environ["JATTN_CACHE"])
    repo = Path(__file__).resolve().parents[1]
    if (repo / "checkpoints").is_dir() and (repo / "pyproject.toml").is_file():
        return repo / "checkpoints"
    return Path.home() / ".cache" / "jattn"


def source_key(files: list[Path]) -> str:
    """Hash of the conversion version and the bytes of every source file (config + weights)."""
    h = hashlib.blake2b(CONVERSION_VERSION.encode(), digest_size=12)
    for path in sorted(files):
        h.update(path.name.encode())
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def save_params(path: Path, params) -> None:
    import orbax.checkpoint as ocp

    path = Path(path).resolve()
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path, jax.tree.map(np.asarray, params), force=True)


def restore_params(path: Path):
    """Restore a params pytree as numpy arrays."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(Path(path).resolve())
    return jax.tree.map(np.asarray, restored)
