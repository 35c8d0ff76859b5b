"""Labelled corpora for the syntax and coreference heads of Clark et al. 2019 (§4.2-§5).

* ``read_conllu_trees``: UD CoNLL-U -> ``Tree`` (words, gold heads 0 = ROOT, relations with
  their subtype, e.g. ``nmod:poss``, UPOS). Multiword-token lines (``3-4``) and empty nodes
  (``8.1``) are skipped: the syntactic words carry the tree.
* ``read_litbank``: LitBank coreference (CoNLL-2012 style, coref column last, ``(id``, ``id)``,
  ``(id)``, several joined by ``|``) -> ``CorefDocument`` (sentences, mention spans, cluster
  ids); ``segments`` packs whole sentences into pieces that fit the model.
* ``read_gap``: GAP tsv -> ``GapExample`` (words and the word indices of the pronoun and of the
  names A and B, which one is coreferent).
* ``fit_words``: which word lists the tokenizer maps into at most ``max_length`` subwords with
  every word kept; the others are reported and skipped with a count, never cut.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from jattn.io.lines import conllu_sentences

__all__ = ["fit_words", "GapExample", "read_conllu_trees", "read_gap", "read_litbank", "segments"]


@dataclasses.dataclass(frozen=True)
class Tree:
    words: list[str]
    heads: np.ndarray  # (w,) int, 1-based index of the head word, 0 = ROOT
    relations: list[str]  # universal relation with subtype ("nmod:poss")
    upos: list[str]
    source: str = ""  # "file:line" of the sentence's first word


def read_conllu_trees(path, encoding: str = "utf-8") -> Iterator[Tree]:
    """Yield the dependency trees of a CoNLL-U file (see module docstring)."""
    path = Path(path)
    for rows in conllu_sentences(path, encoding):
        for i, cols in rows:
            if not cols[6].isdigit():
                raise ValueError(f"{path}:{i}: word {cols[0]} has no numeric head ({cols[6]!r}). Fix: pass a "
                                 "treebank with gold trees (HEAD column filled)")
        yield _tree([cols for _, cols in rows], f"{path}:{rows[0][0]}")


def _tree(rows: list[list[str]], source: str) -> Tree:
    ids = [int(r[0]) for r in rows]
    if ids != list(range(1, len(rows) + 1)):
        raise ValueError(f"{source}: word ids are not 1..{len(rows)} in order (got {ids[:8]}...)")
    heads = np.array([int(r[6]) for r in rows], np.int32)
    if heads.max() > len(rows):
        raise ValueError(f"{source}: a head points past the sentence's {len(rows)} words")
    return Tree([r[1] for r in rows], heads, [r[7] for r in rows], [r[3] for r in rows], source)


@dataclasses.dataclass(frozen=True)
class Mention:
    start: int  # first word, inclusive
    end: int  # last word, inclusive
    cluster: int

    @property
    def head(self) -> int:
        """The head-word rule used throughout: the span's last word (no parse in LitBank)."""
        return self.end


@dataclasses.dataclass(frozen=True)
class CorefDocument:
    name: str
    sentences: list[list[str]]
    mentions: list[Mention]  # document-level word indices


def _coref_tags(cell: str, where: str):
    """'(3' / '3)' / '(3)' joined by '|' -> [(kind, id)], kind in 'open', 'close', 'single'."""
    if cell in ("_", "-", ""):
        return []
    out = []
    for part in cell.split("|"):
        m = re.fullmatch(r"(\()?(\d+)(\))?", part)
        if not m or not (m.group(1) or m.group(3)):
            raise ValueError(f"{where}: cannot read coreference tag {part!r} (expected '(id', 'id)' or '(id)')")
        kind = "single" if m.group(1) and m.group(3) else "open" if m.group(1) else "close"
        out.append((kind, int(m.group(2))))
    return out


def read_litbank(path, encoding: str = "utf-8") -> list[CorefDocument]:
    """Read a LitBank ``*.conll`` file: word in column 4, coreference in the last column,
    sentences separated by blank lines, ``#begin/#end document`` lines."""
    path = Path(path)
    docs, name, sentences, words, mentions, open_ = [], None, [], [], [], {}
    offset = 0

    def close_doc():
        if open_:
            raise ValueError(f"{path}: document {name}: mention(s) of cluster(s) {sorted(open_)} never closed")
        if words:
            sentences.append(list(words))
        if sentences:
            ordered = sorted(mentions, key=lambda m: (m.start, m.end))
            docs.append(CorefDocument(name or path.stem, list(sentences), ordered))

    with open(path, encoding=encoding) as f:
        for i, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if line.startswith("#begin document"):
                name = line.split("(", 1)[-1].split(")")[0]
                sentences, words, mentions, open_, offset = [], [], [], {}, 0
                continue
            if line.startswith("#end document"):
                close_doc()
                name, sentences, words, mentions, open_ = None, [], [], [], {}
                continue
            if not line.strip():
                if words:
                    sentences.append(words)
                    offset += len(words)
                words = []
                continue
            cols = line.split("\t")
            if len(cols) < 5:
                raise ValueError(f"{path}:{i}: a CoNLL-2012 line has the word in column 4 and coreference in "
                                 f"the last column; found {len(cols)} columns")
            w = offset + len(words)
            words.append(cols[3])
            for kind, cid in _coref_tags(cols[-1].strip(), f"{path}:{i}"):
                if kind == "single":
                    mentions.append(Mention(w, w, cid))
                elif kind == "open":
                    open_.setdefault(cid, []).append(w)
                else:
                    if not open_.get(cid):
                        raise ValueError(f"{path}:{i}: '{cid})' closes a mention that was never opened")
                    mentions.append(Mention(open_[cid].pop(), w, cid))
                    if not open_[cid]:
                        del open_[cid]
    if name is not None or words or sentences:
        close_doc()
    return docs


