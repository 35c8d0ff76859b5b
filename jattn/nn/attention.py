"""Multi-head attention that returns its internals (Vaswani et al. 2017, Eq. 1 and §3.2.2), and
the post-LayerNorm attention and feed-forward sublayers every jattn model is built from.

Notation follows Kobayashi et al. (2020): α[h,i,j] the softmax weight of query i on key j in
head h, v_hj = x_j W_V^h + b_V^h the value (bias included), W_O^h the (d_h, D) slice of the
output projection, f_h(x_j) = v_hj W_O^h (Eq. 5), so the block's output is
y_i = Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O.

Interventions (``jattn.nn.interventions.Interventions``, one layer's slice) enter as arrays:
``head_gates`` multiply head h's context Σ_j α v_hj before W_O (Michel et al. 2019's ξ_h);
``disabled_heads`` replace the head's weights by the uniform distribution over the keys the
query may see (Kovaleva et al. 2019); ``weights_delta`` is added to α (∂L/∂delta = ∂L/∂α);
``patch`` replaces the block's input, values, weights or head outputs, the feed-forward block's
input or output or the layer's output by given arrays, and lets marked heads read their queries,
keys or values from another input (path patching's receivers).

Every sublayer is used by the encoder, the translation model and cached decoding alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jattn.nn.interventions import Interventions, blend
from jattn.nn.layer_terms import LayerTerms, ffn_hidden
from jattn.nn.layers import Dense, LayerNorm, dropout, split_rng
from jattn.nn.positions import scores as position_scores


def _per_head(x: jax.Array) -> jax.Array:
    """A per-layer gate or mask, (H,), (b, H) or (b, H, q), as (1 or b, H, 1 or q, 1)."""
    if x.ndim == 1:
        return x[None, :, None, None]
    if x.ndim == 2:
        return x[:, :, None, None]
    return x[..., None]


class MultiHeadAttention(nnx.Module):
    """query/key/value kernels (D, H, d_h) with biases (H, d_h); out kernel (H, d_h, D), bias (D,).
    Heads carry the ``"model"`` partitioning name. ``head_dim`` d_h defaults to D / H; a physically
    pruned stack (``jattn.sweeps.pruning``) keeps its original d_h with fewer head slots."""

    def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs, stack: tuple = (), std=None,
                 head_dim: int | None = None, bias: bool = True, kv_heads: int | None = None,
                 out_bias: bool | None = None, softcap: float = 0.0, score_scale: float = 0.0):
        d_h = head_dim or d_model // num_heads
        kv = kv_heads or num_heads  # grouped-query attention (Ainslie et al. 2023): H_kv key/value heads
        if num_heads % kv:
            raise ValueError(f"num_heads={num_heads} must be a multiple of the key/value heads ({kv})")
        proj = dict(rngs=rngs, stack=stack, out_names=("model", None), std=std, bias=bias)  # bias=False: none
        self.query = Dense((d_model,), (num_heads, d_h), **proj)
        self.key = Dense((d_model,), (kv, d_h), **proj)
        self.value = Dense((d_model,), (kv, d_h), **proj)
        self.out = Dense((num_heads, d_h), (d_model,), rngs=rngs, stack=stack, in_names=("model", None), std=std,
                         bias=bias if out_bias is None else out_bias)
        self.groups = num_heads // kv  # query heads per key/value head
        # scores c·tanh(s / c) (Gemma Team 2024's soft-capping; 0: none), scaled by score_scale (0: 1/sqrt(d_h))
        self.softcap, self.score_scale = softcap, score_scale

    def per_query_head(self, x: jax.Array) -> jax.Array:
        """Key/value heads (b, H_kv, k, d_h) -> one per query head (b, H, k, d_h): query head h reads
        key/value head h // (H / H_kv) (GQA, Ainslie et al. 2023, §2.2); the identity when H_kv = H."""
        return x if self.groups == 1 else jnp.repeat(x, self.groups, axis=1)  # (b, H, k, d_h)

    def keys_values(self, x_kv: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x_kv (b, k, D) -> keys and values head-major, (b, H, k, d_h), value bias included, one per
        query head (``per_query_head``): the layout the attention products read, and cached
        decoding's cache layout (appending a position never transposes the cache)."""
        return (self.per_query_head(jnp.moveaxis(self.key(x_kv), 2, 1)),
                self.per_query_head(jnp.moveaxis(self.value(x_kv), 2, 1)))

    def __call__(self, x_q, k, v, allowed, iv: Interventions, *, dropout_rate: float = 0.0, rng=None,
                 score_bias=None):
        """Attention of queries x_q (b, q, D) over keys/values (b, H, k, d_h); ``allowed``
        (b, 1 or q, k) bool; ``score_bias`` (H, q, k) float32 or None, added to the scores
        before the softmax (``jattn.nn.relative``), or a layer's ``jattn.nn.positions.RelativeScores``
        (DeBERTa's content-dependent position terms), or a layer's ``jattn.nn.layer_terms.LayerTerms``
        (rotary q and k, a local window joined to ``allowed``). Returns (output before the residual
        (b, q, D), internals). Softmax is taken in float32 whatever the compute dtype."""
        dt = x_q.dtype
        q = self.query(x_q)  # (b, q, H, d_h)
        if iv.patch is not None:
            q, k, v = _receivers(self, q, k, v, iv, x_q.shape)
            v = iv.patched("values", v)  # (b, H, k, d_h)
        if isinstance(score_bias, LayerTerms):  # rotary q, k; a local window (jattn.nn.layer_terms)
            q, k, allowed, score_bias = score_bias.apply(q, k, allowed)  # allowed (b, 1 or q, k)
        if self.score_scale:  # q·k · score_scale in place of q·k / sqrt(d_h) (Gemma's query_pre_attn_scalar^−½)
            q = q * jnp.asarray(self.score_scale * q.shape[-1] ** 0.5, q.dtype)  # (b, q, H, d_h)
        scores = position_scores(q, k, score_bias)  # (b, H, q, k) q·k/sqrt(d_h) + bias, or DeBERTa's terms
        if self.softcap:
            scores = self.softcap * jnp.tanh(scores / self.softcap)  # (b, H, q, k) soft-capped before the mask
        mask = allowed[:, None]  # (b, 1, 1 or q, k)
        # additive mask, as HF's eager attention: finfo.min + s rounds to finfo.min, so this equals
        # selecting finfo.min for masked keys, and XLA fuses the addition into the softmax's loop
        bias = jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)  # (b, 1, 1 or q, k)
        weights = jax.nn.softmax(scores + bias, axis=-1)  # (b, H, q, k)
        if iv.disabled_heads is not None:
            uniform = mask / jnp.maximum(mask.sum(-1, keepdims=True), 1)  # (b, 1, 1 or q, k)  Kovaleva's disabled head
            weights = jnp.where(_per_head(iv.disabled_heads), uniform, weights)  # (b, H, q, k)
        weights = iv.patched("weights", weights)  # (b, H, q, k)
        internal_weights = weights
        if iv.detach_weights:
            weights = jax.lax.stop_gradient(weights)
        if iv.weights_delta is not None:
            weights = weights + iv.weights_delta  # (b, H, q, k)  zero delta: ∂L/∂delta = ∂L/∂α
        probs = dropout(weights, dropout_rate, rng).astype(dt)  # (b, H, q, k)
        context = jnp.einsum("bhqk,bhkd->bhqd", probs, v)  # (b, H, q, d_h)
        if iv.head_gates is not None:
            context = context * _per_head(iv.head_gates).astype(dt)  # (b, H, q, d_h)  ξ_h · head_h
        context = iv.patched("context", context)  # (b, H, q, d_h)
        out = self.out(jnp.moveaxis(context, 1, 2))  # (b, q, D)
        internals = {
            "weights": internal_weights,  # (b, H, q, k) α, float32
            "values": v,  # (b, H, k, d_h) v_hj
            "context": context,  # (b, H, q, d_h) per-head output before W_O (after the gate)
            "output": out,  # (b, q, D) Σ_h Σ_j α f_h(x_j) + b_O
        }
        return out, internals


