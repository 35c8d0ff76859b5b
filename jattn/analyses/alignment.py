"""Word alignment from an NMT model's cross-attention, and its evaluation (Kobayashi et al.
2020, §6; following Garg et al. 2019 / Zenkel et al. 2019 / Ding et al. 2019).

* Gold readers: the talp format of the Hansards data (1-based ``i-j`` sure, ``ipj`` possible)
  and the 0-based ``-``/``p`` format of the simalign samples (lines may start ``id<TAB>``).
  Links are (first-file index, second-file index) pairs, 0-based; ``possible`` includes
  ``sure`` (S ⊆ P, as AER assumes).
* Word-level maps: for one target word, the mean over its subword rows; for one source word,
  the sum over its subword columns. Source special tokens (EOS) share one extra column.
* Hard alignment: each target word is linked to the argmax source word; a target word whose
  argmax is the source EOS column gets no link.
* AWO / AWI (Kobayashi et al. 2020, §6.1): with teacher forcing (decoder input = start token
  + the target shifted right), decoder row t *outputs* target token t (AWO) and row t + 1 has
  target token t as its *input* (AWI).
* AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|) (Och & Ney 2003), pooled over the corpus.
* Baselines: ``diagonal_alignment`` (each target word linked to the source word at the same
  relative position) and a statistical aligner's two directions symmetrised by
  ``grow_diag_final_and`` (Koehn et al. 2003; ``jattn.analyses.eflomal_align``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from jattn.io.readers import Links, parse_links

__all__ = ["aer", "decoder_rows", "diagonal_alignment", "hard_alignment", "read_gold", "read_tokenized_pairs",
           "subword_words", "swap", "word_map"]


def read_gold(path, *, one_based: bool) -> list[tuple[Links, Links]]:
    """Read a gold alignment file, one sentence pair per line: talp (``one_based=True``, the
    Hansards ``enfr.gold``) or the 0-based simalign ``-``/``p`` format with ``id<TAB>`` prefixes."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if "\t" in line:
            line = line.split("\t", 1)[1]
        out.append(parse_links(line, one_based=one_based))
    return out


def read_tokenized_pairs(path) -> list[tuple[list[str], list[str]]]:
    """``src ||| tgt`` lines of whitespace-tokenized words (the awesome-align layout)."""
    pairs = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if "|||" not in line:
            raise ValueError(f"{path}:{n}: expected 'source ||| target'")
        a, b = line.split("|||", 1)
        pairs.append((a.split(), b.split()))
    return pairs


def swap(links: Iterable[tuple[int, int]]) -> Links:
    """(i, j) -> (j, i): gold given for the other translation direction."""
    return {(j, i) for i, j in links}


