"""Download the data sets of the manifest into the data folder, verified and atomically.

Every file is fetched to a temporary name in its final folder, checked against the manifest's
sha256 and only then renamed (``os.replace``) to its final name: a final-named file is always
complete and verified. A file already present with the right hash is kept; one with the wrong
bytes is removed first and fetched again. An interrupted fetch leaves at most temporary files,
removed by the next fetch, which then redoes only what is missing. One lock per data set
(``<data dir>/.locks/<name>.lock``, ``jattn.io.locks``) serialises concurrent fetches of the same set.

Sources: the canonical URL of each file at a pinned commit, with the manifest's transform
(``verbatim``; ``gunzip``; ``concat-drop-header``: the sources one after the other, every one
after the first without its header line; ``empty``), or a mirror laid out like the data folder
(``<mirror>/<data set>/<path>``, the final bytes). Downloads go through ``pooch`` (hash check,
temporary file then move) with a connect and read timeout.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
from pathlib import Path

from jattn.io import locks
from jattn.io.manifest import FileEntry, data_dir, datasets, file_path, files, kind, obstacle

TIMEOUT = 30.0  # seconds, for connecting and for each read
LOCK_TIMEOUT = 900.0  # seconds to wait for another fetch of the same data set
_STALE = re.compile(r"^(tmp[a-z0-9_]{8}|\..+\.part)$")  # pooch's and our temporary names


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def problem(entry: FileEntry, folder=None) -> str | None:
    """Why the data folder's copy of ``entry`` is not the manifest's (None when it is)."""
    path = file_path(entry, folder)
    blocked = obstacle(entry, folder)
    if blocked:
        return blocked.removeprefix(f"{path} is ") if blocked.startswith(f"{path} is ") else f"its folder {blocked}"
    if not path.is_file():
        return "missing"
    if path.stat().st_size != entry.size:
        return f"size {path.stat().st_size}, expected {entry.size}"
    if sha256(path) != entry.sha256:
        return "sha256 differs from the manifest"
    return None


def verify(names=None, folder=None, manifest=None) -> list[tuple[FileEntry, str]]:
    """(entry, problem) for every file of data sets ``names`` (all when empty) that is missing or wrong."""
    return [(e, p) for e in files(names, manifest) if (p := problem(e, folder))]


def mirror_url(mirror: str, entry: FileEntry) -> str:
    return f"{mirror.rstrip('/')}/{urllib.parse.quote(entry.dataset)}/{urllib.parse.quote(entry.path)}"


def download(url: str, path: Path, known_sha256: str, timeout: float = TIMEOUT, fix: str = "") -> None:
    """``url`` to ``path`` via a temporary file in ``path``'s folder, kept only when its sha256 is right.

    Errors: TimeoutError (no answer within ``timeout``), OSError (HTTP error, connection), ValueError
    (wrong bytes); each names the URL and, with ``fix``, what to do.
    """
    import pooch
    import requests

    fix = fix or ("Fix: check the network and retry (verified files are kept), or fetch from a mirror "
                  "(--mirror URL or JATTN_DATA_MIRROR)")
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")  # pooch announces every download at INFO
    try:
        pooch.retrieve(url, known_hash=f"sha256:{known_sha256}", fname=path.name, path=path.parent,
                       downloader=pooch.HTTPDownloader(timeout=timeout, progressbar=False))
        os.chmod(path, _new_file_mode())  # pooch's temporary file was 0600
    except requests.exceptions.Timeout:
        raise TimeoutError(f"{url}: no answer within {timeout:g} s. {fix}; or allow more time (--timeout)") from None
    except requests.exceptions.HTTPError as e:
        status = e.response.status_code if e.response is not None else "error"
        raise OSError(f"{url}: HTTP {status}. {fix}") from None
    except requests.exceptions.RequestException as e:
        raise OSError(f"{url}: download failed ({e.__class__.__name__}: {e}). {fix}") from None
    except ValueError as e:
        if "hash" not in str(e):
            raise
        raise ValueError(f"{url}: the downloaded bytes do not match the manifest's sha256 {known_sha256[:12]}… "
                         f"(nothing was kept). {fix}") from None
    finally:
        logger.setLevel(level)


def _new_file_mode() -> int:
    """The mode the user's umask gives a new file (a lab's shared data folder stays readable)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def _temporary(path: Path):
    """A temporary file name next to ``path`` with the mode a new file gets (the umask's), removed
    unless it was renamed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    os.chmod(tmp, _new_file_mode())  # mkstemp's 0600 would become the data file's mode: others could not read it
    try:
        yield Path(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _build(entry: FileEntry, path: Path, staging: Path, timeout: float) -> None:
    """Fetch ``entry``'s canonical sources, apply its transform, verify and move it to ``path``."""
    if entry.transform == "verbatim":
        return download(entry.source[0], path, entry.sha256, timeout)
    staged = []
    for url, known in zip(entry.source, entry.source_sha256):
        p = staging / f"{known[:16]}-{Path(urllib.parse.urlparse(url).path).name}"
        download(url, p, known, timeout)  # kept across an interrupted fetch; skipped when already right
        staged.append(p)
    with _temporary(path) as tmp:
        try:
            with open(tmp, "wb") as out:
                if entry.transform == "gunzip":
                    with gzip.open(staged[0], "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 20)
                elif entry.transform == "concat-drop-header":
                    for i, p in enumerate(staged):
                        with open(p, "rb") as f:
                            if i:
                                f.readline()
                            shutil.copyfileobj(f, out, 1 << 20)
        except (EOFError, gzip.BadGzipFile) as e:
            raise ValueError(f"{entry.source[0]}: cannot {entry.transform} it ({e}). Fix: delete {staging} "
                             "and fetch again") from None
        if sha256(tmp) != entry.sha256:
            raise ValueError(f"{entry.dataset}/{entry.path}: the {entry.transform} of {', '.join(entry.source)} "
                             "does not give the manifest's sha256 (nothing was kept). Fix: report it; meanwhile "
                             "fetch from a mirror (--mirror URL or JATTN_DATA_MIRROR)")
        os.replace(tmp, path)


def explain(e: OSError, path: Path, root: Path, size: int) -> OSError:
    """The OS error ``e``, met while writing ``path`` into the data folder ``root`` (``size``: bytes
    the data set needs), as one line naming the path, the problem in words and the fix."""
    target = Path(e.filename) if e.filename else path
    where = "--data-dir (or set JATTN_DATA)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return PermissionError(f"cannot write {target}: permission denied. Fix: choose a writable data folder "
                               f"(pass {where}), or fix the folder's permissions (e.g. `chmod -R u+w {root}`)")
    if e.errno == errno.EROFS:
        return PermissionError(f"cannot write {target}: {root} is on a read-only file system. Fix: choose "
                               f"a writable data folder (pass {where})")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left" if e.errno == errno.ENOSPC else "disk quota exceeded"
        free = shutil.disk_usage(root).free if root.is_dir() else 0
        return OSError(f"cannot write {target}: {what} on the disk of {root} ({free / 1e6:.1f} MB free; "
                       f"this data set needs {size / 1e6:.1f} MB). Fix: free space on that disk, or pass {where} "
                       "to a folder on another disk")
    if e.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        for p in (target, *target.parents):
            if p.is_dir() and p != target:
                break
            if p.exists() or p.is_symlink():
                expected = "a folder" if p != target or e.errno != errno.EISDIR else "a file"
                if kind(p) != expected:
                    return OSError(f"{p} is {kind(p)}, not {expected}, in the data folder {root}. Fix: "
                                   f"move or delete it, then fetch again (or pass {where} to another folder)")
    return OSError(f"cannot write {target}: {e.strerror or e}. Fix: check {target.parent} and fetch "
                   f"again, or pass {where} to another folder")


