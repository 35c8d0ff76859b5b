"""Tokenization into padded numpy batches, with the word -> subword map word-level methods need.

Input forms: a list of strings and (A, B) string pairs (mixed freely), or of pre-split words
(list[str]) and pairs of them. For pre-split words, ``word_ids[b, t]`` is the index of the word token t comes
from (words of segment B continue the numbering after A's), -1 for special tokens and padding.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from jattn.io import validate


class SequenceTooLongError(ValueError):
    """An example longer than ``max_length`` when truncation was not asked for."""


@dataclasses.dataclass
class TokenBatch:
    input_ids: np.ndarray  # (b, n) int32
    attention_mask: np.ndarray  # (b, n) int32, 1 on real tokens
    token_type_ids: np.ndarray  # (b, n) int32, 0 for segment A, 1 for B
    word_ids: np.ndarray | None = None  # (b, n) int32, -1 on special tokens and padding
    offsets: np.ndarray | None = None  # (b, n, 2) int32 character span, -1 on special tokens and padding

    def inputs(self) -> dict[str, np.ndarray]:
        """The arrays the model's forward takes."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": self.token_type_ids}

    @property
    def lengths(self) -> np.ndarray:  # (b,)
        return self.attention_mask.sum(1)


def _split(examples) -> tuple[list, list, bool]:
    """-> (segments A, segments B (None for a single segment), whether the input is pre-split)."""
    if isinstance(examples, (str, tuple)) or not isinstance(examples, Sequence) or not len(examples):
        raise TypeError("tokenize takes a non-empty list of strings, of (A, B) pairs, or of "
                        f"word lists; got {type(examples).__name__}")
    a, b = [], []
    for i, ex in enumerate(examples):
        if isinstance(ex, tuple):
            if len(ex) != 2:
                raise TypeError(f"example {i}: a tuple is an (A, B) pair, got {len(ex)} items. Fix: give "
                                "a string, an (A, B) pair, or a word list per example")
            a.append(ex[0])
            b.append(ex[1])
        else:
            a.append(ex)
            b.append(None)
    split = isinstance(a[0], list)
    for i, seg in enumerate(a + b):
        if seg is None and i >= len(a):
            continue
        if split != isinstance(seg, list) or (not split and not isinstance(seg, str)):
            raise TypeError(f"example {i % len(a)}: mixed input forms; give strings (or (A, B) pairs of "
                            f"strings) or word lists (or pairs of them), not both; got {type(seg).__name__}")
        if split and not all(isinstance(w, str) for w in seg):
            raise TypeError(f"example {i % len(a)}: a word list holds strings only")
        validate.visible(" ".join(seg) if split else seg, f"example {i % len(a)}")
    return a, b, split


def _encode(tokenizer, a: list, b: list, split: bool, **kwargs) -> list[dict]:
    """Tokenize singles and pairs (each group in one call); rows in the input order."""
    rows: list = [None] * len(a)
    for pair in (False, True):
        index = [i for i in range(len(a)) if (b[i] is not None) == pair]
        if not index:
            continue
        fast = getattr(tokenizer, "is_fast", False)
        enc = tokenizer([a[i] for i in index], [b[i] for i in index] if pair else None,
                        is_split_into_words=split, padding=False, return_token_type_ids=True,
                        return_offsets_mapping=fast, **kwargs)
        for r, i in enumerate(index):
            rows[i] = {"input_ids": enc["input_ids"][r], "token_type_ids": enc["token_type_ids"][r],
                       "offsets": enc["offset_mapping"][r] if fast else None,
                       "word_ids": enc.word_ids(r) if split else None,
                       "sequence_ids": enc.sequence_ids(r) if split else None}
    return rows



def pad_id(tokenizer) -> int:
    """The id padded positions hold: the tokenizer's padding token, or for a causal LM's tokenizer
    without one (GPT-2's) its end-of-text token. Padded positions are masked out of every
    computation, so any valid id serves; it must only be one."""
    for pad in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if pad is not None:
            return pad
    raise ValueError("the tokenizer has neither a padding nor an end-of-text token, so batches cannot be padded. "
                     "Fix: set tokenizer.pad_token (e.g. to an unused token) before loading, or pass token ids")

def tokenize(tokenizer, examples, *, max_length: int = 128, truncate: bool = False,
             pad_to: int | None = None) -> TokenBatch:
    """Tokenize ``examples`` into one padded batch (padded to the longest, or to ``pad_to``).
    Single segments and (A, B) pairs may be mixed in one batch.

    An example longer than ``max_length`` raises ``SequenceTooLongError`` naming it and its
    length, unless ``truncate=True`` (longest segment first, as Hugging Face does); a
    ``max_length`` too short for the special tokens is a ``ValueError`` either way.
    """
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    a, b, split = _split(examples)
    rows = _encode(tokenizer, a, b, split, truncation=False)
    too_long = [(i, len(r["input_ids"])) for i, r in enumerate(rows) if len(r["input_ids"]) > max_length]
    if too_long and not truncate:
        i, n = too_long[0]
        raise SequenceTooLongError(
            f"example {i} has {n} tokens, more than max_length={max_length} "
            f"({len(too_long)} example(s) too long). Fix: raise max_length (up to the model's "
            "maximum), split the text, or pass truncate=True to cut it.")
    if too_long:
        pairs = any(s is not None for s in b)
        specials = tokenizer.num_special_tokens_to_add(pair=pairs)
        if max_length <= specials:
            raise ValueError(f"max_length={max_length} leaves no room for text: {'a pair' if pairs else 'a segment'} "
                             f"takes {specials} special tokens. Fix: max_length ≥ {specials + 1}")
        rows = _encode(tokenizer, a, b, split, truncation="longest_first", max_length=max_length)
        longest = max(len(r["input_ids"]) for r in rows)
        if longest > max_length:  # HF cuts only the longest segment; a short one can stay over
            i = next(i for i, r in enumerate(rows) if len(r["input_ids"]) == longest)
            raise SequenceTooLongError(f"example {i} still has {longest} tokens after truncation to "
                                       f"max_length={max_length}. Fix: raise max_length")
    n = max(len(r["input_ids"]) for r in rows)
    if pad_to is not None:
        if pad_to < n:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest example ({n} tokens)")
        n = pad_to
    size = len(a)
    out = {k: np.zeros((size, n), np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    out["input_ids"][:] = pad_id(tokenizer)
    word_ids = np.full((size, n), -1, np.int32) if split else None
    offsets = np.full((size, n, 2), -1, np.int32) if rows[0]["offsets"] is not None else None
    for i, row in enumerate(rows):
        ids = row["input_ids"]
        out["input_ids"][i, : len(ids)] = ids
        out["attention_mask"][i, : len(ids)] = 1
        out["token_type_ids"][i, : len(ids)] = row["token_type_ids"]
        if offsets is not None:
            span = np.asarray(row["offsets"], np.int32).reshape(-1, 2)  # (n_i, 2)
            special = (span[:, 0] == span[:, 1]) & (span[:, 0] == 0)  # HF marks specials (0, 0)
            offsets[i, : len(ids)] = np.where(special[:, None], -1, span)
        if split:
            offset = len(a[i])  # words of B are numbered after A's
            for t, (w, s) in enumerate(zip(row["word_ids"], row["sequence_ids"])):
                if w is not None:
                    word_ids[i, t] = w + (offset if s == 1 else 0)
    return TokenBatch(word_ids=word_ids, offsets=offsets, **out)
