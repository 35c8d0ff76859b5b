"""The corpus runner's translation-model path: (source, target) pairs through the teacher-forced
encoder–decoder forward, every method reduced per attention type (``jattn.run.run_corpus``
dispatches here for Marian / FSMT models; batching, sharding, processes and the combine are
the runner's).

A pair is tokenized as in training: source ids ending in ``</s>``, target ids (``text_target``)
ending in ``</s>``; the decoder reads the start token + target[:-1] and each of its positions
predicts the next target id (``target_ids``). Source and target are padded to one bucket length
(the smallest that fits both), so each bucket compiles once, as for an encoder. Filler rows (``example == -1``) see one source token so no softmax
row is empty; every mask of theirs is zero, so they contribute nothing.

Per attention type the methods see (``jattn.methods.base``): ``encoder`` — source queries ×
source keys; ``decoder`` — target queries × target keys, causal; ``cross`` — target queries ×
source keys.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jattn.data.tokenize import SequenceTooLongError
from jattn.methods.base import CLS, OTHER, PUNCT, SEP, StepContext, TranslationHostBatch
from jattn.nn import seq2seq, state

INPUT_KEYS = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
PUNCT_PIECES = (".", ",", "▁.", "▁,", ".</w>", ",</w>")  # SentencePiece and fairseq BPE spellings


def token_classes(tokenizer, config, ids: np.ndarray, mask: np.ndarray, start: bool) -> np.ndarray:
    """(b, n) SEP (``</s>``) / PUNCT ("." ",") / OTHER, and CLS at position 0 of the decoder
    input (``start``); -1 on padding."""
    vocab = tokenizer.get_vocab() if not start or not hasattr(tokenizer, "decoder") else tokenizer.decoder
    if isinstance(vocab, dict) and vocab and isinstance(next(iter(vocab)), int):  # FSMT: id -> token
        vocab = {t: i for i, t in vocab.items()}
    punct = [vocab[p] for p in PUNCT_PIECES if p in vocab]
    cls = np.full(ids.shape, OTHER, np.int32)  # (b, n)
    cls[np.isin(ids, punct)] = PUNCT
    cls[ids == config.eos_token_id] = SEP
    if start:
        cls[:, 0] = CLS
    cls[mask == 0] = -1
    return cls


def tokenize_pairs(model, examples: list, max_length: int, truncate: bool) -> list[tuple[int, dict]]:
    """[(corpus index, Example)] -> [(corpus index, {"source": ids, "target": ids})], unpadded."""
    for _, ex in examples:
        if not ex.is_pair or ex.is_words:
            raise ValueError(f"{ex.source}: a translation model is run teacher-forced on (source, target) "
                             "pairs of strings. Fix: give pairs, e.g. --format parallel --input SRC_FILE TGT_FILE")
    tok = model.tokenizer
    src = tok([ex.a for _, ex in examples], truncation=truncate, max_length=max_length)["input_ids"]
    tgt = tok(text_target=[ex.b for _, ex in examples], truncation=truncate, max_length=max_length)["input_ids"]
    rows = []
    for (index, ex), s, t in zip(examples, src, tgt):
        n = max(len(s), len(t))
        if n > max_length:
            raise SequenceTooLongError(f"{ex.source}: {n} tokens on one side, more than --max-length {max_length}. "
                                       "Fix: raise --max-length (up to the model's positions), shorten the pair, "
                                       "or pass --truncate")
        rows.append((index, {"source": np.asarray(s, np.int32), "target": np.asarray(t, np.int32),
                             "labels": ex.labels}))
    return rows


def row_length(row: dict) -> int:
    return max(len(row["source"]), len(row["target"]))


def pad_batch(model, rows: list[tuple[int, dict]], batch_size: int, sizes: tuple[int, ...]) -> TranslationHostBatch:
    """Pad source and target to the smallest bucket in ``sizes`` that fits both."""
    c = model.config
    s = t = next(n for n in sizes if n >= max((row_length(r) for _, r in rows), default=1))
    ids = np.full((batch_size, s), c.pad_token_id, np.int32)  # (b, s)
    mask = np.zeros((batch_size, s), np.int32)  # (b, s)
    dec = np.full((batch_size, t), c.pad_token_id, np.int32)  # (b, t)
    dec_mask = np.zeros((batch_size, t), np.int32)  # (b, t)
    target_ids = np.full((batch_size, t), -1, np.int32)  # (b, t)
    example = np.full((batch_size,), -1, np.int32)  # (b,)
    dec[:, 0] = c.decoder_start_token_id
    for r, (index, row) in enumerate(rows):
        x, y = row["source"], row["target"]
        ids[r, :len(x)], mask[r, :len(x)], example[r] = x, 1, index
        dec[r, 1:len(y)], dec_mask[r, :len(y)], target_ids[r, :len(y)] = y[:-1], 1, y
    source_class = token_classes(model.tokenizer, c, ids, mask, start=False)  # (b, s)
    target_class = token_classes(model.tokenizer, c, dec, dec_mask, start=True)  # (b, t)
    mask[len(rows):, 0] = 1  # filler rows see one token (no empty softmax row); their other masks stay 0
    from jattn.run import pad_labels  # the encoder path's padding: words ≤ pieces on either side

    extra, lists = pad_labels(rows, batch_size, s)
    return TranslationHostBatch(ids, mask, dec, dec_mask, target_ids, source_class, target_class, example, extra, lists)


def attention_fields(batch: dict, kind: str) -> dict:
    """The attention-type fields of ``jattn.methods.base`` for ``kind``, from a translation batch."""
    real_src = (batch["attention_mask"] > 0) & (batch["example"] >= 0)[:, None]  # (b, s)
    real_tgt = batch["decoder_attention_mask"] > 0  # (b, t)
    query, key, q_class, k_class = {
        "encoder": (real_src, real_src, batch["source_class"], batch["source_class"]),
        "decoder": (real_tgt, real_tgt, batch["target_class"], batch["target_class"]),
        "cross": (real_tgt, real_src, batch["target_class"], batch["source_class"]),
    }[kind]
    allowed = query[:, :, None] & key[:, None, :]  # (b, q, k)
    if kind == "decoder":
        t = query.shape[1]
        allowed = allowed & jnp.tril(jnp.ones((t, t), bool))[None]  # (b, t, t)
    fields = {"query_mask": query.astype(jnp.int32), "key_mask": key.astype(jnp.int32), "allowed": allowed,
              "query_class": q_class, "key_class": k_class}
    if kind != "cross":  # the square types also answer to the encoder's field names
        fields.update(attention_mask=fields["query_mask"], token_class=q_class)
    return fields


def kinds_of(method) -> tuple[str, ...]:
    return tuple(getattr(method, "kinds", seq2seq.KINDS))


@functools.lru_cache(maxsize=16)
def make_step(config, methods: tuple, mesh):
    """The jitted step: teacher-forced forward + every method's ``reduce`` per attention type.
    -> (step, data sharding, replicated sharding); statistics keyed ``<kind>-<method name>``."""

    def step(params, batch, features):
        inputs = {k: batch[k] for k in INPUT_KEYS}

        def forward(interventions=None, **kwargs):
            overrides = {k: kwargs.pop(k) for k in INPUT_KEYS if k in kwargs}
            return seq2seq.forward(params, config, dict(inputs, **overrides), interventions, **kwargs)

        outputs, internals = forward(internals="all")
        module = seq2seq.module(params, config)
        stats = {}
        for m in methods:
            for kind in kinds_of(m):
                ctx = StepContext(params, config, dict(batch, **attention_fields(batch, kind)), features[m.name],
                                  outputs, internals[kind], forward, module.view(kind), kind)
                stats[f"{kind}-{m.name}"] = m.reduce(ctx)
        real = batch["example"] >= 0  # (b,)
        stats["_meta"] = {"segments": real.sum(), "tokens": (batch["attention_mask"] * real[:, None]).sum()
                          + batch["decoder_attention_mask"].sum()}
        return stats

    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    placed = jax.tree.map(lambda s: NamedSharding(mesh, s), state.partition_specs(state.abstract(config), mesh))
    return jax.jit(step, in_shardings=(placed, data, data), out_shardings=replicated), data, replicated


def finalize(methods, totals: dict, meta: dict) -> dict:
    """Each method's totals finalized per attention type; statistics named ``<kind>_<name>``."""
    out = {}
    for m in methods:
        for kind in kinds_of(m):
            for name, stat in m.finalize(totals[f"{kind}-{m.name}"], dict(meta, kind=kind)).items():
                stat.description = f"{kind} attention: {stat.description}"
                out[f"{kind}_{name}"] = stat
    return out


def empty_batch(model, rows: int) -> TranslationHostBatch:
    """A batch of filler rows only (the shapes of a process whose shard is empty)."""
    return pad_batch(model, [], rows, (16,))
