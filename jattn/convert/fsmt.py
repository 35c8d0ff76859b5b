"""Key table for Hugging Face ``FSMTForConditionalGeneration`` (fairseq WMT19) checkpoints.

Blocks share Marian's names (``jattn.convert.marian.layer_rows``); FSMT has separate source
and target tables, an untied ``output_projection`` and no ``final_logits_bias``.
"""

from __future__ import annotations

import numpy as np

from jattn.config import Seq2SeqConfig
from jattn.convert.hf import Entry, apply_table
from jattn.convert.marian import layer_rows

# The saved sinusoid tables are recomputed (``jattn.nn.seq2seq.sinusoid_table``).
IGNORED = (r"model\.(encoder|decoder)\.embed_positions\.weight",)


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF FSMT state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    D = config.d_model
    entries = [
        Entry("model.encoder.embed_tokens.weight", ("embeddings", "source"), (config.src_vocab_size, D)),
        Entry("model.decoder.embed_tokens.weight", ("embeddings", "target"), (config.tgt_vocab_size, D)),
        Entry("model.decoder.output_projection.weight", ("output",), (config.tgt_vocab_size, D)),
    ]
    entries += [e for e, _ in layer_rows(config, "model.", "encoder") + layer_rows(config, "model.", "decoder")]
    return apply_table(state, entries, IGNORED, source)
