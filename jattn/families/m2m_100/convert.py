"""Key table for Hugging Face ``M2M100ForConditionalGeneration`` / ``M2M100Model`` checkpoints
(M2M-100, NLLB-200 dense) <-> jattn seq2seq params.

The blocks share Marian's names (``jattn.families.layouts.seq2seq.layer_rows``; in a pre-LayerNorm
block each ``*_layer_norm`` normalises its sublayer's input), the final LayerNorm of each stack is
mBART's (``jattn.families.layouts.seq2seq.final_norm_rows``), one shared token table, no
``final_logits_bias``. The sinusoidal position tables are recomputed, never read
(``jattn.nn.seq2seq_embeddings.sinusoid_table``). A bare ``M2M100Model`` checkpoint (keys without
``model.``) is read as ``M2M100ForConditionalGeneration.from_pretrained`` reads it. The exporter
writes the ``M2M100ForConditionalGeneration`` layout.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts.seq2seq import TIED, TIED_FIX, final_norm_rows, layer_rows
from jattn.families.spec import seq2seq_hf_config
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict
from jattn.nn.config import Seq2SeqConfig

# Copies of the shared table that a checkpoint may also hold (tied in HF), and position tables
# older checkpoints saved (non-persistent buffers now).
IGNORED = (r"lm_head\.weight", r"model\.(encoder|decoder)\.embed_tokens\.weight",
           r"model\.(encoder|decoder)\.embed_positions\.(weights|_float_tensor)")


def entries(config: Seq2SeqConfig) -> list[Entry]:
    """The key table (``M2M100ForConditionalGeneration`` names), each row with its inverse."""
    rows = [Entry("model.shared.weight", ("embeddings", "shared"), (config.tgt_vocab_size, config.d_model))]
    layers = layer_rows(config, "model.", "encoder") + layer_rows(config, "model.", "decoder")
    return rows + [dataclasses.replace(e, inverse=inv) for e, inv in layers] + final_norm_rows(config)


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF M2M100 state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    if "shared.weight" in state and "model.shared.weight" not in state:  # a bare M2M100Model
        state = {f"model.{k}": v for k, v in state.items()}
    check_tied(state, {k: "model.shared.weight" for k in TIED}, source, TIED_FIX)
    return apply_table(state, entries(config), IGNORED, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> an ``M2M100ForConditionalGeneration`` state dict (the tied copies
    of the shared table are not written; HF ties them on load)."""
    return to_state_dict(params, entries(config))


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The M2M100 ``config.json`` dict describing ``config``."""
    if config.model_type != "m2m_100":
        raise ValueError(f"only M2M100 configs can be exported as M2M100 folders, got model_type {config.model_type!r}")
    return seq2seq_hf_config(config, "M2M100ForConditionalGeneration")