def _receivers(attn: MultiHeadAttention, q, k, v, iv: Interventions, query_shape: tuple[int, ...]):
    """The heads marked in ``iv.patch``'s ``query_input`` / ``key_input`` / ``value_input`` (each
    (input (b, n, D), where (1|b, H))) compute q, k or v from that input instead of the block's,
    whose shape (``query_shape`` (b, q, D); keys (b, k, D)) the input must have."""
    patch = iv.patch
    key_shape = (*query_shape[:1], k.shape[2], query_shape[-1])  # (b, k, D)
    if "query_input" in patch:
        x, where = iv.receiver("query_input", query_shape)
        q = blend(q, attn.query(x.astype(q.dtype)), where[:, None, :, None])  # (b, q, H, d_h)
    if "key_input" in patch:
        x, where = iv.receiver("key_input", key_shape)
        k = blend(k, attn.per_query_head(jnp.moveaxis(attn.key(x.astype(k.dtype)), 2, 1)),
                  where[:, :, None, None])  # (b, H, k, d_h)
    if "value_input" in patch:
        x, where = iv.receiver("value_input", key_shape)
        v = blend(v, attn.per_query_head(jnp.moveaxis(attn.value(x.astype(v.dtype)), 2, 1)),
                  where[:, :, None, None])  # (b, H, k, d_h)
    return q, k, v


