"""Key table for DistilBERT checkpoints (``DistilBertModel``, ``DistilBertForMaskedLM``,
``DistilBertForSequenceClassification``) -> jattn encoder params.

The blocks are BERT's under other names (``transformer.layer.N.attention.{q,k,v,out}_lin``,
``sa_layer_norm``, ``ffn.lin1`` / ``ffn.lin2``, ``output_layer_norm``): the table is BERT's
(``jattn.families.layouts.post_ln_encoder.encoder_entries``, pruned layers included) with the keys renamed,
without the token-type table. A task model keeps the encoder under ``distilbert.``; its
masked-LM head (``vocab_transform`` D -> D, the activation, ``vocab_layer_norm``,
``vocab_projector`` tied to the word embeddings unless ``tie_word_embeddings`` is false) becomes
``mlm_head``, its classification head (``pre_classifier`` + ReLU + ``classifier`` on h_[CLS])
``classifier``. The position table is read as stored: with ``sinusoidal_pos_embds`` the
checkpoint holds the sinusoids themselves, so loading them is exact. Question answering and
token classification checkpoints are refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts.post_ln_encoder import encoder_entries as bert_entries
from jattn.io.hf import ConversionError, Entry, apply_table, check_tied, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "distilbert."
# BERT's module names in a layer -> DistilBERT's
LAYER_NAMES = {"attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
               "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
               "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
               "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm"}
MLM = "vocab_projector"
# Known tensors that jattn does not use: buffers.
IGNORED = (r"(distilbert\.)?embeddings\.position_ids",)
# heads of other DistilBERT classes, which jattn does not implement: key -> the class
REFUSED = {"qa_outputs.weight": "DistilBertForQuestionAnswering",
           "classifier.weight": "DistilBertForTokenClassification"}  # (a classifier without pre_classifier)


def _renamed(entry: Entry, prefix: str) -> Entry:
    """A BERT layer row ``{prefix}encoder.layer.N.<module>.<weight|bias>`` under DistilBERT's name."""
    rest = entry.key[len(f"{prefix}encoder.layer."):]  # "N.<module>.<param>"
    layer, module = rest.split(".", 1)
    module, name = module.rsplit(".", 1)
    return dataclasses.replace(entry, key=f"{prefix}transformer.layer.{layer}.{LAYER_NAMES[module]}.{name}")


def _dense(key: str, path: tuple, n_in: int, n_out: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("kernel",), *linear(n_in, n_out)),
            Entry(f"{key}.bias", path + ("bias",), (n_out,))]


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    """Embeddings (word, position, LayerNorm; no token types), the layers and the heads ``c`` has."""
    D, V = c.hidden_size, c.vocab_size
    rows = []
    for e in bert_entries(c, prefix):
        if e.path[0] == "embeddings":
            rows += [] if e.path == ("embeddings", "token_type") else [e]  # the same keys as BERT's
        else:
            rows.append(_renamed(e, prefix))
    if c.num_labels:
        rows += _dense("pre_classifier", ("classifier", "dense"), D, D)
        rows += _dense("classifier", ("classifier", "out"), D, c.num_labels)
    if c.with_mlm_head:
        rows += _dense("vocab_transform", ("mlm_head", "transform"), D, D)
        rows += [Entry("vocab_layer_norm.weight", ("mlm_head", "ln", "scale"), (D,)),
                 Entry("vocab_layer_norm.bias", ("mlm_head", "ln", "bias"), (D,)),
                 Entry(f"{MLM}.bias", ("mlm_head", "bias"), (V,))]
        if not c.tied_mlm_decoder:
            rows.append(Entry(f"{MLM}.weight", ("mlm_head", "decoder"), (V, D)))
    return rows


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    for key, kind in REFUSED.items():
        if key in state and "pre_classifier.weight" not in state:
            raise ConversionError(f"{source} is a {kind} checkpoint, whose head jattn does not implement. Fix: load "
                                  "DistilBertModel, DistilBertForMaskedLM or DistilBertForSequenceClassification")
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    labels = int(state["classifier.bias"].shape[0]) if "pre_classifier.bias" in state else 0
    config = dataclasses.replace(config, with_pooler=False, with_mlm_head="vocab_transform.weight" in state,
                                 num_labels=labels)
    unread: tuple = ()
    if config.with_mlm_head and config.tied_mlm_decoder:  # older checkpoints hold the tied copy: it must be equal
        check_tied(state, {f"{MLM}.weight": f"{prefix}embeddings.word_embeddings.weight"}, source,
                   "the masked-LM decoder is the checkpoint's own: set \"tie_word_embeddings\": false in config.json")
        unread = (rf"{MLM}\.weight",)
    return apply_table(state, entries(config, prefix), IGNORED + unread, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict, the inverse of ``convert``: the task model's layout
    (``DistilBertForSequenceClassification``, ``DistilBertForMaskedLM``) when ``config`` has a head."""
    prefix = PREFIX if config.num_labels or config.with_mlm_head else ""
    return to_state_dict(params, entries(config, prefix))


# config.json names: the generic (BERT) field -> DistilBERT's
HF_NAMES = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
            "intermediate_size": "hidden_dim", "hidden_act": "activation", "hidden_dropout_prob": "dropout",
            "attention_probs_dropout_prob": "attention_dropout"}


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head). The
    position table is exported as the weights hold it (``sinusoidal_pos_embds`` only decides how
    Hugging Face initialises a fresh model, so it is written false)."""
    from jattn.families.spec import encoder_hf_config

    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    generic = encoder_hf_config(config, "DistilBert" + head, label_names)
    out = {HF_NAMES.get(k, k): v for k, v in generic.items() if k != "layer_norm_eps"}  # HF's eps is fixed, 1e-12
    dropout = config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout
    return {**out, "sinusoidal_pos_embds": False, "seq_classif_dropout": dropout}
