"""BERT-family encoder as a pure function (Devlin et al. 2019; Liu et al. 2019 for RoBERTa).

``forward(params, config, batch, *, head_gates, disabled_heads) -> (outputs, internals)``.
The L identical post-LayerNorm blocks are stacked on a leading axis and run with
``jax.lax.scan``, so every internal comes out stacked as (L, ...).

Params pytree (kernels are (in, out); attention kernels split by head):
  embeddings: word (V, D), position (P, D), token_type (T, D), ln {scale, bias} (D,)
  layers (leading axis L):
    attention: query/key/value {kernel (D, H, d_h), bias (H, d_h)}, out {kernel (H, d_h, D), bias (D,)}
    attention_ln {scale, bias}: LayerNorm after the attention residual
    ffn_in {kernel (D, F), bias (F,)}, ffn_out {kernel (F, D), bias (D,)}, ffn_ln {scale, bias}
  pooler (optional): {kernel (D, D), bias (D,)}
  mlm_head (optional): transform {kernel, bias}, ln {scale, bias}, bias (V,) — decoder tied to word
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jattn.config import EncoderConfig
from jattn.nn.attention import dense, dropout, layer_norm, multi_head_attention

ACT = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


def position_ids(config: EncoderConfig, input_ids: jax.Array) -> jax.Array:
    """BERT: 0..n-1. RoBERTa: pad+1+cumulative count of real tokens, pad id on padding."""
    n = input_ids.shape[1]
    if config.model_type == "roberta":
        real = (input_ids != config.pad_token_id).astype(jnp.int32)  # (b, n)
        return jnp.cumsum(real, axis=1) * real + config.pad_token_id  # (b, n)
    return jnp.broadcast_to(jnp.arange(n), input_ids.shape)  # (b, n)


def embed(p, config: EncoderConfig, batch, dtype, rng) -> jax.Array:
    ids = batch["input_ids"]  # (b, n)
    types = batch.get("token_type_ids")
    if types is None:
        types = jnp.zeros_like(ids)  # (b, n)
    x = p["word"][ids] + p["position"][position_ids(config, ids)] + p["token_type"][types]  # (b, n, D)
    x = layer_norm(p["ln"], x, config.layer_norm_eps)  # (b, n, D)
    return dropout(x.astype(dtype), config.hidden_dropout, rng)


def encoder_layer(p, config: EncoderConfig, x, allowed, gate, disabled, rng, weights_delta=None):
    """One post-LN block: x -> LN(x + Attn(x)) -> LN(h + FFN(h)). Returns (x', internals)."""
    rngs = [None] * 3 if rng is None else list(jax.random.split(rng, 3))
    attn_out, att = multi_head_attention(
        p["attention"], x, x, allowed, gate, disabled,
        dropout_rate=config.attention_dropout, rng=rngs[0], weights_delta=weights_delta,
    )  # (b, n, D)
    pre_ln = x + dropout(attn_out, config.hidden_dropout, rngs[1])  # (b, n, D)
    h = layer_norm(p["attention_ln"], pre_ln, config.layer_norm_eps)  # (b, n, D)
    ff = dense(p["ffn_out"], ACT[config.hidden_act](dense(p["ffn_in"], h)))  # (b, n, D)
    out = layer_norm(p["ffn_ln"], h + dropout(ff, config.hidden_dropout, rngs[2]), config.layer_norm_eps)
    internals = dict(
        att,
        residual=x,  # (b, n, D) the block input x_i, added back after attention
        pre_ln=pre_ln,  # (b, n, D) x_i + y_i, the vector the attention LayerNorm normalises
        ln_scale=p["attention_ln"]["scale"],  # (D,) γ
        ln_bias=p["attention_ln"]["bias"],  # (D,) β
        attention_ln_out=h,  # (b, n, D)
    )
    return out, internals


def forward(
    params,
    config: EncoderConfig,
    batch: dict,
    *,
    head_gates: jax.Array | None = None,
    disabled_heads: jax.Array | None = None,
    dropout_rng: jax.Array | None = None,
    compute_dtype=jnp.float32,
    weights_delta: jax.Array | None = None,
    layer_reduce=None,
):
    """Run the encoder; return (outputs, internals).

    batch: ``input_ids`` (b, n) int, ``attention_mask`` (b, n) {0,1}, optional
    ``token_type_ids`` (b, n). head_gates (L, H) float, default ones; disabled_heads (L, H)
    bool, default none. ``dropout_rng`` None means evaluation (no dropout). ``weights_delta``
    (L, b, H, n, n), default None, is added to α in every layer: the gradient of a loss w.r.t.
    a zero delta is ∂L/∂α (Clark et al. 2019, Fig. 3).

    ``layer_reduce``, optional, is applied inside the scan to each layer's internals (the dict
    below without the layer axis, e.g. ``weights`` (b, H, n, n)); its results, stacked (L, ...),
    are ``outputs["layer_reduced"]``. An analysis that reduces every layer at once thus reads
    α while it is still in cache; under ``jit`` the stacked internals it does not use are
    never written.

    outputs: ``last_hidden_state`` (b, n, D), ``hidden_states`` (L+1, b, n, D).
    internals: every entry of ``multi_head_attention`` and ``encoder_layer`` stacked on a
    leading layer axis, e.g. ``weights`` (L, b, H, n, n).
    """
    L, H = config.num_layers, config.num_heads
    gates = jnp.ones((L, H), jnp.float32) if head_gates is None else jnp.asarray(head_gates)
    disabled = jnp.zeros((L, H), bool) if disabled_heads is None else jnp.asarray(disabled_heads, bool)
    if gates.shape != (L, H) or disabled.shape != (L, H):
        raise ValueError(f"head_gates and disabled_heads must have shape (L, H) = {(L, H)}, "
                         f"got {gates.shape} and {disabled.shape}")
    rngs = (None, None) if dropout_rng is None else tuple(jax.random.split(dropout_rng))
    layer_rngs = None if dropout_rng is None else jax.random.split(rngs[1], L)

    x0 = embed(params["embeddings"], config, batch, compute_dtype, rngs[0])  # (b, n, D)
    allowed = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, n)

    def step(x, xs):
        p, gate, dis, rng, delta = xs
        y, internals = encoder_layer(p, config, x, allowed, gate, dis, rng, delta)
        reduced = None if layer_reduce is None else layer_reduce(internals)
        return y, (y, internals, reduced)

    xs = (params["layers"], gates, disabled, layer_rngs, weights_delta)
    x, (hidden, internals, reduced) = jax.lax.scan(step, x0, xs)
    hidden_states = jnp.concatenate([x0[None], hidden], axis=0)  # (L+1, b, n, D)
    outputs = {"last_hidden_state": x, "hidden_states": hidden_states}
    if layer_reduce is not None:
        outputs["layer_reduced"] = reduced  # (L, ...) per layer
    return outputs, internals


def pooler(params, hidden: jax.Array) -> jax.Array:
    """BERT pooler: tanh(W h_[CLS] + b). hidden (b, n, D) -> (b, D)."""
    return jnp.tanh(dense(params["pooler"], hidden[:, 0]))


def mlm_logits(params, config: EncoderConfig, hidden: jax.Array) -> jax.Array:
    """Masked-LM head (BERT ``cls.predictions`` / RoBERTa ``lm_head``), decoder tied to the
    word embeddings. hidden (b, n, D) -> logits (b, n, V)."""
    p = params["mlm_head"]
    h = ACT[config.hidden_act](dense(p["transform"], hidden))  # (b, n, D)
    h = layer_norm(p["ln"], h, config.layer_norm_eps)  # (b, n, D)
    return h @ params["embeddings"]["word"].T.astype(h.dtype) + p["bias"]  # (b, n, V)
