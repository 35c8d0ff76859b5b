"""A run's results folder, published as a whole (its files and figures: ``jattn.viz.results``).

``check_finite`` refuses totals that are not finite (a NaN or inf produced by the model): an
error naming the method, the total and the layer/head, never written as ``null``, which
``to_json`` reserves for "no contributing sequence".

``Output(out)`` owns an output folder for one run: it checks ``out`` before any work (not an
existing file, a writable parent, not a foreign non-empty folder unless ``overwrite``), holds
an exclusive lock (``.<name>.lock`` beside ``out`` while the run lasts, ``jattn.io.locks``: a
second run into the same folder stops at once, and a link planted at the lock's path is refused),
and ``Output.write(fill)`` lets ``fill`` write into a fresh temporary folder beside
``out`` that then replaces ``out`` in one atomic exchange. A run interrupted (SIGINT, SIGKILL,
full disk) leaves ``out`` exactly as it was: the previous complete results or nothing. While
an ``Output`` is open, a SIGINT is also remembered, so a run whose KeyboardInterrupt was
swallowed on the way (Python drops exceptions raised in finalizers and some callbacks) still
never publishes. The command line records its stops (``jattn.io.stops``): ``Output.write`` never publishes after one.
``meta["complete"]`` is true in every published ``results.json``. ``out`` is resolved first (a
symlink: its target is locked and replaced, the link stays), and a published folder lists its
files in ``.jattn-files``: a folder holding any other file (a user's) is never replaced, unless
``overwrite``.
"""

from __future__ import annotations

import ctypes
import datetime
import errno
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from jattn.io import locks
from jattn.io.stops import check_stop

class OutputError(ValueError):
    """An output folder that cannot be used, or writing into it failed."""


class NonFiniteError(ValueError):
    """The run produced NaN or inf statistics."""


def to_json(value: np.ndarray):
    """Nested lists; NaN (a statistic with no contributing sequence) becomes null."""
    value = np.asarray(value, np.float64)
    return np.where(np.isnan(value), None, value).tolist() if np.isnan(value).any() else value.tolist()


def _where(index: tuple, shape: tuple, num_layers: int) -> str:
    if len(shape) >= 2 and shape[0] == num_layers:
        return f"layer {index[0]}, head {index[1]}" + (f", entry {index[2:]}" if len(index) > 2 else "")
    return f"index {index}" if index else "its only value"


def check_finite(result, num_layers: int) -> None:
    """Raise ``NonFiniteError`` if a method's summed totals or a statistic hold NaN/inf.

    Totals are sums over the corpus, so a non-finite total means the model produced a
    non-finite number; a statistic may be NaN only where no sequence contributed (0 / 0)."""
    problems = []
    for method, totals in result.totals.items():
        if method == "_meta":
            continue
        for key, total in totals.items():
            bad = ~np.isfinite(np.asarray(total))
            if bad.any():
                index = tuple(int(i) for i in np.argwhere(bad)[0])
                problems.append(f"method {method!r}, total {key!r}: {int(bad.sum())} non-finite value(s), the "
                                f"first at {_where(index, bad.shape, num_layers)}")
    for name, stat in result.statistics.items():
        bad = np.isinf(np.asarray(stat.value, np.float64))
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            problems.append(f"statistic {name!r}: inf at {_where(index, bad.shape, num_layers)}")
    if problems:
        raise NonFiniteError("the run produced non-finite numbers (" + "; ".join(problems[:3])
                             + (f"; {len(problems) - 3} more" if len(problems) > 3 else "") + "). Fix: check "
                             "the model's weights (jattn.load refuses non-finite ones) and its compute dtype")


