"""Parallel text for translation: reading line-aligned files, encoding, and token-based batching
into few padded shapes."""

from __future__ import annotations

import dataclasses
import unicodedata
from pathlib import Path

import numpy as np


def normalize(line: str, lowercase: bool) -> str:
    """NFKC, collapsed whitespace, optionally lowercased."""
    line = " ".join(unicodedata.normalize("NFKC", line).split())
    return line.lower() if lowercase else line


def read_parallel(src_path, tgt_path, lowercase: bool = False) -> tuple[list[str], list[str]]:
    """Line-aligned source and target files -> two lists of normalised sentences."""
    src = Path(src_path).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_path).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel corpus")
    return [normalize(s, lowercase) for s in src], [normalize(t, lowercase) for t in tgt]


def encode(tokenizer, texts: list[str], max_tokens: int, target: bool = False) -> list[np.ndarray]:
    """Token ids (with the closing ``</s>``) per sentence, truncated to ``max_tokens``."""
    kw = {"text_target": texts} if target else {"text": texts}
    ids = tokenizer(**kw, truncation=True, max_length=max_tokens)["input_ids"]
    return [np.asarray(x, np.int32) for x in ids]


@dataclasses.dataclass
class TrainingBatch:
    """A padded batch: source ids/mask (b, s); decoder inputs (start + target[:-1]), labels
    (target), label mask (b, t)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    decoder_input_ids: np.ndarray
    labels: np.ndarray
    label_mask: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.label_mask.sum())


def bucket(n: int, step: int = 8) -> int:
    """Round a length up to a multiple of ``step`` (few shapes, few compiles)."""
    return max(step, -(-n // step) * step)


def make_batch(src: list[np.ndarray], tgt: list[np.ndarray], pad: int, start: int, rows: int | None = None,
               length: int | None = None) -> TrainingBatch:
    """Pad pairs to (rows, length) arrays (default: their count and bucketed longest length);
    filler rows are fully masked."""
    n = len(src) if rows is None else rows
    L = length or bucket(max(max(len(x), len(y)) for x, y in zip(src, tgt)))
    ids = np.full((n, L), pad, np.int32)
    mask = np.zeros((n, L), np.int32)
    labels = np.full((n, L), pad, np.int32)
    lmask = np.zeros((n, L), np.int32)
    dec = np.full((n, L), pad, np.int32)
    dec[:, 0] = start
    mask[:, 0] = 1  # filler rows see one pad token, so no softmax row is empty
    for i, (x, y) in enumerate(zip(src, tgt)):
        ids[i, : len(x)], mask[i, : len(x)] = x, 1
        labels[i, : len(y)], lmask[i, : len(y)] = y, 1
        dec[i, 1: len(y)] = y[:-1]
    return TrainingBatch(ids, mask, dec, labels, lmask)


def token_batches(src: list[np.ndarray], tgt: list[np.ndarray], max_tokens: int, pad: int, start: int,
                  rng: np.random.Generator | None = None) -> list[TrainingBatch]:
    """Batches of at most ``max_tokens`` padded tokens per side, grouping pairs by the bucketed
    length L of their longer side (Vaswani et al. 2017, §5.1: batches by approximate length).
    Every batch of a group has shape (max_tokens // L, L), so only one shape per L compiles.
    Shuffled (within groups, then batch order) when ``rng`` is given."""
    groups: dict[int, list[int]] = {}
    for i, (x, y) in enumerate(zip(src, tgt)):
        groups.setdefault(bucket(max(len(x), len(y))), []).append(i)
    batches = []
    for L, items in sorted(groups.items()):
        items = np.asarray(items)
        if rng is not None:
            items = rng.permutation(items)
        rows = max(1, max_tokens // L)
        for k in range(0, len(items), rows):
            chunk = items[k:k + rows]
            batches.append(make_batch([src[j] for j in chunk], [tgt[j] for j in chunk], pad, start, rows, L))
    if rng is not None:
        rng.shuffle(batches)
    return batches