def _clean_stale(entries: list[FileEntry], root: Path) -> None:
    """Remove temporary files an interrupted fetch left in the data sets' folders (call under the lock)."""
    finals = {file_path(e, root) for e in entries}
    for folder in {p.parent for p in finals}:
        if folder.is_dir():
            for p in folder.iterdir():
                if _STALE.match(p.name) and p.is_file() and p not in finals:
                    p.unlink()


@contextlib.contextmanager
def _lock(root: Path, name: str):
    """Hold data set ``name``'s lock in ``root`` (``jattn.io.locks``), waiting up to ``LOCK_TIMEOUT``."""
    (root / ".locks").mkdir(parents=True, exist_ok=True)
    path = root / ".locks" / f"{name}.lock"
    try:
        handle = locks.acquire(path, timeout=LOCK_TIMEOUT)
    except locks.Busy as e:
        raise TimeoutError(f"another fetch of {name} into {root} ({e.holder}) has held {path} for "
                           f"{LOCK_TIMEOUT:g} s. Fix: wait for it to end, then retry") from None
    try:
        yield
    finally:
        locks.release(handle, path)


def _place(e: FileEntry, root: Path, mirror: str | None, staging: Path, timeout: float) -> bool:
    """Make ``e`` present and verified in ``root``: False when it already was, True when fetched."""
    if problem(e, root) is None:
        return False
    blocked = obstacle(e, root)
    if blocked:
        raise FileExistsError(f"{blocked}, where {e.dataset}'s file {e.path} must go. Fix: move or delete it, "
                              "then fetch again (or pass --data-dir elsewhere)")
    path = file_path(e, root)
    path.unlink(missing_ok=True)  # wrong bytes never keep a final name
    path.parent.mkdir(parents=True, exist_ok=True)
    if mirror:
        download(mirror_url(mirror, e), path, e.sha256, timeout,
                 fix=f"Fix: put the manifest's {e.dataset}/{e.path} on the mirror {mirror}, "
                     "or fetch without --mirror (and without JATTN_DATA_MIRROR)")
    else:
        staging.mkdir(parents=True, exist_ok=True)
        _build(e, path, staging, timeout)
    return True


