"""Tiny random Hugging Face BART checkpoints with a byte-level BPE tokenizer, saved locally."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_bart_layout import MAIN, SECOND, boost_eos, randomize, save
from tiny_seq2seq import sentences

# The cases: the layout's two shapes (``tiny_bart_layout``) with other activations,
# embedding scaling, a forced first token in generation.
CONFIGS = {
    "bart": dict(MAIN, activation_function="gelu", scale_embedding=False),
    "bart-scaled": dict(SECOND, activation_function="relu", scale_embedding=True),
}
FORCED_BOS = {"bart": True, "bart-scaled": False}  # generation_config.json forced_bos_token_id = <s>
# EOS logit boosts under which the seed-1 models' hypotheses end at different lengths (the decoding
# tests check that they do): the finished-hypothesis paths of the searches run.
EOS_BOOST = {"bart": 4.0, "bart-scaled": 6.0}


def bart_tokenizer(folder: Path, vocab_size: int = 400):
    """A byte-level BPE (Radford et al. 2019) trained on the test sentences, laid out as BART's:
    <s> 0, <pad> 1, </s> 2, <unk> 3, bytes and merges, <mask> last; vocab.json + merges.txt and,
    from ``save_pretrained``, tokenizer.json + tokenizer_config.json."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(sentences(400), vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False)
    bpe.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["<mask>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BartTokenizer"}))
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return tok


def save_tiny(folder: Path, kind: str = "bart", seed: int = 0, eos_boost: float = 2.0, bare: bool = False) -> Path:
    """Save a random ``kind`` BART (``BartForConditionalGeneration``, or ``BartModel`` with ``bare``)
    with its tokenizer to ``folder``. Weights are larger than HF's init (attention not uniform),
    LayerNorms and biases random (every tensor matters), and ``eos_boost`` raises the EOS logit
    through ``final_logits_bias`` so that generated sequences end at different lengths."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration, BartModel

    folder = Path(folder)
    tok = bart_tokenizer(folder)
    torch.manual_seed(seed)
    config = BartConfig(vocab_size=len(tok), max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=tok.eos_token_id,
                        **CONFIGS[kind])
    model = (BartModel if bare else BartForConditionalGeneration)(config)
    randomize(model)
    if not bare:
        boost_eos(model, tok.eos_token_id, eos_boost)
    return save(model, folder, tok.bos_token_id if FORCED_BOS[kind] and not bare else None)


def hf_model(folder: Path, kind: str | None = None, bare: bool = False):
    """The HF oracle of a saved folder (``kind``, the case, changes nothing: every case is one class)."""
    from transformers import BartForConditionalGeneration, BartModel

    cls = BartModel if bare else BartForConditionalGeneration
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()
