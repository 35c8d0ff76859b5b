"""Tiny random Hugging Face BERT/RoBERTa checkpoints saved locally, for parity tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Several shapes and options: head counts, activations, token types, RoBERTa's positions.
CONFIGS = {
    "bert-2x4": dict(model_type="bert", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=48, hidden_act="gelu", type_vocab_size=2),
    "bert-3x2-gelu_new": dict(model_type="bert", hidden_size=24, num_hidden_layers=3, num_attention_heads=2,
                              intermediate_size=40, hidden_act="gelu_new", type_vocab_size=3,
                              layer_norm_eps=1e-5),
    "roberta-2x4": dict(model_type="roberta", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, hidden_act="gelu", type_vocab_size=1, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5),
}


def save_tiny(folder: Path, name: str, head: str = "base", seed: int = 0, safe: bool = True,
              max_positions: int = 64) -> Path:
    """Save a random ``name`` model (head: base | mlm | cls, cls = 3-class sequence classification)
    with MiniLM's WordPiece tokenizer files."""
    import torch
    from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel,
                              RobertaConfig, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaModel)

    from jattn.models.load import default_model_path

    kw = dict(CONFIGS[name])
    model_type = kw.pop("model_type")
    kw.update(vocab_size=30522, max_position_embeddings=max_positions, hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1)
    torch.manual_seed(seed)
    if head == "cls":
        kw["num_labels"] = 3
    if model_type == "bert":
        cls = {"mlm": BertForMaskedLM, "cls": BertForSequenceClassification}.get(head, BertModel)
        model = cls(BertConfig(**kw))
    else:
        cls = {"mlm": RobertaForMaskedLM, "cls": RobertaForSequenceClassification}.get(head, RobertaModel)
        model = cls(RobertaConfig(**kw))
    with torch.no_grad():  # random LayerNorm parameters and biases, so that every tensor matters
        for p in model.parameters():
            if p.ndim == 1:
                p.normal_(0, 0.2)
                if p.shape[0] == kw["hidden_size"]:
                    p.add_(1.0)
    folder = Path(folder)
    model.save_pretrained(folder)
    if not safe:  # the older pickle format (transformers v5 writes only safetensors)
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    for f in TOKENIZER_FILES:
        shutil.copy(default_model_path() / f, folder / f)
    return folder


def hf_model(folder: Path, head: str = "base"):
    """The HF PyTorch oracle for a saved folder, eager attention, eval mode."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

    cls = {"mlm": AutoModelForMaskedLM, "cls": AutoModelForSequenceClassification,
           "lm": AutoModelForCausalLM}.get(head, AutoModel)
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()


def random_batch(config, lengths, seed: int = 0, pairs: bool = False) -> dict:
    """Random ids with per-example ``lengths`` (padding after), [CLS]/[SEP]-free but valid."""
    rng = np.random.default_rng(seed)
    b, n = len(lengths), max(lengths)
    ids = rng.integers(5, config.vocab_size, size=(b, n)).astype(np.int32)
    mask = (np.arange(n)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, config.pad_token_id).astype(np.int32)
    types = np.zeros((b, n), np.int32)
    if pairs:
        for i, length in enumerate(lengths):
            types[i, length // 2: length] = min(1, config.type_vocab_size - 1)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def hf_run(model, batch: dict, **kw):
    import torch

    with torch.no_grad():
        return model(**{k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()},
                     output_attentions=True, output_hidden_states=True, **kw)
