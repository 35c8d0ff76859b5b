"""The encoder–decoder layout of Marian's and BART's block names, shared by the seq2seq families
(Marian, FSMT, BART, mBART, M2M100): per layer ``self_attn`` / ``encoder_attn`` with their
``*_layer_norm``, ``fc1`` / ``fc2`` and ``final_layer_norm`` (``layer_rows``; in a pre-LayerNorm
block each ``*_layer_norm`` normalises its sublayer's input); BART's table with learned position
tables and an embedding LayerNorm per side (``learned_position_entries``); the final LayerNorm of
each stack (``final_norm_rows``); the copies of a shared token table a checkpoint may hold
(``TIED``, ``SHARED_COPIES``) and the fix of one that differs (``TIED_FIX``).
"""

from __future__ import annotations

import dataclasses

from jattn.io.hf import Entry, split_heads_bias, split_heads_in, split_heads_out
from jattn.nn.config import Seq2SeqConfig

POSITION_OFFSET = 2  # HF BartLearnedPositionalEmbedding.offset: rows 0 and 1 are never read
# Copies of the shared table that a checkpoint may also hold (tied in HF).
TIED = ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
SHARED_COPIES = (r"lm_head\.weight", r"model\.(encoder|decoder)\.embed_tokens\.weight")
TIED_FIX = ("load it with transformers (which uses the table it ties to) and save_pretrained it, or export it "
            "again from the model it was trained as")

# (suffix, kind): kind picks the shape, transform and inverse of a row.
_ATTN = ("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")


def row(key, path, kind, n_in, n_out):
    """(Entry, inverse) for one tensor. kinds: linear, vector, table."""
    table = {
        "linear": ((n_out, n_in), lambda w: w.T, lambda k: k.T),
        "vector": ((n_out,), lambda v: v, lambda v: v),
        "table": ((n_in, n_out), lambda t: t, lambda t: t),
    }
    shape, fn, inv = table[kind]
    return Entry(key, path, shape, fn), inv


def _attention_rows(key, path, D, heads, d_h, slots) -> list:
    """(Entry, inverse) rows of one attention block's projections: ``heads`` heads of width d_h
    stored, held in ``slots`` head slots (more than ``heads`` in a physically pruned layer)."""
    rows = []
    for proj, ours in _ATTN:
        for suffix, leaf, (shape, fn, inv) in (("weight", "kernel", split_heads_in(D, heads, d_h, slots)),
                                              ("bias", "bias", split_heads_bias(heads, d_h, slots))):
            rows.append((Entry(f"{key}.{proj}.{suffix}", path + (ours, leaf), shape, fn), inv))
    shape, fn, inv = split_heads_out(D, heads, d_h, slots)
    return rows + [(Entry(f"{key}.out_proj.weight", path + ("out", "kernel"), shape, fn), inv)]


def layer_rows(config: Seq2SeqConfig, prefix: str, side: str) -> list:
    """Rows for every layer of the ``side`` ("encoder" | "decoder") stack under ``prefix``."""
    D = config.d_model
    H = config.encoder_heads if side == "encoder" else config.decoder_heads
    d_h = config.encoder_head_dim if side == "encoder" else config.decoder_head_dim
    F = config.encoder_ffn_dim if side == "encoder" else config.decoder_ffn_dim
    n = config.encoder_layers if side == "encoder" else config.decoder_layers
    # (HF name, ours, heads stored per layer): a pruned model stores fewer than its H slots
    pruned = dict(zip(("encoder", "decoder", "cross"), config.pruned)) if config.pruned else {}
    counts = {kind: pruned[kind].counts if kind in pruned else (H,) * n for kind in ("encoder", "decoder", "cross")}
    blocks = [("self_attn", "self_attn", counts[side])]
    if side == "decoder":
        blocks.append(("encoder_attn", "cross_attn", counts["cross"]))
    rows = []
    for i in range(n):
        k, p = f"{prefix}{side}.layers.{i}", (side, "layers", i)
        for hf_name, name, heads in blocks:
            rows += _attention_rows(f"{k}.{hf_name}", p + (name,), D, heads[i], d_h, H)
            rows += [row(f"{k}.{hf_name}.out_proj.bias", p + (name, "out", "bias"), "vector", D, D),
                     row(f"{k}.{hf_name}_layer_norm.weight", p + (f"{name}_ln", "scale"), "vector", D, D),
                     row(f"{k}.{hf_name}_layer_norm.bias", p + (f"{name}_ln", "bias"), "vector", D, D)]
        rows += [row(f"{k}.fc1.weight", p + ("ffn_in", "kernel"), "linear", D, F),
                 row(f"{k}.fc1.bias", p + ("ffn_in", "bias"), "vector", D, F),
                 row(f"{k}.fc2.weight", p + ("ffn_out", "kernel"), "linear", F, D),
                 row(f"{k}.fc2.bias", p + ("ffn_out", "bias"), "vector", F, D),
                 row(f"{k}.final_layer_norm.weight", p + ("ffn_ln", "scale"), "vector", D, D),
                 row(f"{k}.final_layer_norm.bias", p + ("ffn_ln", "bias"), "vector", D, D)]
    return rows


def learned_position_entries(config: Seq2SeqConfig) -> list[Entry]:
    """BART's key table (``BartForConditionalGeneration`` names), each row with its inverse: the shared
    table, ``final_logits_bias``, one learned position table and one ``layernorm_embedding`` per side,
    the blocks (``layer_rows``)."""
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


def final_norm_rows(config: Seq2SeqConfig, prefix: str = "model.") -> list[Entry]:
    """The final LayerNorm of each stack: ``{prefix}{encoder,decoder}.layer_norm`` <->
    ``{encoder,decoder}.final_ln``."""
    D = config.d_model
    return [Entry(f"{prefix}{side}.layer_norm.{hf}", (side, "final_ln", ours), (D,))
            for side in ("encoder", "decoder") for hf, ours in (("weight", "scale"), ("bias", "bias"))]
