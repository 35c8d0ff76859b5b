"""Corpus readers: plain text, CoNLL-U and the GAP tsv behind one interface.

``read(path, format)`` yields ``Example``s lazily (memory does not grow with the file):
  * ``text``: one segment per non-blank line, tokenized as ``[CLS] line [SEP]``; a line with
    one tab is a pair ``[CLS] A [SEP] B [SEP]``. Blank lines (and a pair with a blank side)
    are skipped and counted (``Corpus.skipped``), as ``run_corpus`` skips empty examples.
  * ``conllu``: one sentence per example, as its list of words (pre-split, so word-level
    methods can aggregate subwords); multiword-token lines (``3-4``) and empty nodes
    (``8.1``) are skipped.
  * ``gap``: the ``Text`` column of the GAP coreference tsv (a Wikipedia paragraph), split at
    the sentence boundary closest to its middle into the pair ``[CLS] A [SEP] B [SEP]``
    (Clark et al. 2019's input shape); a one-sentence paragraph stays a single segment.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path
from typing import Callable, Iterator

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
    """Numbered lines of a text file; a decoding error names the file, the line and ``--encoding``."""

    def __init__(self, path: Path, encoding: str, newline: str | None = None):
        self.path, self.encoding, self.newline, self.number = path, encoding, newline, 0

    def __iter__(self) -> Iterator[str]:
        with open(self.path, encoding=self.encoding, newline=self.newline) as f:
            while True:
                try:
                    line = f.readline()
                except UnicodeDecodeError as e:
                    raise ValueError(f"{self.path}:{self.number + 1}: not valid {self.encoding} ({e.reason} at "
                                     f"byte {e.start} of the chunk read). Fix: pass the file's encoding, e.g. "
                                     "--encoding latin-1 (encoding= in Python), or convert it to UTF-8") from None
                if not line:
                    return
                self.number += 1
                yield line


def read_text(path: Path, encoding: str = "utf-8", skipped: Callable[[], None] = lambda: None) -> Iterator[Example]:
    lines = _Lines(path, encoding)
    for line in lines:
        i = lines.number
        line = line.rstrip("\n\r")
        if not line.strip():
            if line:
                skipped()
            continue
        parts = line.split("\t")
        if len(parts) > 2:
            raise ValueError(f"{path}:{i}: {len(parts) - 1} tabs; a line is one segment or a "
                             "pair 'A<TAB>B'. Fix: remove the extra tabs")
        example = Example(parts[0], parts[1] if len(parts) == 2 else None, f"{path}:{i}")
        if example.is_empty:
            skipped()
            continue
        yield example


def read_conllu(path: Path, encoding: str = "utf-8", skipped: Callable[[], None] = lambda: None) -> Iterator[Example]:
    words, start = [], None
    lines = _Lines(path, encoding)
    for line in lines:
        i = lines.number
        line = line.rstrip("\n\r")
        if not line:
            if words:
                yield Example(words, None, f"{path}:{start}")
            words, start = [], None
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ValueError(f"{path}:{i}: a CoNLL-U token line has 10 tab-separated columns, "
                             f"found {len(cols)}. Is this a CoNLL-U file? Else pass --format")
        if "-" in cols[0] or "." in cols[0]:  # multiword token or empty node
            continue
        start = start or i
        words.append(cols[1])
    if words:
        yield Example(words, None, f"{path}:{start}")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def split_paragraph(text: str) -> tuple[str, str | None]:
    """Split at the sentence boundary closest to the middle (by characters)."""
    cuts = [m.start() for m in _SENTENCE_END.finditer(text)]
    if not cuts:
        return text, None
    cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
    return text[:cut].strip(), text[cut:].strip()


def read_gap(path: Path, encoding: str = "utf-8", skipped: Callable[[], None] = lambda: None) -> Iterator[Example]:
    rows = csv.reader(_Lines(path, encoding, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(rows, None)
    if not header or "Text" not in header:
        raise ValueError(f"{path}: not a GAP tsv (no 'Text' column in the header line). Fix: pass the GAP "
                         "tsv (gap-development.tsv) or another --format")
    col = header.index("Text")
    for row in rows:
        i = rows.line_num
        if not any(cell.strip() for cell in row):
            skipped()
            continue
        if len(row) <= col:
            raise ValueError(f"{path}:{i}: {len(row)} tab-separated fields, the 'Text' column is field "
                             f"{col + 1} of the header's {len(header)}. Fix: repair the row (a GAP row has "
                             f"{len(header)} fields)")
        a, b = split_paragraph(row[col])
        example = Example(a, b, f"{path}:{i}")
        if example.is_empty:
            skipped()
            continue
        yield example


READERS = {"text": read_text, "conllu": read_conllu, "gap": read_gap}


def read(path, format: str = "text", encoding: str = "utf-8", skipped: Callable[[], None] = lambda: None
         ) -> Iterator[Example]:
    """Yield the examples of ``path`` read as ``format`` (one of ``FORMATS``); ``skipped()`` is
    called once per blank segment left out."""
    if format not in READERS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"input {path} is a folder. Fix: pass a corpus file ({format} format)")
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist. Fix: check the path")
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}. Fix: e.g. --encoding utf-8 or latin-1") from None
    return READERS[format](path, encoding, skipped)


class Corpus:
    """A re-readable file corpus: iterating streams ``read(path, format)``; ``len`` counts the
    examples once (a cheap pass without tokenization) so progress bars can show an ETA.
    ``skipped``: blank segments left out by the last complete pass."""

    def __init__(self, path, format: str = "text", encoding: str = "utf-8"):
        self.path, self.format, self.encoding = Path(path), format, encoding
        self._len, self.skipped = None, 0
        iter(self)  # fail early on a bad path, format or encoding

    def __iter__(self) -> Iterator[Example]:
        count = [0]

        def skipped():
            count[0] += 1

        def examples():
            yield from read(self.path, self.format, self.encoding, skipped)
            self.skipped = count[0]
        read(self.path, self.format, self.encoding)  # raise here, not at the first next()
        return examples()

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len
