"""Where named artefacts live in the cache and whether their files are as made: the part of
``jattn.artefacts`` (the recipes, the trainers, ``jattn models make``) that knows no recipe, so
that ``jattn.models.load`` finds a made artefact by name.

A made artefact is a Hugging Face folder ``<cache>/models/<name>/`` with a ``DONE`` marker,
written last; while it is being made, its resumable state lives beside it in
``<cache>/models/<name>-work/`` (removed once the artefact is made). The cache is ``$JATTN_CACHE``,
else the user cache (``jattn.io.checkpoints.default_cache_dir``); the conversion cache lives in
the same folder (``<cache>/converted/``).

Integrity: beside ``DONE``, ``MANIFEST.json`` records the size, mtime and sha256 of each file of
the made folder (``record``, written by ``jattn.artefacts.making.make``). ``check`` compares a made
folder with it: cheaply where artefacts are listed and used (``status``, ``find``, ``checked``:
sizes, and the sha256 only of a file whose size or mtime changed, since hashing hundreds of MB on
every ``list`` is too slow), fully on ``make`` / ``fetch`` (every sha256, and the recipe's known
``file_sha256``). A file that differs makes the artefact "corrupted" (``ArtefactCorrupted`` on
use, naming the file and the fix: ``make`` / ``fetch`` remake it). A ``DONE`` without a manifest
(an artefact made before manifests) is "made (unverified)": usable, and recorded by the next
``make``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from jattn.io import atomic

__all__ = ["DONE"]

DONE = "DONE"  # written last into a made artefact's folder
MANIFEST = "MANIFEST.json"  # beside DONE: {"files": {path: {"size", "mtime_ns", "sha256"}}} of the made folder
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")  # an artefact name: one folder name, no path


class ArtefactNotMade(FileNotFoundError):
    """A known artefact that is not (or not completely) made in the cache."""


class ArtefactCorrupted(ArtefactNotMade):
    """A made artefact whose files differ from those recorded when it was made (``problems``:
    "FILE: what differs" each)."""

    def __init__(self, message: str, problems: list[str] = ()):
        super().__init__(message)
        self.problems = list(problems)


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """``<cache>/models``: ``cache_dir`` if given, else ``$JATTN_CACHE``, else the user cache."""
    from jattn.io.checkpoints import default_cache_dir

    return Path(cache_dir or default_cache_dir()).expanduser() / "models"


def folder(name: str, cache_dir=None) -> Path:
    """Where artefact ``name`` is (or will be) made."""
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an artefact name (lower-case letters, digits, '.', '_', '-')")
    return models_dir(cache_dir) / name


def work_folder(name: str, cache_dir=None) -> Path:
    """The resumable state of artefact ``name`` while it is being made."""
    return folder(name, cache_dir).with_name(f"{name}-work")


def is_made(name: str, cache_dir=None) -> bool:
    return (folder(name, cache_dir) / DONE).is_file()


def sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and p.relative_to(out).as_posix() not in (DONE, MANIFEST))


def _write_manifest(out: Path, files: dict) -> None:
    atomic.replace(out / MANIFEST, json.dumps({"files": files}, indent=1, sort_keys=True) + "\n",
                   instead="move the model cache to another disk (JATTN_CACHE)")


def manifest(out: Path) -> dict | None:
    """The files ``MANIFEST.json`` in folder ``out`` records ({path: {size, mtime_ns, sha256}}), or None."""
    try:
        return dict(json.loads((Path(out) / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def weights(out: Path) -> dict[str, str]:
    """{file: sha256} of the weights files (``*.safetensors``) that folder ``out``'s manifest
    records: what tells two makings of one recipe apart (training is not bit-identical across CPU
    types); {} without a manifest or weights files."""
    return {f: entry["sha256"] for f, entry in sorted((manifest(out) or {}).items()) if f.endswith(".safetensors")}


def record(name: str, cache_dir=None) -> dict:
    """Write ``MANIFEST.json`` into made artefact ``name``'s folder: the size, mtime and sha256 of
    each of its files as they are now; return what it records."""
    out = folder(name, cache_dir)
    files = {}
    for p in _files(out):
        st = p.stat()
        files[p.relative_to(out).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256(p)}
    _write_manifest(out, files)
    return files


def check(name: str, cache_dir=None, *, full: bool = False,
          known: tuple[tuple[str, str], ...] = ()) -> list[str] | None:
    """What differs in made artefact ``name``'s files from its manifest: "FILE: what" each, [] when
    nothing does, None when it has no manifest (made before manifests; with ``full``, the ``known``
    (path, sha256) of its recipe are still checked). Cheap unless ``full``: a file whose size and
    mtime are as recorded is not hashed (a file hashed for a new mtime that matches has its mtime
    recorded); ``full`` hashes every file."""
    out = folder(name, cache_dir)
    files = manifest(out)
    known = dict(known)
    if files is None and not (full and known):
        return None
    want = {path: r.get("sha256") for path, r in (files or {}).items()} | (known if full else {})
    problems, refreshed = [], False
    for path, digest in sorted(want.items()):
        f, rec = out / path, (files or {}).get(path, {})
        if not f.is_file():
            problems.append(f"{path}: missing")
            continue
        st = f.stat()
        if "size" in rec and st.st_size != rec["size"]:
            problems.append(f"{path}: {st.st_size:,} bytes, {rec['size']:,} when made")
        elif full or st.st_mtime_ns != rec.get("mtime_ns"):
            got = sha256(f)
            if got != digest:
                problems.append(f"{path}: sha256 {got[:16]}..., {digest[:16]}... when made")
            elif rec and st.st_mtime_ns != rec.get("mtime_ns"):
                rec["mtime_ns"], refreshed = st.st_mtime_ns, True
    if refreshed and not problems:
        try:
            _write_manifest(out, files)
        except OSError:
            pass  # a read-only cache: the file is hashed again next time
    return problems


def corrupted(name: str, problems: list[str], cache_dir=None, fix: str = "") -> ArtefactCorrupted:
    """The error for made artefact ``name`` whose files are not as made: which, and ``fix`` (by
    default: a good copy, or the recipe that makes it again)."""
    where = folder(name, cache_dir)
    fix = fix or f"replace {where} with a good copy, or make it again if a recipe makes it (jattn models list)"
    return ArtefactCorrupted(f"artefact {name} is corrupted: in {where}, {'; '.join(problems)}. Fix: {fix}", problems)


def status(name: str, cache_dir=None) -> str:
    """"made", "made (unverified)" (no manifest: made before manifests), "corrupted (FILE: what)",
    "partly made" (an interrupted run left state to resume from) or "not made". Cheap (``check``)."""
    if is_made(name, cache_dir):
        problems = check(name, cache_dir)
        return "made (unverified)" if problems is None else f"corrupted ({'; '.join(problems)})" if problems else "made"
    return "partly made" if folder(name, cache_dir).exists() or work_folder(name, cache_dir).exists() else "not made"


def checked(name: str, cache_dir=None, fix: str = "") -> Path:
    """The folder of made artefact ``name`` once ``check`` finds nothing wrong (cheaply); else
    ``ArtefactCorrupted`` naming the files and ``fix``."""
    problems = check(name, cache_dir)
    if problems:
        raise corrupted(name, problems, cache_dir, fix)
    return folder(name, cache_dir)


def find(name_or_path, cache_dir=None) -> Path | None:
    """What ``jattn.models.load`` asks before a hub lookup: the folder of a made artefact called
    ``name_or_path`` (any ``<cache>/models/<name>/`` with ``DONE``; ``ArtefactCorrupted`` if its
    files are not as made), else None (not made, or not an artefact name: a path or a hub id)."""
    name = str(name_or_path)
    if not NAME.fullmatch(name) or not is_made(name, cache_dir):
        return None
    return checked(name, cache_dir)


def made(cache_dir=None) -> list[str]:
    """The made artefacts in ``<cache>/models/``: folders with ``DONE``, by name."""
    root = models_dir(cache_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if NAME.fullmatch(p.name) and (p / DONE).is_file())