def post_ln_attention(attn: MultiHeadAttention, ln: LayerNorm, x, kv, allowed, iv: Interventions, *,
                      attention_dropout: float, dropout_rate: float, rng=None, score_bias=None):
    """h = LN(x + Attn(x, kv)), the post-LayerNorm attention sublayer (Vaswani et al. 2017, §3.1).

    ``kv`` is the keys' input (b, k, D), or already projected (keys, values) (b, H, k, d_h) as
    cached decoding holds them; ``score_bias`` (H, q, k) or None is added to the scores.
    Returns (h (b, q, D), internals): the attention's, plus ``residual`` x (b, q, D),
    ``pre_ln`` x + y (the vector the LayerNorm normalises) and ``attention_ln_out`` h.
    """
    r = split_rng(rng, 2)
    patched = iv.patched("residual", x)  # (b, q, D)
    kv, x = patched if kv is x else kv, patched  # self-attention reads the patched stream for keys and values too
    k, v = attn.keys_values(kv) if not isinstance(kv, tuple) else kv
    y, internals = attn(x, k, v, allowed, iv, dropout_rate=attention_dropout, rng=r[0],
                        score_bias=score_bias)  # (b, q, D)
    pre_ln = x + dropout(y, dropout_rate, r[1])  # (b, q, D)
    h = ln(pre_ln, _sigma(pre_ln, ln, iv))  # (b, q, D)
    internals.update(residual=x, pre_ln=pre_ln, attention_ln_out=h)
    return h, internals


def post_ln_ffn(ffn_in: Dense, ffn_out: Dense, ln: LayerNorm, h, iv: Interventions, *, activation: str,
                activation_dropout: float, dropout_rate: float, rng=None):
    """LN(h + W_2 act(W_1 h + b_1) + b_2), the post-LayerNorm feed-forward sublayer (Vaswani et al.
    2017, Eq. 2). h (b, n, D) -> (out (b, n, D), internals): ``ffn_activation`` act(W_1 h + b_1)
    (b, n, F) (before dropout), ``ffn_output`` W_2 a + b_2 (b, n, D) (before the residual),
    ``ffn_pre_ln`` h + FFN(h) (b, n, D). The patch sites ``ffn_residual`` (h), ``ffn_output`` and
    ``layer_output`` (out) apply here (``jattn.nn.interventions.PATCH_SITES``)."""
    r = split_rng(rng, 2)
    h = iv.patched("ffn_residual", h)  # (b, n, D)
    a = ffn_hidden(ffn_in, h, activation)  # (b, n, F)
    y = iv.patched("ffn_output", ffn_out(dropout(a, activation_dropout, r[0])))  # (b, n, D)
    pre_ln = h + dropout(y, dropout_rate, r[1])  # (b, n, D)
    out = iv.patched("layer_output", ln(pre_ln, _sigma(pre_ln, ln, iv)))  # (b, n, D)
    return out, {"ffn_activation": a, "ffn_output": y, "ffn_pre_ln": pre_ln}


