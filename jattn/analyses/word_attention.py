"""Per-example word-level attention maps for labelled analyses (Clark et al. 2019, §4.2).

``word_attention(model, word_lists)`` runs the model over pre-split sentences in padded
batches and yields, per sentence, the word-level map of every layer and head: units are
[CLS], the words in order, [SEP] (so unit k+1 is word k), attention TO a word summed over its
subword columns and FROM a word averaged over its subword rows
(``jattn.analyses.weights.word_level``, the runner's own aggregation). The per-sentence path of
the Clark stages of ``jattn reproduce`` (probe features, LitBank, syntax); the runner's ``syntax`` and
``coref`` methods compute the same counts from labels carried through ``run_corpus``.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from jattn.analyses.weights import word_level
from jattn.runner.batcher import unit_ids

__all__ = ["word_attention"]

PAD_MULTIPLE = 16  # padded lengths are multiples of this: one compile per bucket


@dataclasses.dataclass
class WordMaps:
    index: int  # position in the input list
    maps: np.ndarray  # (L, H, u, u) float32, u = words + 2: [CLS], words..., [SEP]
    input_ids: np.ndarray  # (n,) the sentence's subword ids, special tokens included
    word_ids: np.ndarray  # (n,) word of each subword, -1 on [CLS]/[SEP]


_word_level = jax.jit(word_level)


def word_attention(model, word_lists: Sequence[list[str]], *, max_length: int = 128, batch_size: int = 16,
                   progress: str | None = None) -> Iterator[WordMaps]:
    """Yield ``WordMaps`` for every word list, in order of length (``.index`` says which).
    Every list must fit ``max_length`` (filter with ``jattn.io.labels.fit_words`` first)."""
    order = sorted(range(len(word_lists)), key=lambda i: len(word_lists[i]))
    bar = tqdm(total=len(order), desc=progress, disable=progress is None, unit="sent")
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = model.tokenize([list(word_lists[i]) for i in idx], max_length=max_length)
        n = batch.input_ids.shape[1]
        pad = min(-(-n // PAD_MULTIPLE) * PAD_MULTIPLE, max_length)
        if pad != n:
            batch = model.tokenize([list(word_lists[i]) for i in idx], max_length=max_length, pad_to=pad)
        units = unit_ids(batch.word_ids, batch.attention_mask)  # (b, n)
        alpha = model.forward(batch, internals=("weights",)).attentions  # (L, b, H, n, n)
        maps = np.asarray(_word_level(alpha, units))  # (L, b, H, n, n) units in the first u rows/cols
        for r, i in enumerate(idx):
            u = len(word_lists[i]) + 2
            if units[r].max() + 1 != u:
                raise ValueError(f"sentence {i}: {units[r].max() + 1} word-level units for {len(word_lists[i])} "
                                 "words + [CLS]/[SEP]: a word gave no subword. Fix: filter with "
                                 "jattn.io.labels.fit_words")
            length = int(batch.attention_mask[r].sum())
            yield WordMaps(i, maps[:, r, :, :u, :u], batch.input_ids[r, :length], batch.word_ids[r, :length])
        bar.update(len(idx))
    bar.close()