@dataclasses.dataclass(frozen=True)
class CorefSegment:
    words: list[str]
    mentions: list[Mention]  # segment-level word indices
    source: str


def segments(doc: CorefDocument, tokenizer, budget: int) -> tuple[list[CorefSegment], dict]:
    """Pack whole sentences greedily into segments of at most ``budget`` subword tokens
    (special tokens included). A sentence alone over budget is skipped; mentions crossing a
    segment boundary or inside a skipped sentence are dropped. -> (segments, counts of both)."""
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    enc = tokenizer(doc.sentences, is_split_into_words=True, add_special_tokens=False)
    lengths = [len(ids) for ids in enc["input_ids"]]  # subwords per sentence
    starts = np.cumsum([0] + [len(s) for s in doc.sentences])
    pieces, cur = [], []
    dropped = {"sentences_over_budget": 0, "mentions_dropped": 0}
    for k, n in enumerate(lengths):
        if n + specials > budget:
            dropped["sentences_over_budget"] += 1
            if cur:
                pieces.append(cur)
            pieces.append(None)  # a gap: no segment spans it
            cur = []
            continue
        if cur and sum(lengths[j] for j in cur) + n + specials > budget:
            pieces.append(cur)
            cur = []
        cur.append(k)
    if cur:
        pieces.append(cur)
    out = []
    spans = [(int(starts[p[0]]), int(starts[p[-1] + 1])) for p in pieces if p]
    for lo, hi in spans:
        inside = [Mention(m.start - lo, m.end - lo, m.cluster) for m in doc.mentions if lo <= m.start and m.end < hi]
        words = [w for s in doc.sentences[_sentence_index(starts, lo):_sentence_index(starts, hi)] for w in s]
        out.append(CorefSegment(words, inside, f"{doc.name}:words {lo}-{hi - 1}"))
    dropped["mentions_dropped"] = len(doc.mentions) - sum(len(s.mentions) for s in out)
    return out, dropped


def _sentence_index(starts: np.ndarray, word: int) -> int:
    return int(np.searchsorted(starts, word))


@dataclasses.dataclass(frozen=True)
class GapExample:
    id: str
    words: list[str]
    pronoun: int  # word index
    a: tuple[int, ...]  # word indices of name A
    b: tuple[int, ...]  # word indices of name B
    gold: str | None  # "A", "B", or None (neither or both coreferent)
    spans: tuple[tuple[int, int], ...] = ()  # character span of each word in the text


_WORD = re.compile(r"\w+|[^\w\s]")  # BERT's basic split: runs of word characters, single punctuation


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Words (runs of word characters, each punctuation character alone) with their char spans."""
    ms = list(_WORD.finditer(text))
    return [m.group() for m in ms], [m.span() for m in ms]


def _span_words(spans, start: int, end: int, what: str, where: str) -> tuple[int, ...]:
    idx = tuple(k for k, (s, e) in enumerate(spans) if s < end and e > start)
    if not idx:
        raise ValueError(f"{where}: {what} at characters {start}-{end} covers no word")
    return idx


def read_gap(path, encoding: str = "utf-8") -> list[GapExample]:
    """Read a GAP tsv (header ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B, ...)."""
    path = Path(path)
    out = []
    with open(path, encoding=encoding, newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        need = {"ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref"}
        if not rows.fieldnames or not need <= set(rows.fieldnames):
            raise ValueError(f"{path}: not a GAP tsv: the header lacks {sorted(need - set(rows.fieldnames or []))}")
        for row in rows:
            where = f"{path}:{rows.line_num}"
            text = row["Text"]
            words, spans = split_words(text)
            idx = {}
            for key in ("Pronoun", "A", "B"):
                start = int(row[f"{key}-offset"])
                name = row[key]
                if text[start:start + len(name)] != name:
                    raise ValueError(f"{where}: {key} {name!r} is not at character {start} of the text")
                idx[key] = _span_words(spans, start, start + len(name), key, where)
            a, b = row["A-coref"].upper() == "TRUE", row["B-coref"].upper() == "TRUE"
            gold = "A" if a and not b else "B" if b and not a else None
            out.append(GapExample(row["ID"], words, idx["Pronoun"][0], idx["A"], idx["B"], gold, tuple(spans)))
    return out


def fit_words(tokenizer, word_lists: Sequence[list[str]], max_length: int) -> tuple[list[int], dict]:
    """Indices of the word lists that tokenize into ≤ ``max_length`` subwords (special tokens
    included) with every word giving at least one subword. -> (kept, {"too_long": n,
    "word_without_subwords": n}). Nothing is cut: the caller skips the others and reports."""
    enc = tokenizer(list(word_lists), is_split_into_words=True, truncation=False, padding=False)
    kept, counts = [], {"too_long": 0, "word_without_subwords": 0}
    for i, words in enumerate(word_lists):
        if len(enc["input_ids"][i]) > max_length:
            counts["too_long"] += 1
            continue
        if len({w for w in enc.word_ids(i) if w is not None}) != len(words):
            counts["word_without_subwords"] += 1
            continue
        kept.append(i)
    return kept, counts
