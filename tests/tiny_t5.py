"""Tiny random Hugging Face T5 / mT5 checkpoints with a SentencePiece-style (Unigram) ``T5Tokenizer``,
saved locally: T5 v1.0 (ReLU FFN, tied output scaled by d_model^-½), T5 v1.1 (gated GELU, an untied
``lm_head``, no scaling; ``tie_word_embeddings: false`` as the released configs say) and mT5 (v1.1's
layout, model_type "mt5"); d_kv differs from d_model / heads in each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tiny_seq2seq import WORDS

# Shapes and options that differ between the cases (H·d_kv ≠ d_model in each; few buckets and a short
# max_distance, so that the padded test batches reach the logarithmic buckets).
CONFIGS = {
    "t5-v1.0": dict(model_type="t5", d_model=32, d_kv=6, num_heads=4, d_ff=40, num_layers=3, num_decoder_layers=2,
                    feed_forward_proj="relu", tie_word_embeddings=True, relative_attention_num_buckets=8,
                    relative_attention_max_distance=6),
    "t5-v1.1": dict(model_type="t5", d_model=24, d_kv=8, num_heads=2, d_ff=36, num_layers=2, num_decoder_layers=2,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False, relative_attention_num_buckets=10,
                    relative_attention_max_distance=7),
    "mt5": dict(model_type="mt5", d_model=24, d_kv=4, num_heads=3, d_ff=28, num_layers=3, num_decoder_layers=2,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False, relative_attention_num_buckets=8,
                relative_attention_max_distance=5),
}
UNTIED = {"t5-v1.0": False, "t5-v1.1": True, "mt5": True}
# EOS logit boosts under which the seed-1 models' hypotheses end at different lengths (the decoding
# tests check that they do): the finished-hypothesis paths of the searches run.
EOS_BOOST = {"t5-v1.0": 1.0, "t5-v1.1": 2.0, "mt5": 6.0}


def pieces() -> list[tuple[str, float]]:
    """A Unigram vocabulary (Kudo 2018) for the test sentences, T5's specials first: <pad> 0,
    </s> 1, <unk> 2, whole words, then letters as the fallback."""
    words = sorted(set(WORDS))
    letters = sorted(set("".join(words)))
    return ([("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -1.0) for w in words]
            + [("▁", -3.0), (".", -2.0), (",", -2.0)] + [(c, -5.0) for c in letters])


def t5_tokenizer(folder: Path):
    """``T5Tokenizer`` over ``pieces`` with 4 sentinel tokens, saved as tokenizer.json + tokenizer_config.json."""
    from transformers import AutoTokenizer, T5Tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    T5Tokenizer(vocab=pieces(), extra_ids=4).save_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))


def _classes(kind: str):
    from transformers import MT5Config, MT5ForConditionalGeneration, T5Config, T5ForConditionalGeneration

    return (MT5Config, MT5ForConditionalGeneration) if kind == "mt5" else (T5Config, T5ForConditionalGeneration)


def save_tiny(folder: Path, kind: str = "t5-v1.0", seed: int = 0, eos_boost: float = 2.0, **overrides) -> Path:
    """Save a random ``kind`` model (``CONFIGS``) with its tokenizer to ``folder``. Weights are larger
    than HF's init (attention not uniform), RMSNorm scales random (every tensor matters), the
    relative biases large (the positions matter), queries and keys
    smaller (unscaled scores), and ``eos_boost`` raises EOS's logit (its row of the output projection) so that
    generated sequences end at different lengths. An untied ``kind`` writes its own
    ``lm_head.weight`` and ``tie_word_embeddings: false``."""
    import torch
    from safetensors.numpy import load_file, save_file

    folder = Path(folder)
    tok = t5_tokenizer(folder)
    config_cls, model_cls = _classes(kind)
    spec = {k: v for k, v in {**CONFIGS[kind], **overrides}.items() if k != "model_type"}
    torch.manual_seed(seed)
    config = config_cls(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                        decoder_start_token_id=tok.pad_token_id, **spec)
    model = model_cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.normal_(0, 1.0)
            elif name.endswith((".q.weight", ".k.weight")):  # T5's scores are unscaled q·k: keep them moderate
                p.normal_(0, 0.15)
            elif p.dim() == 2:
                p.normal_(0, 0.3)
            elif p.dim() == 1:
                p.normal_(1.0, 0.2)  # RMSNorm scales
    model.save_pretrained(str(folder))
    state = load_file(str(folder / "model.safetensors"))
    rng = np.random.default_rng(seed)
    if UNTIED[kind]:
        state["lm_head.weight"] = rng.normal(0, 0.3, state["shared.weight"].shape).astype(np.float32)
    out = state["lm_head.weight" if UNTIED[kind] else "shared.weight"]
    # EOS's logit raised by about ``eos_boost`` on the mean decoder output m of random inputs (the
    # projection's input, scaled as the model scales it): its row += eos_boost · m / ‖m‖²
    ids = torch.tensor(rng.integers(3, len(tok), (8, 6)))
    with torch.no_grad():
        h = model(input_ids=ids, decoder_input_ids=ids, output_hidden_states=True).decoder_hidden_states[-1]
    m = h.mean((0, 1)).numpy() * (config.d_model ** -0.5 if getattr(config, "scale_decoder_outputs", False) else 1.0)
    out[tok.eos_token_id] += eos_boost * m / np.dot(m, m)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = not UNTIED[kind]
    cfg.pop("scale_decoder_outputs", None)  # as the released config.json files: tie_word_embeddings decides
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def hf_model(folder: Path, kind: str = "t5-v1.0"):
    return _classes(kind)[1].from_pretrained(str(folder), attn_implementation="eager").eval()
