"""What every stage of the Clark study shares: the models, the paired test and the tests' note."""

from __future__ import annotations

import numpy as np

MODELS = {"mpnet": "all-mpnet-base-v2", "minilm": None}  # None: the embedded MiniLM


def load(model: str):
    """The encoder a stage analyses: ``"mpnet"`` (the named artefact) or ``"minilm"`` (embedded)."""
    import jattn

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}. Fix: one of {', '.join(MODELS)}")
    return jattn.load() if MODELS[model] is None else jattn.load(MODELS[model])


def paired(system, baseline, gold=None) -> dict:
    """Δ = accuracy against ``gold`` (the mean when ``gold`` is None) of ``system`` − of
    ``baseline`` on the same rows: the paired bootstrap of ``jattn.stats.paired_bootstrap``."""
    from jattn import stats

    if gold is None:
        return stats.paired_bootstrap(np.mean, np.asarray(system, float), np.asarray(baseline, float))
    return stats.paired_bootstrap(lambda s, g: np.mean(s == g), np.asarray(system), np.asarray(baseline),
                                  np.asarray(gold))


def note(why: str) -> dict:
    """A claim's note: the values of the tests its stage ran (``why``). The verdict is the study's
    rules' (``experiments.clark2019.verdicts``), not the stage's."""
    return {"note": f"Tests: {why}."}


def delta(test: dict) -> str:
    """A paired test as text: Δ, its interval and p."""
    return f"Δ {test['delta']:+.3f} [{test['ci'][0]:+.3f}, {test['ci'][1]:+.3f}], p = {test['p']:.3f}"


def rate(rows: list[dict], column: str) -> float:
    """Accuracy of ``column`` against ``gold`` over ``rows``."""
    return float(np.mean([r[column] == r["gold"] for r in rows]))
