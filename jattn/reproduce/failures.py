"""A failure in words: what raised, and where, on one line (a stage's error, a study that does not import)."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path


def describe_failure(e: BaseException) -> str:
    """``e`` on one line: its type, its message's first line, and the file and line that raised it
    (the innermost outside jattn and the installed packages, where there is one)."""
    if isinstance(e, SyntaxError):
        return f"SyntaxError: {e.msg} ({e.filename}, line {e.lineno})"
    frames = traceback.extract_tb(e.__traceback__)
    library = (str(Path(__file__).parents[1]), sys.prefix, sys.base_prefix)  # jattn, installed packages, Python
    own = [f for f in frames if not f.filename.startswith(library)]
    at = "".join(f" ({f.filename}, line {f.lineno})" for f in (own or frames)[-1:])
    if isinstance(e, SystemExit):
        return f"sys.exit({e.code!r}) was called{at}"
    text = str(e).strip().splitlines()
    return type(e).__name__ + (f": {text[0]}" if text else "") + at
