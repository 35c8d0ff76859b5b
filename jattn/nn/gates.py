"""Hard-concrete head gates (Louizos et al. 2018, §4; Voita et al. 2019, §5, Eq. 3-5).

Each head h has one learned parameter log α_h. During training a gate is sampled once per head per
step (the same value for every example of the batch):

    u ~ U(ε, 1-ε),   s = σ((log u - log(1-u) + log α_h) / β),   g = clip(s (ζ - γ) + γ, 0, 1),

with β = 0.33, γ = -0.1, ζ = 1.1, ε = 1e-6 (the stretched interval (γ, ζ) puts finite probability
mass on exactly 0 and exactly 1). At evaluation the gate is deterministic,
g = clip(σ(log α_h)(ζ - γ) + γ, 0, 1) (no temperature, as in the authors' code). The L0 penalty
is the probability that a gate is non-zero, P(g ≠ 0) = σ(log α_h - β log(-γ/ζ)) (Louizos et al.
2018, Eq. 12).

The gate multiplies head h's context before W_O, i.e. it is ``Interventions.head_gates``
(Michel et al.'s ξ_h sits at the same place). For a translation model each attention type
("encoder", "decoder", "cross") has its own (L, H) array of log α; a type without one is not gated.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn.interventions import Interventions

__all__ = ["NORMALISATIONS"]

BETA, GAMMA, ZETA, EPS = 0.33, -0.1, 1.1, 1e-6
NORMALISATIONS = ("sum_heads", "mean_layers")


def sample(log_alpha: jax.Array, key: jax.Array) -> jax.Array:
    """Training gates: one hard-concrete draw per entry of ``log_alpha`` (e.g. (L, H))."""
    u = jax.random.uniform(key, log_alpha.shape, minval=EPS, maxval=1.0 - EPS)  # (L, H)
    s = jax.nn.sigmoid((jnp.log(u) - jnp.log1p(-u) + log_alpha) / BETA)  # (L, H)
    return jnp.clip(s * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)  # (L, H)


def deterministic(log_alpha: jax.Array) -> jax.Array:
    """Evaluation gates: clip(σ(log α)(ζ - γ) + γ, 0, 1); exactly 0 or 1 once |log α| ≳ 2.4."""
    return jnp.clip(jax.nn.sigmoid(log_alpha) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)  # (L, H)


def prob_open(log_alpha: jax.Array) -> jax.Array:
    """P(g ≠ 0) = σ(log α - β log(-γ/ζ)), the expected L0 norm of each gate."""
    return jax.nn.sigmoid(log_alpha - BETA * np.log(-GAMMA / ZETA))  # (L, H)


def gates(log_alphas: Mapping[str, jax.Array], key: jax.Array | None) -> dict[str, jax.Array]:
    """Gate values per attention type: sampled when ``key`` is given (training), deterministic
    when it is None (evaluation). Each type gets its own independent noise."""
    if key is None:
        return {k: deterministic(a) for k, a in log_alphas.items()}
    keys = jax.random.split(key, len(log_alphas))
    return {k: sample(a, kk) for (k, a), kk in zip(sorted(log_alphas.items()), keys)}


def regulariser(log_alphas: Mapping[str, jax.Array], normalisation: str = "sum_heads") -> jax.Array:
    """The L0 penalty over every gated attention type.

    ``sum_heads``: Σ over all gated heads of P(g_h ≠ 0) (Voita et al. 2019, Eq. 5 as written).
    ``mean_layers``: the mean over gated attention layers (of every type) of Σ_h P(g_h ≠ 0) per
    layer (the authors' code; equivalent to ``sum_heads`` with λ divided by the number of layers).
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    per_layer = jnp.concatenate([prob_open(a).sum(-1) for a in log_alphas.values()])  # (total gated layers,)
    return per_layer.sum() if normalisation == "sum_heads" else per_layer.mean()


def interventions(gate_values: Mapping[str, jax.Array], encoder_only: bool = False):
    """Gate values as the model's intervention input: an ``Interventions`` for an encoder
    (``encoder_only``; the mapping must hold one entry), else {kind: Interventions} for a
    translation model."""
    if encoder_only:
        if len(gate_values) != 1:
            raise ValueError(f"an encoder has one attention type; got gates for {sorted(gate_values)}")
        return Interventions(head_gates=next(iter(gate_values.values())))
    return {k: Interventions(head_gates=g) for k, g in gate_values.items()}


def init_log_alpha(shape: tuple, value: float = 3.0) -> jax.Array:
    """Initial log α: every gate open (deterministic gate 1, P(open) ≈ 0.98 at 3.0), so training
    starts from the converged model's function."""
    return jnp.full(shape, value, jnp.float32)