def subword_words(encode_word: Callable[[str], list[int]], words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Tokenize pre-split words one by one: (token ids, word index of each token)."""
    ids, word_of = [], []
    for w, word in enumerate(words):
        pieces = encode_word(word)
        if not pieces:
            raise ValueError(f"word {w} ({word!r}) tokenizes to nothing")
        ids += pieces
        word_of += [w] * len(pieces)
    return ids, word_of


def word_map(att: np.ndarray, tgt_word: np.ndarray, src_word: np.ndarray) -> np.ndarray:
    """Token-level cross-attention (rows, cols) -> word-level (target words, source words + 1).

    tgt_word (rows,): target word of each decoder row, -1 for rows that are no word (start,
    EOS, padding). src_word (cols,): source word of each column, -1 for special tokens (EOS:
    gathered in the last column), -2 for padding (dropped). Rows: mean over the word's
    subwords; columns: sum over the word's subwords.
    """
    att = np.asarray(att, np.float64)
    tgt_word, src_word = np.asarray(tgt_word), np.asarray(src_word)
    if att.shape != (len(tgt_word), len(src_word)):
        raise ValueError(f"attention {att.shape} does not match {len(tgt_word)} rows × {len(src_word)} columns")
    n_t, n_s = tgt_word.max() + 1, src_word.max() + 1
    cols = np.where(src_word == -1, n_s, src_word)  # special tokens -> last column
    keep = src_word >= -1
    col_onehot = (cols[keep, None] == np.arange(n_s + 1)).astype(np.float64)  # (cols, n_s + 1)
    summed = att[:, keep] @ col_onehot  # (rows, n_s + 1)
    row_onehot = (tgt_word[None, :] == np.arange(n_t)[:, None]).astype(np.float64)  # (n_t, rows)
    return row_onehot @ summed / row_onehot.sum(1, keepdims=True)  # (n_t, n_s + 1)


def hard_alignment(wmap: np.ndarray) -> Links:
    """(source word, target word) links: argmax over the columns of each target row of a
    ``word_map``; a row whose argmax is the last (EOS) column gives no link."""
    best = np.asarray(wmap).argmax(1)  # (n_t,)
    eos = wmap.shape[1] - 1
    return {(int(s), t) for t, s in enumerate(best) if s != eos}


def decoder_rows(word_of_target_token: Sequence[int], setting: str, n_rows: int) -> np.ndarray:
    """Target word of each decoder row under teacher forcing (Kobayashi et al. 2020, §6.1).

    word_of_target_token: word index of each target token y_0..y_{T-1} (-1 for EOS/special).
    AWO: row t outputs y_t. AWI: row t + 1 takes y_t as input. Rows with no word get -1.
    """
    if setting not in ("AWO", "AWI"):
        raise ValueError(f"setting must be 'AWO' or 'AWI', got {setting!r}")
    rows = np.full(n_rows, -1)
    shift = 0 if setting == "AWO" else 1
    for t, w in enumerate(word_of_target_token):
        if t + shift < n_rows:
            rows[t + shift] = w
    return rows


def aer(predicted: Sequence[Links], gold: Sequence[tuple[Links, Links]]) -> float:
    """Alignment error rate pooled over the corpus (Och & Ney 2003):
    1 − (|A∩S| + |A∩P|) / (|A| + |S|), sums over sentence pairs. P ⊇ S."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments for {len(gold)} gold ones")
    a_s = a_p = n_a = n_s = 0
    for a, (s, p) in zip(predicted, gold):
        a_s += len(a & s)
        a_p += len(a & (p | s))
        n_a += len(a)
        n_s += len(s)
    if n_a + n_s == 0:
        raise ValueError("AER is undefined with no predicted and no sure links")
    return 1.0 - (a_s + a_p) / (n_a + n_s)


def diagonal_alignment(n_source: int, n_target: int) -> Links:
    """Position-proportional baseline: target word t -> source word ⌊(t + ½)·n_s / n_t⌋, the
    source word whose share of the sentence holds the centre of t's share. (source, target) links."""
    if n_source < 1 or n_target < 1:
        raise ValueError(f"diagonal alignment needs words on both sides, got {n_source} and {n_target}")
    return {(min(n_source - 1, (2 * t + 1) * n_source // (2 * n_target)), t) for t in range(n_target)}


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(forward: Links, reverse: Links) -> Links:
    """Symmetrise two directional alignments (Koehn et al. 2003, "grow-diag-final-and"): start
    from their intersection; repeatedly add a union link adjacent (also diagonally) to a kept
    link when its source or its target word is still unaligned; finally add each remaining
    link of ``forward``, then of ``reverse`` (in sorted order), whose source and target words
    are both unaligned. Links are (source, target) pairs in both arguments."""
    union = set(forward) | set(reverse)
    kept = set(forward) & set(reverse)
    src = {i for i, _ in kept}
    tgt = {j for _, j in kept}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(kept):
            for di, dj in _NEIGHBOURS:
                p = (i + di, j + dj)
                if p in union and p not in kept and (p[0] not in src or p[1] not in tgt):
                    kept.add(p)
                    src.add(p[0])
                    tgt.add(p[1])
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src and j not in tgt:
                kept.add((i, j))
                src.add(i)
                tgt.add(j)
    return kept


def format_links(links: Iterable[tuple[int, int]]) -> str:
    """Links -> one 0-based Pharaoh line ``i-j i-j ...`` (sorted), readable by ``parse_links``."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))
