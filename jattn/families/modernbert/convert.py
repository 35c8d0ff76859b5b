"""Key table for ModernBERT checkpoints (``ModernBertModel``, ``...ForMaskedLM``,
``...ForSequenceClassification``; Warner et al. 2024) -> jattn encoder params.

Hugging Face fuses the query, key and value projections in one ``attn.Wqkv`` (3·H·d_h, D) (rows
q, k, v) and the FFN's input and gate in one ``mlp.Wi`` (2F, D) (rows u, g): the converter
splits them into jattn's query / key / value kernels (D, H, d_h) and the gated W_1 (D, 2, F), the
exporter joins them again. Biases, β of the LayerNorms and the decoder's bias exist only where
config.json asks for them (``attention_bias``, ``mlp_bias``, ``norm_bias``, ``classifier_bias``,
``decoder_bias``). Layer 0 has no attention LayerNorm (identity, ``first_attention_norm``): its
γ slot is filled with ones, which the model never reads (``jattn.nn.layer_terms.AttentionNorm``),
and is not exported."""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.spec import encoder_hf_config
from jattn.io import tensors
from jattn.io.hf import ConversionError, Entry, apply_table, check_tied, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "model."
IGNORED = (r"decoder\.weight",)  # the tied decoder's copy of the word embeddings (checked equal)


def _ln(key: str, path: tuple, d: int, bias: bool) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,))] + ([Entry(f"{key}.bias", path + ("bias",), (d,))]
                                                                 if bias else [])


def _dense(key: str, path: tuple, n_in: int, n_out: int, bias: bool) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("kernel",), *linear(n_in, n_out))] + (
        [Entry(f"{key}.bias", path + ("bias",), (n_out,))] if bias else [])


def _heads_in(D: int, H: int, d_h: int):
    """One of q / k / v (H·d_h, D) <-> kernel (D, H, d_h)."""
    return (H * d_h, D), lambda w: w.T.reshape(D, H, d_h), lambda k: k.reshape(D, H * d_h).T


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, d_h, F = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size
    rows = [Entry(f"{prefix}embeddings.tok_embeddings.weight", ("embeddings", "word"), (c.vocab_size, D)),
            *_ln(f"{prefix}embeddings.norm", ("embeddings", "ln"), D, c.norm_bias)]
    for i in range(c.num_layers):
        k, p = f"{prefix}layers.{i}", ("layers", i)
        rows += _ln(f"{k}.attn_norm", p + ("attention_ln",), D, c.norm_bias)
        for name in ("query", "key", "value"):
            rows.append(Entry(f"{k}.attn.W{name[0]}.weight", p + ("attention", name, "kernel"), *_heads_in(D, H, d_h)))
            if c.attention_bias:
                rows.append(Entry(f"{k}.attn.W{name[0]}.bias", p + ("attention", name, "bias"), (H * d_h,),
                                  lambda b: b.reshape(H, d_h), lambda b: b.reshape(H * d_h)))
        rows.append(Entry(f"{k}.attn.Wo.weight", p + ("attention", "out", "kernel"), (D, H * d_h),
                          lambda w: w.T.reshape(H, d_h, D), lambda w: w.reshape(H * d_h, D).T))
        if c.attention_bias:
            rows.append(Entry(f"{k}.attn.Wo.bias", p + ("attention", "out", "bias"), (D,)))
        rows += _ln(f"{k}.mlp_norm", p + ("ffn_ln",), D, c.norm_bias)
        rows.append(Entry(f"{k}.mlp.Wi.weight", p + ("ffn_in", "kernel"), (2 * F, D),
                          lambda w: w.T.reshape(D, 2, F), lambda w: w.reshape(D, 2 * F).T))
        if c.ffn_bias:
            rows.append(Entry(f"{k}.mlp.Wi.bias", p + ("ffn_in", "bias"), (2 * F,),
                              lambda b: b.reshape(2, F), lambda b: b.reshape(2 * F)))
        rows += _dense(f"{k}.mlp.Wo", p + ("ffn_out",), F, D, c.ffn_bias)
    rows += _ln(f"{prefix}final_norm", ("final_ln",), D, c.norm_bias)
    if c.with_mlm_head:
        rows += _dense("head.dense", ("mlm_head", "transform"), D, D, c.head_bias)
        rows += _ln("head.norm", ("mlm_head", "ln"), D, c.norm_bias)
        if c.mlm_output_bias:
            rows.append(Entry("decoder.bias", ("mlm_head", "bias"), (c.vocab_size,)))
    if c.num_labels:
        rows += _dense("head.dense", ("classifier", "dense"), D, D, c.head_bias)
        rows += _ln("head.norm", ("classifier", "ln"), D, c.norm_bias)
        rows += _dense("classifier", ("classifier", "out"), D, c.num_labels, True)
    return rows


