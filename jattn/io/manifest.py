"""The data sets jattn's experiments and tests read, and where they live on this machine.

``manifest.json`` (beside this file) lists every file of every data set: its path inside the data
set's folder, size, sha256, the canonical source at a pinned commit, the transform from the source
bytes to ours, the license, and what was checked against upstream. The data folder holds one
sub-folder per data set (``<data dir>/gap/gap-development.tsv``); it is, first found:

1. the folder passed explicitly (``--data-dir``, ``data_dir=``),
2. ``$JATTN_DATA``,
3. ``platformdirs.user_cache_dir("jattn")/data`` (e.g. ``~/.cache/jattn/data`` on Linux).

``jattn data fetch`` fills it (:mod:`jattn.io.fetch`). One more name needs no fetching: ``sample``,
the bundled sample (``jattn/io/sample/``: 300 sentences of UD English EWT dev), which
:func:`data_path` finds inside the installed package, so that a command naming
``"$(jattn data path sample)/sentences.txt"`` works from any folder.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["data_dir", "data_path", "files"]

MANIFEST = Path(__file__).with_name("manifest.json")
SAMPLE = "sample"  # the bundled sample's name for data_path; no data set of the manifest may take it
TRANSFORMS = ("verbatim", "gunzip", "concat-drop-header", "empty")


@dataclass(frozen=True)
class FileEntry:
    """One file of a data set, as the manifest describes it."""

    dataset: str
    path: str  # relative to the data set's folder, "/"-separated
    size: int
    sha256: str
    source: tuple[str, ...]  # canonical URL(s) at a pinned commit; () for "empty"
    source_sha256: tuple[str, ...]  # sha256 of each source when transform != "verbatim"
    transform: str
    license: str
    checked: str


def load(path: str | os.PathLike | None = None) -> tuple[dict, tuple[FileEntry, ...]]:
    """(data sets -> their metadata, file entries) of the manifest at ``path`` (default: jattn's own)."""
    return _load(str(path or MANIFEST))


@functools.lru_cache(maxsize=None)
def _load(path: str) -> tuple[dict, tuple[FileEntry, ...]]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        known = dict(raw["datasets"])
        entries = tuple(_entry(f) for f in raw["files"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"cannot read the data manifest {path}: {e!r}. Fix: reinstall jattn") from None
    if SAMPLE in known:
        raise ValueError(f"data manifest {path}: {SAMPLE!r} names the bundled sample, not a data set")
    for e in entries:
        if e.dataset not in known or e.transform not in TRANSFORMS or len(e.source_sha256) != (
                0 if e.transform in ("verbatim", "empty") else len(e.source)):
            raise ValueError(f"data manifest {path}, {e.dataset}/{e.path}: unknown data set or transform "
                             f"{e.transform!r} (known: {', '.join(TRANSFORMS)}), or sources without their sha256")
        if Path(e.path).is_absolute() or ".." in Path(e.path).parts:
            raise ValueError(f"data manifest {path}: path {e.path!r} leaves its data set's folder")
    return known, entries


def _entry(f: dict) -> FileEntry:
    as_tuple = lambda v: tuple(v) if isinstance(v, list) else (() if v is None else (v,))
    return FileEntry(f["dataset"], f["path"], int(f["size"]), f["sha256"], as_tuple(f.get("source")),
                     as_tuple(f.get("source_sha256")), f.get("transform", "verbatim"), f.get("license", ""),
                     f.get("checked", ""))


def datasets(manifest=None) -> dict:
    """Data set name -> metadata (description, license, repository, commit)."""
    return load(manifest)[0]


def files(names=None, manifest=None) -> list[FileEntry]:
    """The file entries of data sets ``names`` (all when None or empty), or a ValueError naming an unknown one."""
    known, entries = load(manifest)
    names = list(names or known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown data set {', '.join(map(repr, unknown))}; known: {', '.join(known)} "
                         "(see jattn data list)")
    return [e for e in entries if e.dataset in names]


def data_dir(folder: str | os.PathLike | None = None) -> Path:
    """The data folder: ``folder`` if given, else ``$JATTN_DATA``, else the user cache's ``jattn/data``.
    A path that exists and is not a folder is an error naming where it came from."""
    if folder:
        path, origin = Path(folder).expanduser(), "the data folder (--data-dir)"
    elif os.environ.get("JATTN_DATA"):
        path, origin = Path(os.environ["JATTN_DATA"]).expanduser(), "JATTN_DATA"
    else:
        import platformdirs

        path, origin = Path(platformdirs.user_cache_dir("jattn")) / "data", "the user cache's data folder"
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        fix = ("pass --data-dir a folder (the data folder, or a new path: `jattn data fetch` creates it)" if folder
               else "set JATTN_DATA to a folder (the data folder, or a new path), or pass --data-dir FOLDER")
        raise NotADirectoryError(f"{origin} {path} is {kind(path)}, not a folder. Fix: {fix}")
    return path


def file_path(entry: FileEntry, folder: str | os.PathLike | None = None) -> Path:
    """Where ``entry`` lives in the data folder."""
    return data_dir(folder) / entry.dataset / Path(*entry.path.split("/"))


def kind(path: Path) -> str:
    """What ``path`` is, in words ("a file", "a folder", "a FIFO", ...; "nothing" when absent); follows links."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else "nothing"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    kinds = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def obstacle(entry: FileEntry, folder=None) -> str | None:
    """What stands where ``entry`` or one of its folders must go and that fetching cannot replace (a
    folder or a FIFO at the file's path, a file at a folder's), as "PATH is X, not Y"; None when nothing does."""
    root = data_dir(folder)
    path, p = file_path(entry, root), root
    for part in (entry.dataset, *entry.path.split("/")[:-1]):
        p = p / part
        if not p.is_dir():
            return f"{p} is {kind(p)}, not a folder" if p.exists() or p.is_symlink() else None
    what = kind(path)
    if what in ("nothing", "a file", "a broken symbolic link"):
        return None
    if what.startswith("unreadable"):
        return f"{path} is {what}"
    return f"{path} is {what}, not {'a file' if what == 'a folder' else 'a regular file'}"


def missing(name: str, folder=None, manifest=None) -> list[FileEntry]:
    """Files of data set ``name`` absent from the data folder or of the wrong size (a quick check, no hashing)."""
    out = []
    for e in files([name], manifest):
        p = file_path(e, folder)
        if not p.is_file() or p.stat().st_size != e.size:
            out.append(e)
    return out


def data_path(name: str, folder: str | os.PathLike | None = None) -> Path:
    """The folder of data set ``name`` (e.g. "ud-english-ewt") in the data folder (``folder``, else
    ``$JATTN_DATA``, else the user cache).

    ``"sample"`` is the bundled sample's folder inside the installed package, wherever the data folder is.
    Raises FileNotFoundError naming the command that fetches it when a file is missing or of the
    wrong size (``jattn data verify`` checks the hashes too), ValueError for an unknown name.
    """
    if name == SAMPLE:
        return Path(__file__).with_name(SAMPLE)
    root = data_dir(folder)
    gone = missing(name, root)
    if gone:
        command = f"jattn data fetch {name}" + (f" --data-dir {root}" if folder else "")
        blocked = next((o for e in gone if (o := obstacle(e, root))), None)
        if blocked:
            raise FileNotFoundError(f"data set {name!r} cannot be read: {blocked}. Fix: move or delete it, then "
                                    f"run `{command}`")
        where = "" if folder else f" (into {root}: $JATTN_DATA if set, else the user cache)"
        raise FileNotFoundError(
            f"data set {name!r} is not in the data folder: {len(gone)} of {len(files([name]))} file(s) missing or "
            f"incomplete, e.g. {file_path(gone[0], root)}. Fix: run `{command}`{where}, or set JATTN_DATA to a "
            "folder that has it")
    return root / name
