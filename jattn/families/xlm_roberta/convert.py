"""Key table for XLM-RoBERTa checkpoints (``XLMRobertaModel``, ``XLMRobertaForMaskedLM``,
``XLMRobertaForSequenceClassification``) -> jattn encoder params.

Hugging Face keeps XLM-R's tensors under RoBERTa's names: the encoder under ``roberta.`` in a
task model, the masked-LM head under ``lm_head.``, the classification head as ``classifier.dense``
and ``classifier.out_proj``. So the table is RoBERTa's (``jattn.families.layouts.post_ln_encoder``), read and
written with the config seen as RoBERTa's; only the exported ``config.json`` names XLM-R's classes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts import post_ln_encoder
from jattn.nn.config import EncoderConfig

TABLE = "roberta"  # the model_type whose key table (and key prefix) XLM-R's checkpoints use


def _as_table(config: EncoderConfig) -> EncoderConfig:
    return dataclasses.replace(config, model_type=TABLE)


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (RoBERTa's table)."""
    return post_ln_encoder.convert(state, _as_table(config), source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict (``XLMRobertaForSequenceClassification``'s,
    ``XLMRobertaForMaskedLM``'s or ``XLMRobertaModel``'s layout), the inverse of ``convert``."""
    return post_ln_encoder.to_hf_state_dict(params, _as_table(config))


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The ``config.json`` dict of ``config``: RoBERTa's fields under XLM-R's model_type and classes."""
    out = post_ln_encoder.to_hf_config(_as_table(config), label_names)
    out["architectures"] = [name.replace("Roberta", "XLMRoberta", 1) for name in out["architectures"]]
    if config.classifier_dropout is not None:
        out["classifier_dropout"] = config.classifier_dropout
    return {**out, "model_type": config.model_type}
