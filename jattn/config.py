"""Frozen model configurations, built from Hugging Face ``config.json`` dictionaries.

Configs are hashable so that they can be static arguments of ``jax.jit``: one compiled
forward per (config, padded shape).
"""

from __future__ import annotations

import dataclasses
from typing import Any


class ConfigError(ValueError):
    """A Hugging Face config that jattn cannot represent faithfully."""


ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """A BERT-family encoder (BERT, RoBERTa): post-LayerNorm blocks, learned positions.

    The two families differ only in the embeddings: RoBERTa numbers positions from
    ``pad_token_id + 1`` and skips padding (``position_offset``), and has one token type.
    """

    model_type: str  # "bert" | "roberta"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def max_length(self) -> int:
        """Longest sequence (special tokens included) the position table can encode."""
        if self.model_type == "roberta":
            return self.max_position_embeddings - self.pad_token_id - 1
        return self.max_position_embeddings

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> "EncoderConfig":
        """Build from a Hugging Face ``config.json`` dict, refusing what we do not implement."""
        model_type = hf.get("model_type")
        if model_type not in ("bert", "roberta"):
            raise ConfigError(f"EncoderConfig supports model_type 'bert' and 'roberta', got {model_type!r}")
        required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings")
        if missing := [k for k in required if k not in hf]:
            raise ConfigError(f"config.json lacks {', '.join(missing)}: not a complete {model_type} config")
        act = hf.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"unsupported hidden_act {act!r}; supported: {', '.join(ACTIVATIONS)}")
        pos = hf.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ConfigError(f"only absolute position embeddings are supported, got {pos!r}")
        if hf.get("is_decoder") or hf.get("add_cross_attention"):
            raise ConfigError("decoder-style BERT configs (is_decoder / add_cross_attention) are not supported")
        if hf["hidden_size"] % hf["num_attention_heads"]:
            raise ConfigError("hidden_size must be divisible by num_attention_heads")
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            hidden_act=act,
            max_position_embeddings=hf["max_position_embeddings"],
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            pad_token_id=hf.get("pad_token_id", 0) if hf.get("pad_token_id") is not None else 0,
            hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        )
