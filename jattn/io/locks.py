"""The one lock routine: every lock jattn takes (an output folder's ``.<name>.lock``, ``jattn
reproduce``'s, a named artefact's under ``<cache>/models/.locks/``, a data set's under
``<data dir>/.locks/``).

``acquire(path, timeout)`` opens ``path`` without following a link (``O_NOFOLLOW``): a link planted
at the path is refused by name and what it points to is never opened, let alone truncated. It
then takes an exclusive ``flock`` (waiting up to ``timeout`` seconds: 0 tries once, None waits as
long as it takes; ``Busy`` names the holder when it runs out) and writes ``pid N`` into the file,
but only into a file that is a lock: a regular file with one name, empty or holding a ``pid N``
line. Anything else at the path (a user's file, a hard link to one, a FIFO) is ``LockError``,
left as it is. ``release`` removes the file while still holding it, then closes it; a process
that took the lock on a file its holder removed meanwhile (the path now names another file, or
none) takes it again on the path. A lock whose ``pid`` line cannot be written (a full disk) is
removed before the error is raised: no empty lock is left behind.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from pathlib import Path

POLL_S = 0.05  # how often a waiting process tries the lock again
_LOCK_TEXT = re.compile(rb"(pid \d+\n?)?")  # what a lock file holds: nothing, or its holder


class LockError(OSError):
    """Something at a lock's path that is not a lock jattn may write (a link, a user's file)."""


class Busy(OSError):
    """The lock is held by another process (``holder``: its ``pid N``) for longer than the timeout."""

    def __init__(self, path: Path, holder: str):
        super().__init__(f"{path} is held by another process ({holder})")
        self.holder = holder


def _open(path: Path):
    """``path`` opened for reading and writing (created if absent, never through a link)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):
            raise LockError(f"{path} is a symbolic link (to {os.readlink(path)}) where jattn keeps a lock file; "
                            "jattn does not open a lock through a link, and nothing it points to was touched. "
                            f"Fix: remove the link ({path}), then run again") from None
        raise OSError(e.errno, e.strerror, str(path)) from None
    return os.fdopen(fd, "rb+", buffering=0)


def _holder(handle) -> str:
    handle.seek(0)
    return handle.read(80).decode("utf-8", "replace").strip() or "another process"


def _at_path(handle, path: Path) -> bool:
    """Whether the open file is still the one named ``path`` (not removed or replaced meanwhile)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _refusal(handle, path: Path) -> str | None:
    """Why the locked file at ``path`` is not a lock jattn may overwrite; None when it is one."""
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file where jattn keeps a lock file. Fix: remove it, then run again"
    if info.st_nlink != 1:
        return (f"{path} is one of {info.st_nlink} names of a file (a hard link) where jattn keeps a lock file; "
                "writing the lock would change that file. Fix: remove this name, then run again")
    handle.seek(0)
    if not _LOCK_TEXT.fullmatch(handle.read(64)) or info.st_size > 64:
        return (f"{path} holds data that is not a jattn lock ({info.st_size:,} bytes) where jattn keeps a lock "
                "file; writing the lock would overwrite it. Fix: move that file away, then run again")
    return None


def acquire(path, timeout: float | None = 0.0):
    """The lock file ``path``, locked exclusively with this process's ``pid`` in it: an open binary
    file to pass to ``release``. ``timeout``: seconds to wait for another holder (0: none; None:
    for ever), after which ``Busy``; ``LockError`` for a link or a file that is not a lock."""
    path = Path(path)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        handle = _open(path)
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise Busy(path, _holder(handle)) from None
                    time.sleep(POLL_S)
            if _at_path(handle, path):
                refused = _refusal(handle, path)
                if refused is not None:
                    raise LockError(refused)
                break
        except BaseException:
            handle.close()
            raise
        handle.close()  # its holder removed it while we waited: lock the file now at the path
    try:
        handle.truncate(0)
        text = f"pid {os.getpid()}\n".encode()
        written = 0
        while written < len(text):
            written += os.pwrite(handle.fileno(), text[written:], written)
    except OSError as e:
        release(handle, path)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        release(handle, path)
        raise
    return handle


def release(handle, path) -> None:
    """Remove the lock file while still holding it, then close it (see ``acquire``)."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        handle.close()

