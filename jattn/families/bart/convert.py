"""Key table for Hugging Face ``BartForConditionalGeneration`` / ``BartModel`` checkpoints <->
jattn seq2seq params.

The table is the seq2seq layout's (``jattn.families.layouts.seq2seq.learned_position_entries``:
Marian's block names, a learned position table and an embedding LayerNorm per side). A bare
``BartModel`` checkpoint (keys without ``model.``, no ``final_logits_bias``) is read as
``BartForConditionalGeneration.from_pretrained`` reads it: the bias is zero, the output projection
the shared table. The exporter writes the ``BartForConditionalGeneration`` layout.
"""

from __future__ import annotations

import numpy as np

from jattn.families.layouts.seq2seq import SHARED_COPIES, TIED, TIED_FIX, learned_position_entries
from jattn.families.spec import seq2seq_hf_config
from jattn.io.hf import apply_table, check_tied, to_state_dict
from jattn.nn.config import Seq2SeqConfig


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF BART state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    if "shared.weight" in state and "model.shared.weight" not in state:  # a bare BartModel
        state = {f"model.{k}": v for k, v in state.items()}
        state["final_logits_bias"] = np.zeros((1, config.tgt_vocab_size), np.float32)
    check_tied(state, {k: "model.shared.weight" for k in TIED}, source, TIED_FIX)
    return apply_table(state, learned_position_entries(config), SHARED_COPIES, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> a ``BartForConditionalGeneration`` state dict (the tied copies of
    the shared table are not written; HF ties them on load)."""
    return to_state_dict(params, learned_position_entries(config))


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The BART ``config.json`` dict describing ``config``."""
    if config.model_type != "bart":
        raise ValueError(f"only BART configs can be exported as BART folders, got model_type {config.model_type!r}")
    return seq2seq_hf_config(config, "BartForConditionalGeneration")
