"""Orbax save/restore of a model's parameters (its NNX module state), and the conversion cache
keyed by source content.

The cache is an optimisation, never a source of truth: ``save_params`` writes synchronously
(nothing waits at interpreter exit), a format marker (``jattn.format``: the layout of the
state it holds) and a checksum of every file of the checkpoint (``jattn.blake2b``);
``restore_params`` verifies the checksum before orbax reads anything, then the marker, then
(given the model's config) that every array matches the module's parameters. A missing,
unreadable or mismatching entry raises ``CacheError``; an entry in another layout (written by
jattn before its models were NNX modules: no marker) raises ``StaleCacheError``. ``jattn.load``
answers both by converting again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["restore_params", "save_params"]

CONVERSION_VERSION = "2"  # bump when a converter's output layout changes (2: untied MLM decoders, ELECTRA's RTD head)
FORMAT = "jattn nnx.State 1"  # the pure-dict layout of the modules' nnx.Param state (jattn.nn.state)
FORMAT_FILE = "jattn.format"  # inside the checkpoint folder, covered by the checksum; orbax ignores it


class CacheError(RuntimeError):
    """A cache entry that cannot be used (damaged, incomplete) or a cache folder that cannot be written."""


class StaleCacheError(CacheError):
    """A sound cache entry in another layout than the one this jattn reads (e.g. written before the
    models were NNX modules, or for a module without a classifier head)."""


def default_cache_dir() -> Path:
    """jattn's cache: ``$JATTN_CACHE``, else the user cache (``platformdirs.user_cache_dir("jattn")``,
    e.g. ``~/.cache/jattn`` on Linux). It holds ``converted/`` (this conversion cache) and
    ``models/`` (the named artefacts, ``jattn.io.artefacts``); never a folder of the checkout."""
    if os.environ.get("JATTN_CACHE"):
        return Path(os.environ["JATTN_CACHE"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("jattn"))


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
    """Save a module state (``nnx.State``) or a nested dict of arrays (a converter's output, the
    same layout) synchronously, then the format marker and the checksum. ``CacheError`` on any
    failure, with nothing partial left behind."""
    import jax
    import orbax.checkpoint as ocp
    from flax import nnx

    from jattn.nn import state

    path = Path(path).resolve()
    writable_folder(path.parent)
    arrays = state.to_arrays(params) if isinstance(params, nnx.State) else jax.tree.map(np.asarray, params)
    need = sum(np.asarray(a).nbytes for a in jax.tree.leaves(arrays))
    free = shutil.disk_usage(path.parent).free
    if free < need + (1 << 20):  # a full disk: skip before orbax starts writing (its threads log tracebacks)
        raise CacheError(f"{path.parent} has {free / 1e6:.1f} MB free, the converted parameters need "
                         f"{need / 1e6:.1f} MB (No space left on device)")
    quiet = logging.getLogger("absl")  # orbax logs its background threads' failures: reported below instead
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        checkpointer.save(path, args=ocp.args.StandardSave(arrays), force=True)
        checkpointer.close()
        (path / FORMAT_FILE).write_text(FORMAT + "\n")
        _checksum_file(path).write_text(checksum(path) + "\n")
    except Exception as e:  # orbax/tensorstore raise many types; the cache is optional
        remove(path)
        raise CacheError(f"saving the conversion cache {path} failed ({e.__class__.__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    finally:
        quiet.setLevel(level)


def restore_params(path: Path, config=None, placement=None):
    """The saved parameters, verified against the stored checksum and format marker: with
    ``config``, as that config's module state (``nnx.State``, checked array by array against the
    module); without, as a nested dict of numpy arrays. ``placement(shapes)``: called with the
    stored arrays' shapes (a nested dict of ``jax.ShapeDtypeStruct``), returns ``path -> Sharding``;
    orbax then reads each array straight onto its devices, each device its own slices, and the
    result holds jax arrays (the parameters of a model on a mesh, never whole on one device)."""
    import jax
    import orbax.checkpoint as ocp

    from jattn.nn import state

    path = Path(path).resolve()
    marker = path / FORMAT_FILE
    if path.is_dir() and not marker.is_file() and (path / "_CHECKPOINT_METADATA").is_file():
        raise StaleCacheError(f"{path} has no format marker {FORMAT_FILE}: it was written by jattn before its "
                              "models were NNX modules, or by an interrupted save")
    stored = _checksum_file(path)
    if not stored.is_file():
        raise CacheError(f"{path} has no checksum file {stored.name} (an interrupted save)")
    if not path.is_dir() or checksum(path) != stored.read_text().strip():  # before orbax sees damaged files
        raise CacheError(f"{path} does not match its checksum (files changed, truncated or deleted)")
    found = marker.read_text().strip() if marker.is_file() else None
    if found != FORMAT:
        raise StaleCacheError(f"{path} holds the layout {found!r}; this jattn reads {FORMAT!r}")
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        if placement is None:
            restored = checkpointer.restore(path)
        else:
            shapes = jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype),
                                  checkpointer.metadata(path).item_metadata.tree)
            where = placement(shapes)
            target = jax.tree_util.tree_map_with_path(
                lambda p, a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=where(tuple(k.key for k in p))), shapes)
            restored = checkpointer.restore(path, args=ocp.args.StandardRestore(target))
        checkpointer.close()
    except Exception as e:
        raise CacheError(f"{path} cannot be read ({e.__class__.__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    arrays = restored if placement is not None else jax.tree.map(np.asarray, restored)
    if config is None:
        return arrays
    try:
        return state.from_arrays(config, arrays)
    except ValueError as e:
        raise StaleCacheError(f"{path} does not hold this model's parameters ({str(e).split('. Fix')[0]})") from None


def remove(path: Path) -> None:
    """Delete a cache entry, ignoring errors (a read-only cache stays as is)."""
    shutil.rmtree(path, ignore_errors=True)
