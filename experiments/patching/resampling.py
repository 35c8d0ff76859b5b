"""The patching study's resampling unit: GAP's Wikipedia pages for the coreference pairs.

GAP takes up to a few paragraphs from one page, and a pair is one paragraph, so the page is the
document an interval resamples (``STATISTICS.md`` §"Resampling unit"; the Clark study's GAP claims
resample the same pages, ``experiments.common.gap_pages``). The SST-2 and translation
pairs are one sentence each and are resampled as pairs.
"""

from __future__ import annotations

import numpy as np

from jattn import stats
from jattn.reproduce import claims


def resample_weights(n: int, clusters=None, b: int = stats.B) -> np.ndarray:
    """(b, n) how often each of ``n`` rows enters each of ``b`` bootstrap resamples: of the rows
    (``clusters`` None: the draws of ``jattn.stats``, seed 0), or of the clusters the rows belong to
    (``clusters`` (n,) labels, numbered in order of first appearance: the resamples of
    ``claims.evaluate``'s ``"cluster"`` option, e.g. GAP's Wikipedia pages)."""
    codes, k = claims.cluster_codes(range(n) if clusters is None else clusters)  # (n,) each row's cluster
    return claims.pick_counts(claims.resample_picks(k, b), k)[:, codes]  # (b, n)
