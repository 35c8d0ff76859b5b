"""Key table for ALBERT checkpoints (``AlbertModel``, ``AlbertForMaskedLM``,
``AlbertForPreTraining``, ``AlbertForSequenceClassification``) -> jattn encoder params.

ALBERT stores G = ``num_hidden_groups`` layers (``encoder.albert_layer_groups.g.albert_layers.0``;
``inner_group_num`` 1) and runs L = ``num_hidden_layers`` of them, layer i with group
⌊i / (L / G)⌋ (Hugging Face's ``AlbertTransformer``; G = 1 for every published checkpoint: one
layer shared by all). jattn stacks its L layers on a leading axis and scans them, so the
converter writes each group's tensors into every layer that uses it: L copies, each layer's
internals, gates and interventions then its own. The layer rows are BERT's
(``jattn.families.layouts.post_ln_encoder.encoder_entries``) under ALBERT's names. The embedding tables and
their LayerNorm have width E = ``embedding_size`` < D, followed by
``encoder.embedding_hidden_mapping_in`` (E -> D). Heads: the pooler (``pooler``, dense + tanh);
the classifier on it (``classifier``); the masked-LM head (``predictions.dense`` D -> E, the
activation, ``predictions.LayerNorm`` (E), the decoder E -> V tied to the word embeddings, and
``predictions.bias``). The sentence-order head of ``AlbertForPreTraining`` is ignored; question
answering and token classification checkpoints are refused.

Export (``to_hf_state_dict``, ``to_hf_config``) writes one group per layer (G = L): the L copies
jattn holds may have diverged (fine-tuning unties them), and Hugging Face's ALBERT with G = L
computes exactly what they compute. A model loaded from a G = 1 checkpoint and not changed
exports as L equal groups (L times the layer tensors; the same function).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from jattn.families.layouts.post_ln_encoder import encoder_entries as bert_entries, mlm_state
from jattn.io.hf import ConversionError, Entry, apply_table, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "albert."
# BERT's module names in a layer -> ALBERT's
LAYER_NAMES = {"attention.self.query": "attention.query", "attention.self.key": "attention.key",
               "attention.self.value": "attention.value", "attention.output.dense": "attention.dense",
               "attention.output.LayerNorm": "attention.LayerNorm", "intermediate.dense": "ffn",
               "output.dense": "ffn_output", "output.LayerNorm": "full_layer_layer_norm"}
MLM = "predictions"
# Known tensors that jattn does not use: buffers, the sentence-order head (and the MLM head's, mlm_state).
IGNORED = (r"(albert\.)?embeddings\.(position_ids|token_type_ids)", r"sop_classifier\.classifier\.(weight|bias)")
GROUP = re.compile(r"(?:albert\.)?encoder\.albert_layer_groups\.(\d+)\.")


def group_of(layer: int, layers: int, groups: int) -> int:
    """The group whose weights layer ``layer`` of ``layers`` runs (Hugging Face's rule)."""
    return int(layer / (layers / groups))


def layer_entries(c: EncoderConfig, prefix: str, groups: int) -> list[Entry]:
    """Every layer's rows, each under the key of the group it runs."""
    rows = []
    for e in bert_entries(c, prefix):
        if e.path[0] != "layers":
            continue
        layer, module = e.key[len(f"{prefix}encoder.layer."):].split(".", 1)
        module, name = module.rsplit(".", 1)
        g = group_of(int(layer), c.num_layers, groups)
        rows.append(dataclasses.replace(
            e, key=f"{prefix}encoder.albert_layer_groups.{g}.albert_layers.0.{LAYER_NAMES[module]}.{name}"))
    return rows


def _dense(key: str, path: tuple, n_in: int, n_out: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("kernel",), *linear(n_in, n_out)),
            Entry(f"{key}.bias", path + ("bias",), (n_out,))]


def _ln(key: str, path: tuple, d: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,)), Entry(f"{key}.bias", path + ("bias",), (d,))]


