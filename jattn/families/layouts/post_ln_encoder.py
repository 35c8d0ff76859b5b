"""The post-LN encoder layout: the key table of BERT and RoBERTa checkpoints (``BertModel``,
``BertForMaskedLM``, ``BertForPreTraining``, ``RobertaModel``, ``RobertaForMaskedLM``, ...) -> jattn
encoder params, and its rows (``encoder_entries``, ``head_entries``, the masked-LM head's
``mlm_output_entries`` / ``mlm_state``) that the encoder families keeping BERT's block names read
under their own keys (ALBERT, DeBERTa-v2, DistilBERT, ELECTRA, MPNet, RoBERTa-PreLayerNorm, XLM-R).

Converted: the encoder, the pooler, the masked-LM head (its decoder matrix too when config.json
says ``tie_word_embeddings: false``) and the sequence-classification head
(``BertForSequenceClassification``: linear on the pooled [CLS]; ``RobertaForSequenceClassification``:
dense + tanh + linear on <s>) when present; every row carries its inverse, so a fine-tuned model
is exported as a folder that ``BertForSequenceClassification.from_pretrained`` reads. Tensors that
Hugging Face's forward does not read (position-id buffers, the NSP classifier, a tied decoder's
copy of the word embeddings, an untied head's unused ``bias``) are allowed; a tied decoder copy
that differs from what it is tied to, and anything else unexpected, is an error.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.spec import encoder_hf_config
from jattn.nn.config import EncoderConfig
from jattn.io.hf import (Entry, apply_table, check_tied, linear, split_heads_bias, split_heads_in, split_heads_out,
                         to_state_dict)


def _ln(key: str, path: tuple, d: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,)), Entry(f"{key}.bias", path + ("bias",), (d,))]


def _dense(key: str, path: tuple, n_in: int, n_out: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("kernel",), *linear(n_in, n_out)),
            Entry(f"{key}.bias", path + ("bias",), (n_out,))]


def _prefix(state: dict, model_type: str) -> str:
    """'' for a bare model, 'bert.'/'roberta.' for a model with a task head."""
    return f"{model_type}." if any(k.startswith(f"{model_type}.embeddings.") for k in state) else ""


def encoder_entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, d_h, F = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size
    emb = f"{prefix}embeddings"
    entries = [
        Entry(f"{emb}.word_embeddings.weight", ("embeddings", "word"), (c.vocab_size, D)),
        Entry(f"{emb}.position_embeddings.weight", ("embeddings", "position"), (c.max_position_embeddings, D)),
        Entry(f"{emb}.token_type_embeddings.weight", ("embeddings", "token_type"), (c.type_vocab_size, D)),
        *_ln(f"{emb}.LayerNorm", ("embeddings", "ln"), D),
    ]
    counts = c.pruned.counts if c.pruned else (H,) * c.num_layers  # heads stored per layer (pruned: fewer)
    for i, h in enumerate(counts):
        k, p = f"{prefix}encoder.layer.{i}", ("layers", i)
        for name in ("query", "key", "value"):
            entries += [
                Entry(f"{k}.attention.self.{name}.weight", p + ("attention", name, "kernel"),
                      *split_heads_in(D, h, d_h, H)),
                Entry(f"{k}.attention.self.{name}.bias", p + ("attention", name, "bias"), *split_heads_bias(h, d_h, H)),
            ]
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


def classifier_entries(c: EncoderConfig) -> list[Entry]:
    """The sequence-classification head (``c.num_labels`` classes)."""
    D = c.hidden_size
    if c.model_type == "bert":
        return _dense("classifier", ("classifier", "out"), D, c.num_labels)
    return _dense("classifier.dense", ("classifier", "dense"), D, D) + \
        _dense("classifier.out_proj", ("classifier", "out"), D, c.num_labels)


def num_labels(state: dict, model_type: str) -> int:
    """Classes of the checkpoint's classification head (0 without one)."""
    key = "classifier.bias" if model_type == "bert" else "classifier.out_proj.bias"
    return int(state[key].shape[0]) if key in state else 0


def mlm_key(model_type: str) -> str:
    return "cls.predictions" if model_type == "bert" else "lm_head"


