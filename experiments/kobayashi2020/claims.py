"""What the Kobayashi et al. stages share: the paired difference a claim records (its verdict is
``experiments.kobayashi2020.verdicts``'s; the paper's numbers are ``experiments/papers.py``'s)."""

from __future__ import annotations


def paired(rows: list[dict], statistic: str, columns: dict, against: dict) -> dict:
    """The paired-bootstrap Δ (``claims.evaluate``) of ``statistic`` on ``columns`` minus on ``columns``
    with ``against`` swapped in, with the spec that recomputes it (``measure``)."""
    from jattn.reproduce import claims

    spec = {"statistic": statistic, "columns": columns, "ci_method": "paired", "against": against}
    return {**claims.evaluate(rows, spec), "measure": spec}


