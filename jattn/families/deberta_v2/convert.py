"""Key table for DeBERTa-v2 / v3 checkpoints (``DebertaV2Model``, ``DebertaV2ForMaskedLM`` in both
head layouts, ``DebertaV2ForSequenceClassification``) -> jattn encoder params.

Per layer: ``attention.self.{query,key,value}_proj`` -> attention.{query,key,value},
``attention.self.pos_key_proj`` / ``pos_query_proj`` (without ``share_att_key``) -> positions.{key,query}
(W_{k,r}, W_{q,r} of He et al. 2021, Eq. 4); ``encoder.rel_embeddings`` -> relative_embeddings.table and
``encoder.LayerNorm`` (``norm_rel_ebd: layer_norm``) -> relative_embeddings.ln; ``pooler.dense`` (HF's
ContextPooler) -> pooler; ``classifier`` -> classifier.out; the masked-LM head's transform, LayerNorm
and bias from ``cls.predictions`` (``legacy``, the default) or ``lm_predictions.lm_head`` (its
decoder is the word-embedding table in both)."""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts.post_ln_encoder import _dense, _ln, mlm_state
from jattn.io.hf import Entry, apply_table, split_heads_bias, split_heads_in, split_heads_out, to_state_dict
from jattn.nn.config import EncoderConfig

LEGACY, CURRENT = "cls.predictions", "lm_predictions.lm_head"


def _prefix(state: dict) -> str:
    return "deberta." if any(k.startswith("deberta.embeddings.") for k in state) else ""


def encoder_entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, d_h, F, d = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size, c.disentangled
    emb = f"{prefix}embeddings"
    entries = [Entry(f"{emb}.word_embeddings.weight", ("embeddings", "word"), (c.vocab_size, D)),
               *_ln(f"{emb}.LayerNorm", ("embeddings", "ln"), D)]
    if c.position_embeddings:
        entries.append(Entry(f"{emb}.position_embeddings.weight", ("embeddings", "position"),
                             (c.max_position_embeddings, D)))
    if c.type_vocab_size:
        entries.append(Entry(f"{emb}.token_type_embeddings.weight", ("embeddings", "token_type"),
                             (c.type_vocab_size, D)))
    if d.terms:
        entries.append(Entry(f"{prefix}encoder.rel_embeddings.weight", ("relative_embeddings", "table"),
                             (2 * d.span, D)))
        if d.layer_norm:
            entries += _ln(f"{prefix}encoder.LayerNorm", ("relative_embeddings", "ln"), D)
    own = {"pos_key_proj": ("key", "c2p"), "pos_query_proj": ("query", "p2c")} if not d.shared_projections else {}
    counts = c.pruned.counts if c.pruned else (H,) * c.num_layers
    for i, h in enumerate(counts):
        k, p = f"{prefix}encoder.layer.{i}", ("layers", i)
        for name in ("query", "key", "value"):
            entries += [Entry(f"{k}.attention.self.{name}_proj.weight", p + ("attention", name, "kernel"),
                              *split_heads_in(D, h, d_h, H)),
                        Entry(f"{k}.attention.self.{name}_proj.bias", p + ("attention", name, "bias"),
                              *split_heads_bias(h, d_h, H))]
        for hf_name, (name, term) in own.items():
            if term in d.terms:
                entries += [Entry(f"{k}.attention.self.{hf_name}.weight", p + ("positions", name, "kernel"),
                                  *split_heads_in(D, h, d_h, H)),
                            Entry(f"{k}.attention.self.{hf_name}.bias", p + ("positions", name, "bias"),
                                  *split_heads_bias(h, d_h, H))]
        entries += [
            Entry(f"{k}.attention.output.dense.weight", p + ("attention", "out", "kernel"),
                  *split_heads_out(D, h, d_h, H)),
            Entry(f"{k}.attention.output.dense.bias", p + ("attention", "out", "bias"), (D,)),
            *_ln(f"{k}.attention.output.LayerNorm", p + ("attention_ln",), D),
            *_dense(f"{k}.intermediate.dense", p + ("ffn_in",), D, F),
            *_dense(f"{k}.output.dense", p + ("ffn_out",), F, D),
            *_ln(f"{k}.output.LayerNorm", p + ("ffn_ln",), D),
        ]
    return entries


def head_entries(c: EncoderConfig, mlm: str) -> list[Entry]:
    """The ContextPooler and classifier, or the masked-LM head under ``mlm`` (LEGACY or CURRENT)."""
    D, V = c.hidden_size, c.vocab_size
    entries = _dense("pooler.dense", ("pooler",), D, D) if c.with_pooler else []
    if c.num_labels:
        entries += _dense("classifier", ("classifier", "out"), D, c.num_labels)
    if c.with_mlm_head:
        transform = f"{mlm}.transform." if mlm == LEGACY else f"{mlm}."
        entries += _dense(f"{transform}dense", ("mlm_head", "transform"), D, D)
        entries += _ln(f"{transform}LayerNorm", ("mlm_head", "ln"), D)
        entries.append(Entry(f"{mlm}.bias", ("mlm_head", "bias"), (V,)))
    return entries


IGNORED = (r"(deberta\.)?embeddings\.position_ids", r"mask_predictions\..*")


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (``jattn.nn.encoder``'s layout, ``jattn.nn.positions``'s)."""
    prefix = _prefix(state)
    mlm = CURRENT if f"{CURRENT}.bias" in state else LEGACY
    labels = int(state["classifier.bias"].shape[0]) if "classifier.bias" in state else 0
    config = dataclasses.replace(config, with_pooler="pooler.dense.weight" in state,
                                 with_mlm_head=f"{mlm}.bias" in state, tied_mlm_decoder=True, num_labels=labels)
    unread: tuple = ()
    if mlm == LEGACY:
        state, unread = mlm_state(state, config, mlm, f"{prefix}embeddings.word_embeddings.weight", source)
    return apply_table(state, encoder_entries(config, prefix) + head_entries(config, mlm), IGNORED + unread, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn params -> a HF state dict (a masked-LM head in the ``legacy`` layout)."""
    prefix = "deberta." if config.num_labels or config.with_mlm_head else ""
    return to_state_dict(params, encoder_entries(config, prefix) + head_entries(config, LEGACY))
