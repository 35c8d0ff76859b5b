"""Numbered, incrementally decoded lines of a text file, and the sentences of a CoNLL-U file:
what the corpus readers (``readers``) and the label readers (``labels``) share."""

from __future__ import annotations

import codecs
import itertools
from pathlib import Path
from typing import Iterator


class Lines:
    """Numbered lines of a text file, decoded incrementally; a decoding error names the file,
    the line and ``--encoding``. ``newline=""`` keeps line endings (for ``csv``)."""

    def __init__(self, path: Path, encoding: str, newline: str | None = None):
        self.path, self.encoding, self.keep_ends, self.number = path, encoding, newline == "", 0

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder(self.encoding)()
        pending = ""
        with open(self.path, "rb") as f:
            for raw in itertools.chain(f, [None]):
                try:
                    pending += decoder.decode(b"" if raw is None else raw, final=raw is None)
                except UnicodeDecodeError as e:
                    raise ValueError(f"{self.path}:{self.number + pending.count(chr(10)) + 1}: not valid "
                                     f"{self.encoding} ({e.reason}). Fix: pass the file's encoding, e.g. "
                                     "--encoding latin-1 (encoding= in Python), or convert it to UTF-8") from None
                lines = pending.splitlines(keepends=True)
                pending = lines.pop() if lines and raw is not None and not lines[-1].endswith("\n") else ""
                for line in lines:
                    self.number += 1
                    yield line if self.keep_ends else line.replace("\r\n", "\n").replace("\r", "\n")


def conllu_sentences(path: Path, encoding: str = "utf-8") -> Iterator[list[tuple[int, list[str]]]]:
    """The sentences of a CoNLL-U file as lists of (line number, 10 columns), one per word:
    comments, multiword-token lines (``3-4``) and empty nodes (``8.1``) skipped."""
    rows = []
    lines = Lines(path, encoding)
    for line in lines:
        i = lines.number
        line = line.rstrip("\n\r")
        if not line:
            if rows:
                yield rows
            rows = []
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ValueError(f"{path}:{i}: a CoNLL-U token line has 10 tab-separated columns, "
                             f"found {len(cols)}. Is this a CoNLL-U file? Else pass --format")
        if "-" in cols[0] or "." in cols[0]:  # multiword token or empty node
            continue
        rows.append((i, cols))
    if rows:
        yield rows
