"""Encoder–decoder Transformer as a pure function (Vaswani et al. 2017, §3.1), configured for
Hugging Face Marian (Opus-MT; Junczys-Dowmunt et al. 2018) and FSMT (fairseq WMT19; Ng et al. 2019).

``forward(params, config, batch, *, head_gates, disabled_heads) -> (outputs, internals)``.
Every block is post-LayerNorm: x -> LN(x + Sublayer(x)). The L identical layers of each stack
are stacked on a leading axis and run with ``jax.lax.scan``; internals come out as (L, ...) for
the three attention types, keyed ``"encoder"`` (self), ``"decoder"`` (causal self) and
``"cross"`` (decoder queries on encoder outputs). Interventions are dicts with the same keys,
each an (L, H) array (see ``jattn.nn.attention`` for what a gate and a disabled head do).

Params pytree (kernels are (in, out); attention kernels split by head, as in the encoder):
  embeddings: shared (V, D)  or  source (V_src, D) + target (V_tgt, D)
  output (V_tgt, D): the output projection when it is not tied to the target embeddings
  final_logits_bias (V_tgt,): Marian only
  encoder.layers (leading axis L_enc): self_attn {query, key, value, out}, self_attn_ln,
      ffn_in, ffn_out, ffn_ln
  decoder.layers (leading axis L_dec): self_attn, self_attn_ln, cross_attn, cross_attn_ln,
      ffn_in, ffn_out, ffn_ln
Positions are sinusoidal (not parameters), in the family's layout (``sinusoid_table``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jattn.config import Seq2SeqConfig
from jattn.nn.attention import dense, dropout, layer_norm, multi_head_attention
from jattn.nn.encoder import ACT

KINDS = ("encoder", "decoder", "cross")


@functools.lru_cache(maxsize=16)
def sinusoid_table(config: Seq2SeqConfig) -> np.ndarray:
    """The fixed position table (Vaswani et al. 2017, §3.5), rows indexed by position id.

    marian: row p = [sin(p ω_0..ω_{D/2-1}), cos(p ω_0..ω_{D/2-1})], ω_i = 10000^(-2i/D),
      rows 0..P-1, computed in float64 (HF ``MarianSinusoidalPositionalEmbedding``).
    fairseq: ω_i = exp(-i log(10000) / (D/2 - 1)), same sin|cos halves, computed in float32,
      P + pad + 1 rows with the ``pad_token_id`` row zero (tensor2tensor's variant).
    """
    D, P = config.d_model, config.max_position_embeddings
    if config.positions == "marian":
        omega = np.power(10000.0, -2.0 * np.arange(D // 2) / D)  # (D/2,)
        angles = np.arange(P)[:, None] * omega[None]  # (P, D/2)
        return np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)  # (P, D)
    n, half = P + config.pad_token_id + 1, D // 2
    omega = np.exp(np.arange(half, dtype=np.float32) * np.float32(-np.log(10000) / (half - 1)))  # (D/2,)
    angles = np.arange(n, dtype=np.float32)[:, None] * omega[None]  # (n, D/2) float32
    table = np.concatenate([np.sin(angles), np.cos(angles)], 1)  # (n, D)
    table[config.pad_token_id] = 0.0
    return table


def position_ids(config: Seq2SeqConfig, ids: jax.Array, offset=0) -> jax.Array:
    """Row of ``sinusoid_table`` for each token; ``offset`` = tokens already decoded.

    marian: offset + 0..n-1. fairseq: real tokens numbered from pad+1 (+offset), padding
    gets the zero row ``pad`` — fairseq's ``make_positions``, also in incremental decoding.
    """
    if config.positions == "marian":
        return jnp.broadcast_to(jnp.arange(ids.shape[1]) + offset, ids.shape)  # (b, n)
    real = (ids != config.pad_token_id).astype(jnp.int32)  # (b, n)
    return jnp.cumsum(real, axis=1) * real + config.pad_token_id + offset  # (b, n)


def embedding_table(params, side: str) -> jax.Array:
    """Token table of ``side`` ("source" | "target"): (V, D)."""
    emb = params["embeddings"]
    return emb["shared"] if "shared" in emb else emb[side]


def embed(params, config: Seq2SeqConfig, ids, side: str, dtype, rng, offset=0) -> jax.Array:
    """Scaled token embedding + sinusoidal position, then dropout. ids (b, n) -> (b, n, D)."""
    scale = np.sqrt(config.d_model) if config.scale_embedding else 1.0
    tokens = embedding_table(params, side)[ids] * scale  # (b, n, D)
    pos = jnp.asarray(sinusoid_table(config))[position_ids(config, ids, offset)]  # (b, n, D)
    return dropout((tokens + pos).astype(dtype), config.dropout, rng)


def _split(rng, n):
    return [None] * n if rng is None else list(jax.random.split(rng, n))


def attention_block(p, ln, config: Seq2SeqConfig, x, kv, allowed, gate, disabled, rng):
    """Post-LN attention sublayer h = LN(x + Attn(x, kv)); returns (h, internals)."""
    r = _split(rng, 2)
    attn_out, att = multi_head_attention(p, x, kv, allowed, gate, disabled,
                                         dropout_rate=config.attention_dropout, rng=r[0])  # (b, q, D)
    pre_ln = x + dropout(attn_out, config.dropout, r[1])  # (b, q, D)
    h = layer_norm(ln, pre_ln, config.layer_norm_eps)  # (b, q, D)
    internals = dict(
        att,
        residual=x,  # (b, q, D) the block input x_i, added back after attention
        pre_ln=pre_ln,  # (b, q, D) x_i + y_i, the vector the LayerNorm normalises
        ln_scale=ln["scale"],  # (D,) γ
        ln_bias=ln["bias"],  # (D,) β
        attention_ln_out=h,  # (b, q, D)
    )
    return h, internals


def ffn_block(p, config: Seq2SeqConfig, h, rng) -> jax.Array:
    """Post-LN position-wise feed-forward sublayer (Vaswani et al. 2017, Eq. 2). (b, n, D)."""
    r = _split(rng, 2)
    a = dropout(ACT[config.activation](dense(p["ffn_in"], h)), config.activation_dropout, r[0])  # (b, n, F)
    ff = dense(p["ffn_out"], a)  # (b, n, D)
    return layer_norm(p["ffn_ln"], h + dropout(ff, config.dropout, r[1]), config.layer_norm_eps)


def interventions(config: Seq2SeqConfig, head_gates, disabled_heads):
    """Fill and check the per-kind (L, H) gate and disabled-head arrays."""
    shapes = {"encoder": (config.encoder_layers, config.encoder_heads),
              "decoder": (config.decoder_layers, config.decoder_heads),
              "cross": (config.decoder_layers, config.decoder_heads)}
    out = {}
    for name, given, default, dtype in (("head_gates", head_gates, jnp.ones, jnp.float32),
                                        ("disabled_heads", disabled_heads, jnp.zeros, bool)):
        given = {} if given is None else dict(given)
        unknown = set(given) - set(KINDS)
        if unknown:
            raise ValueError(f"{name} keys must be among {KINDS}, got {sorted(unknown)}")
        arrays = {}
        for kind, shape in shapes.items():
            a = default(shape, dtype) if given.get(kind) is None else jnp.asarray(given[kind], dtype)
            if a.shape != shape:
                raise ValueError(f"{name}[{kind!r}] must have shape (L, H) = {shape}, got {a.shape}")
            arrays[kind] = a
        out[name] = arrays
    return out["head_gates"], out["disabled_heads"]


def encode(params, config: Seq2SeqConfig, input_ids, attention_mask, gates, disabled, rng=None,
           dtype=jnp.float32):
    """Encoder stack. input_ids, attention_mask (b, s) -> (b, s, D), internals stacked (L_enc, ...)."""
    r = _split(rng, 2)
    x = embed(params, config, input_ids, "source", dtype, r[0])  # (b, s, D)
    allowed = attention_mask.astype(bool)[:, None, :]  # (b, 1, s)
    layer_rngs = None if rng is None else jax.random.split(r[1], config.encoder_layers)

    def step(x, xs):
        p, gate, dis, lr = xs
        lr = _split(lr, 2)
        h, internals = attention_block(p["self_attn"], p["self_attn_ln"], config, x, x, allowed, gate, dis, lr[0])
        return ffn_block(p, config, h, lr[1]), internals

    return jax.lax.scan(step, x, (params["encoder"]["layers"], gates, disabled, layer_rngs))


def decode(params, config: Seq2SeqConfig, encoder_out, attention_mask, decoder_input_ids,
           decoder_attention_mask, gates, disabled, rng=None, dtype=jnp.float32):
    """Decoder stack with teacher forcing. encoder_out (b, s, D), decoder_input_ids (b, t) ->
    (b, t, D) and internals {"decoder": (L_dec, ...), "cross": (L_dec, ...)}.

    ``gates`` and ``disabled`` are dicts with "decoder" and "cross" (L_dec, H) arrays.
    """
    r = _split(rng, 2)
    t = decoder_input_ids.shape[1]
    y = embed(params, config, decoder_input_ids, "target", dtype, r[0])  # (b, t, D)
    causal = jnp.tril(jnp.ones((t, t), bool))[None] & decoder_attention_mask.astype(bool)[:, None, :]  # (b, t, t)
    cross_allowed = attention_mask.astype(bool)[:, None, :]  # (b, 1, s)
    layer_rngs = None if rng is None else jax.random.split(r[1], config.decoder_layers)

    def step(y, xs):
        p, g_self, d_self, g_cross, d_cross, lr = xs
        lr = _split(lr, 3)
        h, self_int = attention_block(p["self_attn"], p["self_attn_ln"], config, y, y, causal,
                                      g_self, d_self, lr[0])  # (b, t, D)
        h, cross_int = attention_block(p["cross_attn"], p["cross_attn_ln"], config, h, encoder_out,
                                       cross_allowed, g_cross, d_cross, lr[1])  # (b, t, D)
        return ffn_block(p, config, h, lr[2]), {"decoder": self_int, "cross": cross_int}

    xs = (params["decoder"]["layers"], gates["decoder"], disabled["decoder"], gates["cross"],
          disabled["cross"], layer_rngs)
    return jax.lax.scan(step, y, xs)


def output_logits(params, config: Seq2SeqConfig, h: jax.Array) -> jax.Array:
    """Output projection (tied to the target embeddings or not) + Marian's final_logits_bias.
    h (b, t, D) -> (b, t, V_tgt), float32."""
    table = params["output"] if "output" in params else embedding_table(params, "target")  # (V, D)
    logits = jnp.einsum("btd,vd->btv", h, table.astype(h.dtype)).astype(jnp.float32)  # (b, t, V)
    if "final_logits_bias" in params:
        logits = logits + params["final_logits_bias"]
    return logits


def default_decoder_mask(config: Seq2SeqConfig, decoder_input_ids):
    """HF's default when no decoder mask is given: Marian attends to every target position (its
    start token is the pad id); FSMT masks pad tokens. (b, t) -> (b, t) int."""
    if config.model_type == "marian":
        return jnp.ones_like(decoder_input_ids)
    return (decoder_input_ids != config.pad_token_id).astype(jnp.int32)


def forward(params, config: Seq2SeqConfig, batch: dict, *, head_gates=None, disabled_heads=None,
            dropout_rng=None, compute_dtype=jnp.float32):
    """Teacher-forced encoder–decoder pass; returns (outputs, internals).

    batch: ``input_ids``, ``attention_mask`` (b, s); ``decoder_input_ids`` (b, t) and optional
    ``decoder_attention_mask`` (b, t) (default as HF: see ``default_decoder_mask``). head_gates /
    disabled_heads: dicts keyed "encoder", "decoder", "cross" of (L, H) arrays (missing = none).
    ``dropout_rng`` None means evaluation.

    outputs: ``logits`` (b, t, V), ``encoder_last_hidden_state`` (b, s, D),
    ``decoder_last_hidden_state`` (b, t, D). internals: {"encoder", "decoder", "cross"}, each
    the entries of ``attention_block`` stacked (L, ...), e.g. ``weights`` (L, b, H, q, k).
    """
    gates, disabled = interventions(config, head_gates, disabled_heads)
    r = _split(dropout_rng, 2)
    dec_mask = batch.get("decoder_attention_mask")
    if dec_mask is None:
        dec_mask = default_decoder_mask(config, batch["decoder_input_ids"])  # (b, t)
    enc, enc_int = encode(params, config, batch["input_ids"], batch["attention_mask"], gates["encoder"],
                          disabled["encoder"], r[0], compute_dtype)  # (b, s, D)
    dec, dec_int = decode(params, config, enc, batch["attention_mask"], batch["decoder_input_ids"], dec_mask,
                          gates, disabled, r[1], compute_dtype)  # (b, t, D)
    outputs = {"logits": output_logits(params, config, dec), "encoder_last_hidden_state": enc,
               "decoder_last_hidden_state": dec}
    return outputs, {"encoder": enc_int, **dec_int}
