"""Key table for ELECTRA checkpoints (``ElectraModel``, ``ElectraForPreTraining``, and the
generator ``ElectraForMaskedLM``) -> jattn encoder params.

The layers are BERT's (``jattn.families.layouts.post_ln_encoder``: the same keys); the embedding tables and
their LayerNorm have width E = ``embedding_size``, followed by ``embeddings_project`` (E -> D)
when E != D. ``ElectraForPreTraining`` keeps the encoder under ``electra.``; its replaced-token
detection head (``discriminator_predictions.dense`` D -> D, ``.dense_prediction`` D -> 1) becomes
``replaced_token_head`` (``jattn.nn.heads.ReplacedTokenHead``). The generator
(``ElectraForMaskedLM``, also under ``electra.``) has the masked-LM head
``generator_predictions.dense`` (D -> E), GELU, ``generator_predictions.LayerNorm`` (E) and
``generator_lm_head`` (E -> V, its matrix tied to the word embeddings unless
``tie_word_embeddings`` is false, its bias its own): ``mlm_head`` (``jattn.nn.heads.MLMHead``
with the transform's width E). Exported as the folder it came from: ``ElectraModel``,
``ElectraForPreTraining`` with the replaced-token head, ``ElectraForMaskedLM`` with the masked-LM
head. The classification models (``ElectraFor*Classification``) are refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.spec import encoder_hf_config
from jattn.families.layouts.post_ln_encoder import encoder_entries as bert_entries
from jattn.io.hf import ConversionError, Entry, apply_table, check_tied, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "electra."

# Known tensors that jattn does not use: buffers.
IGNORED = (r"(electra\.)?embeddings\.(position_ids|token_type_ids)",)
HEAD = "discriminator_predictions"
GENERATOR, LM_HEAD = "generator_predictions", "generator_lm_head"  # the generator's masked-LM head
# heads of other ELECTRA classes, which jattn does not implement: key prefix -> the class
REFUSED = {"classifier.": "ELECTRA classification (ElectraFor*Classification)"}


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
    if c.with_mlm_head:
        V = c.vocab_size
        rows += [Entry(f"{GENERATOR}.dense.weight", ("mlm_head", "transform", "kernel"), *linear(D, E)),
                 Entry(f"{GENERATOR}.dense.bias", ("mlm_head", "transform", "bias"), (E,)),
                 Entry(f"{GENERATOR}.LayerNorm.weight", ("mlm_head", "ln", "scale"), (E,)),
                 Entry(f"{GENERATOR}.LayerNorm.bias", ("mlm_head", "ln", "bias"), (E,)),
                 Entry(f"{LM_HEAD}.bias", ("mlm_head", "bias"), (V,))]
        if not c.tied_mlm_decoder:
            rows.append(Entry(f"{LM_HEAD}.weight", ("mlm_head", "decoder"), (V, E)))
    return rows


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    for key, kind in REFUSED.items():
        if any(k.startswith(key) for k in state):
            raise ConversionError(f"{source} is an {kind} checkpoint, whose head jattn does not implement. Fix: load "
                                  "ElectraModel, ElectraForPreTraining or ElectraForMaskedLM")
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    config = dataclasses.replace(config, with_pooler=False, with_mlm_head=f"{GENERATOR}.dense.weight" in state,
                                 num_labels=0, with_replaced_token_head=f"{HEAD}.dense.weight" in state)
    unread: tuple = ()
    if config.with_mlm_head and config.tied_mlm_decoder:  # a tied copy in the file must equal the table
        check_tied(state, {f"{LM_HEAD}.weight": f"{prefix}embeddings.word_embeddings.weight"}, source,
                   "the generator's output matrix is its own: set \"tie_word_embeddings\": false in config.json")
        unread = (rf"{LM_HEAD}\.weight",)
    return apply_table(state, entries(config, prefix), IGNORED + unread, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> an ``ElectraModel`` state dict, ``ElectraForPreTraining``'s with
    the replaced-token head or ``ElectraForMaskedLM``'s with the masked-LM head: the inverse of
    ``convert``."""
    if config.num_labels:
        raise ValueError("ELECTRA is exported without a classification head: Hugging Face's ELECTRA classification "
                         "head computes W_o·gelu(W_d·h + b_d) + b_o, which jattn does not implement. Fix: export "
                         "without the head")
    if config.with_mlm_head and config.with_replaced_token_head:
        raise ValueError("no Hugging Face ELECTRA class holds both the generator's masked-LM head and the "
                         "discriminator's replaced-token head. Fix: export a model with one of them")
    heads = config.with_replaced_token_head or config.with_mlm_head
    return to_state_dict(params, entries(config, PREFIX if heads else ""))


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The ``config.json`` dict of an ``ElectraModel`` (``ElectraForPreTraining`` with the
    replaced-token head, ``ElectraForMaskedLM`` with the masked-LM head) with ``config``'s shape."""
    if label_names:
        raise ValueError("ELECTRA is exported without a classification head; label_names do not apply")
    kind = ("ElectraForPreTraining" if config.with_replaced_token_head else
            "ElectraForMaskedLM" if config.with_mlm_head else "ElectraModel")
    return encoder_hf_config(config, kind, embedding_size=config.embedding_size or config.hidden_size,
                             type_vocab_size=config.type_vocab_size)
