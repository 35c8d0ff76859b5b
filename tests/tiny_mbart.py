"""Tiny random Hugging Face mBART checkpoints with SentencePiece-style (Unigram) tokenizers carrying
language codes, saved locally: mBART-cc25 style (``MBartTokenizer``: ``X </s> lang``, decoding from
the target's code) and mBART-50 style (``MBart50Tokenizer``: ``lang X </s>``, decoding from ``</s>``
with the target's code forced first)."""

from __future__ import annotations

from pathlib import Path

from tiny_bart_layout import MAIN, SECOND, boost_eos, randomize, save
from tiny_seq2seq import WORDS

SRC_LANG, TGT_LANG = "fr_XX", "en_XX"
# The cases: the layout's two shapes (``tiny_bart_layout``) with other activations,
# embedding scaling, how decoding starts.
CONFIGS = {
    "mbart-cc25": dict(MAIN, activation_function="gelu", scale_embedding=True),
    "mbart-50": dict(SECOND, activation_function="relu", scale_embedding=False),
}
FORCED_BOS = {"mbart-cc25": False, "mbart-50": True}  # generation_config.json forced_bos_token_id = the target's code
# EOS logit boosts under which the seed-1 models' hypotheses end at different lengths (the decoding
# tests check that they do): the finished-hypothesis paths of the searches run.
EOS_BOOST = {"mbart-cc25": 2.0, "mbart-50": 2.0}


def pieces() -> list[tuple[str, float]]:
    """A Unigram vocabulary (Kudo 2018) for the test sentences, fairseq's specials first: <s> 0,
    <pad> 1, </s> 2, <unk> 3, whole words, then letters as the fallback."""
    words = sorted(set(WORDS))
    letters = sorted(set("".join(words)))
    return ([("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -1.0) for w in words]
            + [("▁", -3.0), (".", -2.0), (",", -2.0)] + [(c, -5.0) for c in letters])


def mbart_tokenizer(folder: Path, kind: str):
    """``MBartTokenizer`` (cc25) or ``MBart50Tokenizer`` (50) with ``pieces``, the language codes and
    <mask> after them, source French, target English; saved as tokenizer.json + tokenizer_config.json."""
    from transformers import AutoTokenizer, MBart50Tokenizer, MBartTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cls = MBartTokenizer if kind == "mbart-cc25" else MBart50Tokenizer
    cls(vocab=pieces(), src_lang=SRC_LANG, tgt_lang=TGT_LANG).save_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))


def save_tiny(folder: Path, kind: str = "mbart-cc25", seed: int = 0, eos_boost: float = 2.0, bare: bool = False,
              **overrides) -> Path:
    """Save a random ``kind`` mBART (``MBartForConditionalGeneration``, or ``MBartModel`` with
    ``bare``) with its tokenizer to ``folder``. Weights are larger than HF's init (attention not
    uniform), LayerNorms and biases random (every tensor matters), and ``eos_boost`` raises the EOS
    logit through ``final_logits_bias`` so that generated sequences end at different lengths."""
    import torch
    from transformers import MBartConfig, MBartForConditionalGeneration, MBartModel

    folder = Path(folder)
    tok = mbart_tokenizer(folder, kind)
    tgt_code = tok.convert_tokens_to_ids(TGT_LANG)
    start = tgt_code if kind == "mbart-cc25" else tok.eos_token_id
    torch.manual_seed(seed)
    config = MBartConfig(vocab_size=len(tok), max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.convert_tokens_to_ids("<s>"), eos_token_id=tok.eos_token_id,
                         decoder_start_token_id=start, forced_eos_token_id=tok.eos_token_id,
                         **{**CONFIGS[kind], **overrides})
    model = (MBartModel if bare else MBartForConditionalGeneration)(config)
    randomize(model)
    if not bare:
        boost_eos(model, tok.eos_token_id, eos_boost)
    return save(model, folder, tgt_code if FORCED_BOS[kind] and not bare else None)


def hf_model(folder: Path, kind: str | None = None, bare: bool = False):
    """The HF oracle of a saved folder (``kind``, the case, changes nothing: every case is one class)."""
    from transformers import MBartForConditionalGeneration, MBartModel

    cls = MBartModel if bare else MBartForConditionalGeneration
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()