def run_meta(**fields) -> dict:
    """What a results folder records about its run, plus the time (UTC, ISO 8601)."""
    return {**fields, "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def holds_results(folder: Path) -> bool:
    """Whether ``folder`` is a results folder jattn wrote (results.json with ``meta``)."""
    try:
        return "meta" in json.loads((Path(folder) / "results.json").read_text())
    except (OSError, ValueError):
        return False


MANIFEST = ".jattn-files"  # the files a published folder holds, one relative path per line
# what a results folder written before the manifest existed may hold
_LEGACY = (".json", ".npz", ".png", ".md", ".html", ".csv", ".tsv", ".lock")


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def write_manifest(folder: Path) -> None:
    """List every file of ``folder`` in its ``MANIFEST``: what jattn wrote there."""
    (Path(folder) / MANIFEST).write_text("".join(f + "\n" for f in _files(folder) if f != MANIFEST))


def foreign_files(folder: Path) -> list[str]:
    """Files of a results folder that jattn did not write: those not in its manifest (a folder
    written before manifests: files other than results, tables and figures)."""
    folder = Path(folder)
    try:
        listed = set((folder / MANIFEST).read_text().splitlines())
    except FileNotFoundError:
        return [f for f in _files(folder) if not f.endswith(_LEGACY)]
    except OSError:
        return []
    return [f for f in _files(folder) if f not in listed and f != MANIFEST]


def acquire_lock(path: Path, what: str, option: str):
    """The lock file ``path`` of the folder ``what`` (named by ``option`` in the fixes), taken
    through ``jattn.io.locks.acquire`` (never through a link planted at ``path``): an
    ``OutputError`` naming the holder when another run has it, the link or file in the way, or
    the disk's problem."""
    try:
        return locks.acquire(path)
    except locks.Busy as e:
        raise OutputError(f"{what} is in use by another jattn run ({e.holder}). Fix: wait for it to finish, or "
                          f"choose another {option}") from None
    except locks.LockError as e:
        raise OutputError(str(e)) from None
    except OSError as e:
        raise OutputError(f"{what}: cannot write the lock file {path} ({e.strerror or e}). Fix: "
                          f"{_fix(e, option)}") from None


def release_lock(handle, path: Path) -> None:
    """Release a lock ``acquire_lock`` took (``jattn.io.locks.release``: the file goes with it)."""
    locks.release(handle, path)


def _fix(e: OSError, option: str) -> str:
    """What to do about the OS error ``e`` met writing into the folder that ``option`` names."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free space on that disk, or choose another {option}"
    return f"choose a writable {option}"


class Output:
    """An output folder for one run: checked and locked at construction, replaced as a whole
    by ``write``. Use as a context manager (the lock is released on exit)."""

    def __init__(self, out, *, overwrite: bool = False, option: str = "--out", switch: str | None = "--overwrite"):
        self.out = Path(out).expanduser().resolve()  # a symlink's target: one lock per real folder
        self.overwrite, self.option = overwrite, option
        # the caller's way to replace a folder, named in the fixes; None: it offers none
        self._or_replace = f", or pass {switch} to replace the folder as a whole" if switch else ""
        self._lock = None
        self._handler = None  # the SIGINT handler to restore on close, when this one guards the run
        self._unraisable = None  # the sys.unraisablehook to restore on close
        self.interrupted = False
        out, parent = self.out, self.out.parent
        if out.exists() and not out.is_dir():
            raise OutputError(f"{option} {out} is an existing file. Fix: give a folder path for the results")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{option} {out}: cannot create its parent folder {parent} ({e.strerror}). "
                              f"Fix: choose a writable {option}") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {out}: the folder {parent} is not writable. Fix: choose a writable {option}")
        if out.is_dir() and any(out.iterdir()) and not overwrite and not holds_results(out):
            raise OutputError(f"{option} {out} is a non-empty folder that holds no jattn results; it would be "
                              f"replaced as a whole. Fix: choose a new folder{self._or_replace}")
        self._lock = self._acquire(parent / f".{out.name}.lock", option)
        self._check_foreign()
        for stale in parent.glob(f".{out.name}.tmp-*"):  # left by a killed run: we hold the lock
            shutil.rmtree(stale, ignore_errors=True)

    def _check_foreign(self) -> None:
        """Refuse to replace a results folder holding files jattn did not write (unless ``overwrite``)."""
        if self.overwrite or not self.out.is_dir():
            return
        if foreign := foreign_files(self.out):
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            self.close()
            raise OutputError(f"{self.option} {self.out} holds files jattn did not write ({shown}); replacing the "
                              f"folder would delete them. Fix: move them out or choose another {self.option}"
                              + self._or_replace)

    def _acquire(self, path: Path, option: str):
        self._lock_path = path
        return acquire_lock(path, f"{option} {self.out}", option)

    def write(self, fill: Callable[[Path], object]):
        """``fill(folder)`` writes into a fresh folder beside ``out``, which then replaces
        ``out`` atomically; on any error ``out`` is left as it was and the fresh folder is removed
        (an OS error, a full disk's included, as one ``OutputError`` naming the file and the fix).
        Returns what ``fill`` returns."""
        tmp = None
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.tmp-", dir=self.out.parent))
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would become out's mode
            value = fill(tmp)
            if self.interrupted:  # a SIGINT arrived and its KeyboardInterrupt was lost on the way
                raise KeyboardInterrupt
            check_stop()  # one the command line recorded
            write_manifest(tmp)
            self._check_foreign()  # a file added to out while the run computed
            _replace(tmp, self.out)
            return value
        except OSError as e:
            if e.errno is None:  # already one message with its fix
                raise
            raise OutputError(f"{e.strerror} writing {self._final(e.filename, tmp)}; "
                              f"{self.out} was left as it was. Fix: {_fix(e, self.option)}") from e
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _final(self, filename, tmp: Path | None) -> Path:
        """The path a file written into the fresh folder ``tmp`` would have had in ``out``."""
        if not filename:
            return self.out
        try:
            return self.out / Path(os.fsdecode(filename)).relative_to(tmp)
        except (TypeError, ValueError):
            return Path(os.fsdecode(filename))

    def close(self) -> None:
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
            sys.unraisablehook = self._unraisable
            self._handler = self._unraisable = None
        if self._lock is not None:
            release_lock(self._lock, self._lock_path)
            self._lock = None

    def _on_sigint(self, signum, frame):
        self.interrupted = True
        (self._handler or signal.default_int_handler)(signum, frame)  # raises KeyboardInterrupt

    def _on_unraisable(self, unraisable):
        """A remembered SIGINT's KeyboardInterrupt that Python dropped (raised in a finalizer or
        a garbage-collection callback) is not printed as a traceback: the run stops on it anyway."""
        if not (self.interrupted and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            self._unraisable(unraisable)

    def __enter__(self):
        """Also remember SIGINTs while open (main thread, Python's default handler only)."""
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._handler = signal.signal(signal.SIGINT, self._on_sigint)
            self._unraisable, sys.unraisablehook = sys.unraisablehook, self._on_unraisable
        return self

    def __exit__(self, *exc):
        self.close()


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))


def _replace(new: Path, out: Path) -> None:
    """Put folder ``new`` at ``out``; the previous ``out`` ends up at ``new`` (caller deletes it)."""
    if not out.exists():
        os.rename(new, out)
    elif not _exchange(new, out):  # two renames: out is missing for an instant
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        os.rename(out, old / "previous")
        os.rename(new, out)
        os.rename(old, new)
