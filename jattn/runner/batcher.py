"""The one batcher: examples -> padded host batches of a few bucket lengths.

Segments and segment pairs (an encoder) and (source, target) pairs (a translation model,
teacher-forced) are input kinds of the same pipeline: read a chunk of examples, tokenize,
sort by length, cut into batches of ``batch_size`` rows, pad each batch to the smallest bucket
length that fits (one compile per bucket), and carry the label channel (per-word labels padded
per word) beside the token arrays. Every padded array in jattn is made by ``pad_rows``; the
trainers' batches (``TrainingBatch``, ``token_batches``; the classifier's in
``jattn.training.finetune``) are built from it and the same bucket rules.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterable

import numpy as np

from jattn.nn.token_classes import CLS, OTHER, PUNCT, SEP
from jattn.runner.protocol import HostBatch, TranslationHostBatch
from jattn.io import validate
from jattn.io.readers import Example, as_example
from jattn.io.tokenize import SequenceTooLongError, tokenize
from jattn.runner.inputs import Tokens, corpus, pad_token
from jattn.nn.config import Seq2SeqConfig


BUCKETS = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)


def buckets(max_length: int) -> tuple[int, ...]:
    """Padded lengths used: ``BUCKETS`` below max_length, and it. Steps of at most 1.5× (at most
    1.33× from 24 on) pad a batch longer than 16 tokens to under 1.5× its longest row while
    keeping the number of compiled shapes small (9 up to 128). Halving the steps of the earlier
    16/32/64/96/128 grid cut warm gradient importance over SST-2 dev (MiniLM, batch 32) from
    10.6 to 8.1 s: with sentences of 10-60 tokens, most rows were padded to 32 or 64; every 8
    tokens was 8.7 s."""
    return (*(s for s in BUCKETS if s < max_length), max_length)


def bucket_length(n: int, max_length: int) -> int:
    """The smallest of ``buckets(max_length)`` that holds ``n`` tokens."""
    return next(s for s in buckets(max_length) if s >= n)


def round_up(n: int, step: int = 8) -> int:
    """A length rounded up to a multiple of ``step`` (the translation batches' few shapes)."""
    return max(step, -(-n // step) * step)


def pad_rows(seqs, rows: int, length: int, fill: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token sequences -> (values (rows, length) filled with ``fill``, mask (rows, length) int32),
    sequence r written at row r from column ``offset``; rows past the sequences stay filler."""
    values = np.full((rows, length), fill, np.int32)  # (b, n)
    mask = np.zeros((rows, length), np.int32)  # (b, n)
    for r, x in enumerate(seqs):
        values[r, offset: offset + len(x)], mask[r, offset: offset + len(x)] = x, 1
    return values, mask


def token_classes(tokenizer, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """(b, n) CLS / SEP / PUNCT ("." and ",", also BPE's "Ġ." "Ġ," and SentencePiece's "▁." "▁,", the
    word-initial forms) / OTHER, -1 on padding; ``tokenizer`` None (a model loaded without one):
    no token's class is known, every real token is OTHER."""
    if tokenizer is None:
        return np.where(attention_mask > 0, OTHER, -1).astype(np.int32)  # (b, n)
    punct = [i for i in tokenizer.convert_tokens_to_ids([".", ",", "Ġ.", "Ġ,", "▁.", "▁,"])
             if i is not None and i != tokenizer.unk_token_id]
    cls = np.full(input_ids.shape, OTHER, np.int32)  # (b, n)
    cls[np.isin(input_ids, punct)] = PUNCT
    cls[input_ids == tokenizer.sep_token_id] = SEP
    cls[input_ids == tokenizer.cls_token_id] = CLS
    cls[attention_mask == 0] = -1
    return cls


def unit_ids(word_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """(b, n) word-level unit of each token: each special token (word id -1) its own unit, the
    subwords of a word one unit, numbered in order; -1 on padding."""
    units = np.full(word_ids.shape, -1, np.int32)  # (b, n)
    for r in range(word_ids.shape[0]):
        u, prev = -1, None
        for t in np.flatnonzero(attention_mask[r]):
            w = word_ids[r, t]
            if w < 0 or w != prev:
                u += 1
            units[r, t], prev = u, (w if w >= 0 else None)
    return units


def tokenize_segments(model, examples: list[tuple[int, Example]], max_length: int, truncate: bool,
                   words: bool, dropped: dict | None = None) -> list[tuple[int, dict]]:
    """Tokenize one chunk; -> [(corpus index, {input_ids, token_type_ids, word_ids, labels} unpadded)].
    With ``dropped`` (a dict of lists), over-long examples are skipped into ``dropped["too_long"]``
    instead of raising, and labelled word lists with a word that gives no subword (its labels
    would land on the wrong unit) into ``dropped["unmappable"]``."""
    rows = [(index, {"input_ids": ex.ids, "token_type_ids": ex.types, "word_ids": None, "labels": None})
            for index, ex in examples if isinstance(ex, Tokens)]
    if rows and words:
        raise ValueError("word-level methods need input pre-split into words, and a tokenized batch has no words. "
                         "Fix: give lists of words, or drop the word-level methods")
    if too_long := [(index, len(r["input_ids"])) for index, r in rows if len(r["input_ids"]) > max_length]:
        if dropped is None:
            raise SequenceTooLongError(f"row {too_long[0][0]} of the tokenized batch has {too_long[0][1]} tokens, more "
                                       f"than max_length={max_length}. Fix: a larger max_length= (up to the model's "
                                       "positions), or skip_too_long=True")
        dropped["too_long"] += [index for index, _ in too_long]
        rows = [(index, r) for index, r in rows if len(r["input_ids"]) <= max_length]
    examples = [item for item in examples if not isinstance(item[1], Tokens)]
    key = lambda item: (item[1].is_pair, item[1].is_words)
    for (pair, split), group in itertools.groupby(sorted(examples, key=key), key=key):
        group = list(group)
        if words and not split:
            raise ValueError(
                f"{group[0][1].source}: word-level methods need input pre-split into "
                "words. Fix: give lists of words (read_conllu; format=conllu or gap), or drop the word-level methods"
            )
        text = lambda ex: (ex.a, ex.b) if pair else ex.a  # noqa: E731
        if dropped is not None and not truncate:
            full = tokenize(model.tokenizer, [text(ex) for _, ex in group], max_length=10**9)
            fits = full.attention_mask.sum(1) <= max_length  # (g,)
            dropped["too_long"] += [i for (i, _), ok in zip(group, fits) if not ok]
            group = [item for item, ok in zip(group, fits) if ok]
            if not group:
                continue
        texts = [text(ex) for _, ex in group]
        try:
            batch = model.tokenize(texts, max_length=max_length, truncate=truncate)
        except SequenceTooLongError:
            for (_, ex), one in zip(group, texts):
                n = len(tokenize(model.tokenizer, [one], max_length=10**9).input_ids[0])
                if n > max_length:
                    raise SequenceTooLongError(
                        f"{ex.source}: {n} tokens, more than max_length={max_length}. Fix: a larger "
                        "max_length= (up to the model's maximum), shorten the segment, pass "
                        "truncate=True to cut over-long segments explicitly, or skip_too_long=True") from None
            raise
        kinds = getattr(model.config, "type_vocab_size", 0)
        if pair and kinds and batch.token_type_ids.max() >= kinds:  # the embedding gather would clamp it
            raise ValueError(f"{group[0][1].source}: a segment pair, whose second segment the tokenizer marks with "
                             f"token type {int(batch.token_type_ids.max())}, but this model has {kinds} token "
                             "type(s). Fix: give single segments (no tab), or a model trained on segment pairs")
        for r, (index, ex) in enumerate(group):
            n = int(batch.attention_mask[r].sum())
            wids = None if batch.word_ids is None else batch.word_ids[r, :n]
            if ex.labels is not None and wids is not None:
                count = len(ex.a) + (len(ex.b) if pair else 0)
                if len(set(wids[wids >= 0].tolist())) != count:
                    if dropped is None:
                        raise ValueError(f"{ex.source}: a word gives no subword token, so its labels cannot be "
                                         "placed. Fix: remove the word, or pass skip_too_long=True to skip "
                                         "such examples with a count")
                    dropped["unmappable"].append(index)
                    continue
            rows.append((index, {"input_ids": batch.input_ids[r, :n], "token_type_ids": batch.token_type_ids[r, :n],
                                 "word_ids": wids, "labels": ex.labels}))
    return rows


def pad_labels(rows: list[tuple[int, dict]], batch_size: int, length: int) -> tuple[dict, dict]:
    """Examples' labels as batch arrays: numbers padded to (b,), (b, n) or (b, n, n) with -1
    (False for booleans) — word k at index k —, lists of strings as per-row lists (None on
    padding rows). -> (labels, label_lists)."""
    labelled = [r["labels"] for _, r in rows]
    if all(x is None for x in labelled):
        return {}, {}
    keys = set(labelled[0] or ())
    if any(set(x or ()) != keys for x in labelled):
        raise ValueError("examples of one run carry different label names "
                         f"({sorted(keys)} vs {sorted(set(next(x or {} for x in labelled if set(x or ()) != keys)))}). "
                         "Fix: give every example the same labels")
    arrays, lists = {}, {}
    for key in sorted(keys):
        first = labelled[0][key]
        if isinstance(first, list):
            lists[key] = [x[key] for x in labelled] + [None] * (batch_size - len(rows))
            continue
        first = np.asarray(first)
        fill = False if first.dtype == bool else -1
        out = np.full((batch_size,) + (length,) * first.ndim, fill, first.dtype)  # (b,) | (b, n) | (b, n, n)
        for r, x in enumerate(labelled):
            value = np.asarray(x[key])
            if value.ndim != first.ndim or max(value.shape, default=0) > length:
                raise ValueError(f"label {key!r}: shape {value.shape} does not fit a batch of length {length} "
                                 f"(the first example's has {first.ndim} axes). Fix: one value per word")
            out[(r,) + tuple(slice(0, d) for d in value.shape)] = value
        arrays[key] = out
    return arrays, lists


def pad_segments(model, rows: list[tuple[int, dict]], batch_size: int, length: int, words: bool) -> HostBatch:
    ids, mask = pad_rows([r["input_ids"] for _, r in rows], batch_size, length, pad_token(model))  # (b, n)
    types, _ = pad_rows([r["token_type_ids"] for _, r in rows], batch_size, length, 0)  # (b, n)
    wids = pad_rows([r["word_ids"] for _, r in rows], batch_size, length, -1)[0] if words else None  # (b, n)
    example = np.full((batch_size,), -1, np.int32)  # (b,)
    example[: len(rows)] = [index for index, _ in rows]
    labels, lists = pad_labels(rows, batch_size, length)
    return HostBatch(ids, mask, types, token_classes(model.tokenizer if model.has_tokenizer else None, ids, mask),
                     unit_ids(wids, mask) if words else None, example, labels, lists)


PUNCT_PIECES = (".", ",", "▁.", "▁,", ".</w>", ",</w>")  # SentencePiece and fairseq BPE spellings


def pair_token_classes(vocab: dict[str, int], config, ids: np.ndarray, mask: np.ndarray, start: bool,
                       bos: int | None = None) -> np.ndarray:
    """(b, n) SEP (``</s>``) / PUNCT ("." ",") / OTHER, and CLS at position 0 of the decoder
    input (``start``) or on a source's leading ``bos`` (BART's ``<s>``: the start token of the
    source, as [CLS] is an encoder's); -1 on padding. ``vocab``: token -> id of the side the ids
    come from."""
    punct = [vocab[p] for p in PUNCT_PIECES if p in vocab]
    cls = np.full(ids.shape, OTHER, np.int32)  # (b, n)
    cls[np.isin(ids, punct)] = PUNCT
    cls[ids == config.eos_token_id] = SEP
    if start:
        cls[:, 0] = CLS
    elif bos is not None:
        cls[:, 0] = np.where(ids[:, 0] == bos, CLS, cls[:, 0])
    cls[mask == 0] = -1
    return cls


def tokenize_pairs(model, examples: list, max_length: int, truncate: bool) -> list[tuple[int, dict]]:
    """[(corpus index, Example or ``Tokens``)] -> [(corpus index, {"source": ids, "target": ids})], unpadded."""
    texts = [(index, ex) for index, ex in examples if not isinstance(ex, Tokens)]
    for _, ex in texts:
        if not ex.is_pair or ex.is_words:
            raise ValueError(
                f"{ex.source}: a translation model is run teacher-forced on (source, target) "
                "pairs of strings. Fix: give (source, target) pairs (format=parallel with a source and a target file)"
            )
    given = [(index, ex, ex.ids, ex.target) for index, ex in examples if isinstance(ex, Tokens)]
    if texts:
        tok, prepare = model.tokenizer, getattr(model, "prepare_texts", list)  # the model's own text normalisation
        src = tok(prepare([ex.a for _, ex in texts]), truncation=truncate, max_length=max_length)["input_ids"]
        tgt = tok(text_target=prepare([ex.b for _, ex in texts]), truncation=truncate,
                  max_length=max_length)["input_ids"]
        given += [(index, ex, s, t) for (index, ex), s, t in zip(texts, src, tgt)]
    rows = []
    for index, ex, s, t in given:
        n = max(len(s), len(t))
        if n > max_length:
            raise SequenceTooLongError(f"{ex.source}: {n} tokens on one side, more than max_length={max_length}. "
                                       "Fix: a larger max_length= (up to the model's positions), shorten the pair, "
                                       "or pass truncate=True")
        rows.append((index, {"source": np.asarray(s, np.int32), "target": np.asarray(t, np.int32),
                             "labels": ex.labels}))
    return rows


def pair_length(row: dict) -> int:
    return max(len(row["source"]), len(row["target"]))


def pad_pairs(model, rows: list[tuple[int, dict]], batch_size: int, sizes: tuple[int, ...]) -> TranslationHostBatch:
    """Pad source and target to the smallest bucket in ``sizes`` that fits both."""
    c = model.config
    s = t = next(n for n in sizes if n >= max((pair_length(r) for _, r in rows), default=1))
    ids, mask = pad_rows([r["source"] for _, r in rows], batch_size, s, c.pad_token_id)  # (b, s)
    target_ids, dec_mask = pad_rows([r["target"] for _, r in rows], batch_size, t, -1)  # (b, t)
    dec, _ = pad_rows([r["target"][:-1] for _, r in rows], batch_size, t, c.pad_token_id, offset=1)  # (b, t)
    dec[:, 0] = c.decoder_start_token_id  # teacher forcing: start token + target[:-1]
    example = np.full((batch_size,), -1, np.int32)  # (b,)
    example[: len(rows)] = [index for index, _ in rows]
    tok = model.tokenizer if model.has_tokenizer else None  # without one, no punctuation is known
    vocab = lambda side: model.family.side_vocab(tok, side) if tok is not None else {}  # noqa: E731
    source_class = pair_token_classes(vocab("source"), c, ids, mask, start=False,
                                      bos=getattr(tok, "bos_token_id", None))  # (b, s)
    target_class = pair_token_classes(vocab("target"), c, dec, dec_mask, start=True)  # (b, t)
    mask[len(rows):, 0] = 1  # filler rows see one token (no empty softmax row); their other masks stay 0

    extra, lists = pad_labels(rows, batch_size, s)
    return TranslationHostBatch(ids, mask, dec, dec_mask, target_ids, source_class, target_class, example, extra, lists)


def _visible(ex: Example) -> bool:
    """True, or ``BadArgument`` naming the example for a segment of invisible characters only
    (NUL bytes, zero-width characters: ``jattn.io.validate.visible``)."""
    for seg in (ex.a, ex.b):
        text = " ".join(seg) if isinstance(seg, list) else seg
        if isinstance(text, str):
            validate.visible(text, ex.source or "an example")
    return True


def batches(model, examples: Iterable, batch_size: int, max_length: int, truncate: bool, words: bool,
             shard: tuple[int, int], chunk: int, skipped: list, dropped: dict | None = None):
    """Yield (host batch, number of real rows): chunks of ``chunk`` examples, length-sorted, cut
    into batches of ``batch_size`` rows from the longest down (a partial batch is the shortest).
    Empty examples (no text) are left out; their corpus indices are appended to ``skipped``;
    with ``dropped``, so are over-long and unmappable ones (``tokenize_segments``). ``examples``
    may be a tokenized batch (``jattn.runner.inputs.corpus``)."""
    translation = isinstance(model.config, Seq2SeqConfig)
    index, count = shard
    mine = ((i, x if isinstance(x, Tokens) else as_example(x, i)) for i, x in enumerate(corpus(model, examples, False))
            if i % count == index)
    mine = (item for item in mine if not (item[1].is_empty and not skipped.append(item[0])) and _visible(item[1]))
    sizes = buckets(max_length)
    while True:
        part = list(itertools.islice(mine, chunk))
        if not part:
            return
        if translation:
            rows = tokenize_pairs(model, part, max_length, truncate)
            rows.sort(key=lambda r: (pair_length(r[1]), r[0]))
        else:
            rows = tokenize_segments(model, part, max_length, truncate, words, dropped)
            rows.sort(key=lambda r: (len(r[1]["input_ids"]), r[0]))
        if not rows:
            continue
        first = len(rows) % batch_size or batch_size  # the partial batch holds the shortest rows,
        for start in (0, *range(first, len(rows), batch_size)):  # so its filler rows are short too
            group = rows[start:start + (first if start == 0 else batch_size)]
            if translation:
                yield pad_pairs(model, group, batch_size, sizes), len(group)
                continue
            length = bucket_length(len(group[-1][1]["input_ids"]), max_length)
            yield pad_segments(model, group, batch_size, length, words), len(group)



def model_batches(model, examples: list, batch_size: int, max_length: int, truncate: bool = False,
                  skipped: list | None = None):
    """An encoder's examples (texts, (A, B) pairs or ``Example``s) as the model's input dicts:
    yields (inputs of (b, n) arrays, corpus indices of the real rows (b_real,)), from the same
    length-sorted, bucket-padded batches the corpus loop runs (filler rows empty). For code that
    runs the model itself on every batch (sweeps that build their own interventions). Examples
    without text are an error, or with a list ``skipped``, left out with their indices appended.
    ``examples`` may be a tokenized batch (``jattn.runner.inputs.corpus``)."""
    examples, left_out = corpus(model, examples, False), []
    for host, real in batches(model, examples, batch_size, max_length, truncate, False, (0, 1), max(len(examples), 1),
                              left_out):
        yield ({"input_ids": host.input_ids, "attention_mask": host.attention_mask,
                "token_type_ids": host.token_type_ids}, host.example[:real])
    if skipped is not None:
        skipped += left_out
    elif left_out:
        raise ValueError(f"{len(left_out)} example(s) have no text (first: #{left_out[0]}). Fix: remove them")

# ---------------------------------------------------------------- translation training batches

@dataclasses.dataclass
class TrainingBatch:
    """A padded teacher-forced batch: source ids/mask (b, s); decoder inputs (start +
    target[:-1]), labels (target), label mask (b, t)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    decoder_input_ids: np.ndarray
    labels: np.ndarray
    label_mask: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.label_mask.sum())


def make_batch(src: list[np.ndarray], tgt: list[np.ndarray], pad: int, start: int, rows: int | None = None,
               length: int | None = None) -> TrainingBatch:
    """Pad pairs to (rows, length) arrays (default: their count and ``round_up`` of the longest
    side); filler rows see one pad token (no empty softmax row) and carry no labels."""
    n = len(src) if rows is None else rows
    L = length or round_up(max(max(len(x), len(y)) for x, y in zip(src, tgt)))
    ids, mask = pad_rows(src, n, L, pad)  # (b, L)
    mask[len(src):, 0] = 1
    labels, label_mask = pad_rows(tgt, n, L, pad)  # (b, L)
    dec, _ = pad_rows([y[:-1] for y in tgt], n, L, pad, offset=1)  # (b, L)
    dec[:, 0] = start
    return TrainingBatch(ids, mask, dec, labels, label_mask)


def token_batches(src: list[np.ndarray], tgt: list[np.ndarray], max_tokens: int, pad: int, start: int,
                  rng: np.random.Generator | None = None) -> list[TrainingBatch]:
    """Batches of at most ``max_tokens`` padded tokens per side, grouping pairs by the rounded
    length L of their longer side (Vaswani et al. 2017, §5.1: batches by approximate length).
    Every batch of a group has shape (max_tokens // L, L), so only one shape per L compiles.
    Shuffled (within groups, then batch order) when ``rng`` is given."""
    groups: dict[int, list[int]] = {}
    for i, (x, y) in enumerate(zip(src, tgt)):
        groups.setdefault(round_up(max(len(x), len(y))), []).append(i)
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
