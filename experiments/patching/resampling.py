"""The patching study's resampling unit: GAP's Wikipedia pages for the coreference pairs.

GAP takes up to a few paragraphs from one page, and a pair is one paragraph, so the page is the
document an interval resamples (``STATISTICS.md`` §"Resampling unit"; the Clark study's GAP claims
resample the same pages, ``experiments.clark2019.coref.gap_pages``). The SST-2 and translation
pairs are one sentence each and are resampled as pairs.
"""

from __future__ import annotations

import numpy as np

from jattn import stats


def resample_weights(n: int, clusters=None, b: int = stats.B) -> np.ndarray:
    """(b, n) how often each of ``n`` rows enters each of ``b`` bootstrap resamples: of the rows
    (``clusters`` None: the draws of ``jattn.stats``, seed 0), or of the clusters the rows belong to
    (``clusters`` (n,) labels, numbered in order of first appearance: the resamples of
    ``claims.evaluate``'s ``"cluster"`` option, e.g. GAP's Wikipedia pages)."""
    labels = np.arange(n) if clusters is None else np.asarray(clusters)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    codes, k = rank[inverse.ravel()], len(first)  # (n,) each row's cluster, K clusters
    picks = np.random.default_rng(stats.SEED).integers(0, k, size=(b, k))  # (b, K) clusters drawn
    counts = np.bincount((np.arange(b)[:, None] * k + picks).ravel(), minlength=b * k).reshape(b, k)  # (b, K)
    return counts[:, codes]  # (b, n)
