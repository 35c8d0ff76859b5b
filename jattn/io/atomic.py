"""A file replaced whole or not at all, never written through a link: the one way jattn writes a
single file a reader may look at while it is written (a stage record, a report, a cache entry, a
resumable state, a manifest, a viewer page).

``replace(path, data)`` writes ``data`` into a new file beside ``path`` (``mkstemp``: created with
``O_EXCL``, so a link or a file planted at any name is never opened), gives it the mode a new file
gets (the umask's, not ``mkstemp``'s 0600), flushes it to disk (``fsync``) and renames it over
``path`` (``os.replace``: a link at ``path`` is replaced, what it points to is left as it is). On
any failure (a full disk, a stop) the temporary file is removed and ``path`` is as it was; an OS
error is a ``WriteError``: one line naming ``path`` and the fix, with ``errno``, ``strerror`` and
``filename`` (``path``) kept for a caller that phrases its own.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk, or the user's quota spent


class WriteError(OSError):
    """``path`` could not be replaced (it was left as it was); ``str`` is the line a user reads."""

    def __init__(self, cause: OSError, path: Path, instead: str | None):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        fix = "free space on that disk" if cause.errno in FULL else f"make {path.parent} writable"
        self.message = (f"{self.strerror} writing {path}; {path.name} was left as it was. "
                        f"Fix: {fix}{f', or {instead}' if instead else ''}")

    def __str__(self) -> str:
        return self.message


def _new_file_mode() -> int:
    """The mode the process's umask gives a new file (read without setting the umask: a writer
    may run in a thread beside others)."""
    try:
        umask = int(re.search(r"^Umask:\s*([0-7]+)$", Path("/proc/self/status").read_text(), re.M).group(1), 8)
    except (OSError, AttributeError):  # not Linux, or a kernel before 4.7
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def replace(path, data: str | bytes, *, instead: str | None = None) -> None:
    """Put ``data`` (text is written as UTF-8) at ``path`` whole or not at all (module docstring).
    ``instead``: what else the user can do, in the caller's terms, added to the fix of an error
    (e.g. "choose another --out")."""
    path = Path(path)
    rest = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, _new_file_mode())
            while rest:
                rest = rest[os.write(fd, rest):]
            os.fsync(fd)  # the bytes are on disk before the name points at them
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise WriteError(e, path, instead) from None
    finally:
        if tmp is not None:  # an error or a stop before the rename: nothing left behind
            Path(tmp).unlink(missing_ok=True)
