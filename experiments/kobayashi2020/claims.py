"""What the Kobayashi et al. stages share: the paper's numbers and settings, and the rule that turns a
paired difference into a claim's status."""

from __future__ import annotations

# the model the paper analysed (the only place it is named: test_architecture flags family names in code)
MODEL = "BERT-base"
PAPER = {
    "weight": f"{MODEL}, 992 Wikipedia segments: [CLS], [SEP] and punctuation get large α "
              "(Kobayashi et al. 2020 Fig. 2, weight-based; Clark et al. 2019)",
    "weight-other": f"{MODEL}: the other tokens get the rest of α (Fig. 2)",
    "norm": f"{MODEL}: ‖αf(x)‖ to [CLS], [SEP] and punctuation far below their α; α and ‖f(x)‖ cancel (Fig. 2-3)",
    "norm-other": f"{MODEL}: the other tokens' share grows from α to ‖αf(x)‖ (Fig. 2)",
    "mixing": f"{MODEL} mean mixing ratio: AttnResLn-N 18.75 % vs Attn-W 96.41 % (2021 Table 1, 12 % masked)",
    "frequency": f"{MODEL}: ρ(‖f(x)‖, frequency rank) ≈ 0.75 over occurrences: rarer tokens, larger ‖f(x)‖ (§4.3)",
    "AWO": "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 41.4 (‖Σαf‖) vs 47.7 (α) (Table 4)",
    "AWI": "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 25.0 (‖Σαf‖) vs 29.8 (α) (Table 4)",
    "diagonal": "norm- and weight-based alignments far better than trivial (best-layer AER 25-48, Table 4)",
    "eflomal": "not in the paper: a statistical aligner as the reference point for attention-based alignments",
}


def verdict(delta: dict, expected: int, rejected: bool = True) -> tuple[str, str]:
    """The status of a directional finding from its paired Δ: "reproduced" when the CI of Δ lies on
    the paper's side of 0 (``expected`` +1 / −1) and the test survives Holm (``rejected``)."""
    lo, hi = delta["ci"]
    sign = "above" if expected > 0 else "below"
    if lo <= 0 <= hi:
        return "not reproduced", f"no difference detected: the 95 % CI of Δ [{lo:.3f}, {hi:.3f}] includes 0"
    if (lo > 0) != (expected > 0):
        return "not reproduced", f"opposite direction: Δ CI [{lo:.3f}, {hi:.3f}], the paper has it {sign} 0"
    if not rejected:
        return "not reproduced", f"Δ CI [{lo:.3f}, {hi:.3f}] excludes 0 but not after Holm (p = {delta['p']:.3g})"
    return "reproduced", f"Δ = {delta['value']:.3f}, CI [{lo:.3f}, {hi:.3f}], p = {delta['p']:.3g}"


def paired(rows: list[dict], statistic: str, columns: dict, against: dict) -> dict:
    """The paired-bootstrap Δ (``claims.evaluate``) of ``statistic`` on ``columns`` minus on ``columns``
    with ``against`` swapped in, with the spec that recomputes it (``measure``)."""
    from jattn.reproduce import claims

    spec = {"statistic": statistic, "columns": columns, "ci_method": "paired", "against": against}
    return {**claims.evaluate(rows, spec), "measure": spec}


