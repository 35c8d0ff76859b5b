"""Key table for RoBERTa-PreLayerNorm checkpoints (``RobertaPreLayerNormModel``,
``...ForMaskedLM``, ``...ForSequenceClassification``) -> jattn encoder params.

RoBERTa's tables (``jattn.families.layouts.post_ln_encoder``) under ``roberta_prelayernorm.``, with the
LayerNorms where a pre-LN block reads them: a block's attention LayerNorm is
``attention.LayerNorm`` (before the attention), its feed-forward LayerNorm
``intermediate.LayerNorm`` (before ``intermediate.dense``), and the final LayerNorm on the last
layer's output is ``roberta_prelayernorm.LayerNorm``. Every row carries its inverse (export)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from jattn.families.layouts import post_ln_encoder
from jattn.families.spec import encoder_hf_config
from jattn.io.hf import Entry, apply_table, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "roberta_prelayernorm."
MLM = "lm_head"
IGNORED = (r"(roberta_prelayernorm\.)?embeddings\.(position_ids|token_type_ids)",)
# BERT's post-LN key -> where the pre-LN block keeps that LayerNorm
MOVED = ((re.compile(r"(encoder\.layer\.\d+\.attention)\.output\.LayerNorm"), r"\1.LayerNorm"),
         (re.compile(r"(encoder\.layer\.\d+)\.output\.LayerNorm"), r"\1.intermediate.LayerNorm"))


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    rows = []
    for e in post_ln_encoder.encoder_entries(c, prefix) + post_ln_encoder.head_entries(c, prefix):
        key = e.key
        for pattern, repl in MOVED:
            key = pattern.sub(repl, key)
        rows.append(dataclasses.replace(e, key=key))
    D = c.hidden_size
    return rows + [Entry(f"{prefix}LayerNorm.weight", ("final_ln", "scale"), (D,)),
                   Entry(f"{prefix}LayerNorm.bias", ("final_ln", "bias"), (D,))]


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    config = dataclasses.replace(config, with_pooler=f"{prefix}pooler.dense.weight" in state,
                                 with_mlm_head=f"{MLM}.bias" in state,
                                 num_labels=post_ln_encoder.num_labels(state, config.model_type))
    state, unread = post_ln_encoder.mlm_state(state, config, MLM, f"{prefix}embeddings.word_embeddings.weight", source)
    return apply_table(state, entries(config, prefix), IGNORED + unread, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict, the inverse of ``convert`` (the task model's layout
    when ``config`` has a head)."""
    prefix = PREFIX if config.num_labels or config.with_mlm_head else ""
    return post_ln_encoder.untied_bias(to_state_dict(params, entries(config, prefix)), config, MLM)


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head)."""
    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    return encoder_hf_config(config, "RobertaPreLayerNorm" + head, label_names,
                             type_vocab_size=config.type_vocab_size, position_embedding_type="absolute")
