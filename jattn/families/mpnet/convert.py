"""Key table for MPNet checkpoints (``MPNetModel``, ``MPNetForMaskedLM``,
``MPNetForSequenceClassification``) -> jattn encoder params.

BERT's layout under other names: ``encoder.layer.N.attention.attn.{q,k,v,o}`` for the
attention projections, ``attention.LayerNorm`` after it; no token-type table; the shared
relative-position table ``encoder.relative_attention_bias.weight`` (32, H) becomes
``relative_bias``. The pooler, the masked-LM head (``lm_head``, its decoder tied to the word
embeddings or, with ``tie_word_embeddings: false``, its own, as BERT's: ``mlm_state``; Hugging
Face applies exact GELU there whatever ``hidden_act`` says: ``mlm_activation``) and the
dense–tanh classification head (``classifier.dense`` / ``classifier.out_proj``) are converted
when present; every row carries its inverse, so a fine-tuned or pruned model is exported as a
folder Hugging Face reads (a pruned one as transformers 4.x wrote ``pruned_heads``; the relative
table keeps every original head's column).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts.post_ln_encoder import mlm_output_entries, mlm_state, untied_bias
from jattn.families.spec import encoder_hf_config
from jattn.io.hf import (Entry, apply_table, linear, split_heads_bias, split_heads_in, split_heads_out,
                         to_state_dict)
from jattn.nn.config import EncoderConfig

PREFIX = "mpnet."  # the base model's key prefix in task models


def _ln(key: str, path: tuple, d: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,)), Entry(f"{key}.bias", path + ("bias",), (d,))]


def _dense(key: str, path: tuple, n_in: int, n_out: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("kernel",), *linear(n_in, n_out)),
            Entry(f"{key}.bias", path + ("bias",), (n_out,))]


def encoder_entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, d_h, F = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size
    heads = c.pruned.heads if c.pruned else H  # the relative table's columns: every original head
    entries = [
        Entry(f"{prefix}embeddings.word_embeddings.weight", ("embeddings", "word"), (c.vocab_size, D)),
        Entry(f"{prefix}embeddings.position_embeddings.weight", ("embeddings", "position"),
              (c.max_position_embeddings, D)),
        *_ln(f"{prefix}embeddings.LayerNorm", ("embeddings", "ln"), D),
        Entry(f"{prefix}encoder.relative_attention_bias.weight", ("relative_bias",),
              (c.relative_position_buckets, heads)),
    ]
    counts = c.pruned.counts if c.pruned else (H,) * c.num_layers  # heads stored per layer (pruned: fewer)
    for i, h in enumerate(counts):
        k, p = f"{prefix}encoder.layer.{i}", ("layers", i)
        for hf_name, name in (("q", "query"), ("k", "key"), ("v", "value")):
            entries += [
                Entry(f"{k}.attention.attn.{hf_name}.weight", p + ("attention", name, "kernel"),
                      *split_heads_in(D, h, d_h, H)),
                Entry(f"{k}.attention.attn.{hf_name}.bias", p + ("attention", name, "bias"),
                      *split_heads_bias(h, d_h, H)),
            ]
        entries += [
            Entry(f"{k}.attention.attn.o.weight", p + ("attention", "out", "kernel"), *split_heads_out(D, h, d_h, H)),
            Entry(f"{k}.attention.attn.o.bias", p + ("attention", "out", "bias"), (D,)),
            *_ln(f"{k}.attention.LayerNorm", p + ("attention_ln",), D),
            *_dense(f"{k}.intermediate.dense", p + ("ffn_in",), D, F),
            *_dense(f"{k}.output.dense", p + ("ffn_out",), F, D),
            *_ln(f"{k}.output.LayerNorm", p + ("ffn_ln",), D),
        ]
    return entries


def head_entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    """Pooler, masked-LM head and classification head, as ``c`` says the checkpoint has them."""
    D = c.hidden_size
    entries = _dense(f"{prefix}pooler.dense", ("pooler",), D, D) if c.with_pooler else []
    if c.num_labels:
        entries += _dense("classifier.dense", ("classifier", "dense"), D, D)
        entries += _dense("classifier.out_proj", ("classifier", "out"), D, c.num_labels)
    if c.with_mlm_head:
        entries += _dense("lm_head.dense", ("mlm_head", "transform"), D, D)
        entries += _ln("lm_head.layer_norm", ("mlm_head", "ln"), D)
        entries += mlm_output_entries(c, "lm_head")
    return entries


# Known tensors that jattn does not use: the position-id buffer (and the MLM head's, mlm_state).
IGNORED = (r"(mpnet\.)?embeddings\.position_ids",)


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    labels = int(state["classifier.out_proj.bias"].shape[0]) if "classifier.out_proj.bias" in state else 0
    config = dataclasses.replace(config, with_pooler=f"{prefix}pooler.dense.weight" in state,
                                 with_mlm_head="lm_head.bias" in state, num_labels=labels)
    state, unread = mlm_state(state, config, "lm_head", f"{prefix}embeddings.word_embeddings.weight", source)
    return apply_table(state, encoder_entries(config, prefix) + head_entries(config, prefix), IGNORED + unread,
                       source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict, the inverse of ``convert``: the task model's layout
    (``MPNetForSequenceClassification``, ``MPNetForMaskedLM``) when ``config`` has a head."""
    prefix = PREFIX if config.num_labels or config.with_mlm_head else ""
    return untied_bias(to_state_dict(params, encoder_entries(config, prefix) + head_entries(config, prefix)),
                       config, "lm_head")


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head)."""
    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    return encoder_hf_config(config, "MPNet" + head, label_names,
                             relative_attention_num_buckets=config.relative_position_buckets)
