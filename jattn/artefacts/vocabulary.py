"""A joint SentencePiece vocabulary saved as a Hugging Face Marian tokenizer folder.

Vocabulary: a unigram SentencePiece model (Kudo 2018) trained on source + target text, laid
out as Opus-MT does (``vocab.json``: ``</s>`` = 0, ``<unk>`` = 1, the pieces, ``<pad>`` last),
so ``MarianTokenizer`` (and so ``jattn.load``) reads it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["train_sentencepiece"]


def train_sentencepiece(texts: list[str], folder, vocab_size: int, seed: int = 0):
    """Train a joint unigram SentencePiece model on ``texts`` and write a Marian tokenizer folder
    (source.spm = target.spm, vocab.json, tokenizer_config.json). Returns the MarianTokenizer;
    its length is at most ``vocab_size`` (pieces + ``</s>``, ``<unk>``, ``<pad>``; fewer on a
    corpus too small for that many pieces)."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "spm_corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    prefix = folder / "spm"
    spm.set_random_generator_seed(seed)
    # spm ids: 0 <unk>, 1 </s>; no <s>/<pad> inside spm (Marian's pad is a vocab.json entry).
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=vocab_size - 1, model_type="unigram",
        character_coverage=1.0, unk_id=0, eos_id=1, bos_id=-1, pad_id=-1, hard_vocab_limit=False,
        input_sentence_size=2_000_000, shuffle_input_sentence=True, minloglevel=2, num_threads=2)
    corpus.unlink()
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        if p not in vocab:
            vocab[p] = len(vocab)
    vocab["<pad>"] = len(vocab)
    for name in ("source.spm", "target.spm"):
        shutil.copy(str(prefix) + ".model", folder / name)
    for suffix in (".model", ".vocab"):
        (Path(str(prefix) + suffix)).unlink()
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "MarianTokenizer", "model_max_length": 512, "separate_vocabs": False,
         "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}), encoding="utf-8")
    return MarianTokenizer.from_pretrained(str(folder))
