"""Key table for Hugging Face ``BartForConditionalGeneration`` / ``BartModel`` checkpoints <->
jattn seq2seq params.

The blocks share Marian's names (``jattn.families.marian.convert.layer_rows``); BART adds a learned
position table and an embedding LayerNorm per side. A bare ``BartModel`` checkpoint (keys without
``model.``, no ``final_logits_bias``) is read as ``BartForConditionalGeneration.from_pretrained``
reads it: the bias is zero, the output projection the shared table. The exporter writes the
``BartForConditionalGeneration`` layout.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.spec import seq2seq_hf_config
from jattn.families.marian.convert import TIED_FIX, layer_rows
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict
from jattn.nn.config import Seq2SeqConfig

# Copies of the shared table that a checkpoint may also hold (tied in HF).
IGNORED = (r"lm_head\.weight", r"model\.(encoder|decoder)\.embed_tokens\.weight")


def entries(config: Seq2SeqConfig) -> list[Entry]:
    """The key table (``BartForConditionalGeneration`` names), each row with its inverse."""
    D, V, P = config.d_model, config.tgt_vocab_size, config.position_rows
    rows = [Entry("model.shared.weight", ("embeddings", "shared"), (V, D)),
            Entry("final_logits_bias", ("final_logits_bias",), (1, V), lambda b: b[0], lambda b: b[None])]
    for hf_side, side in (("encoder", "source"), ("decoder", "target")):
        k = f"model.{hf_side}"
        rows += [Entry(f"{k}.embed_positions.weight", ("embeddings", f"{side}_positions"), (P, D)),
                 Entry(f"{k}.layernorm_embedding.weight", ("embeddings", f"{side}_ln", "scale"), (D,)),
                 Entry(f"{k}.layernorm_embedding.bias", ("embeddings", f"{side}_ln", "bias"), (D,))]
    layers = layer_rows(config, "model.", "encoder") + layer_rows(config, "model.", "decoder")
    return rows + [dataclasses.replace(e, inverse=inv) for e, inv in layers]


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF BART state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    if "shared.weight" in state and "model.shared.weight" not in state:  # a bare BartModel
        state = {f"model.{k}": v for k, v in state.items()}
        state["final_logits_bias"] = np.zeros((1, config.tgt_vocab_size), np.float32)
    check_tied(state, {k: "model.shared.weight" for k in ("lm_head.weight", "model.encoder.embed_tokens.weight",
                                                          "model.decoder.embed_tokens.weight")}, source, TIED_FIX)
    return apply_table(state, entries(config), IGNORED, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> a ``BartForConditionalGeneration`` state dict (the tied copies of
    the shared table are not written; HF ties them on load)."""
    return to_state_dict(params, entries(config))


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The BART ``config.json`` dict describing ``config``."""
    if config.model_type != "bart":
        raise ValueError(f"only BART configs can be exported as BART folders, got model_type {config.model_type!r}")
    return seq2seq_hf_config(config, "BartForConditionalGeneration")
