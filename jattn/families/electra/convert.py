"""Key table for ELECTRA discriminator checkpoints (``ElectraModel``, ``ElectraForPreTraining``)
-> jattn encoder params.

The layers are BERT's (``jattn.families.bert.convert``: the same keys); the embedding tables and
their LayerNorm have width E = ``embedding_size``, followed by ``embeddings_project`` (E -> D)
when E != D. ``ElectraForPreTraining`` keeps the encoder under ``electra.``; its replaced-token
detection head (``discriminator_predictions.dense`` D -> D, ``.dense_prediction`` D -> 1) becomes
``replaced_token_head`` (``jattn.nn.heads.ReplacedTokenHead``). Exported as the folder it came
from: ``ElectraModel``, or ``ElectraForPreTraining`` with the head. The generator
(``ElectraForMaskedLM``) and the classification models (``ElectraFor*Classification``) are refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.spec import encoder_hf_config
from jattn.families.bert.convert import encoder_entries as bert_entries
from jattn.io.hf import ConversionError, Entry, apply_table, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "electra."

# Known tensors that jattn does not use: buffers.
IGNORED = (r"(electra\.)?embeddings\.(position_ids|token_type_ids)",)
HEAD = "discriminator_predictions"
# heads of other ELECTRA classes, which jattn does not implement: key prefix -> the class
REFUSED = {"generator_": "ElectraForMaskedLM (the generator)",
           "classifier.": "ELECTRA classification (ElectraFor*Classification)"}


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    E, D = c.embedding_size or c.hidden_size, c.hidden_size
    emb = f"{prefix}embeddings"
    rows = [
        Entry(f"{emb}.word_embeddings.weight", ("embeddings", "word"), (c.vocab_size, E)),
        Entry(f"{emb}.position_embeddings.weight", ("embeddings", "position"), (c.max_position_embeddings, E)),
        Entry(f"{emb}.token_type_embeddings.weight", ("embeddings", "token_type"), (c.type_vocab_size, E)),
        Entry(f"{emb}.LayerNorm.weight", ("embeddings", "ln", "scale"), (E,)),
        Entry(f"{emb}.LayerNorm.bias", ("embeddings", "ln", "bias"), (E,)),
    ]
    if E != D:
        rows += [Entry(f"{prefix}embeddings_project.weight", ("embeddings", "project", "kernel"), *linear(E, D)),
                 Entry(f"{prefix}embeddings_project.bias", ("embeddings", "project", "bias"), (D,))]
    rows += [e for e in bert_entries(c, prefix) if e.path[0] != "embeddings"]  # BERT's layers
    if c.with_replaced_token_head:
        rows += [Entry(f"{HEAD}.dense.weight", ("replaced_token_head", "dense", "kernel"), *linear(D, D)),
                 Entry(f"{HEAD}.dense.bias", ("replaced_token_head", "dense", "bias"), (D,)),
                 Entry(f"{HEAD}.dense_prediction.weight", ("replaced_token_head", "out", "kernel"), *linear(D, 1)),
                 Entry(f"{HEAD}.dense_prediction.bias", ("replaced_token_head", "out", "bias"), (1,))]
    return rows


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    for key, kind in REFUSED.items():
        if any(k.startswith(key) for k in state):
            raise ConversionError(f"{source} is an {kind} checkpoint, whose head jattn does not implement. Fix: load "
                                  "the discriminator (ElectraModel or ElectraForPreTraining)")
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    config = dataclasses.replace(config, with_pooler=False, with_mlm_head=False, num_labels=0,
                                 with_replaced_token_head=f"{HEAD}.dense.weight" in state)
    return apply_table(state, entries(config, prefix), IGNORED, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> an ``ElectraModel`` state dict, or ``ElectraForPreTraining``'s with
    the replaced-token head: the inverse of ``convert``."""
    if config.num_labels or config.with_mlm_head:
        raise ValueError("ELECTRA is exported as the bare encoder: Hugging Face's ELECTRA classification head "
                         "computes W_o·gelu(W_d·h + b_d) + b_o, which jattn does not implement. Fix: export "
                         "without the head")
    return to_state_dict(params, entries(config, PREFIX if config.with_replaced_token_head else ""))


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The ``config.json`` dict of an ``ElectraModel`` (``ElectraForPreTraining`` with the
    replaced-token head) with ``config``'s shape."""
    if label_names:
        raise ValueError("ELECTRA is exported without a classification head; label_names do not apply")
    kind = "ElectraForPreTraining" if config.with_replaced_token_head else "ElectraModel"
    return encoder_hf_config(config, kind, embedding_size=config.embedding_size or config.hidden_size,
                             type_vocab_size=config.type_vocab_size)
