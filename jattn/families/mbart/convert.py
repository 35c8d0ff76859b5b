"""Key table for Hugging Face ``MBartForConditionalGeneration`` / ``MBartModel`` checkpoints <->
jattn seq2seq params.

mBART's tensors are BART's (``jattn.families.layouts.seq2seq.learned_position_entries``: the
shared table, one learned position table and one ``layernorm_embedding`` per side, the blocks under
BART's names, where in a pre-LayerNorm block ``self_attn_layer_norm`` / ``encoder_attn_layer_norm`` /
``final_layer_norm`` normalise each sublayer's input) plus the final LayerNorm of each stack,
``model.{encoder,decoder}.layer_norm`` (``jattn.families.layouts.seq2seq.final_norm_rows``). A bare
``MBartModel`` checkpoint (keys without ``model.``) and a checkpoint without
``final_logits_bias`` are read as ``MBartForConditionalGeneration.from_pretrained`` reads them:
the bias is zero. The exporter writes the ``MBartForConditionalGeneration`` layout.
"""

from __future__ import annotations

import numpy as np

from jattn.families.layouts.seq2seq import (SHARED_COPIES, TIED, TIED_FIX, final_norm_rows,
                                            learned_position_entries)
from jattn.families.spec import seq2seq_hf_config
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict
from jattn.nn.config import Seq2SeqConfig


def entries(config: Seq2SeqConfig) -> list[Entry]:
    """The key table (``MBartForConditionalGeneration`` names), each row with its inverse."""
    return learned_position_entries(config) + final_norm_rows(config)


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF mBART state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    if "shared.weight" in state and "model.shared.weight" not in state:  # a bare MBartModel
        state = {f"model.{k}": v for k, v in state.items()}
    if "final_logits_bias" not in state:  # MBartForConditionalGeneration: _keys_to_ignore_on_load_missing
        state = dict(state, final_logits_bias=np.zeros((1, config.tgt_vocab_size), np.float32))
    check_tied(state, {k: "model.shared.weight" for k in TIED}, source, TIED_FIX)
    return apply_table(state, entries(config), SHARED_COPIES, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> an ``MBartForConditionalGeneration`` state dict (the tied copies of
    the shared table are not written; HF ties them on load)."""
    return to_state_dict(params, entries(config))


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The mBART ``config.json`` dict describing ``config``."""
    if config.model_type != "mbart":
        raise ValueError(f"only mBART configs can be exported as mBART folders, got model_type {config.model_type!r}")
    return seq2seq_hf_config(config, "MBartForConditionalGeneration")
