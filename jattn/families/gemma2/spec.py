"""Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size", §2):
Llama's causal block (``jattn.families.llama``: rotary positions, GeGLU with the tanh GELU,
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

from jattn.families.gemma2 import convert
from jattn.families.llama.spec import config_from_hf as llama_config
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError


def config_from_hf(hf: dict):
    if hf.get("use_bidirectional_attention"):
        raise ConfigError("config.json use_bidirectional_attention=True is not supported: jattn runs Gemma 2 as a "
                          "causal LM. Fix: set it to null/false")
    L = hf["num_hidden_layers"]
    types = hf.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    if len(types) != L or set(types) - {"sliding_attention", "full_attention"}:
        raise ConfigError(f"config.json layer_types must give 'sliding_attention' or 'full_attention' for each of the "
                          f"{L} layers, got {types!r}")
    window = int(hf.get("sliding_window") or 4096)
    config = llama_config({**hf, "hidden_act": hf.get("hidden_activation", "gelu_pytorch_tanh")})
    soft = (lambda key: float(hf.get(key) or 0.0))
    return dataclasses.replace(
        config, norm_offset=1.0, sublayer_post_norm=True, attention_softcap=soft("attn_logit_softcapping"),
        logit_softcap=soft("final_logit_softcapping"), score_scale=float(hf.get("query_pre_attn_scalar", 256)) ** -0.5,
        embedding_scale=float(np.float32(hf["hidden_size"] ** 0.5)), tied_lm_head=bool(hf.get("tie_word_embeddings", True)),
        attention_radius=tuple(window - 1 if t == "sliding_attention" else 0 for t in types))


SPEC = register(FamilySpec(
    model_type="gemma2", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("tokenizer.model",)), special_tokens=("eos",),
))