def head_entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    """Pooler, masked-LM head and classification head, as ``c`` says the checkpoint has them."""
    D, mlm = c.hidden_size, mlm_key(c.model_type)
    entries = _dense(f"{prefix}pooler.dense", ("pooler",), D, D) if c.with_pooler else []
    if c.num_labels:
        entries += classifier_entries(c)
    if c.with_mlm_head:
        if c.model_type == "bert":
            entries += _dense(f"{mlm}.transform.dense", ("mlm_head", "transform"), D, D)
            entries += _ln(f"{mlm}.transform.LayerNorm", ("mlm_head", "ln"), D)
        else:
            entries += _dense(f"{mlm}.dense", ("mlm_head", "transform"), D, D)
            entries += _ln(f"{mlm}.layer_norm", ("mlm_head", "ln"), D)
        entries += mlm_output_entries(c, mlm)
    return entries


def mlm_output_entries(c: EncoderConfig, mlm: str) -> list[Entry]:
    """The masked-LM head's output layer under ``mlm`` ("cls.predictions", "lm_head"): its bias;
    untied (``c.tied_mlm_decoder`` False) the decoder matrix (V, D) and the decoder's bias, which
    Hugging Face's forward reads then (transformers ≥ 5; before, ``bias`` was the same tensor)."""
    V, D = c.vocab_size, c.hidden_size
    if c.tied_mlm_decoder:
        return [Entry(f"{mlm}.bias", ("mlm_head", "bias"), (V,))]
    return [Entry(f"{mlm}.decoder.weight", ("mlm_head", "decoder"), (V, D)),
            Entry(f"{mlm}.decoder.bias", ("mlm_head", "bias"), (V,))]


def mlm_state(state: dict, c: EncoderConfig, mlm: str, word_key: str, source: str) -> tuple[dict, tuple[str, ...]]:
    """(``state`` in the layout ``mlm_output_entries`` reads, the regexes of the head's tensors
    Hugging Face's forward does not read). Tied: the decoder's copies, which must equal the word
    embeddings (``word_key``) and the bias they are tied to (``check_tied``); untied: the
    head's ``bias`` (a transformers 4 checkpoint, without ``decoder.bias``, has it in its place)."""
    esc = mlm.replace(".", r"\.")
    if not c.with_mlm_head:
        return state, ()
    if not c.tied_mlm_decoder:
        if f"{mlm}.decoder.bias" not in state and f"{mlm}.bias" in state:
            state = {**state, f"{mlm}.decoder.bias": state[f"{mlm}.bias"]}
        return state, (rf"{esc}\.bias",)
    check_tied(state, {f"{mlm}.decoder.weight": word_key, f"{mlm}.decoder.bias": f"{mlm}.bias"}, source,
               "the masked-LM decoder is the checkpoint's own: set \"tie_word_embeddings\": false in config.json")
    return state, (rf"{esc}\.decoder\.(weight|bias)",)


# Known tensors that jattn does not use: buffers, the NSP head (and the MLM head's, mlm_state).
IGNORED = (
    r"(bert\.|roberta\.)?embeddings\.position_ids",
    r"(bert\.|roberta\.)?embeddings\.token_type_ids",
    r"cls\.seq_relationship\.(weight|bias)",
)


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix, mlm = _prefix(state, config.model_type), mlm_key(config.model_type)
    config = dataclasses.replace(config, with_pooler=f"{prefix}pooler.dense.weight" in state,
                                 with_mlm_head=f"{mlm}.bias" in state,
                                 num_labels=num_labels(state, config.model_type))
    state, unread = mlm_state(state, config, mlm, f"{prefix}embeddings.word_embeddings.weight", source)
    return apply_table(state, encoder_entries(config, prefix) + head_entries(config, prefix), IGNORED + unread,
                       source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict, the inverse of ``convert``: the task model's layout
    (``BertForSequenceClassification``, ``BertForMaskedLM``, RoBERTa's) when ``config`` has a head."""
    prefix = f"{config.model_type}." if config.num_labels or config.with_mlm_head else ""
    return untied_bias(to_state_dict(params, encoder_entries(config, prefix) + head_entries(config, prefix)),
                       config, mlm_key(config.model_type))


def untied_bias(state: dict, c: EncoderConfig, mlm: str) -> dict:
    """An exported state dict with an untied masked-LM head's ``bias`` (unread by Hugging Face's
    forward, expected by its loader) equal to the decoder's bias."""
    if c.with_mlm_head and not c.tied_mlm_decoder:
        state[f"{mlm}.bias"] = state[f"{mlm}.decoder.bias"]
    return state


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head)."""
    kind = "Bert" if config.model_type == "bert" else "Roberta"
    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    return encoder_hf_config(config, kind + head, label_names, type_vocab_size=config.type_vocab_size,
                             position_embedding_type="absolute")
