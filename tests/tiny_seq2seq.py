"""Tiny random Hugging Face Marian and FSMT checkpoints with working tokenizers, saved locally."""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

WORDS = ("un homme une femme chien court sur la plage the man woman dog runs on beach a red blue "
         "ball child plays with in park street two people are walking near water").split()

# Shapes and options that differ between the cases: head counts, layer counts, activations,
# embedding scaling, separate vocabularies.
CONFIGS = {
    "marian": dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                   decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=48,
                   activation_function="swish", scale_embedding=True),
    "fsmt": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=40, decoder_ffn_dim=36, activation_function="relu"),
}


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(3, 9))) for _ in range(n)]


def marian_tokenizer(folder: Path, vocab_size: int = 80):
    from jattn.artefacts.vocabulary import train_sentencepiece

    return train_sentencepiece(sentences(400), folder, vocab_size)


def fsmt_tokenizer(folder: Path):
    """A character-level BPE vocabulary per side with a few merges."""
    from transformers import FSMTTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    specials = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    letters = list(string.ascii_lowercase)
    src = dict(specials, **{t: 4 + i for i, t in enumerate(letters + [c + "</w>" for c in letters] + ["un</w>"])})
    tgt = dict(
        specials, **{t: 4 + i for i, t in enumerate(letters + [c + "</w>" for c in letters] + ["th", "the</w>"])}
    )
    (folder / "vocab-src.json").write_text(json.dumps(src))
    (folder / "vocab-tgt.json").write_text(json.dumps(tgt))
    (folder / "merges.txt").write_text("u n</w>\nt h\nth e</w>\n")
    tok = FSMTTokenizer(langs=["fr", "en"], src_vocab_file=str(folder / "vocab-src.json"),
                        tgt_vocab_file=str(folder / "vocab-tgt.json"), merges_file=str(folder / "merges.txt"))
    tok.save_pretrained(str(folder))
    return tok


def save_tiny(folder: Path, kind: str, seed: int = 0, eos_boost: float = 2.0, **overrides) -> Path:
    """Save a random ``kind`` ("marian" | "fsmt") model with its tokenizer to ``folder``.

    ``eos_boost`` raises Marian's EOS logit (through ``final_logits_bias``) so that generated
    sequences end at different lengths, exercising the finished-hypothesis paths of the searches
    (random FSMT models, which have no such bias, run to ``max_length``)."""
    import torch
    from transformers import FSMTConfig, FSMTForConditionalGeneration, MarianConfig, MarianMTModel

    folder = Path(folder)
    torch.manual_seed(seed)
    kw = {**CONFIGS[kind], "max_position_embeddings": 64, **overrides}
    if kind == "marian":
        tok = marian_tokenizer(folder)
        V = len(tok)
        model = MarianMTModel(MarianConfig(vocab_size=V, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                                           decoder_start_token_id=tok.pad_token_id,
                                           forced_eos_token_id=tok.eos_token_id, **kw))
        with torch.no_grad():
            model.final_logits_bias.normal_()  # zero at init: make the test see it
    else:
        tok = fsmt_tokenizer(folder)
        model = FSMTForConditionalGeneration(FSMTConfig(
            langs=["fr", "en"], src_vocab_size=len(tok.encoder), tgt_vocab_size=len(tok.decoder), **kw))
    with torch.no_grad():  # larger random weights than HF's init, so that attention is not uniform
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed_positions" not in name:
                p.normal_(0, 0.3)
        if kind == "marian":
            model.final_logits_bias[0, model.config.eos_token_id] += eos_boost
    model.save_pretrained(str(folder))
    return folder


def hf_model(folder: Path, kind: str):
    from transformers import FSMTForConditionalGeneration, MarianMTModel

    cls = MarianMTModel if kind == "marian" else FSMTForConditionalGeneration
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()


def padded_batch(config, seed: int = 0, b: int = 4, s: int = 9, t: int = 7):
    """Random ids with right padding of different lengths on both sides (row 0 unpadded)."""
    rng = np.random.default_rng(seed)
    pad = config.pad_token_id
    src_len = [s] + list(rng.integers(2, s, b - 1))
    tgt_len = [t] + list(rng.integers(2, t, b - 1))
    ids = np.full((b, s), pad)
    mask = np.zeros((b, s), np.int64)
    dec = np.full((b, t), pad)
    dmask = np.zeros((b, t), np.int64)
    low = 4  # above the special tokens of both families
    for i in range(b):
        ids[i, : src_len[i]] = rng.integers(low, config.src_vocab_size - 1, src_len[i])
        mask[i, : src_len[i]] = 1
        dec[i, : tgt_len[i]] = rng.integers(low, config.tgt_vocab_size - 1, tgt_len[i])
        dec[i, 0] = config.decoder_start_token_id
        dmask[i, : tgt_len[i]] = 1
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dmask}
