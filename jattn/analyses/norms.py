"""Vector-norm analysis of attention (Kobayashi et al. 2020, EMNLP; 2021 extension, EMNLP).

Kobayashi et al. (2020) rewrite a multi-head attention block as
  y_i = Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O,    f_h(x_j) = v_hj W_O^h        (Eq. 5-6)
and read ‖α f_h(x_j)‖ instead of α as "how much token j contributes to token i". The 2021
extension adds the residual and the attention LayerNorm (§3, Eq. 7-9):
  S_ij = Σ_h α[h,i,j] f_h(x_j)                                              (Attn-N)
  R_ij = S_ij + δ_ij x_i                                                    (AttnRes-N)
  Z_ij = γ ⊙ (R_ij − mean(R_ij)) / sqrt(var_i + eps),  var_i of the real pre-LN vector
                                                        (AttnResLn-N; β and b_O dropped)
and the mixing ratio r_i = ‖Σ_{j≠i} V_ij‖ / (‖Σ_{j≠i} V_ij‖ + ‖V_ii‖)  for V ∈ {S, R, Z}.

The authors' code forms the (b, H, n, n, D) tensor α f. Here nothing of size n×n×D exists:
  * ‖Σ_h α f‖²[i,j] = Σ_{h,g} α[h,i,j] α[g,i,j] G_j[h,g] with the per-key head Gram matrix
    G_j[h,g] = ⟨f_h(x_j), f_g(x_j)⟩ = v_hj W_O^h W_O^gᵀ v_gjᵀ (n × H × H; f itself is never
    formed either);
  * Σ_j S_ij is the block output minus b_O, so ‖Σ_{j≠i} V_ij‖ needs only (n, D) vectors;
  * given var_i, the LayerNorm is linear, so ‖Z_ij‖ (j ≠ i) uses the Gram matrix of the
    centred, γ-scaled vectors γ ⊙ (f_h − mean f_h) — the same Gram with that map composed into
    W_O's rows — divided by sqrt(var_i + eps).

Every function takes one attention block's internals (activations, see ``jattn.nn.attention``)
and its parameter view (``view``: W_O, b_O, the LayerNorm's γ; ``EncoderLayer.view``,
``Seq2Seq.view``) without the layer axis; ``over_layers`` maps one over stacked (L, ...)
internals and views, one layer at a time.
Padding: rows of padded queries and columns of padded keys are 0 in every output.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn import state
from jattn.nn.layers import ln_sigma, safe_norm, safe_sqrt

__all__ = ["encoder_norms", "norms"]


def layer_major(path) -> int:
    """The batch axis of every stacked (L, b, ...) result at ``path``: 1 (``jattn.nn.state.on_auto_axes``)."""
    return 1


def transformed_norm(values: jax.Array, out_kernel: jax.Array) -> jax.Array:
    """‖f_h(x_j)‖ without forming f: ‖v_hj W_O^h‖² = v_hj (W_O^h W_O^hᵀ) v_hjᵀ, H times cheaper.
    values (b, H, n, d_h), out_kernel (H, d_h, D) -> (b, H, n)."""
    w = out_kernel.astype(jnp.float32)
    m = jnp.einsum("hde,hfe->hdf", w, w)  # (H, d_h, d_h)
    v = values.astype(jnp.float32)
    sq = jnp.einsum("bhnd,hdf,bhnf->bhn", v, m, v)  # (b, H, n)
    return safe_sqrt(sq)


def head_gram(values: jax.Array, out_kernel: jax.Array) -> jax.Array:
    """G_j[h,g] = ⟨f_h(x_j), f_g(x_j)⟩ = v_hj (W_O^h W_O^gᵀ) v_gjᵀ, without forming f.

    values (b, H, n, d_h), out_kernel (H, d_h, D) -> (b, n, H, H). One head h at a time
    (``lax.map``): v_h (b·n, d_h) @ [W_O^h W_O^gᵀ]_g (d_h, H·d_h), then a product with v
    reduced over d_h — the same b·n·D² multiply-adds as forming f, but a (b·n, D) working set
    instead of (b, H, n, D) (several times faster on CPU than the (b, n)-batched H×H matmuls).
    """
    b, H, n, d = values.shape
    w = out_kernel.astype(jnp.float32)
    k = jnp.einsum("hde,gfe->hdgf", w, w).reshape(H, d, H * d)  # (H, d_h, H·d_h)  W_O^h W_O^gᵀ
    v = values.astype(jnp.float32)
    vt = jnp.transpose(v, (1, 0, 2, 3)).reshape(H, b * n, d)  # (H, b·n, d_h)
    vn = jnp.transpose(v, (0, 2, 1, 3)).reshape(b * n, H, d)  # (b·n, H, d_h)
    rows = jax.lax.map(lambda x: (jnp.matmul(x[0], x[1]).reshape(b * n, H, d) * vn).sum(-1), (vt, k))  # (H, b·n, H)
    return jnp.transpose(rows, (1, 0, 2)).reshape(b, n, H, H)  # (b, n, H, H)


def quadratic_norm(weights: jax.Array, gram: jax.Array) -> jax.Array:
    """‖Σ_h α[h,i,j] u_h(x_j)‖ from the Gram matrix of the u_h(x_j).

    weights (b, H, q, k), gram (b, k, H, H) -> (b, q, k): Σ_h α_h² G[h,h] + 2 Σ_{h<g} α_h α_g G[h,g]
    as H(H+1)/2 fused elementwise terms, clipped at 0 against rounding before the square root
    (``safe_sqrt``: gradient 0, not NaN, at a masked pair's 0).
    """
    H = weights.shape[1]
    sq = jnp.zeros(weights.shape[:1] + weights.shape[2:], jnp.float32)  # (b, q, k)
    for h in range(H):
        for g in range(h, H):
            sq = sq + (1.0 if g == h else 2.0) * weights[:, h] * weights[:, g] * gram[:, None, :, h, g]
    return safe_sqrt(sq)


def diagonal_sum(weights: jax.Array, values: jax.Array, out_kernel: jax.Array) -> jax.Array:
    """S_ii = Σ_h α[h,i,i] f_h(x_i) as one (b·n, D) @ (D, D) product. -> (b, n, D)"""
    b, H, n, d = values.shape
    a_ii = jnp.diagonal(weights, axis1=-2, axis2=-1)  # (b, H, n)
    c = (a_ii[..., None] * values.astype(jnp.float32)).transpose(0, 2, 1, 3).reshape(b, n, H * d)  # (b, n, D)
    return c @ out_kernel.astype(jnp.float32).reshape(H * d, -1)  # (b, n, D)


def _masks(weights, q_mask, k_mask):
    b, _, q, k = weights.shape
    q_mask = jnp.ones((b, q), bool) if q_mask is None else q_mask.astype(bool)  # (b, q)
    k_mask = jnp.ones((b, k), bool) if k_mask is None else k_mask.astype(bool)  # (b, k)
    return q_mask, k_mask, q_mask[:, :, None] & k_mask[:, None, :]  # (b, q), (b, k), (b, q, k)


def attention_norms(internals: dict, view: dict, q_mask=None, k_mask=None) -> dict:
    """Kobayashi et al. (2020) norms for one attention block (self- or cross-attention).

    internals: ``weights`` α (b, H, q, k), ``values`` (b, H, k, d_h); view: ``out_kernel`` (H, d_h, D).
    q_mask (b, q), k_mask (b, k): 1 on real tokens (default all real).
    Returns ``f_norm`` ‖f_h(x_j)‖ (b, H, k); ``weighted_norm`` ‖α f‖ = α‖f‖ (b, H, q, k);
    ``summed_norm`` ‖Σ_h α f‖ (b, q, k); ``weights`` α (b, H, q, k).
    """
    alpha = internals["weights"].astype(jnp.float32)  # (b, H, q, k)
    q_mask, k_mask, pair = _masks(alpha, q_mask, k_mask)
    alpha = alpha * pair[:, None]  # (b, H, q, k)
    gram = head_gram(internals["values"], view["out_kernel"])  # (b, k, H, H)
    f_norm = safe_sqrt(jnp.diagonal(gram, axis1=-2, axis2=-1))  # (b, k, H)
    f_norm = jnp.transpose(f_norm, (0, 2, 1)) * k_mask[:, None]  # (b, H, k)
    return {
        "f_norm": f_norm,  # (b, H, k)
        "weighted_norm": alpha * f_norm[:, :, None, :],  # (b, H, q, k)
        "summed_norm": quadratic_norm(alpha, gram),  # (b, q, k)
        "weights": alpha,  # (b, H, q, k)
    }


def layer_norm_map(v: jax.Array, scale: jax.Array, sigma: jax.Array) -> jax.Array:
    """The LayerNorm as the linear map it is once the variance is fixed (β dropped):
    v (..., n, D), scale γ (D,), sigma (..., n, 1) -> γ ⊙ (v − mean v) / sigma."""
    return scale * (v - v.mean(-1, keepdims=True)) / sigma


def _ratio(mixing: jax.Array, preserving: jax.Array) -> jax.Array:
    """r_i = ‖mixing‖ / (‖mixing‖ + ‖preserving‖). (b, n, D) each -> (b, n)."""
    m = safe_norm(mixing, axis=-1)  # (b, n)
    p = safe_norm(preserving, axis=-1)  # (b, n)
    return m / jnp.maximum(m + p, jnp.finfo(jnp.float32).tiny)


def residual_norms(internals: dict, view: dict, mask: jax.Array, eps: float, norm_position: str = "post") -> dict:
    """Kobayashi et al. (2021) AttnRes-N / AttnResLn-N norms and mixing ratios of one
    self-attention block with its residual, post- or pre-LayerNorm (``norm_position``).

    internals: ``weights`` (b, H, n, n), ``values`` (b, H, n, d_h), ``output`` (b, n, D) =
    Σ_j S_ij + b_O, ``residual`` x (b, n, D), ``pre_ln`` (b, n, D) the vector the block's LayerNorm
    normalises; view: ``out_kernel`` (H, d_h, D), ``out_bias`` (D,), ``ln_scale`` γ (D,). mask
    (b, n): 1 on real tokens. eps: the LayerNorm's epsilon.

    Post-LN (BERT, post-norm NMT): h_i = LN(x_i + y_i), and Z_ij, the LN-map of R_ij, decomposes
    h_i − β exactly. Pre-LN (Xiong et al. 2020): h_i = x_i + y_i, the LayerNorm acts on each key's
    x_j inside f_h (v_hj = LN(x_j) W_V^h + b_V^h, so f_h(x_j) = v_hj W_O^h as read), and R_ij already
    decomposes h_i − b_O exactly; no LayerNorm acts on the residual sum within the block (the next
    one normalises the stream only on the feed-forward's input), so Z and its ratio are undefined
    and absent (``docs/METHODS.md``).

    Returns (b, n, n): ``attnres_norm`` ‖R_ij‖, ``attnresln_norm`` ‖Z_ij‖ (post-LN); (b, n) mixing
    ratios ``mixing_attn_w`` 1 − ᾱ_ii, ``mixing_attnres_w`` (1 − ᾱ_ii)/2 (ᾱ = head mean),
    ``mixing_attn_n``, ``mixing_attnres_n``, ``mixing_attnresln_n`` (post-LN).
    """
    alpha = internals["weights"].astype(jnp.float32)  # (b, H, n, n)
    if alpha.shape[-1] != alpha.shape[-2]:
        raise ValueError(f"residual_norms needs self-attention (q = k), got weights {alpha.shape}")
    mask, _, pair = _masks(alpha, mask, mask)
    alpha = alpha * pair[:, None]  # (b, H, n, n)
    values, w_o = internals["values"], view["out_kernel"]  # (b, H, n, d_h), (H, d_h, D)
    x = internals["residual"].astype(jnp.float32)  # (b, n, D)

    alpha_ii = jnp.diagonal(alpha, axis1=-2, axis2=-1)  # (b, H, n)
    s_ii = diagonal_sum(alpha, values, w_o)  # (b, n, D)  S_ii
    s_sum = internals["output"].astype(jnp.float32) - view["out_bias"].astype(jnp.float32)  # (b, n, D)
    mixing = s_sum - s_ii  # (b, n, D)  Σ_{j≠i} S_ij = Σ_{j≠i} R_ij
    r_ii = s_ii + x  # (b, n, D)  R_ii

    eye = jnp.eye(alpha.shape[-1], dtype=bool)  # (n, n)
    s_off = quadratic_norm(alpha, head_gram(values, w_o))  # (b, n, n)  ‖S_ij‖ = ‖R_ij‖, j ≠ i
    diag = lambda v: safe_norm(v, axis=-1)[:, :, None] * eye  # (b, n, n)
    bar_ii = alpha_ii.mean(1)  # (b, n)  ᾱ_ii
    real = mask.astype(jnp.float32)  # (b, n)
    out = {
        "attnres_norm": jnp.where(eye, diag(r_ii), s_off) * pair,  # (b, n, n)
        "mixing_attn_w": (1.0 - bar_ii) * real,  # (b, n)
        "mixing_attnres_w": 0.5 * (1.0 - bar_ii) * real,  # (b, n)
        "mixing_attn_n": _ratio(mixing, s_ii) * real,  # (b, n)
        "mixing_attnres_n": _ratio(mixing, r_ii) * real,  # (b, n)
    }
    if norm_position == "pre":
        return out
    gamma = view["ln_scale"].astype(jnp.float32)  # (D,)
    sigma = ln_sigma(internals["pre_ln"], eps)  # (b, n, 1)
    z_mixing = layer_norm_map(mixing, gamma, sigma)  # (b, n, D)  Σ_{j≠i} Z_ij
    z_ii = layer_norm_map(r_ii, gamma, sigma)  # (b, n, D)  Z_ii
    w_ln = layer_norm_map(w_o.astype(jnp.float32), gamma, jnp.ones(()))  # (H, d_h, D) rows: f ↦ γ ⊙ (f − mean f)
    z_off = quadratic_norm(alpha, head_gram(values, w_ln)) / sigma  # (b, n, n)  ‖Z_ij‖, j ≠ i
    out["attnresln_norm"] = jnp.where(eye, diag(z_ii), z_off) * pair  # (b, n, n)
    out["mixing_attnresln_n"] = _ratio(z_mixing, z_ii) * real  # (b, n)
    return out


def check_decomposable(config, what: str) -> None:
    """The residual decomposition and ALTI read a block's output as h_i = x_i + Σ_j S_ij + b_O
    (pre-LN) or its LayerNorm (post-LN); a block that normalises its sublayer's output before the
    residual sum (``config.sublayer_post_norm``, Gemma 2's post-norms) is neither, and is refused."""
    if getattr(config, "sublayer_post_norm", False):
        raise ValueError(f"{what} decomposes a block's output as x_i + Σ_j S_ij + b_O (pre-LN) or its LayerNorm "
                         "(post-LN); this model normalises each sublayer's output before the residual sum (sublayer "
                         "post-norms), which neither form covers (docs/METHODS.md). Fix: the attention-only norms "
                         "(jattn.norms without residual=True), value zeroing and attention rollout apply to it")


def over_layers(fn, internals: dict, view: dict, *args) -> dict:
    """Apply a per-block function to internals and parameter views stacked as (L, ...), one
    layer at a time (``lax.map``), so only one layer's working arrays are alive at once."""
    return jax.lax.map(lambda layer: fn(layer[0], layer[1], *args), (internals, view))


# ---------------------------------------------------------------- one-call API on a model

@partial(jax.jit, static_argnames=("config", "residual"))
def encoder_norms(params, config, inputs, residual: bool):
    """Norms of every encoder layer, computed inside the encoder's scan on each chunk of the
    batch a layer runs in, written straight into the stacked result. -> each (L, b, ...), sharded
    over the batch as ``inputs`` is (``jattn.nn.state.on_auto_axes``)."""
    from jattn.nn import encoder

    if residual:
        check_decomposable(config, "jattn.norms(residual=True)")

    def run(params, inputs):
        def layer_norms(layer, view, take):  # one chunk's internals (b', ...) -> its norms, rows (b', ...)
            mask = take(inputs["attention_mask"])  # (b', n)
            out = attention_norms(layer, view, mask, mask)
            if residual:
                out.update(residual_norms(layer, view, mask, config.layer_norm_eps, config.norm_position))
            return out

        outputs, _ = encoder.forward(params, config, inputs, layer_rows=layer_norms, internals=None)
        return outputs["layer_rows"]  # each (L, b, ...)

    return state.on_auto_axes(run, (params, inputs), inputs["attention_mask"], layer_major)


@partial(jax.jit, static_argnames=("config", "residual"))
def seq2seq_norms(params, config, inputs, residual: bool):
    """Norms of the three attention types of a translation model. -> {kind: each (L, b, ...)}."""
    from jattn.nn import seq2seq

    def run(params, inputs):
        model = seq2seq.module(params, config)
        _, internals = model(inputs)
        src, tgt = inputs["attention_mask"], inputs["decoder_attention_mask"]  # (b, s), (b, t)
        masks = {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}
        out = {kind: over_layers(attention_norms, internals[kind], model.view(kind), *masks[kind]) for kind in masks}
        if residual:  # the residual + LayerNorm decomposition needs q = k: self-attention only
            for kind in ("encoder", "decoder"):
                out[kind].update(over_layers(residual_norms, internals[kind], model.view(kind), masks[kind][0],
                                             config.layer_norm_eps, config.norm_position))
        return out

    return state.on_auto_axes(run, (params, inputs), inputs["attention_mask"], layer_major)


def norms(model, examples, *, residual: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Norm-based analysis of every attention layer of ``model`` on ``examples`` (a list, or a
    tokenized batch; see ``ModuleModel.batch``) (Kobayashi et al. 2020), per attention type.

    ``{kind: arrays}`` with numpy arrays ``f_norm`` (L, b, H, k), ``weighted_norm`` (L, b, H, q, k),
    ``summed_norm`` (L, b, q, k), ``weights`` (L, b, H, q, k); padding is 0. An encoder has the
    type ``"encoder"`` (q = k = n); a translation model ``"encoder"``, ``"decoder"``, ``"cross"``
    (queries × keys: s × s, t × t, t × s). ``residual=True`` adds the 2021 extension to the
    self-attention types (see ``residual_norms``): ``attnres_norm``, ``attnresln_norm`` (L, b, n, n)
    and the five ``mixing_*`` ratios (L, b, n); a pre-LN model has no ``attnresln_norm`` nor
    ``mixing_attnresln_n`` (undefined there, ``docs/METHODS.md``).
    """
    if not hasattr(model, "norm_maps"):
        raise TypeError(f"jattn.norms takes a model from jattn.load, got {type(model).__name__}")
    maps = model.norm_maps(model.batch(examples), residual)
    return {kind: jax.tree.map(np.asarray, maps[kind]) for kind in model.head_shapes}  # the types in order