def entries(c: EncoderConfig, prefix: str, groups: int) -> list[Entry]:
    """Embeddings (width E) and their projection E -> D, the layers (``groups`` stored), the heads ``c`` has."""
    E, D, V = c.embedding_size, c.hidden_size, c.vocab_size
    emb = f"{prefix}embeddings"
    rows = [Entry(f"{emb}.word_embeddings.weight", ("embeddings", "word"), (V, E)),
            Entry(f"{emb}.position_embeddings.weight", ("embeddings", "position"), (c.max_position_embeddings, E)),
            Entry(f"{emb}.token_type_embeddings.weight", ("embeddings", "token_type"), (c.type_vocab_size, E)),
            *_ln(f"{emb}.LayerNorm", ("embeddings", "ln"), E),
            *_dense(f"{prefix}encoder.embedding_hidden_mapping_in", ("embeddings", "project"), E, D),
            *layer_entries(c, prefix, groups)]
    if c.with_pooler:
        rows += _dense(f"{prefix}pooler", ("pooler",), D, D)
    if c.num_labels:
        rows += _dense("classifier", ("classifier", "out"), D, c.num_labels)
    if c.with_mlm_head:
        rows += _dense(f"{MLM}.dense", ("mlm_head", "transform"), D, E) + _ln(f"{MLM}.LayerNorm", ("mlm_head", "ln"), E)
        if c.tied_mlm_decoder:
            rows.append(Entry(f"{MLM}.bias", ("mlm_head", "bias"), (V,)))
        else:
            rows += [Entry(f"{MLM}.decoder.weight", ("mlm_head", "decoder"), (V, E)),
                     Entry(f"{MLM}.decoder.bias", ("mlm_head", "bias"), (V,))]
    return rows


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix = PREFIX if any(k.startswith(f"{PREFIX}embeddings.") for k in state) else ""
    if "qa_outputs.weight" in state or ("classifier.weight" in state and f"{prefix}pooler.weight" not in state):
        kind = "AlbertForQuestionAnswering" if "qa_outputs.weight" in state else "AlbertForTokenClassification"
        raise ConversionError(f"{source} is an {kind} checkpoint, whose head jattn does not implement. Fix: load "
                              "AlbertModel, AlbertForMaskedLM, AlbertForPreTraining or AlbertForSequenceClassification")
    groups = len({int(m.group(1)) for k in state if (m := GROUP.match(k))})
    if not 1 <= groups <= config.num_layers:
        raise ConversionError(f"{source} has {groups} layer groups (encoder.albert_layer_groups.*) for "
                              f"{config.num_layers} layers. Fix: check that config.json matches the weights")
    config = dataclasses.replace(config, with_pooler=f"{prefix}pooler.weight" in state,
                                 with_mlm_head=f"{MLM}.dense.weight" in state,
                                 num_labels=int(state["classifier.bias"].shape[0]) if "classifier.bias" in state else 0)
    state, unread = mlm_state(state, config, MLM, f"{prefix}embeddings.word_embeddings.weight", source)
    return apply_table(state, entries(config, prefix, groups), IGNORED + unread, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn encoder params -> a HF state dict with one layer group per layer (module docstring),
    in the task model's layout (``AlbertForSequenceClassification``, ``AlbertForMaskedLM``) when
    ``config`` has a head."""
    if config.pruned:
        raise ValueError("a pruned ALBERT model is not exported: Hugging Face's ALBERT has no per-layer "
                         "pruned_heads. Fix: gate the heads (Interventions(head_gates=...)) instead, or export "
                         "the model before pruning")
    prefix = PREFIX if config.num_labels or config.with_mlm_head else ""
    state = to_state_dict(params, entries(config, prefix, config.num_layers))
    if config.with_mlm_head and not config.tied_mlm_decoder:  # unread by HF's forward, expected by its loader
        state[f"{MLM}.bias"] = state[f"{MLM}.decoder.bias"]
    return state


def to_hf_config(config: EncoderConfig, label_names: list[str] | None = None) -> dict:
    """The Hugging Face ``config.json`` dict of ``config`` (a task model's when it has a head), with
    one layer group per layer (``num_hidden_groups`` = L), as ``to_hf_state_dict`` writes them."""
    from jattn.families.spec import encoder_hf_config

    head = "ForSequenceClassification" if config.num_labels else "ForMaskedLM" if config.with_mlm_head else "Model"
    out = encoder_hf_config(config, "Albert" + head, label_names, embedding_size=config.embedding_size,
                            type_vocab_size=config.type_vocab_size, num_hidden_groups=config.num_layers,
                            inner_group_num=1, position_embedding_type="absolute")
    if config.classifier_dropout is not None:
        out["classifier_dropout_prob"] = config.classifier_dropout
    return out