def pre_ln_attention(attn: MultiHeadAttention, ln: LayerNorm, x, kv, allowed, iv: Interventions, *,
                     attention_dropout: float, dropout_rate: float, rng=None, score_bias=None, post_ln=None):
    """h = x + Attn(LN(x), kv), the pre-LayerNorm attention sublayer (Xiong et al. 2020, Eq. 3;
    Wang et al. 2019): the LayerNorm normalises the block's input, the residual bypasses it.

    ``kv`` as ``post_ln_attention``'s; self-attention (``kv is x``) reads LN(x) for keys and values,
    cross-attention reads ``kv`` as given (the encoder's output, already normalised). Returns
    (h (b, q, D), internals): the attention's, plus ``residual`` x, ``pre_ln`` x (the vector the
    LayerNorm normalises: the block input here) and ``attention_ln_out`` LN(x) (the attention's
    input). h itself is the feed-forward sublayer's ``ffn_pre_ln``. ``post_ln``: a norm on the
    attention's output before the residual, h = x + post_ln(Attn(LN(x))) (Gemma Team 2024's sandwich;
    ``output`` stays the attention's output before it).
    """
    r = split_rng(rng, 2)
    patched = iv.patched("residual", x)  # (b, q, D)
    self_attention, x = kv is x, patched
    u = ln(x, _sigma(x, ln, iv))  # (b, q, D)
    kv = u if self_attention else kv
    k, v = attn.keys_values(kv) if not isinstance(kv, tuple) else kv
    y, internals = attn(u, k, v, allowed, iv, dropout_rate=attention_dropout, rng=r[0],
                        score_bias=score_bias)  # (b, q, D)
    h = x + dropout(y if post_ln is None else post_ln(y), dropout_rate, r[1])  # (b, q, D)
    internals.update(residual=x, pre_ln=x, attention_ln_out=u)
    return h, internals


def pre_ln_ffn(ffn_in: Dense, ffn_out: Dense, ln: LayerNorm, h, iv: Interventions, *, activation: str,
               activation_dropout: float, dropout_rate: float, rng=None, post_ln=None):
    """h + W_2 act(W_1 LN(h) + b_1) + b_2, the pre-LayerNorm feed-forward sublayer (Xiong et al.
    2020). h (b, n, D) -> (out (b, n, D), internals): ``ffn_activation`` (b, n, F), ``ffn_output``
    W_2 a + b_2 (b, n, D), ``ffn_pre_ln`` h (the vector the LayerNorm normalises). Patch sites as
    ``post_ln_ffn``'s; ``post_ln`` as ``pre_ln_attention``'s (``ffn_output`` before it)."""
    r = split_rng(rng, 2)
    h = iv.patched("ffn_residual", h)  # (b, n, D)
    a = ffn_hidden(ffn_in, ln(h, _sigma(h, ln, iv)), activation)  # (b, n, F)
    y = iv.patched("ffn_output", ffn_out(dropout(a, activation_dropout, r[0])))  # (b, n, D)
    out = iv.patched("layer_output", h + dropout(y if post_ln is None else post_ln(y), dropout_rate, r[1]))  # (b, n, D)
    return out, {"ffn_activation": a, "ffn_output": y, "ffn_pre_ln": h}


SUBLAYERS = {"post": (post_ln_attention, post_ln_ffn), "pre": (pre_ln_attention, pre_ln_ffn)}  # by norm_position


def _sigma(pre_ln, ln, iv: Interventions):
    """The normaliser ``ln``'s divisor of ``pre_ln`` (its σ) with its gradient stopped when
    ``iv.detach_ln``; else None (the normaliser computes it)."""
    return jax.lax.stop_gradient(ln.sigma(pre_ln)) if iv.detach_ln else None  # (b, n, 1)


def block_view(attn: MultiHeadAttention, ln: LayerNorm, ffn_ln: LayerNorm | None = None) -> dict:
    """The parameters the norm-based methods read for one attention sublayer (stacked or not):
    ``out_kernel`` W_O (…, H, d_h, D), ``out_bias`` b_O, ``ln_scale`` γ, ``ln_bias`` β (…, D), and
    ``ffn_ln_scale`` (the next LayerNorm's γ) when given."""
    out_bias = jnp.zeros(attn.out.kernel.shape[:-3] + attn.out.kernel.shape[-1:]) if attn.out.bias is None \
        else attn.out.bias[...]  # (…, D): zeros without a bias
    view = {"out_kernel": attn.out.kernel[...], "out_bias": out_bias, "ln_scale": ln.scale[...], "ln_bias": ln.beta()}
    if ffn_ln is not None:
        view["ffn_ln_scale"] = ffn_ln.scale[...]
    return view


def transformed_vectors(values: jax.Array, out_kernel: jax.Array) -> jax.Array:
    """f_h(x_j) = v_hj W_O^h (Kobayashi et al. 2020, Eq. 5) for one attention block.

    values (b, H, n, d_h), out_kernel (H, d_h, D) -> (b, H, n, D). For internals stacked over
    layers, ``jax.vmap`` it over the leading layer axis.
    """
    return jnp.einsum("bhnd,hde->bhne", values, out_kernel)  # (b, H, n, D)
