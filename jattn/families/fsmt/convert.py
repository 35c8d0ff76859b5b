"""Key table for Hugging Face ``FSMTForConditionalGeneration`` (fairseq WMT19) checkpoints.

Blocks share Marian's names (``jattn.families.layouts.seq2seq.layer_rows``); FSMT has separate source
and target tables, an untied ``output_projection`` and no ``final_logits_bias``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.nn.config import Seq2SeqConfig
from jattn.io.hf import Entry, apply_table, to_state_dict
from jattn.families.layouts.seq2seq import layer_rows

# The saved sinusoid tables are recomputed (``jattn.nn.seq2seq.sinusoid_table``).
IGNORED = (r"model\.(encoder|decoder)\.embed_positions\.weight",)


def entries(config: Seq2SeqConfig) -> list[Entry]:
    """The key table, each row with its inverse (jattn -> HF)."""
    D = config.d_model
    tables = [
        Entry("model.encoder.embed_tokens.weight", ("embeddings", "source"), (config.src_vocab_size, D)),
        Entry("model.decoder.embed_tokens.weight", ("embeddings", "target"), (config.tgt_vocab_size, D)),
        Entry("model.decoder.output_projection.weight", ("output",), (config.tgt_vocab_size, D)),
    ]
    layers = layer_rows(config, "model.", "encoder") + layer_rows(config, "model.", "decoder")
    return tables + [dataclasses.replace(e, inverse=inv) for e, inv in layers]


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF FSMT state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    return apply_table(state, entries(config), IGNORED, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> the FSMT tensors jattn reads (the sinusoid position tables,
    which jattn recomputes, are not written)."""
    return to_state_dict(params, entries(config))
