"""Tiny random Hugging Face M2M100 checkpoints with an NLLB-style tokenizer (``NllbTokenizer``: BPE
pieces, ``lang X </s>`` on both sides), saved locally. Decoding starts from ``</s>`` and, where the
case asks, forces the target's language code first (``forced_bos_token_id``)."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_bart_layout import MAIN, SECOND, randomize, save
from tiny_seq2seq import WORDS

SRC_LANG, TGT_LANG, OTHER_LANG = "fra_Latn", "eng_Latn", "deu_Latn"
# The cases: the layout's two shapes (``tiny_bart_layout``) with other activations,
# embedding scaling, a forced first token in generation.
CONFIGS = {
    "m2m_100": dict(MAIN, activation_function="relu", scale_embedding=True),
    "m2m_100-gelu": dict(SECOND, activation_function="gelu", scale_embedding=False),
}
FORCED_BOS = {"m2m_100": True, "m2m_100-gelu": False}  # generation_config.json forced_bos_token_id = eng_Latn
# EOS logit boosts under which the seed-1 models' hypotheses end at different lengths (the decoding
# tests check that they do): the finished-hypothesis paths of the searches run.
EOS_BOOST = {"m2m_100": 3.0, "m2m_100-gelu": 7.0}


def nllb_tokenizer(folder: Path):
    """An ``NllbTokenizer`` over the test sentences: <s> 0, <pad> 1, </s> 2, <unk> 3, letters, then
    each word's prefixes with the merges that build them left to right (Sennrich et al. 2016's
    BPE), three language codes and <mask> last; source French, target English."""
    from transformers import AutoTokenizer, NllbTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    words = sorted(set(WORDS))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for c in ["▁", ".", ","] + sorted(set("".join(words))):
        vocab.setdefault(c, len(vocab))
    merges = []
    for w in words:
        piece = "▁"
        for ch in w:
            if (piece, ch) not in merges:
                merges.append((piece, ch))
            piece += ch
            vocab.setdefault(piece, len(vocab))
    NllbTokenizer(vocab=vocab, merges=merges, src_lang=SRC_LANG, tgt_lang=TGT_LANG,
                  extra_special_tokens=[TGT_LANG, SRC_LANG, OTHER_LANG]).save_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))


def m2m100_tokenizer(folder: Path):
    """An ``M2M100Tokenizer`` as M2M-100's folders hold one (vocab.json + sentencepiece.bpe.model):
    a unigram SentencePiece model (Kudo 2018) of the test sentences, fairseq's specials first, the
    WMT-21 language codes ``__xx__`` after the pieces; source German, target English."""
    import os

    import sentencepiece as spm
    from transformers import AutoTokenizer, M2M100Tokenizer

    from tiny_seq2seq import sentences

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "spm_corpus.txt"
    corpus.write_text("\n".join(sentences(400)) + "\n")
    spm.set_random_generator_seed(0)
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "spm"), vocab_size=60,
                                   model_type="unigram", character_coverage=1.0, bos_id=0, pad_id=1, eos_id=2,
                                   unk_id=3, hard_vocab_limit=False, minloglevel=2, num_threads=1)
    corpus.unlink()
    (folder / "spm.vocab").unlink()
    os.replace(folder / "spm.model", folder / "sentencepiece.bpe.model")
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    M2M100Tokenizer(str(folder / "vocab.json"), str(folder / "sentencepiece.bpe.model"), src_lang="de", tgt_lang="en",
                    language_codes="wmt21").save_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))


def save_tiny(folder: Path, kind: str = "m2m_100", seed: int = 0, eos_boost: float = 2.0, bare: bool = False,
              tokenizer: str = "nllb", **overrides) -> Path:
    """Save a random ``kind`` M2M100 (``M2M100ForConditionalGeneration``, or ``M2M100Model`` with
    ``bare``) with its tokenizer to ``folder``. Weights are larger than HF's init (attention not
    uniform), LayerNorms and biases random (every tensor matters). M2M100 has no
    ``final_logits_bias``: ``eos_boost`` raises the EOS logit through the decoder's final
    LayerNorm bias β (logit_v = h·E_v with h = γ·x̂ + β: β += boost·E_eos / |E_eos|²), so that
    generated sequences end at different lengths. ``tokenizer``: "nllb" (``nllb_tokenizer``) or
    "m2m100" (``m2m100_tokenizer``; the vocabulary then has fairseq's 8 made-up words after the
    language codes, as M2M-100's has)."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Model

    folder = Path(folder)
    tok = nllb_tokenizer(folder) if tokenizer == "nllb" else m2m100_tokenizer(folder)
    V = len(tok) if tokenizer == "nllb" else max(tok.get_vocab().values()) + 1 + 8
    torch.manual_seed(seed)
    config = M2M100Config(vocab_size=V, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                          decoder_start_token_id=tok.eos_token_id,
                          encoder_layerdrop=0.0, decoder_layerdrop=0.0, **{**CONFIGS[kind], **overrides})
    model = (M2M100Model if bare else M2M100ForConditionalGeneration)(config)
    randomize(model)
    with torch.no_grad():
        base = model if bare else model.model
        e = base.shared.weight[tok.eos_token_id]
        base.decoder.layer_norm.bias += eos_boost * e / (e @ e)
    code = tok.convert_tokens_to_ids(TGT_LANG if tokenizer == "nllb" else "__en__")
    return save(model, folder, code if FORCED_BOS[kind] and not bare else None)


def hf_model(folder: Path, kind: str | None = None, bare: bool = False):
    """The HF oracle of a saved folder (``kind``, the case, changes nothing: every case is one class)."""
    from transformers import M2M100ForConditionalGeneration, M2M100Model

    cls = M2M100Model if bare else M2M100ForConditionalGeneration
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()