def _split_fused(state: dict, c: EncoderConfig, prefix: str) -> dict:
    """``attn.Wqkv`` -> ``attn.Wq`` / ``Wk`` / ``Wv`` (rows q, k, v), and layer 0's missing attention
    LayerNorm as γ = 1 (β = 0): the slot the stacked LayerNorm has, never read."""
    state, D = dict(state), c.hidden_size
    for i in range(c.num_layers):
        k = f"{prefix}layers.{i}.attn.Wqkv"
        for part in ("weight", "bias"):
            if f"{k}.{part}" in state:
                for name, block in zip("qkv", tensors.split(state.pop(f"{k}.{part}"), 3, axis=0)):
                    state[f"{prefix}layers.{i}.attn.W{name}.{part}"] = block
    ln0 = f"{prefix}layers.0.attn_norm"
    if f"{ln0}.weight" in state:
        raise ConversionError(f"{ln0}.weight is in the checkpoint, but ModernBERT's layer 0 has no attention "
                              "LayerNorm. Fix: check that the checkpoint is a ModernBERT model")
    state[f"{ln0}.weight"] = np.ones(D, np.float32)
    if c.norm_bias:
        state[f"{ln0}.bias"] = np.zeros(D, np.float32)
    return state


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    labels = int(state["classifier.weight"].shape[0]) if "classifier.weight" in state else 0
    config = dataclasses.replace(config, with_mlm_head="head.norm.weight" in state and not labels, num_labels=labels)
    if config.with_mlm_head:
        check_tied(state, {"decoder.weight": f"{prefix}embeddings.tok_embeddings.weight"}, source,
                   "the masked-LM decoder must be the word embeddings (jattn ties it, as config.json says)")
    return apply_table(_split_fused(state, config, prefix), entries(config, prefix), IGNORED, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict, the inverse of ``convert`` (the task model's layout
    when ``config`` has a head): q, k, v joined into ``Wqkv``, layer 0's unread γ dropped."""
    prefix = PREFIX if config.num_labels or config.with_mlm_head else ""
    state = to_state_dict(params, entries(config, prefix))
    for part in ("weight", "bias"):
        state.pop(f"{prefix}layers.0.attn_norm.{part}", None)
    for i in range(config.num_layers):
        k = f"{prefix}layers.{i}.attn"
        for part in ("weight", "bias"):
            if f"{k}.Wq.{part}" in state:
                state[f"{k}.Wqkv.{part}"] = np.concatenate([state.pop(f"{k}.W{x}.{part}") for x in "qkv"], axis=0)
    return state


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head),
    in transformers 5's fields (``layer_types``, ``rope_parameters``)."""
    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    radii = config.attention_radius or (0,) * config.num_layers
    out = encoder_hf_config(config, "ModernBert" + head, label_names)
    for key in ("hidden_act", "layer_norm_eps", "hidden_dropout_prob", "attention_probs_dropout_prob"):
        out.pop(key)
    return {**out, "hidden_activation": config.hidden_act, "norm_eps": config.layer_norm_eps,
            "norm_bias": config.norm_bias, "attention_bias": config.attention_bias, "mlp_bias": config.ffn_bias,
            "classifier_bias": config.head_bias, "decoder_bias": config.mlm_output_bias,
            "classifier_activation": config.mlm_activation or config.hidden_act, "classifier_pooling": "cls",
            "classifier_dropout": config.classifier_dropout or 0.0, "attention_dropout": config.attention_dropout,
            "embedding_dropout": config.hidden_dropout, "mlp_dropout": 0.0,
            "local_attention": 2 * max(radii), "layer_types": ["sliding_attention" if r else "full_attention"
                                                                for r in radii],
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.rotary_theta},
                                "sliding_attention": {"rope_type": "default",
                                                      "rope_theta": config.local_rotary_theta or config.rotary_theta}}}
