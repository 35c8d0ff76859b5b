"""Corpus readers: plain text, CoNLL-U and the GAP tsv behind one interface.

``read(path, format)`` yields ``Example``s lazily (memory does not grow with the file):
  * ``text``: one segment per non-empty line, tokenized as ``[CLS] line [SEP]``; a line with
    one tab is a pair ``[CLS] A [SEP] B [SEP]``. Empty lines separate nothing and are passed
    over; a line of blanks (or a pair with a blank side) is an empty ``Example``, which
    ``run_corpus`` skips and counts (``meta["skipped_empty"]``), as for any empty input.
  * ``conllu``: one sentence per example, as its list of words (pre-split, so word-level
    methods can aggregate subwords); multiword-token lines (``3-4``) and empty nodes
    (``8.1``) are skipped. Labels: ``heads`` (w,) 1-based gold head (0 = ROOT) when every
    HEAD is numeric, ``relations`` and ``upos`` (word lists of strings).
  * ``gap``: the ``Text`` column of the GAP coreference tsv (a Wikipedia paragraph), split at
    the sentence boundary closest to its middle into the pair ``[CLS] A [SEP] B [SEP]``
    (Clark et al. 2019's input shape); a one-sentence paragraph stays a single segment.
    With ``words=True`` (the runner asks for it when a method is word-level) the paragraph is
    one segment of words (``jattn.io.labels.split_words``) labelled for coreference:
    ``pronoun`` (), ``candidates`` (w,) 1 on name A's words, 2 on name B's, else 0, ``gold``
    () 0 = A, 1 = B, -1 when not exactly one name is coreferent, ``char_spans`` (w, 2).
  * ``parallel``: (source, target) pairs for a translation model, from two line-aligned files
    (``path`` a pair of paths) or from one file of ``source ||| target`` lines (fast_align's
    format, as the gold-alignment test sets ship). With a gold alignment file (``gold=``, one
    line per pair, ``i-j`` sure / ``ipj`` possible links; ``parse_links``)
    each pair is labelled ``links`` (source words, target words) int32: 2 sure, 1 possible only,
    0 none, words being the whitespace-separated tokens of each side.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import itertools
import re
from pathlib import Path
from typing import Iterator

import numpy as np

from jattn.io.lines import Lines, conllu_sentences

__all__ = ["Corpus", "Example", "read"]

FORMATS = ("text", "conllu", "gap", "parallel")


@dataclasses.dataclass(frozen=True)
class Example:
    """One input of the runner. ``labels``: what a labelled study reads, by name — numbers
    (an int, or an array per word (w,) or per word pair (w, w), word k of the segment at index
    k) are padded into the host batch (``HostBatch.labels``); lists of strings (per word) reach
    the methods' ``prepare`` as ``HostBatch.label_lists``."""

    a: str | list[str]  # text, or words
    b: str | list[str] | None = None  # second segment of a pair
    source: str = ""  # where it came from, e.g. "corpus.txt:12", for error messages
    labels: dict | None = dataclasses.field(default=None, compare=False)

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


def read_text(path: Path, encoding: str = "utf-8") -> Iterator[Example]:
    lines = Lines(path, encoding)
    for line in lines:
        i = lines.number
        line = line.rstrip("\n\r")
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) > 2:
            fix = ("this looks like a CoNLL-U file (10 tab-separated columns): read it with "
                   "format=conllu" if len(parts) == 10 else "remove the extra tabs")
            raise ValueError(f"{path}:{i}: {len(parts) - 1} tabs; a line is one segment or a "
                             f"pair 'A<TAB>B'. Fix: {fix}")
        yield Example(parts[0], parts[1] if len(parts) == 2 else None, f"{path}:{i}")


def read_conllu(path: Path, encoding: str = "utf-8") -> Iterator[Example]:
    for rows in conllu_sentences(path, encoding):
        cols = [c for _, c in rows]
        labels = {"relations": [c[7] for c in cols], "upos": [c[3] for c in cols]}
        if all(c[6].isdigit() for c in cols):
            labels["heads"] = np.array([int(c[6]) for c in cols], np.int32)
            for (line, c), head in zip(rows, labels["heads"]):
                if head > len(cols):  # 0 is the root; words are 1..len(cols)
                    raise ValueError(f"{path}:{line}: word {c[0]} {c[1]!r} has HEAD {head}, but its sentence has "
                                     f"{len(cols)} words. Fix: correct the HEAD column (0 for the root, else the "
                                     "ID of a word of the same sentence)")
        yield Example([c[1] for c in cols], None, f"{path}:{rows[0][0]}", labels)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def split_paragraph(text: str) -> tuple[str, str | None]:
    """Split at the sentence boundary closest to the middle (by characters)."""
    cuts = [m.start() for m in _SENTENCE_END.finditer(text)]
    if not cuts:
        return text, None
    cut = min(cuts, key=lambda c: abs(c - len(text) / 2))
    return text[:cut].strip(), text[cut:].strip()


