"""Orbax save/restore of converted params, and the conversion cache keyed by source content.

The cache is an optimisation, never a source of truth: ``save_params`` writes synchronously
(nothing waits at interpreter exit) and stores a checksum of every file of the checkpoint
in it (``jattn.blake2b``); ``restore_params`` verifies it before orbax reads anything and
raises ``CacheError`` on a missing, unreadable or mismatching entry, which ``jattn.load``
answers by converting again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import jax
import numpy as np

CONVERSION_VERSION = "1"  # bump when a converter's output layout changes


class CacheError(RuntimeError):
    """A cache entry that cannot be used (damaged, incomplete) or a cache folder that cannot be written."""


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


def checksum(folder: Path) -> str:
    """blake2b of the relative path and bytes of every file under ``folder`` (but the checksum
    file), in sorted order."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != CHECKSUM_FILE):
        h.update(f"{path.relative_to(folder)}|{path.stat().st_size}|".encode())
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


CHECKSUM_FILE = "jattn.blake2b"  # inside the checkpoint folder; orbax ignores it


def _checksum_file(path: Path) -> Path:
    return path / CHECKSUM_FILE


def writable_folder(folder: Path) -> None:
    """Create ``folder`` if needed and check a file can be written in it; ``CacheError`` if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as e:
        raise CacheError(f"cannot write in {folder} ({e.strerror or e})") from None


def save_params(path: Path, params) -> None:
    """Save a params pytree synchronously, then its checksum. ``CacheError`` on any failure,
    with nothing partial left behind."""
    import orbax.checkpoint as ocp

    path = Path(path).resolve()
    writable_folder(path.parent)
    arrays = jax.tree.map(np.asarray, params)
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        checkpointer.save(path, args=ocp.args.StandardSave(arrays), force=True)
        checkpointer.close()
        _checksum_file(path).write_text(checksum(path) + "\n")
    except Exception as e:  # orbax/tensorstore raise many types; the cache is optional
        remove(path)
        raise CacheError(f"saving the conversion cache {path} failed ({e.__class__.__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None


def restore_params(path: Path):
    """Restore a params pytree as numpy arrays, verified against the stored checksum."""
    import orbax.checkpoint as ocp

    path = Path(path).resolve()
    stored = _checksum_file(path)
    if not stored.is_file():
        raise CacheError(f"{path} has no checksum file {stored.name} (an interrupted save)")
    if not path.is_dir() or checksum(path) != stored.read_text().strip():  # before orbax sees damaged files
        raise CacheError(f"{path} does not match its checksum (files changed, truncated or deleted)")
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        restored = checkpointer.restore(path)
        checkpointer.close()
    except Exception as e:
        raise CacheError(f"{path} cannot be read ({e.__class__.__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return jax.tree.map(np.asarray, restored)


def remove(path: Path) -> None:
    """Delete a cache entry, ignoring errors (a read-only cache stays as is)."""
    shutil.rmtree(path, ignore_errors=True)