def fetch(names=None, folder=None, mirror: str | None = None, timeout: float = TIMEOUT, progress: bool | None = None,
          manifest=None) -> dict:
    """Make data sets ``names`` (all when empty) present and verified in the data folder.

    ``folder``: the data folder (default: ``$JATTN_DATA``, else the user cache). ``mirror``: a URL
    laid out like the data folder to fetch the final files from (default: ``$JATTN_DATA_MIRROR``,
    else each file's canonical source). ``progress``: a progress bar on stderr (None: when it is
    a terminal). Returns {"folder", "fetched", "present"} (counts of files).
    """
    from tqdm.auto import tqdm

    entries = files(names, manifest)
    root = data_dir(folder)
    mirror = mirror or os.environ.get("JATTN_DATA_MIRROR") or None
    if mirror and urllib.parse.urlparse(mirror).scheme not in ("http", "https"):
        raise ValueError(f"mirror {mirror!r} is not an http(s) URL. Fix: pass --mirror http://HOST/PATH "
                         "(laid out like the data folder: <URL>/<data set>/<file>)")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot create the data folder {root} ({e.strerror}). Fix: pass --data-dir (or set "
                      "JATTN_DATA) to a writable folder") from None
    counts = {"folder": str(root), "fetched": 0, "present": 0}
    with tqdm(total=sum(e.size for e in entries), unit="B", unit_scale=True, desc="jattn data fetch",
              disable=None if progress is None else not progress) as bar:
        for name in [n for n in datasets(manifest) if any(e.dataset == n for e in entries)]:
            own = [e for e in entries if e.dataset == name]
            staging, path = root / ".sources" / name, root / name
            try:
                with _lock(root, name):
                    _clean_stale(own, root)
                    for e in own:
                        path = file_path(e, root)
                        bar.set_postfix_str(f"{name}/{e.path}", refresh=False)
                        counts["fetched" if _place(e, root, mirror, staging, timeout) else "present"] += 1
                        bar.update(e.size)
                    shutil.rmtree(staging, ignore_errors=True)
            except OSError as e:
                if e.errno is None:  # already ours, with its fix
                    raise
                raise explain(e, path, root, sum(x.size for x in own)) from None
    with contextlib.suppress(OSError):
        (root / ".sources").rmdir()  # when empty
    return counts