def read_gap(path: Path, encoding: str = "utf-8", words: bool = False) -> Iterator[Example]:
    if words:
        yield from _gap_words(path, encoding)
        return
    rows = csv.reader(Lines(path, encoding, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
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


def read_translation_pairs(path, encoding: str = "utf-8", gold=None, one_based: bool = True) -> Iterator[Example]:
    """(source, target) Examples: ``path`` a (source file, target file) pair of line-aligned
    files, or one file of ``source ||| target`` lines. Blank lines are kept as empty examples
    (the runner skips and counts them), so line numbers stay aligned with gold files.
    ``gold``: a gold alignment file line-aligned with the pairs (labels ``links``, see the module
    docstring; ``one_based`` as the Hansards' talp format, False for 0-based files)."""
    if gold is not None:
        yield from _with_links(read_translation_pairs(path, encoding), Path(gold), encoding, one_based)
        return
    if isinstance(path, (tuple, list)):
        sources, targets = (Lines(Path(p), encoding) for p in path)
        count = 0
        for count, (a, b) in enumerate(itertools.zip_longest(sources, targets), 1):
            if a is None or b is None:
                short, n = (path[0], count - 1) if a is None else (path[1], count - 1)
                raise ValueError(f"{short} ends after {n} lines but the other file goes on: not line-aligned. "
                                 "Fix: pass the two sides of one parallel corpus")
            yield Example(a.rstrip("\n"), b.rstrip("\n"), f"{path[0]}:{count}")
        return
    lines = Lines(Path(path), encoding)
    for line in lines:
        parts = line.rstrip("\n").split(" ||| ")
        if len(parts) != 2:
            raise ValueError(f"{path}:{lines.number}: expected 'source ||| target', found {len(parts) - 1} "
                             "' ||| ' separators. Fix: one pair per line, or pass the two sides as two files")
        yield Example(parts[0], parts[1], f"{path}:{lines.number}")


def _gap_words(path: Path, encoding: str) -> Iterator[Example]:
    from jattn.io import labels

    for ex in labels.read_gap(path, encoding):
        candidates = np.zeros(len(ex.words), np.int32)
        candidates[list(ex.a)], candidates[list(ex.b)] = 1, 2
        gold = {"A": 0, "B": 1, None: -1}[ex.gold]
        yield Example(list(ex.words), None, f"{path}:{ex.id}",
                      {"pronoun": np.int32(ex.pronoun), "candidates": candidates, "gold": np.int32(gold),
                       "char_spans": np.asarray(ex.spans, np.int32)})


Links = set[tuple[int, int]]  # (first-file index, second-file index), 0-based
_LINK = re.compile(r"^(\d+)([-p])(\d+)$")


def parse_links(line: str, *, one_based: bool) -> tuple[Links, Links]:
    """One gold line -> (sure, possible ⊇ sure), 0-based. ``i-j`` sure, ``ipj`` possible."""
    sure, possible = set(), set()
    shift = 1 if one_based else 0
    for tok in line.split():
        m = _LINK.match(tok)
        if m is None:
            raise ValueError(f"bad alignment link {tok!r} in line {line.strip()!r}: expected i-j or ipj")
        i, j = int(m.group(1)) - shift, int(m.group(3)) - shift
        if i < 0 or j < 0:
            raise ValueError(f"link {tok!r} has index 0 in a 1-based file (line {line.strip()!r})")
        possible.add((i, j))
        if m.group(2) == "-":
            sure.add((i, j))
    return sure, possible


def _with_links(pairs: Iterator[Example], gold: Path, encoding: str, one_based: bool) -> Iterator[Example]:
    _check_file(gold, "gold alignment")
    lines = iter(Lines(gold, encoding))
    for ex in pairs:
        line = next(lines, None)
        if line is None:
            raise ValueError(f"{gold} ends before {ex.source}: the gold file has a line per pair. Fix: pass the "
                             "gold alignments of this corpus")
        line = line.split("\t", 1)[-1]  # simalign files prefix an id
        try:
            sure, possible = parse_links(line, one_based=one_based)
        except ValueError as e:
            raise ValueError(f"{gold}: {e}") from None
        links = np.zeros((len(ex.a.split()), len(ex.b.split())), np.int32)  # (source words, target words)
        for (i, j), kind in [(x, 1) for x in possible] + [(x, 2) for x in sure]:
            if i >= links.shape[0] or j >= links.shape[1]:
                raise ValueError(f"{gold}: link {i}-{j} (0-based) of {ex.source} is outside its {links.shape[0]} "
                                 f"source and {links.shape[1]} target words. Fix: check one_based / the file")
            links[i, j] = kind
        yield dataclasses.replace(ex, labels={"links": links})


READERS = {"text": read_text, "conllu": read_conllu, "gap": read_gap, "parallel": read_translation_pairs}


def _check_file(path: Path, format: str) -> None:
    if path.is_dir():
        raise IsADirectoryError(f"input {path} is a folder. Fix: pass a corpus file ({format} format)")
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist. Fix: check the path")


def read(path, format: str = "text", encoding: str = "utf-8", words: bool = False, gold=None) -> Iterator[Example]:
    """Yield the examples of ``path`` read as ``format`` (one of ``FORMATS``); for ``parallel``
    ``path`` may be a (source, target) pair of files and ``gold`` a 1-based gold alignment
    file (``read_translation_pairs``). ``words``: pre-split words where the format offers both
    (``gap``)."""
    if format not in READERS:
        raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    paths = [Path(p) for p in path] if isinstance(path, (tuple, list)) else [Path(path)]
    if len(paths) != 1 and (format != "parallel" or len(paths) != 2):
        raise ValueError(f"{len(paths)} input files for --format {format}: one file, or for --format parallel a "
                         "source file and a target file. Fix: pass one --input file (two for parallel)")
    for p in paths:
        _check_file(p, format)
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}. Fix: e.g. --encoding utf-8 or latin-1") from None
    if words and format == "gap":
        return read_gap(paths[0], encoding, words=True)
    if gold is not None:
        if format != "parallel":
            raise ValueError(f"gold alignments go with --format parallel, not {format}. Fix: drop --gold")
        return read_translation_pairs(tuple(paths) if len(paths) == 2 else paths[0], encoding, gold)
    return READERS[format](tuple(paths) if len(paths) == 2 else paths[0], encoding)


class Corpus:
    """A re-readable file corpus: iterating streams ``read(path, format)``; ``len`` counts the
    examples once (a cheap pass without tokenization) so progress bars can show an ETA."""

    def __init__(self, path, format: str = "text", encoding: str = "utf-8", words: bool = False, gold=None):
        self.path = tuple(map(Path, path)) if isinstance(path, (tuple, list)) else Path(path)
        self.format, self.encoding, self.words, self.gold = format, encoding, words, gold
        self._len = None
        iter(self)  # fail early on a bad path, format or encoding

    def __iter__(self) -> Iterator[Example]:
        return read(self.path, self.format, self.encoding, self.words, self.gold)

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len


_HEADER_LABEL = re.compile(r"[A-Za-z_][A-Za-z_ ]*")


def is_header(line: str) -> bool:
    """Whether the first line of a labelled file is a header, decided by its content: one tab and
    a label column that is a name (``label``), not a number. A first line of data is never one."""
    text, tab, label = line.rpartition("\t")
    return bool(tab) and "\t" not in text and bool(_HEADER_LABEL.fullmatch(label.strip()))


class Labelled(list):
    """(text, label) rows of a labelled file; ``header``: whether its first line was a header."""

    header = False
    path = ""

    def describe(self) -> str:
        return f"{len(self)} labelled examples read from {self.path}" + (
            " (header line skipped)" if self.header else ""
        )


def read_labelled(path) -> Labelled:
    """A ``text<TAB>label`` file with integer labels. The first line is a header (skipped) only
    when its label column is a name (``sentence<TAB>label``; ``is_header``); every other line
    must be data. Lines of invisible characters only (NUL bytes, zero-width) are an error."""
    from jattn.io import validate

    path = Path(path)
    _check_file(path, "labelled")
    rows = Labelled()
    rows.path = str(path)
    for i, line in enumerate(Lines(path, "utf-8"), 1):
        line = line.rstrip("\n\r")
        if i == 1 and is_header(line):
            rows.header = True
            continue
        if not line.strip():
            continue
        text, tab, label = line.rpartition("\t")
        if not tab or not text.strip() or not label.strip().isdigit():
            what = "no tab" if not tab else ("an empty text" if not text.strip() else f"label {label.strip()!r}")
            raise ValueError(f"{path}:{i}: expected 'text<TAB>label' with a non-negative integer label, got "
                             f"{what} in {line[:80]!r}. Fix: one example per line, its class index after the last "
                             "tab (a header is recognised only on line 1, as a name such as 'label')")
        rows.append((validate.visible(text.strip(), f"{path}:{i}"), int(label)))
    if not rows:
        raise ValueError(f"{path} holds no labelled lines ('text<TAB>label')")
    return rows
