"""The batches of classifier fine-tuning (``jattn.training.finetune``, which makes them public, and
``jattn gates``): token ids per text without silent truncation, shuffled length-bucketed batches of
example indices, fixed-size padded batches with weights."""

from __future__ import annotations

import numpy as np

from jattn.runner.batcher import bucket_length, pad_rows


def encode(tokenizer, texts: list[str], max_length: int) -> list[np.ndarray]:
    """Token ids per text ([CLS] text [SEP]); a text longer than ``max_length`` is an error (no
    silent truncation) that names how many are too long."""
    ids = [np.asarray(x, np.int32) for x in tokenizer(list(texts), truncation=False)["input_ids"]]
    if too_long := [i for i, x in enumerate(ids) if len(x) > max_length]:
        raise ValueError(f"{len(too_long)} text(s) exceed max_length={max_length} tokens (first: #{too_long[0]}, "
                         f"{len(ids[too_long[0]])} tokens). Fix: raise max_length or shorten them")
    return ids


def length_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Shuffled, length-bucketed batches of example indices: shuffle, sort chunks of 50 batches by
    length, cut into batches, shuffle the batches. Deterministic in (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    chunk = 50 * batch_size
    batches = []
    for s in range(0, len(order), chunk):
        part = order[s: s + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i: i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def pad_batch(ids: list[np.ndarray], labels: np.ndarray, idx: np.ndarray, batch_size: int, pad_id: int,
              max_length: int) -> dict:
    """A fixed-size batch (``jattn.runner.batcher``'s padding and buckets): rows padded to the
    smallest bucket length that fits, missing rows of a last batch with weight 0 (so shapes, and
    compiled programs, come from a small set)."""
    n = bucket_length(max(len(ids[i]) for i in idx), max_length)
    input_ids, mask = pad_rows([ids[i] for i in idx], batch_size, n, pad_id)  # (B, n)
    mask[len(idx):, 0] = 1  # empty rows attend to one (pad) token: finite, and weighted 0 below
    label = np.zeros(batch_size, np.int32)
    label[: len(idx)] = labels[idx]
    weight = (np.arange(batch_size) < len(idx)).astype(np.float32)  # (B,)
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids),
            "labels": label, "weights": weight}
