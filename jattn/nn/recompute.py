"""A layer's attention weights recomputed from the layer's input, for analyses that read α of
several layers at once (Clark et al. 2019 §6's Jensen–Shannon between every pair of heads, LRP's
top-down pass) without keeping every layer's α (L, b, H, q, k): they keep the layers' inputs, the
``residual`` internal (L, b, q, D), and recompute the α of the layers they read, one or two at a
time. The layer runs as in the forward (its score bias, the causal mask, a local window, the
relative-position terms), so α is the forward's: α = softmax(q·k/√d_h + bias) (Vaswani et al.
2017, Eq. 1) of the layer's input."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jattn.nn import encoder, seq2seq
from jattn.nn.config import Seq2SeqConfig
from jattn.nn.engine import layer_slice
from jattn.nn.interventions import NONE


def layer_weights(params, config, kind: str, batch: dict, outputs: dict):
    """``weights(l, x) -> α (b, H, q, k)``: layer l's (an int, or traced) attention weights of
    type ``kind`` ("encoder" on an encoder or a causal LM; "encoder" | "decoder" | "cross" on a
    translation model) from x (b, q, D), the layer's input of that type (its ``residual``
    internal: a decoder layer's cross-attention reads the output of its self-attention), in
    evaluation mode. ``batch``: the forward's masks (``attention_mask`` (b, s), a translation
    model's ``decoder_attention_mask`` (b, t)); ``outputs``: the forward's, whose
    ``encoder_last_hidden_state`` (b, s, D) the cross-attention's keys and values read."""
    module = seq2seq.module(params, config) if isinstance(config, Seq2SeqConfig) else encoder.module(params, config)
    source = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, s)
    if not isinstance(config, Seq2SeqConfig):
        graphdef, stacked = nnx.split(module.layers)

        def weights(l, x):
            layer = nnx.merge(graphdef, layer_slice(stacked, l))
            return layer(x, source, NONE, None, module.score_bias(l, x.shape[1]))[1]["weights"]  # (b, H, n, n)

        return weights
    stack = module.encoder if kind == "encoder" else module.decoder
    graphdef, stacked = nnx.split(stack.layers)
    if kind == "encoder":
        allowed, keys, bias = source, None, stack.score_bias(batch["attention_mask"].shape[1])  # (H, s, s) or None
    elif kind == "decoder":
        t = batch["decoder_attention_mask"].shape[1]
        allowed = jnp.tril(jnp.ones((t, t), bool))[None] & batch["decoder_attention_mask"].astype(bool)[:, None, :]
        keys, bias = None, stack.score_bias(t)  # allowed (b, t, t), bias (H, t, t) or None
    else:
        allowed, keys, bias = source, outputs["encoder_last_hidden_state"], None  # keys, values (b, s, D)

    def weights(l, x):
        layer = nnx.merge(graphdef, layer_slice(stacked, l))
        attention = "cross" if kind == "cross" else "self"
        return layer.attend(attention, x, x if keys is None else keys, allowed, NONE, None, bias)[1]["weights"]

    return weights
