"""Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size", §2):
Llama's causal block (``jattn.families.layouts.rotary_decoder``: rotary positions, GeGLU with the tanh GELU,
grouped-query attention, a ``head_dim`` of its own) with RMSNorm scaling by 1 + γ
(``RMSNorm(offset=1)``), a norm on each sublayer's input *and* output (x -> h = x +
N_post(Attn(N_pre(x))) -> h + N_post'(FFN(N_pre'(h)))), scores q·k / sqrt(``query_pre_attn_scalar``)
soft-capped c·tanh(s / c) (``attn_logit_softcapping``) and the final logits likewise
(``final_logit_softcapping``), local layers attending to the ``sliding_window`` − 1 keys before the
query and itself (``layer_types``; HF's mask j > i − W) alternating with global ones, and word
embeddings scaled by sqrt(D). The LM head is tied to the embeddings."""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.config_table import (LAYER_TYPES, ROTARY_DECODER, TOKEN_IDS, ConfigKey, activation, flag, reads,
                                         size, with_defaults)
from jattn.families.gemma2 import convert
from jattn.families.layouts import rotary_decoder
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError


def _softcap(name: str, default: float, what: str) -> ConfigKey:
    return ConfigKey(name, float, 0, None, default, f"{what} soft-capped c·tanh(s / c) (null: none)", nullable=True,
                     open_low=True)


# Gemma2Config's keys and defaults: Llama's without hidden_act (hidden_activation), mlp_bias and
# pretraining_tp (Gemma 2's modules fix them), and its own
CONFIG_KEYS = (
    *with_defaults(tuple(k for k in ROTARY_DECODER if k.name not in ("hidden_act", "mlp_bias", "pretraining_tp")),
                   num_key_value_heads=size("num_key_value_heads", "key/value heads"),
                   head_dim=size("head_dim", "the head width"),
                   pad_token_id=0, bos_token_id=2,
                   eos_token_id=ConfigKey("eos_token_id", (int, list), 0, None, 1, "where generation stops",
                                          nullable=True, items=TOKEN_IDS),
                   tie_word_embeddings=True),
    activation("hidden_activation", "gelu_pytorch_tanh"),
    ConfigKey("query_pre_attn_scalar", int, 1, None, 256, "scores are q·k / sqrt(query_pre_attn_scalar)"),
    ConfigKey("sliding_window", int, 1, None, 4096, "a local layer's window W: the query and the W − 1 keys "
              "before it (HF's mask j > i − W)"),
    LAYER_TYPES,
    _softcap("attn_logit_softcapping", 50.0, "scores"), _softcap("final_logit_softcapping", 30.0, "the logits"),
    flag("use_bidirectional_attention", None, "attention to every token, not causal", nullable=True),
)


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if hf["use_bidirectional_attention"]:
        raise ConfigError("config.json use_bidirectional_attention=True is not supported: jattn runs Gemma 2 as a "
                          "causal LM. Fix: set it to null/false")
    L = hf["num_hidden_layers"]
    types = hf["layer_types"] or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    if len(types) != L or set(types) - {"sliding_attention", "full_attention"}:
        raise ConfigError(f"config.json layer_types must give 'sliding_attention' or 'full_attention' for each of the "
                          f"{L} layers, got {types!r}")
    window = hf["sliding_window"]
    config = rotary_decoder.config_from_hf({**hf, "hidden_act": hf["hidden_activation"], "mlp_bias": False,
                                            "pretraining_tp": 1})
    soft = (lambda key: float(hf[key] or 0.0))  # null: none (jattn's 0)
    return dataclasses.replace(
        config, norm_offset=1.0, sublayer_post_norm=True, attention_softcap=soft("attn_logit_softcapping"),
        logit_softcap=soft("final_logit_softcapping"), score_scale=float(hf["query_pre_attn_scalar"]) ** -0.5,
        embedding_scale=float(np.float32(hf["hidden_size"] ** 0.5)), tied_lm_head=hf["tie_word_embeddings"],
        attention_radius=tuple(window - 1 if t == "sliding_attention" else 0 for t in types))


SPEC = register(FamilySpec(
    model_type="gemma2", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("tokenizer.model",)), special_tokens=("eos",),
))
