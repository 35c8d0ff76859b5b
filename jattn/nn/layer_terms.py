"""What a layer of a stack may do differently from the others, handed to it through the layer
loop's per-layer score-bias argument (``Encoder.score_bias(l, n)``, ``jattn.nn.engine.run_stack``):
rotary position embeddings of queries and keys with a per-layer base (Su et al. 2021,
``jattn.nn.rotary``), a local attention window (keys with |i − j| > r masked, combined with the
padding mask; Beltagy et al. 2020's sliding window, bidirectional), an additive score bias, and
whether the layer's attention LayerNorm acts (a pre-LN stack whose embeddings end in a
LayerNorm may skip it in layer 0: Warner et al. 2024's ModernBERT).

``LayerTerms`` is a pytree, so the layer loop scans it, ``jax.vmap`` stacks it and a chunk of
the batch reads all of it; ``terms[:, :q]`` keeps the first q query rows (``cls_row``).
The gated feed-forward's hidden activation (``ffn_hidden``) lives here too.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jattn.nn.layers import ACT
from jattn.nn.rotary import rotate, tables


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class LayerTerms:
    """One layer's position terms on n positions (q query rows, k keys)."""

    q_cos: jax.Array | None  # (q, d_h) rotary tables of the queries' positions; None: no rotary
    q_sin: jax.Array | None
    k_cos: jax.Array | None  # (k, d_h) of the keys' positions
    k_sin: jax.Array | None
    window: jax.Array | None  # (q, k) bool, keys within the layer's window; None: all
    bias: jax.Array | None  # (H, q, k) float32 additive score bias; None: none
    attention_norm: jax.Array  # () bool: the attention LayerNorm acts (False: identity)

    def __getitem__(self, index):
        """The terms of the query rows ``index[1]`` (``index`` as a score bias (H, q, k) is sliced)."""
        rows = index[1]
        cut = (lambda a: None if a is None else a[rows])
        return dataclasses.replace(self, q_cos=cut(self.q_cos), q_sin=cut(self.q_sin),
                                   window=None if self.window is None else self.window[rows],
                                   bias=None if self.bias is None else self.bias[index])

    def apply(self, q, k, allowed):
        """q (b, q, H, d_h), k (b, H, k, d_h), ``allowed`` (b, 1 or q, k) -> rotated q and k (RoFormer
        Eq. 34), ``allowed`` within the window (b, 1 or q, k) and the additive bias (H, q, k) or None.
        A query none of whose keys is allowed keeps an all-masked row (Hugging Face's eager
        attention then spreads it uniformly over all keys: every score is finfo.min)."""
        if self.q_cos is not None:
            q = jnp.swapaxes(rotate(jnp.swapaxes(q, 1, 2), self.q_cos, self.q_sin), 1, 2)  # (b, q, H, d_h)
        if self.k_cos is not None:  # None with rotary queries: keys rotated already (a decoding cache)
            k = rotate(k, self.k_cos, self.k_sin)  # (b, H, k, d_h)
        if self.window is not None:
            allowed = allowed & self.window[None]  # (b, q, k)
        return q, k, allowed, self.bias


def layer_terms(config, layer, n: int, bias=None) -> LayerTerms | None:
    """Layer ``layer``'s (an int, or traced) terms on n positions from ``config``'s
    ``rotary_theta``, ``local_rotary_theta``, ``attention_radius``, ``first_attention_norm`` and
    ``causal`` (keys j ≤ i only: a causal LM's mask, Radford et al. 2019, joined to the window),
    with the additive ``bias`` (H, n, n) or None; None when the config asks for none of them."""
    radii, causal = config.attention_radius, getattr(config, "causal", False)
    if not (config.rotary_theta or radii or not config.first_attention_norm or causal):
        return None
    radius = jnp.asarray(radii or (0,) * config.num_layers, jnp.int32)[layer]  # ()
    window, i = None, jnp.arange(n)
    if any(radii):
        window = (jnp.abs(i[:, None] - i[None, :]) <= radius) | (radius == 0)  # (n, n)
    if causal:
        before = i[None, :] <= i[:, None]  # (n, n) key j at or before query i
        window = before if window is None else window & before  # (n, n)
    cos = sin = None
    if config.rotary_theta:
        local = config.local_rotary_theta or config.rotary_theta
        g, w = tables(config.rotary_theta, n, config.head_dim), tables(local, n, config.head_dim)
        cos, sin = (jnp.where(radius > 0, a_w, a_g) for a_g, a_w in zip(g, w))  # (n, d_h)
    on = jnp.asarray(layer) > 0 if not config.first_attention_norm else jnp.asarray(True)
    return LayerTerms(cos, sin, cos, sin, window, bias, on)


class AttentionNorm:
    """A LayerNorm that acts where ``on`` (a traced bool) and is the identity elsewhere: exact,
    as no LayerNorm (γ = 1, β = 0) is the identity (it centres and scales)."""

    def __init__(self, ln, on):
        self.ln, self.on, self.eps = ln, on, ln.eps

    def __call__(self, x, sigma=None):
        return jnp.where(self.on, self.ln(x, sigma), x)  # (…, D)

    def sigma(self, x):
        """The LayerNorm's divisor of x (…, D) -> (…, 1) (unused where the identity acts)."""
        return self.ln.sigma(x)


def attention_norm(ln, score_bias):
    """The attention LayerNorm a layer applies: ``ln``, or ``AttentionNorm`` when ``score_bias``
    is ``LayerTerms`` that may switch it off."""
    return AttentionNorm(ln, score_bias.attention_norm) if isinstance(score_bias, LayerTerms) else ln


def ffn_hidden(ffn_in, x, activation: str) -> jax.Array:
    """The feed-forward's hidden activation on x (b, n, D): act(W_1 x + b_1) (b, n, F), or, when W_1
    gives an input and a gate ((b, n, 2, F): a gated FFN), act(u) * g (Shazeer 2020, Eq. 5–6 with
    GELU: GEGLU) (b, n, F), which W_2 reads."""
    y = ffn_in(x)  # (b, n, F) or (b, n, 2, F)
    if y.ndim == x.ndim + 1:
        return ACT[activation](y[..., 0, :]) * y[..., 1, :]  # (b, n, F)
    return ACT[activation](y)  # (b, n, F)
