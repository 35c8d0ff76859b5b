"""Key table for Hugging Face ``MarianMTModel`` (Opus-MT) checkpoints <-> jattn seq2seq params.

The layer tables are the seq2seq layout's (``jattn.families.layouts.seq2seq.layer_rows``).
Each row carries its inverse so a jattn model trained here can be exported as a Marian folder
that ``MarianMTModel.from_pretrained`` loads (``to_hf_state_dict``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts.seq2seq import TIED_FIX, layer_rows, row
from jattn.nn.config import Seq2SeqConfig
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict

def rows(config: Seq2SeqConfig) -> list:
    D = config.d_model
    if config.shared_embeddings:
        emb = [row("model.shared.weight", ("embeddings", "shared"), "table", config.src_vocab_size, D)]
    else:
        emb = [row("model.encoder.embed_tokens.weight", ("embeddings", "source"), "table", config.src_vocab_size, D),
               row("model.decoder.embed_tokens.weight", ("embeddings", "target"), "table", config.tgt_vocab_size, D)]
    bias = (Entry("final_logits_bias", ("final_logits_bias",), (1, config.tgt_vocab_size), lambda b: b[0]),
            lambda b: b[None])
    return emb + [bias] + layer_rows(config, "model.", "encoder") + layer_rows(config, "model.", "decoder")


# Known tensors jattn does not read: recomputed sinusoids, copies of tied tables (check_tied).
IGNORED = (
    r"model\.(encoder|decoder)\.embed_positions\.weight",
    r"lm_head\.weight",
    r"model\.(encoder|decoder)\.embed_tokens\.weight",
)


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF Marian state dict -> jattn seq2seq params (layout in ``jattn.nn.seq2seq``)."""
    state = dict(state)
    if config.shared_embeddings and "model.shared.weight" not in state and "model.encoder.embed_tokens.weight" in state:
        state["model.shared.weight"] = state.pop("model.encoder.embed_tokens.weight")
    ignored = IGNORED if config.shared_embeddings else IGNORED[:2]
    table = "model.shared.weight" if config.shared_embeddings else "model.decoder.embed_tokens.weight"
    copies = {k: table for k in ("lm_head.weight", "model.encoder.embed_tokens.weight",
                                 "model.decoder.embed_tokens.weight") if k != table}
    check_tied(state, copies if config.shared_embeddings else {"lm_head.weight": table}, source, TIED_FIX)
    return apply_table(state, [e for e, _ in rows(config)], ignored, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> a Marian state dict (``MarianMTModel.from_pretrained`` layout)."""
    return to_state_dict(params, [dataclasses.replace(e, inverse=inv) for e, inv in rows(config)])


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The Marian ``config.json`` dict describing ``config``."""
    if config.model_type != "marian":
        raise ValueError("only Marian-type configs can be exported as Marian folders")
    out = {
        "model_type": "marian", "architectures": ["MarianMTModel"], "vocab_size": config.src_vocab_size,
        "decoder_vocab_size": config.tgt_vocab_size, "d_model": config.d_model,
        "encoder_layers": config.encoder_layers, "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.pruned[0].heads if config.pruned else config.encoder_heads,
        "decoder_attention_heads": config.pruned[1].heads if config.pruned else config.decoder_heads,
        "encoder_ffn_dim": config.encoder_ffn_dim, "decoder_ffn_dim": config.decoder_ffn_dim,
        "activation_function": config.activation, "max_position_embeddings": config.max_position_embeddings,
        "scale_embedding": config.scale_embedding,
        "share_encoder_decoder_embeddings": config.shared_embeddings, "tie_word_embeddings": True,
        "pad_token_id": config.pad_token_id, "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.decoder_start_token_id,
        "forced_eos_token_id": config.forced_eos_token_id, "dropout": config.dropout,
        "attention_dropout": config.attention_dropout, "activation_dropout": config.activation_dropout,
        "is_encoder_decoder": True,
    }
    if config.pruned:  # jattn's key (transformers has no head pruning for Marian): see jattn.sweeps.pruning
        out["jattn_pruned_heads"] = {k: p.removed() for k, p in zip(("encoder", "decoder", "cross"), config.pruned)}
    return out


def save_marian_folder(folder, params, config: Seq2SeqConfig, tokenizer_folder=None, generation: dict | None = None):
    """Write a Hugging Face Marian folder (config.json, generation_config.json,
    model.safetensors and the tokenizer files) that both ``jattn.load`` and
    ``MarianMTModel.from_pretrained`` read."""
    import json
    import shutil
    from pathlib import Path

    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(to_hf_config(config), indent=2))
    gen = {"decoder_start_token_id": config.decoder_start_token_id, "eos_token_id": config.eos_token_id,
           "pad_token_id": config.pad_token_id, "forced_eos_token_id": config.forced_eos_token_id,
           "bad_words_ids": [[i] for i in config.bad_token_ids], **(generation or {})}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2))
    save_file(to_hf_state_dict(params, config), str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer_folder is not None:
        for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
            shutil.copy(Path(tokenizer_folder) / name, folder / name)
