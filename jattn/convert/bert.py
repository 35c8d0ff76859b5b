"""Key table for BERT and RoBERTa checkpoints (``BertModel``, ``BertForMaskedLM``,
``BertForPreTraining``, ``RobertaModel``, ``RobertaForMaskedLM``, ...) -> jattn encoder params.

Converted: the encoder, the pooler and the masked-LM head when present. Tensors that are
known but not used (position-id buffers, the NSP classifier, a decoder matrix tied to the word
embeddings) are allowed; anything else unexpected is an error.
"""

from __future__ import annotations

import numpy as np

from jattn.config import EncoderConfig
from jattn.convert.hf import Entry, apply_table, linear, split_heads_in, split_heads_out


def _ln(key: str, path: tuple, d: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,)), Entry(f"{key}.bias", path + ("bias",), (d,))]


def _dense(key: str, path: tuple, n_in: int, n_out: int) -> list[Entry]:
    shape, fn = linear(n_in, n_out)
    return [Entry(f"{key}.weight", path + ("kernel",), shape, fn), Entry(f"{key}.bias", path + ("bias",), (n_out,))]


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
    qkv_shape, qkv_fn = split_heads_in(D, H, d_h)
    out_shape, out_fn = split_heads_out(D, H, d_h)
    for i in range(c.num_layers):
        k, p = f"{prefix}encoder.layer.{i}", ("layers", i)
        for name in ("query", "key", "value"):
            entries += [
                Entry(f"{k}.attention.self.{name}.weight", p + ("attention", name, "kernel"), qkv_shape, qkv_fn),
                Entry(f"{k}.attention.self.{name}.bias", p + ("attention", name, "bias"), (H * d_h,),
                      lambda b: b.reshape(H, d_h)),
            ]
        entries += [
            Entry(f"{k}.attention.output.dense.weight", p + ("attention", "out", "kernel"), out_shape, out_fn),
            Entry(f"{k}.attention.output.dense.bias", p + ("attention", "out", "bias"), (D,)),
            *_ln(f"{k}.attention.output.LayerNorm", p + ("attention_ln",), D),
            *_dense(f"{k}.intermediate.dense", p + ("ffn_in",), D, F),
            *_dense(f"{k}.output.dense", p + ("ffn_out",), F, D),
            *_ln(f"{k}.output.LayerNorm", p + ("ffn_ln",), D),
        ]
    return entries


def head_entries(c: EncoderConfig, state: dict, prefix: str) -> list[Entry]:
    """Pooler and masked-LM head, for the ones the checkpoint has."""
    D = c.hidden_size
    entries = []
    if f"{prefix}pooler.dense.weight" in state:
        entries += _dense(f"{prefix}pooler.dense", ("pooler",), D, D)
    mlm = "cls.predictions" if c.model_type == "bert" else "lm_head"
    if f"{mlm}.bias" in state:
        if c.model_type == "bert":
            entries += _dense(f"{mlm}.transform.dense", ("mlm_head", "transform"), D, D)
            entries += _ln(f"{mlm}.transform.LayerNorm", ("mlm_head", "ln"), D)
        else:
            entries += _dense(f"{mlm}.dense", ("mlm_head", "transform"), D, D)
            entries += _ln(f"{mlm}.layer_norm", ("mlm_head", "ln"), D)
        entries.append(Entry(f"{mlm}.bias", ("mlm_head", "bias"), (c.vocab_size,)))
    return entries


# Known tensors that jattn does not use: buffers, the NSP head, tied decoder copies.
IGNORED = (
    r"(bert\.|roberta\.)?embeddings\.position_ids",
    r"(bert\.|roberta\.)?embeddings\.token_type_ids",
    r"cls\.seq_relationship\.(weight|bias)",
    r"cls\.predictions\.decoder\.(weight|bias)",
    r"lm_head\.decoder\.(weight|bias)",
)


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn encoder params (see ``jattn.nn.encoder`` for the layout)."""
    prefix = _prefix(state, config.model_type)
    entries = encoder_entries(config, prefix) + head_entries(config, state, prefix)
    return apply_table(state, entries, IGNORED, source)
