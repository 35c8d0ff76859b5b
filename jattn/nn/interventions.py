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
``patch``  {site: (value, where)}: activation patching (Vaswani-style internals replaced by given
    arrays, per layer, example, head and position; the feed-forward block's input and output and the
    layer's output per layer, example and position; ``PATCH_SITES`` below). ``where`` bool
    replaces; ``where`` float t blends x + t (value − x), so ∂metric/∂t at t = 0 is attribution
    patching's first-order estimate (Nanda 2023; Syed et al. 2023).
``detach_weights`` / ``detach_ln``  static bools: stop the gradient through α, or through the
    LayerNorms' σ (as LRP-style relevance propagation treats them: Voita et al. 2019 §4.2;
    Ali et al. 2022). Changing them recompiles: they change the program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Interventions", "PATCH_SITES"]

# site -> (what it replaces, the shape of one layer's value, the shape of one layer's ``where``);
# ``1|`` marks an axis ``where`` may broadcast. b examples, H heads, q queries, k keys.
PATCH_SITES = {
    "context": ("head outputs Σ_j α v before W_O (after the gate)", "(b, H, q, d_h)", "(1|b, H, 1|q)"),
    "weights": ("attention weights α (after disabling, before weights_delta)", "(b, H, q, k)", "(1|b, H, 1|q)"),
    "values": ("values v_hj", "(b, H, k, d_h)", "(1|b, H, 1|k)"),
    "residual": ("the attention block's input x (keys and values too in self-attention)", "(b, q, D)", "(1|b, 1|q)"),
    "query_input": ("the input the marked heads compute their queries from", "(b, q, D)", "(1|b, H)"),
    "key_input": ("the input the marked heads compute their keys from", "(b, k, D)", "(1|b, H)"),
    "value_input": ("the input the marked heads compute their values from", "(b, k, D)", "(1|b, H)"),
    "ffn_residual": ("the feed-forward block's input h = LN(x + Attn(x)), which it adds its output to",
                     "(b, q, D)", "(1|b, 1|q)"),
    "ffn_output": ("the feed-forward output W_2 act(W_1 h + b_1) + b_2, before the residual", "(b, q, D)",
                   "(1|b, 1|q)"),
    "layer_output": ("the layer's output LN(h + FFN(h)), the residual stream the next layer reads", "(b, q, D)",
                     "(1|b, 1|q)"),
}
RECEIVER_SITES = ("query_input", "key_input", "value_input")  # path patching's receivers (Wang et al. 2022)
# sites on the feed-forward sublayer: in a decoder layer they belong to the cross-attention's Interventions
FFN_SITES = ("ffn_residual", "ffn_output", "layer_output")
STREAM_SITES = ("residual", *FFN_SITES)  # (b, q, D) vectors without a head axis


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Interventions:
    head_gates: jax.Array | None = None
    disabled_heads: jax.Array | None = None
    weights_delta: jax.Array | None = None
    patch: dict | None = None
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
        patch = None if self.patch is None else check_patch(self.patch, L, H, what)
        return dataclasses.replace(self, head_gates=gates, disabled_heads=disabled, weights_delta=delta, patch=patch)

    def layer_slices(self):
        """The array fields, each with the layer axis leading (what ``lax.scan`` slices)."""
        return (self.head_gates, self.disabled_heads, self.weights_delta, self.patch)

    def for_layer(self, gates, disabled, delta, patch=None) -> "Interventions":
        """One layer's view, rebuilt from the slices ``lax.scan`` hands each step."""
        return dataclasses.replace(self, head_gates=gates, disabled_heads=disabled, weights_delta=delta, patch=patch)

    def patched(self, site: str, x: jax.Array) -> jax.Array:
        """One layer's ``x`` with the patch of ``site`` applied (``x`` itself when there is none). A
        value of another shape is an error naming the expected one, raised while tracing (before any
        compute): the batch's axes are checked against the batch before (``jattn.io.validate``), the
        last axis (the width: D, d_h or the keys) only here, where the model's is known."""
        if self.patch is None or site not in self.patch:
            return x
        value, where = self.patch[site]
        if value.shape != x.shape:
            layout = PATCH_SITES[site][1]
            raise ValueError(f"interventions.patch[{site!r}] value has shape (L, {', '.join(map(str, value.shape))}); "
                             f"this model's {site} is (L, {', '.join(map(str, x.shape))}), {layout} per layer: the "
                             f"last axis must be {x.shape[-1]}, not {value.shape[-1]}. Fix: take the value from this "
                             "model's internals (model.forward(batch).internals)")
        return blend(x, value, where[..., None])

    def receiver(self, site: str, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
        """``patch[site]`` of a receiver site (``query_input`` / ``key_input`` / ``value_input``): the
        input (b, n, D) the marked heads read and where (1|b, H), the input's shape checked against the
        ``shape`` the block's own input has (an error naming it, raised while tracing)."""
        value, where = self.patch[site]
        if value.shape != tuple(shape):
            layout = PATCH_SITES[site][1]
            raise ValueError(f"interventions.patch[{site!r}] value has shape (L, {', '.join(map(str, value.shape))}); "
                             f"this model's {site} is (L, {', '.join(map(str, shape))}), {layout} per layer: the "
                             f"last axis must be {shape[-1]}, not {value.shape[-1]}. Fix: take the value from this "
                             "model's internals (model.forward(batch).internals)")
        return value, where

    def take_rows(self, take) -> "Interventions":
        """One layer's view cut to a subset of the batch: ``take`` maps an array (b, ...) to its
        rows; fields without an example axis ((H,) gates or masks) or with a broadcast one (size
        1) are kept whole."""
        def cut(x, per_example: bool):
            return take(x) if x is not None and per_example and x.shape[0] > 1 else x

        gates, disabled, delta = self.head_gates, self.disabled_heads, self.weights_delta
        patch = None if self.patch is None else {site: (cut(value, True), cut(where, True))
                                                 for site, (value, where) in self.patch.items()}
        return dataclasses.replace(self, head_gates=cut(gates, gates is not None and gates.ndim >= 2),
                                   disabled_heads=cut(disabled, disabled is not None and disabled.ndim == 2),
                                   weights_delta=cut(delta, True), patch=patch)

    def first_query(self) -> "Interventions":
        """One layer's view for its first query row only ([CLS]): per-query gates (b, H, q) and
        weight deltas (b, H, q, k) cut to q = 1."""
        if self.patch is not None:
            raise ValueError(
                "a patch changes every query row: run model.forward, not classify, with interventions.patch"
            )
        gates, delta = self.head_gates, self.weights_delta
        return dataclasses.replace(self, head_gates=gates[..., :1] if gates is not None and gates.ndim == 3 else gates,
                                   weights_delta=None if delta is None else delta[:, :, :1])


def blend(x: jax.Array, value: jax.Array, where: jax.Array) -> jax.Array:
    """``value`` where ``where`` (bool) is True, else x; for a float ``where`` t, x + t (value − x)."""
    value = value.astype(x.dtype)
    if where.dtype == jnp.bool_:
        return jnp.where(where, value, x)
    return x + where.astype(x.dtype) * (value - x)


def check_patch(patch, L: int, H: int, what: str) -> dict:
    """Validate a stacked patch {site: (value (L, b, ...), where (L, 1|b, ...))} (``PATCH_SITES``)."""
    name = f"{what}.patch"
    if not isinstance(patch, dict):
        raise ValueError(f"{name} must be a dict {{site: (value, where)}} with sites among {sorted(PATCH_SITES)}, "
                         f"got {type(patch).__name__}")
    out = {}
    for site, pair in patch.items():
        if site not in PATCH_SITES:
            raise ValueError(f"{name} has unknown site {site!r}. Fix: choose from {', '.join(PATCH_SITES)}")
        _, value_shape, where_shape = PATCH_SITES[site]
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ValueError(f"{name}[{site!r}] must be a pair (value, where), got {type(pair).__name__}")
        value, where = _as_array(pair[0], f"{name}[{site!r}] value"), _as_array(pair[1], f"{name}[{site!r}] where")
        receiver = site in RECEIVER_SITES
        want_where = 3 if receiver else value.ndim - 1
        expected = f"value (L, {value_shape[1:]} and where (L, {where_shape[1:]} with L={L}, H={H}"
        shape_ok = (value.ndim == len(value_shape.split(",")) + 1 and where.ndim == want_where
                    and value.shape[0] == where.shape[0] == L and where.shape[1] in (1, value.shape[1]))
        if shape_ok and site not in STREAM_SITES:
            shape_ok = where.shape[2] == H and (receiver or value.shape[2] == H)
        if shape_ok and not receiver:
            shape_ok = all(w in (1, v) for w, v in zip(where.shape[2:], value.shape[2:]))
        if not shape_ok:
            raise ValueError(f"{name}[{site!r}] needs {expected}; got value {tuple(value.shape)}, "
                             f"where {tuple(where.shape)}")
        if not (where.dtype == jnp.bool_ or jnp.issubdtype(where.dtype, jnp.floating)):
            raise ValueError(f"{name}[{site!r}] where must be bool (replace) or float (blend), got {where.dtype}")
        out[site] = (value, where)
    return out


def _as_array(x, name: str) -> jax.Array:
    if isinstance(x, (str, bytes, dict)):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}")
    return jnp.asarray(x)


NONE = Interventions()
