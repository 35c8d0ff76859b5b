"""Tokenization into padded numpy batches, with the word -> subword map word-level methods need.

Input forms: a list of strings, of (A, B) string pairs, or of pre-split words (list[str]) and
pairs of them. For pre-split words, ``word_ids[b, t]`` is the index of the word token t comes
from (words of segment B continue the numbering after A's), -1 for special tokens and padding.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


class SequenceTooLongError(ValueError):
    """An example longer than ``max_length`` when truncation was not asked for."""


@dataclasses.dataclass
class Batch:
    input_ids: np.ndarray  # (b, n) int32
    attention_mask: np.ndarray  # (b, n) int32, 1 on real tokens
    token_type_ids: np.ndarray  # (b, n) int32, 0 for segment A, 1 for B
    word_ids: np.ndarray | None = None  # (b, n) int32, -1 on special tokens and padding

    def inputs(self) -> dict[str, np.ndarray]:
        """The arrays the model's forward takes."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": self.token_type_ids}

    @property
    def lengths(self) -> np.ndarray:  # (b,)
        return self.attention_mask.sum(1)


def _split(examples) -> tuple[list, list | None, bool]:
    """-> (segments A, segments B or None, whether the input is pre-split into words)."""
    if isinstance(examples, (str, tuple)) or not isinstance(examples, Sequence) or not len(examples):
        raise TypeError("tokenize takes a non-empty list of strings, of (A, B) pairs, or of "
                        f"word lists; got {type(examples).__name__}")
    first = examples[0]
    is_pair = isinstance(first, tuple)
    a = [ex[0] for ex in examples] if is_pair else list(examples)
    b = [ex[1] for ex in examples] if is_pair else None
    split = isinstance(a[0], list)
    for i, seg in enumerate(a + (b or [])):
        if split != isinstance(seg, list) or (not split and not isinstance(seg, str)):
            raise TypeError(f"example {i % len(a)}: mixed input forms; give all strings, all pairs, "
                            "or all word lists")
    return a, b, split


def tokenize(tokenizer, examples, *, max_length: int = 128, truncate: bool = False,
             pad_to: int | None = None) -> Batch:
    """Tokenize ``examples`` into one padded batch (padded to the longest, or to ``pad_to``).

    An example longer than ``max_length`` raises ``SequenceTooLongError`` naming it and its
    length, unless ``truncate=True`` (longest segment first, as Hugging Face does).
    """
    a, b, split = _split(examples)
    enc = tokenizer(a, b, is_split_into_words=split, truncation=False, padding=False,
                    return_token_type_ids=True)
    lengths = [len(ids) for ids in enc["input_ids"]]
    too_long = [(i, n) for i, n in enumerate(lengths) if n > max_length]
    if too_long and not truncate:
        i, n = too_long[0]
        raise SequenceTooLongError(
            f"example {i} has {n} tokens, more than max_length={max_length} "
            f"({len(too_long)} example(s) too long). Fix: raise max_length (up to the model's "
            "maximum), split the text, or pass truncate=True to cut it.")
    if too_long:
        enc = tokenizer(a, b, is_split_into_words=split, truncation="longest_first",
                        max_length=max_length, padding=False, return_token_type_ids=True)
    n = max(len(ids) for ids in enc["input_ids"])
    if pad_to is not None:
        if pad_to < n:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest example ({n} tokens)")
        n = pad_to
    size = len(a)
    out = {k: np.zeros((size, n), np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    out["input_ids"][:] = tokenizer.pad_token_id
    word_ids = np.full((size, n), -1, np.int32) if split else None
    for i in range(size):
        ids = enc["input_ids"][i]
        out["input_ids"][i, : len(ids)] = ids
        out["attention_mask"][i, : len(ids)] = 1
        out["token_type_ids"][i, : len(ids)] = enc["token_type_ids"][i]
        if split:
            offset = len(a[i])  # words of B are numbered after A's
            for t, (w, s) in enumerate(zip(enc.word_ids(i), enc.sequence_ids(i))):
                if w is not None:
                    word_ids[i, t] = w + (offset if s == 1 else 0)
    return Batch(word_ids=word_ids, **out)
