"""What every stage of the Clark study shares: the models, the paired test (``mean_deltas``, the
claim's resampling unit: segments, sentences or documents) and the tests' note."""

from __future__ import annotations

import numpy as np

from jattn import stats
from jattn.reproduce import claims

# Resamples for the syntax family's p-values: Holm's smallest threshold over ~26 relations is
# .05 / 26 ≈ .0019, which p-values in steps of 2 / 1000 cannot resolve; 5,000 give steps of .0004.
FAMILY_RESAMPLES = 5_000
MODELS = {"mpnet": "all-mpnet-base-v2", "minilm": None}  # None: the embedded MiniLM


def load(model: str):
    """The encoder a stage analyses: ``"mpnet"`` (the named artefact) or ``"minilm"`` (embedded)."""
    import jattn

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}. Fix: one of {', '.join(MODELS)}")
    return jattn.load() if MODELS[model] is None else jattn.load(MODELS[model])


def note(why: str) -> dict:
    """A claim's note: the values of the tests its stage ran (``why``). The verdict is the study's
    rules' (``experiments.clark2019.verdicts``), not the stage's."""
    return {"note": f"Tests: {why}."}


def rate(rows: list[dict], column: str) -> float:
    """Accuracy of ``column`` against ``gold`` over ``rows``."""
    return float(np.mean([r[column] == r["gold"] for r in rows]))


def mean_deltas(d, clusters=None, groups=None, *, b: int = stats.B, level: float = 0.95) -> dict:
    """{group: {"value", "ci", "p", "b"}} of Δ = the mean of the per-row paired differences ``d`` in each
    group (one group "" when ``groups`` is None), resampling the ``clusters`` (rows when None):
    the resamples, percentile interval and two-sided p of ``claims.evaluate``'s "paired" method
    (with "cluster" when given), every group on the same resamples, vectorised by counts."""
    d = np.asarray(d, np.float64)
    n = len(d)
    codes, k = claims.cluster_codes(range(n) if clusters is None else clusters)  # (n,) each row's cluster
    names, which = np.unique(np.zeros(n, int) if groups is None else np.asarray(groups), return_inverse=True)
    cell = codes * len(names) + which.ravel()
    sums = np.bincount(cell, d, k * len(names)).reshape(k, -1)  # (K, G)
    counts = np.bincount(cell, None, k * len(names)).reshape(k, -1)  # (K, G)
    picks = claims.resample_picks(k, b)  # (b, K): claims' cluster resamples
    deltas = []
    for chunk in np.array_split(picks, max(1, b * k // 2_000_000)):
        w = claims.pick_counts(chunk, k).astype(float)  # (c, K)
        with np.errstate(invalid="ignore", divide="ignore"):
            deltas.append((w @ sums) / (w @ counts))  # (c, G)
    deltas = np.concatenate(deltas)  # (b, G)
    out = {}
    for g, name in enumerate(names):
        t = deltas[:, g][np.isfinite(deltas[:, g])]
        p = min(1.0, 2 * min((t <= 0).mean(), (t >= 0).mean()))
        out["" if groups is None else str(name)] = {
            "value": float(sums[:, g].sum() / counts[:, g].sum()), "p": float(p), "b": b,
            "ci": [float(q) for q in np.quantile(t, [(1 - level) / 2, (1 + level) / 2])]}
    return out


def p_text(test: dict) -> str:
    """The p of a ``mean_deltas`` test as text; a bootstrap p of 0 as "< 2 / B"."""
    return f"p = {test['p']:.4f}" if test["p"] > 0 else f"p < {2 / test['b']:g}"


def said(test: dict, unit: str) -> str:
    """A ``mean_deltas`` test as text: Δ, its interval and p, and the ``unit`` resampled."""
    return f"Δ {test['value']:+.3f} [{test['ci'][0]:+.3f}, {test['ci'][1]:+.3f}], {p_text(test)} ({unit} resampled)"
