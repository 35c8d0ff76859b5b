"""Key table for Gemma 2 checkpoints (``Gemma2ForCausalLM``, ``Gemma2Model``): Llama's
(``jattn.families.layouts.rotary_decoder``) with four RMSNorms per block: ``input_layernorm`` (the attention's
input), ``post_attention_layernorm`` (its output, before the residual), ``pre_feedforward_layernorm``
and ``post_feedforward_layernorm``. γ is stored as the checkpoint stores it (the model scales by
1 + γ, ``RMSNorm(offset=1)``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.layouts import rotary_decoder
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict
from jattn.nn.config import EncoderConfig


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    rows = []
    for e in rotary_decoder.entries(c, prefix):
        if ".post_attention_layernorm." in e.key:
            layer = e.path[:2]
            rows += [dataclasses.replace(e, path=layer + ("attention_post_ln", "scale")),
                     Entry(e.key.replace("post_attention", "pre_feedforward"), layer + ("ffn_ln", "scale"), e.shape),
                     Entry(e.key.replace("post_attention", "post_feedforward"), layer + ("ffn_post_ln", "scale"),
                           e.shape)]
        else:
            rows.append(e)
    return rows


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn params."""
    prefix = rotary_decoder.PREFIX if any(k.startswith(rotary_decoder.PREFIX) for k in state) else ""
    if config.tied_lm_head:
        check_tied(state, {"lm_head.weight": f"{prefix}embed_tokens.weight"}, source,
                   "the LM head must be the word embeddings (config.json tie_word_embeddings)")
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    return apply_table(rotary_decoder._join_gate_up(state, config, prefix), entries(config, prefix),
                       rotary_decoder.IGNORED, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn params -> a ``Gemma2ForCausalLM`` state dict."""
    state = to_state_dict(params, entries(config, rotary_decoder.PREFIX))
    for i in range(config.num_layers):
        k = f"{rotary_decoder.PREFIX}layers.{i}.mlp"
        state[f"{k}.gate_proj.weight"], state[f"{k}.up_proj.weight"] = np.split(state.pop(f"{k}.gate_up.weight"), 2)
    return state
