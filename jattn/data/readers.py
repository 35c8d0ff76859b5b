"""Corpus readers: plain text, CoNLL-U and the GAP tsv behind one interface.

``read(path, format)`` yields ``Example``s lazily (memory does not grow with the file):
  * ``text``: one segment per non-empty line, tokenized as ``[CLS] line [SEP]``; a line with
    one tab is a pair ``[CLS] A [SEP] B [SEP]``. Empty lines separate nothing and are passed
    over; a line of blanks (or a pair with a blank side) is an empty ``Example``, which
    ``run_corpus`` skips and counts (``meta["skipped_empty"]``), as for any empty input.
  * ``conllu``: one sentence per example, as its list of words (pre-split, so word-level
    methods can aggregate subwords); multiword-token lines (``3-4``) and empty nodes
    (``8.1``) are skipped.
  * ``gap``: the ``Text`` column of the GAP coreference tsv (a Wikipedia paragraph), split at
    the sentence boundary closest to its middle into the pair ``[CLS] A [SEP] B [SEP]``
    (Clark et al. 2019's input shape); a one-sentence paragraph stays a single segment.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import itertools
import re
from pathlib import Path
from typing import Iterator

FORMATS = ("text", "conllu", "gap")


@dataclasses.dataclass(frozen=True)
class Example:
    a: str | list[str]  # text, or words
    b: str | list[str] | None = None  # second segment of a pair
    source: str = ""  # where it came from, e.g. "corpus.txt:12", for error messages

    @property
    def is_pair(self) -> bool:
        return self.b is not None

    @property
    def is_words(self) -> bool:
        return isinstance(self.a, list)

    @property
    def is_empty(self) -> bool:
        """A segment without text (``""``, blanks, ``[]``): nothing to analyse."""
        return any(not (" ".join(s) if isinstance(s, list) else s).strip()
                   for s in (self.a, self.b) if s is not None and isinstance(s, (str, list)))


def as_example(x, index: int) -> Example:
    """Accept an Example, a string, an (A, B) tuple, or a word list."""
    if isinstance(x, Example):
        return x
    if isinstance(x, str) or isinstance(x, list):
        return Example(x, None, f"example {index}")
    if isinstance(x, tuple) and len(x) == 2:
        return Example(x[0], x[1], f"example {index}")
    raise TypeError(f"example {index}: expected an Example, a string, an (A, B) pair or a word list, "
                    f"got {type(x).__name__}")


class _Lines:
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


def read_text(path: Path, encoding: str = "utf-8") -> Iterator[Example]:
    lines = _Lines(path, encoding)
    for line in lines:
        i = lines.number
        line = line.rstrip("\n\r")
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) > 2:
            raise ValueError(f"{path}:{i}: {len(parts) - 1} tabs; a line is one segment or a "
                             "pair 'A<TAB>B'. Fix: remove the extra tabs")
        yield Example(parts[0], parts[1] if len(parts) == 2 else None, f"{path}:{i}")


def conllu_sentences(path: Path, encoding: str = "utf-8") -> Iterator[list[tuple[int, list[str]]]]:
    """The sentences of a CoNLL-U file as lists of (line number, 10 columns), one per word:
    comments, multiword-token lines (``3-4``) and empty nodes (``8.1``) skipped."""
    rows = []
    lines = _Lines(path, encoding)
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


def read_conllu(path: Path, encoding: str = "utf-8") -> Iterator[Example]:
    for rows in conllu_sentences(path, encoding):
        yield Example([cols[1] for _, cols in rows], None, f"{path}:{rows[0][0]}")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def split_paragraph(text: str) -> tuple[str, str | None]:
    """Split at the sentence boundary closest to the middle (by characters)."""
    cuts = [m.start() for m in _SENTENCE_END.finditer(text)]
    if not cuts:
        return text, None
    cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
    return text[:cut].strip(), text[cut:].strip()


def read_gap(path: Path, encoding: str = "utf-8") -> Iterator[Example]:
    rows = csv.reader(_Lines(path, encoding, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(rows, None)
    if not header or "Text" not in header:
        raise ValueError(f"{path}: not a GAP tsv (no 'Text' column in the header line). Fix: pass the GAP "
                         "tsv (gap-development.tsv) or another --format")
    col = header.index("Text")
    for row in rows:
        i = rows.line_num
        if not row:  # an empty line
            continue
        if len(row) <= col:
            raise ValueError(f"{path}:{i}: {len(row)} tab-separated fields, the 'Text' column is field "
                             f"{col + 1} of the header's {len(header)}. Fix: repair the row (a GAP row has "
                             f"{len(header)} fields)")
        a, b = split_paragraph(row[col])
        yield Example(a, b, f"{path}:{i}")


READERS = {"text": read_text, "conllu": read_conllu, "gap": read_gap}


def read(path, format: str = "text", encoding: str = "utf-8") -> Iterator[Example]:
    """Yield the examples of ``path`` read as ``format`` (one of ``FORMATS``)."""
    if format not in READERS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"input {path} is a folder. Fix: pass a corpus file ({format} format)")
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist. Fix: check the path")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}. Fix: e.g. --encoding utf-8 or latin-1") from None
    return READERS[format](path, encoding)


class Corpus:
    """A re-readable file corpus: iterating streams ``read(path, format)``; ``len`` counts the
    examples once (a cheap pass without tokenization) so progress bars can show an ETA."""

    def __init__(self, path, format: str = "text", encoding: str = "utf-8"):
        self.path, self.format, self.encoding = Path(path), format, encoding
        self._len = None
        iter(self)  # fail early on a bad path, format or encoding

    def __iter__(self) -> Iterator[Example]:
        return read(self.path, self.format, self.encoding)

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len
