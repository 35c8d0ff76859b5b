"""``Interventions``: every change to an attention stack's computation, as one pytree of arrays.

One instance describes one stack of L attention blocks with H heads (the encoder's
self-attention; or one of a translation model's three attention types, passed as a mapping
``{"encoder": …, "decoder": …, "cross": …}``). Fields left ``None`` change nothing and cost
nothing. Because the arrays are arguments, a jitted forward compiles once per shape and a new
gate value never recompiles; ``jax.grad`` with respect to ``head_gates`` is Michel et al.'s head
importance.

``head_gates``  float, (L, H), (L, b, H) or (L, b, H, q): ξ multiplying each head's context
    Σ_j α v before W_O (Michel et al. 2019, §3; Voita et al. 2019's gates g_h sit at the same
    place) — per head, per head and example, or per head, example and query token.
``disabled_heads``  bool, (L, H) or (L, b, H): the head's weights become uniform over the keys
    the query may see (Kovaleva et al. 2019, §4.2).
``weights_delta``  float, (L, b, H, q, k): added to α before it multiplies the values; at zero it
    changes nothing and ∂L/∂delta = ∂L/∂α (Clark et al. 2019, Fig. 3).
``detach_weights`` / ``detach_ln``  static bools: stop the gradient through α, or through the
    LayerNorms' σ (as LRP-style relevance propagation treats them: Voita et al. 2019 §4.2;
    Ali et al. 2022). Changing them recompiles: they change the program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Interventions:
    head_gates: jax.Array | None = None
    disabled_heads: jax.Array | None = None
    weights_delta: jax.Array | None = None
    detach_weights: bool = dataclasses.field(default=False, metadata=dict(static=True))
    detach_ln: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def check(self, L: int, H: int, what: str = "interventions") -> "Interventions":
        """Validate shapes, dtypes and values on the host (cheap: (L, H)-sized arrays are read,
        larger ones only checked for shape); return the instance with arrays as jax arrays."""
        gates, disabled, delta = self.head_gates, self.disabled_heads, self.weights_delta
        if gates is not None:
            gates = _as_array(gates, f"{what}.head_gates")
            head_axis = 1 if gates.ndim == 2 else 2
            if gates.ndim not in (2, 3, 4) or gates.shape[0] != L or gates.shape[head_axis] != H:
                raise ValueError(f"{what}.head_gates must be (L, H), (L, b, H) or (L, b, H, n) with L={L}, "
                                 f"H={H}; got shape {tuple(gates.shape)}")
            if not jnp.issubdtype(gates.dtype, jnp.floating):
                raise ValueError(f"{what}.head_gates must be a float array (got {gates.dtype}); use "
                                 "disabled_heads for boolean masks")
            if gates.ndim == 2 and not bool(jnp.isfinite(gates).all()):
                raise ValueError(f"{what}.head_gates contains NaN or inf: gates must be finite")
        if disabled is not None:
            disabled = _as_array(disabled, f"{what}.disabled_heads")
            if disabled.ndim not in (2, 3) or disabled.shape[0] != L or disabled.shape[-1] != H:
                raise ValueError(f"{what}.disabled_heads must be (L, H) or (L, b, H) with L={L}, H={H}; "
                                 f"got shape {tuple(disabled.shape)}")
            if disabled.dtype != jnp.bool_:
                values = np.unique(np.asarray(disabled))
                if not np.isin(values, (0, 1)).all():
                    raise ValueError(f"{what}.disabled_heads must be boolean (True = disabled); got values "
                                     f"{values[:5].tolist()}. Fix: pass a bool array, e.g. mask > 0.5")
                disabled = disabled.astype(bool)
        if delta is not None:
            delta = _as_array(delta, f"{what}.weights_delta")
            if delta.ndim != 5 or delta.shape[0] != L or delta.shape[2] != H:
                raise ValueError(f"{what}.weights_delta must be (L, b, H, q, k) with L={L}, H={H}; "
                                 f"got shape {tuple(delta.shape)}")
        return dataclasses.replace(self, head_gates=gates, disabled_heads=disabled, weights_delta=delta)

    def layer_slices(self):
        """The array fields, each with the layer axis leading (what ``lax.scan`` slices)."""
        return (self.head_gates, self.disabled_heads, self.weights_delta)

    def for_layer(self, gates, disabled, delta) -> "Interventions":
        """One layer's view, rebuilt from the slices ``lax.scan`` hands each step."""
        return dataclasses.replace(self, head_gates=gates, disabled_heads=disabled, weights_delta=delta)

    def take_rows(self, take) -> "Interventions":
        """One layer's view cut to a subset of the batch: ``take`` maps an array (b, ...) to its
        rows; fields without an example axis ((H,) gates or masks) or with a broadcast one (size
        1) are kept whole."""
        def cut(x, per_example: bool):
            return take(x) if x is not None and per_example and x.shape[0] > 1 else x

        gates, disabled, delta = self.head_gates, self.disabled_heads, self.weights_delta
        return dataclasses.replace(self, head_gates=cut(gates, gates is not None and gates.ndim >= 2),
                                   disabled_heads=cut(disabled, disabled is not None and disabled.ndim == 2),
                                   weights_delta=cut(delta, True))

    def first_query(self) -> "Interventions":
        """One layer's view for its first query row only ([CLS]): per-query gates (b, H, q) and
        weight deltas (b, H, q, k) cut to q = 1."""
        gates, delta = self.head_gates, self.weights_delta
        return dataclasses.replace(self, head_gates=gates[..., :1] if gates is not None and gates.ndim == 3 else gates,
                                   weights_delta=None if delta is None else delta[:, :, :1])


def _as_array(x, name: str) -> jax.Array:
    if isinstance(x, (str, bytes, dict)):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}")
    return jnp.asarray(x)


NONE = Interventions()
