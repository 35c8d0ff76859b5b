"""Pruning curves as per-example predictions (Michel et al. 2019, §4.2, Fig. 3): the pieces of the
Michel stages that do not depend on the model or the metric.

A *pruning order* is a score per head (flat, in ``pruning_curve.head_shapes`` order); at share p
of all N heads, the round(p·N) heads of lowest score are masked (gate ξ_h = 0, Michel's masking),
ties broken by the lower flat index as ``jattn.sweeps.pruning_curve.choose`` does. With one
ranking for the whole curve (importance estimated once, on the unpruned model) this is the
curve ``prune(schedule="once")`` walks, on the exact 10 % grid of all heads instead of
cumulative steps of round(0.1·N) heads (so that 40 % and 50 % are points of every curve).

``predictions_along`` runs a model's ``predict(mask)`` at every share of every order, once per
distinct mask (the unpruned and the all-pruned masks are shared by every order), keeping each
result in a folder so that a stopped stage continues where it stopped. ``step_deltas`` gives
the paired bootstrap Δ (Koehn 2004; ``jattn.stats.paired_bootstrap``) of every point against the
unpruned model; the study's prunable share is the equivalence rule
``experiments.michel2019.claims.equivalent_share``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from jattn import stats

SHARES = tuple(i / 10 for i in range(11))  # 0 %, 10 %, ..., 100 % of all heads


def ranking(scores) -> np.ndarray:
    """Flat head indices, lowest score first; ties: the lower index first (``pruning_curve.choose``)."""
    scores = np.asarray(scores, np.float64).ravel()
    return np.lexsort((np.arange(len(scores)), scores))


def masks_for(scores, shape: tuple[int, int], shares: Sequence[float] = SHARES) -> list[np.ndarray]:
    """The (L, H) head masks (1 kept, 0 masked) of one pruning order at each share of all heads."""
    order = ranking(scores)
    n = int(np.prod(shape))
    if len(order) != n:
        raise ValueError(f"scores hold {len(order)} heads, the model {shape} = {n}")
    out = []
    for p in shares:
        kept = np.ones(n, np.float32)  # (N,)
        kept[order[: int(round(p * n))]] = 0.0
        out.append(kept.reshape(shape))
    return out


def predictions_along(predict: Callable, orders: dict[str, np.ndarray], shape: tuple[int, int], folder: Path,
                      shares: Sequence[float] = SHARES, log=None) -> dict[str, list[list]]:
    """{order name: [per-example predictions at each share]} with ``predict(mask) -> (n,)``.

    Each distinct mask runs once; its predictions are written to ``folder/<sha1 of the mask>.json``
    and read back on a rerun (resume)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, scores in orders.items():
        out[name] = []
        for p, mask in zip(shares, masks_for(scores, shape, shares)):
            path = folder / (hashlib.sha1(mask.astype(np.uint8).tobytes()).hexdigest() + ".json")
            if path.is_file():
                pred = json.loads(path.read_text())
            else:
                pred = np.asarray(predict(mask)).tolist()
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(pred))
                tmp.replace(path)
                if log:
                    log(f"{name} at {p:.0%}: done")
            out[name].append(pred)
    return out


def step_deltas(metric: Callable, gold, curve: Sequence, unpruned) -> list[dict]:
    """Paired bootstrap of ``metric(pred, gold)`` at each point of ``curve`` (per-example
    predictions per share) against ``unpruned``: [{"delta", "ci", "p"}, ...]."""
    gold, base = np.asarray(gold), np.asarray(unpruned)
    out = []
    for pred in curve:
        pred = np.asarray(pred)
        if np.array_equal(pred, base):  # the unpruned point itself, or no prediction changed
            out.append({"delta": 0.0, "ci": [0.0, 0.0], "p": 1.0})
            continue
        r = stats.paired_bootstrap(lambda s, g: metric(s, g), pred, base, gold)
        out.append({"delta": r["delta"], "ci": list(r["ci"]), "p": r["p"]})
    return out


def digits(pred) -> str:
    """Per-example classes 0-9 as one string, a character each (compact rows;
    ``jattn.reproduce.statistics._systems``)."""
    pred = np.asarray(pred)
    if pred.size and (pred.min() < 0 or pred.max() > 9):
        raise ValueError("digit strings hold classes 0-9 only")
    return "".join(map(str, pred.tolist()))
