"""Examples or a tokenized batch: the one place every analysis and sweep decides which it was given.

A public analysis or sweep takes a model's examples (texts, (A, B) pairs, (text, label) pairs, a
translation model's (source, target) pairs) or the same examples tokenized: a ``TokenBatch`` or a
dict of (b, n) arrays as ``model.batch`` returns it, with ``labels`` where the examples would carry
them (a classifier's class per row (b,); a translation model's target ids (b, t), as Hugging Face
names them). ``corpus`` turns a tokenized batch into one ``Tokens`` per row, its real tokens only,
which the batcher pads as it pads tokenized texts: texts and the same texts tokenized give the same
batches, hence the same numbers. A model loaded without a tokenizer takes token ids only.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from jattn.io.tokenize import TokenBatch
from jattn.nn.config import Seq2SeqConfig


@dataclasses.dataclass(frozen=True)
class Tokens:
    """One row of a tokenized batch: its real tokens, as the batcher takes an ``Example``."""

    ids: np.ndarray  # (n,) int32 the row's real tokens
    types: np.ndarray  # (n,) int32 their token types (segment A 0, B 1)
    target: np.ndarray | None = None  # (t,) int32 a translation model's target ids (what the decoder predicts)
    source: str = ""  # "row i of the tokenized batch", for messages
    a = b = labels = None  # what the batcher reads of an ``Example``: no text, no label channel
    is_pair = is_words = False

    @property
    def is_empty(self) -> bool:
        return not len(self.ids)


def is_batch(examples) -> bool:
    """Whether ``examples`` is a tokenized batch (a dict of arrays or a ``TokenBatch``), not examples."""
    return isinstance(examples, (Mapping, TokenBatch))


def _contiguous(mask: np.ndarray, name: str) -> None:
    """Each row's real tokens (mask 1) in one run, left- or right-padded; else a clear error."""
    starts = np.diff(np.pad(mask, ((0, 0), (1, 0))), axis=1) == 1  # (b, n) a run of 1s starts here
    if (bad := np.flatnonzero(starts.sum(1) > 1)).size:
        raise ValueError(f"{name} row {int(bad[0])} has padding between real tokens: an analysis re-pads each "
                         "row, so its real tokens must be one run. Fix: pad each row on one side only")


def corpus(model, examples, labelled: bool = True):
    """``examples`` as given, or a tokenized batch as a list of ``Tokens`` (one per row), paired
    with its row's label, ``(Tokens, label)``, where the batch holds a classifier's ``labels`` (b,)
    (refused unless ``labelled``: what scores against them takes them). The batch passes
    ``model.batch`` (its keys, shapes, vocabulary and masks checked there)."""
    if not is_batch(examples):
        return examples
    given = examples.inputs() if isinstance(examples, TokenBatch) else dict(examples)
    if "labels" in given and not labelled and not isinstance(model.config, Seq2SeqConfig):
        raise ValueError("this analysis reads no labels, and the tokenized batch holds labels. Fix: leave them "
                         "out; a method's labels come with its examples (jattn.io.readers.Example)")
    inputs = {k: np.asarray(v) for k, v in model.batch(given).items()}  # checked; labels left out
    if "inputs_embeds" in inputs:
        raise ValueError("a corpus is read as token ids; this batch gives inputs_embeds. Fix: pass input_ids "
                         "(model.forward takes inputs_embeds)")
    mask, b = inputs["attention_mask"], len(inputs["input_ids"])
    _contiguous(mask, "attention_mask")
    labels = given.get("labels")
    translation = isinstance(model.config, Seq2SeqConfig)
    if translation:
        dec, dec_mask = inputs["decoder_input_ids"], inputs["decoder_attention_mask"]  # (b, t)
        _contiguous(dec_mask, "decoder_attention_mask")
        if labels is not None:  # Hugging Face's target ids (b, t); the decoder reads start + target[:-1]
            labels = np.asarray(labels)
            if labels.shape != dec.shape or not np.issubdtype(labels.dtype, np.integer):
                raise ValueError(f"labels of a translation batch are the target ids, an integer array of "
                                 f"decoder_input_ids' shape {dec.shape}; got {labels.dtype} {labels.shape}")
        eos = np.int32(model.config.eos_token_id)  # without labels: the decoder input shifted left, closed by eos
        targets = [labels[r][dec_mask[r] > 0] if labels is not None else np.append(dec[r][dec_mask[r] > 0][1:], eos)
                   for r in range(b)]
        return [Tokens(inputs["input_ids"][r][mask[r] > 0], np.zeros(int(mask[r].sum()), np.int32),
                       targets[r].astype(np.int32), f"row {r} of the tokenized batch") for r in range(b)]
    rows = [Tokens(inputs["input_ids"][r][mask[r] > 0], inputs["token_type_ids"][r][mask[r] > 0],
                   source=f"row {r} of the tokenized batch") for r in range(b)]
    if labels is None:
        return rows
    labels = np.asarray(labels)
    if labels.shape != (b,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels of a tokenized batch are one integer class per row, shape ({b},); got "
                         f"{labels.dtype} {labels.shape}. Fix: labels=np.array([class of each row])")
    return [(row, int(y)) for row, y in zip(rows, labels)]


def default_length(model, max_length: int | None) -> int:
    """``max_length`` as given, or by default 128, or the model's positions where it has fewer."""
    return min(128, model.config.max_length) if max_length is None else max_length


def pad_token(model) -> int:
    """The id padded positions hold: the tokenizer's (``jattn.io.tokenize.pad_id``), or for a model
    loaded without one the config's ``pad_token_id`` (padding is masked out: any valid id serves)."""
    from jattn.io.tokenize import pad_id

    return pad_id(model.tokenizer) if model.has_tokenizer else model.config.pad_token_id
