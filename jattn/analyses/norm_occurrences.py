"""Occurrence-level statistics against frequency rank, as the authors compute them
(Kobayashi et al. 2020, §4.3 "‖f(x)‖ vs frequency"; Kobayashi et al. 2021, §5 and Table 2
"mixing ratio vs frequency").

The authors' released code gives **each token occurrence its own value** — ‖f(x)‖ averaged
over heads and layers (2020), or the mixing ratio averaged over layers (2021, unmasked input)
— and its id's frequency rank, over every non-padding token of the corpus ([CLS] and [SEP]
included; ids missing from the rank file get the bottom rank, the file's largest rank + 1),
and reports ``scipy.stats.spearmanr`` of the two vectors. A streaming reducer cannot do this
(ranks are global), so ``occurrence_pass`` runs ``jattn.norms`` batch by batch and appends
(id, value) per occurrence to disk (``OccurrenceLog``: 4 bytes per field and occurrence, about
0.4 MB per field for 100k tokens); ``spearman_authors`` then ranks them exactly.

Not the same statistic as the runner's ``*_spearman_rank_occurrences`` (``norm_stats``), which
gives each occurrence its *type's mean* value: there the value is a function of the id, and the
two can differ arbitrarily (``tests/test_norm_stats.py`` builds a case with ρ = −1 vs 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from tqdm import tqdm

from jattn.analyses.norm_stats import MIXING

__all__ = ["bottom_ranked"]


def bottom_ranked(ranks: np.ndarray) -> np.ndarray:
    """Rank per vocabulary id with the authors' rule for ids absent from the rank file (NaN in
    ``read_ranks``'s output): the bottom rank, one past the largest rank in the file. (V,) -> (V,)"""
    ranks = np.asarray(ranks, np.float64)
    if np.isnan(ranks).all():
        raise ValueError("the rank table ranks no id. Fix: pass a rank file of 'rank count id' lines for "
                         "this model's vocabulary")
    return np.where(np.isnan(ranks), np.nanmax(ranks) + 1, ranks)


def spearman_authors(values: np.ndarray, ids: np.ndarray, ranks: np.ndarray) -> float:
    """Spearman ρ between each occurrence's own value and its id's frequency rank (unranked ids
    at the bottom rank), ties averaged: the statistic of Kobayashi et al.'s code.
    values (N,), ids (N,) int, ranks (V,) from ``read_ranks``."""
    from scipy.stats import spearmanr

    values, ids = np.asarray(values, np.float64), np.asarray(ids)
    if values.shape != ids.shape or values.ndim != 1:
        raise ValueError(f"values {values.shape} and ids {ids.shape} must be matching 1-D arrays")
    if len(values) < 3:
        return float("nan")
    return float(spearmanr(values, bottom_ranked(ranks)[ids]).statistic)


class OccurrenceLog:
    """Per-occurrence fields appended to raw files in ``folder`` (one ``<field>.bin`` each:
    ``ids`` int32, every other field float32), so a corpus never has to sit in memory."""

    def __init__(self, folder, fields: Iterable[str]):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fields = ("ids", *fields)
        self.count = 0
        for f in self.fields:
            (self.folder / f"{f}.bin").write_bytes(b"")

    def dtype(self, field: str):
        return np.int32 if field == "ids" else np.float32

    def append(self, **columns: np.ndarray) -> None:
        if set(columns) != set(self.fields):
            raise ValueError(f"append needs exactly the fields {self.fields}, got {sorted(columns)}")
        n = {len(v) for v in columns.values()}
        if len(n) != 1:
            raise ValueError(f"fields of unequal length: { {k: len(v) for k, v in columns.items()} }")
        for f, v in columns.items():
            with open(self.folder / f"{f}.bin", "ab") as fh:
                np.asarray(v, self.dtype(f)).tofile(fh)
        self.count += n.pop()

    def read(self) -> dict[str, np.ndarray]:
        """Every field as a read-only memory map (N,)."""
        out = {f: np.memmap(self.folder / f"{f}.bin", self.dtype(f), "r") if self.count else
               np.zeros(0, self.dtype(f)) for f in self.fields}
        (self.folder / "fields.json").write_text(json.dumps({f: np.dtype(self.dtype(f)).name for f in self.fields}))
        return out


def occurrence_values(norms: dict, mask: np.ndarray, residual: bool) -> dict[str, np.ndarray]:
    """One batch of an encoder's ``jattn.norms(...)["encoder"]`` -> per-token values (b, n):
    ``fnorm`` ‖f(x_j)‖ averaged over heads and layers and ``alpha`` the α x_j receives averaged
    over layers, heads and real query rows (2020); with ``residual``, ``mixing_<k>`` each
    layer-mean mixing ratio (2021)."""
    real = (np.asarray(mask) > 0).astype(np.float64)  # (b, n)
    if residual:
        return {f"mixing_{k}": np.asarray(norms[f"mixing_{k}"], np.float64).mean(0) for k in MIXING}  # (b, n) each
    w = np.asarray(norms["weights"], np.float64)  # (L, b, H, q, k), padded rows/cols 0
    received = w.sum(3).mean((0, 2)) / np.maximum(real.sum(-1, keepdims=True), 1.0)  # (b, n)
    return {"fnorm": np.asarray(norms["f_norm"], np.float64).mean((0, 2)),  # (b, n)
            "alpha": received}


def occurrence_pass(model, examples: Iterable, folder, *, residual: bool, batch_size: int = 16,
                    max_length: int = 128, truncate: bool = True, progress: bool = True,
                    on_batch: Callable[[dict, dict], None] | None = None) -> OccurrenceLog:
    """Stream (id, value) of every real token of ``examples`` (strings, (A, B) pairs or
    ``Example``s; empty ones skipped, as ``run_corpus`` does) to an ``OccurrenceLog`` in
    ``folder``. Batches are ``run_corpus``'s (``jattn.runner.batcher.model_batches``): length-sorted
    and padded to a few bucket lengths, so only a few shapes compile.
    ``on_batch(norms, inputs)``, if given, also sees each batch's ``jattn.norms`` output and its
    padded inputs (padding rows have an all-zero ``attention_mask``)."""
    from jattn.analyses.norms import norms as norms_of
    from jattn.runner.batcher import model_batches

    fields = [f"mixing_{k}" for k in MIXING] if residual else ["fnorm", "alpha"]
    log = OccurrenceLog(folder, fields)
    examples = list(examples)
    bar = tqdm(total=len(examples), unit="ex", desc="occurrences", disable=not progress, dynamic_ncols=True)
    for inputs, idx in model_batches(model, examples, batch_size, max_length, truncate, skipped=[]):
        norms = norms_of(model, inputs, residual=residual)["encoder"]
        if on_batch is not None:
            on_batch(norms, inputs)
        values = occurrence_values(norms, inputs["attention_mask"], residual)
        real = inputs["attention_mask"] > 0  # (b, n)
        log.append(ids=inputs["input_ids"][real], **{k: v[real] for k, v in values.items()})
        bar.update(len(idx))
    bar.close()
    return log
