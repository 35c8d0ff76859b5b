"""Key table for Llama-layout checkpoints (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``*Model``) ->
jattn params (``jattn.nn.encoder`` layout with a causal LM head).

``nn.Linear`` weights (out, in) are transposed into kernels (in, out) split by head: q_proj
(H·d_h, D) -> (D, H, d_h), k_proj / v_proj (H_kv·d_h, D) -> (D, H_kv, d_h) (grouped-query
attention keeps H_kv key/value heads; the attention repeats them per query head), o_proj
(D, H·d_h) -> (H, d_h, D). The gated FFN act(gate_proj x) ⊙ up_proj x (Shazeer 2020) is jattn's
gated W_1 (D, 2, F): slot 0 the activated input (``gate_proj``), slot 1 the multiplier
(``up_proj``). RMSNorm γ -> ``scale``. The LM head is ``lm_head.weight`` (V, D), or the word
embeddings where ``tie_word_embeddings``."""

from __future__ import annotations

import numpy as np

from jattn.io import tensors
from jattn.io.hf import Entry, apply_table, check_tied, linear, to_state_dict
from jattn.nn.config import EncoderConfig

PREFIX = "model."
IGNORED = (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq", r"model\.rotary_emb\.inv_freq")


def _proj_in(D: int, heads: int, d_h: int):
    """q / k / v (heads·d_h, D) <-> kernel (D, heads, d_h)."""
    return (heads * d_h, D), lambda w: w.T.reshape(D, heads, d_h), lambda k: k.reshape(D, heads * d_h).T


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, K, d_h, F = c.hidden_size, c.num_heads, c.kv_heads, c.head_dim, c.intermediate_size
    rows = [Entry(f"{prefix}embed_tokens.weight", ("embeddings", "word"), (c.vocab_size, D))]
    out_bias = c.attention_bias if c.attention_out_bias is None else c.attention_out_bias
    for i in range(c.num_layers):
        k, p = f"{prefix}layers.{i}", ("layers", i)
        rows.append(Entry(f"{k}.input_layernorm.weight", p + ("attention_ln", "scale"), (D,)))
        for name, heads in (("query", H), ("key", K), ("value", K)):
            rows.append(Entry(f"{k}.self_attn.{name[0]}_proj.weight", p + ("attention", name, "kernel"),
                              *_proj_in(D, heads, d_h)))
            if c.attention_bias:
                rows.append(Entry(f"{k}.self_attn.{name[0]}_proj.bias", p + ("attention", name, "bias"),
                                  (heads * d_h,), lambda b, h=heads: b.reshape(h, d_h),
                                  lambda b, h=heads: b.reshape(h * d_h)))
        rows.append(Entry(f"{k}.self_attn.o_proj.weight", p + ("attention", "out", "kernel"), (D, H * d_h),
                          lambda w: w.T.reshape(H, d_h, D), lambda w: w.reshape(H * d_h, D).T))
        if out_bias:
            rows.append(Entry(f"{k}.self_attn.o_proj.bias", p + ("attention", "out", "bias"), (D,)))
        rows.append(Entry(f"{k}.post_attention_layernorm.weight", p + ("ffn_ln", "scale"), (D,)))
        rows.append(Entry(f"{k}.mlp.gate_up.weight", p + ("ffn_in", "kernel"), (2 * F, D),
                          lambda w: w.T.reshape(D, 2, F), lambda w: w.reshape(D, 2 * F).T))
        rows.append(Entry(f"{k}.mlp.down_proj.weight", p + ("ffn_out", "kernel"), *linear(F, D)))
        if c.ffn_bias:
            rows.append(Entry(f"{k}.mlp.gate_up.bias", p + ("ffn_in", "bias"), (2 * F,),
                              lambda b: b.reshape(2, F), lambda b: b.reshape(2 * F)))
            rows.append(Entry(f"{k}.mlp.down_proj.bias", p + ("ffn_out", "bias"), (D,)))
    rows.append(Entry(f"{prefix}norm.weight", ("final_ln", "scale"), (D,)))
    if not c.tied_lm_head:
        rows.append(Entry("lm_head.weight", ("lm_head", "weight"), (c.vocab_size, D)))
    return rows


def _join_gate_up(state: dict, c: EncoderConfig, prefix: str) -> dict:
    """``mlp.gate_proj`` and ``mlp.up_proj`` (F, D) -> one ``mlp.gate_up`` (2F, D) (rows gate, up)."""
    state = dict(state)
    for i in range(c.num_layers):
        k = f"{prefix}layers.{i}.mlp"
        for part in ("weight", "bias"):
            if f"{k}.gate_proj.{part}" in state and f"{k}.up_proj.{part}" in state:
                state[f"{k}.gate_up.{part}"] = tensors.concat([state.pop(f"{k}.gate_proj.{part}"),
                                                              state.pop(f"{k}.up_proj.{part}")], axis=0)
    return state


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn params."""
    prefix = PREFIX if any(k.startswith(PREFIX) for k in state) else ""
    if config.tied_lm_head:
        check_tied(state, {"lm_head.weight": f"{prefix}embed_tokens.weight"}, source,
                   "the LM head must be the word embeddings (config.json tie_word_embeddings)")
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    return apply_table(_join_gate_up(state, config, prefix), entries(config, prefix), IGNORED, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn params -> a ``*ForCausalLM`` state dict (``gate_proj`` / ``up_proj`` split again)."""
    state = to_state_dict(params, entries(config, PREFIX))
    for i in range(config.num_layers):
        k = f"{PREFIX}layers.{i}.mlp"
        for part in ("weight", "bias"):
            if f"{k}.gate_up.{part}" in state:
                state[f"{k}.gate_proj.{part}"], state[f"{k}.up_proj.{part}"] = np.split(
                    state.pop(f"{k}.gate_up.{part}"), 2, axis=0)
    return state
