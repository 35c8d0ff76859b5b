"""The rotary decoder layout (Llama's: ``LlamaForCausalLM``, and the families that keep its names:
Qwen2, Gemma 2): the config.json mapping of Llama's keys (``config_from_hf``) and the key table ->
jattn params (``jattn.nn.encoder`` layout with a causal LM head).

``config_from_hf``: a causal Transformer with pre-normalisation by RMSNorm (Zhang & Sennrich 2019),
rotary positions on queries and keys (Su et al. 2021, "rotate half" with base ``rope_theta``),
SwiGLU (Shazeer 2020, Eq. 6), grouped-query attention with ``num_key_value_heads`` key/value heads
(Ainslie et al. 2023), a final RMSNorm, biases where the config (or the family) says.

``nn.Linear`` weights (out, in) are transposed into kernels (in, out) split by head: q_proj
(H·d_h, D) -> (D, H, d_h), k_proj / v_proj (H_kv·d_h, D) -> (D, H_kv, d_h) (grouped-query
attention keeps H_kv key/value heads; the attention repeats them per query head), o_proj
(D, H·d_h) -> (H, d_h, D). The gated FFN act(gate_proj x) ⊙ up_proj x (Shazeer 2020) is jattn's
gated W_1 (D, 2, F): slot 0 the activated input (``gate_proj``), slot 1 the multiplier
(``up_proj``). RMSNorm γ -> ``scale``. The LM head is ``lm_head.weight`` (V, D), or the word
embeddings where ``tie_word_embeddings``."""

from __future__ import annotations

import dataclasses

import numpy as np

from jattn.families.config_table import ROTARY_DECODER, reads
from jattn.io import tensors
from jattn.io.hf import Entry, apply_table, check_tied, linear, to_state_dict
from jattn.nn.config import ConfigError, EncoderConfig, encoder_config

CONFIG_KEYS = ROTARY_DECODER  # LlamaConfig's keys and defaults
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


def rope_theta(hf: dict) -> float:
    """The rotary base, read as Hugging Face (transformers 5, ``convert_rope_params_to_dict``) reads
    it: the ``rope_scaling`` dict where set, in place of ``rope_parameters``; its ``rope_theta``, else
    the top-level ``rope_theta``, else 10 000. A scaled or otherwise modified RoPE is refused."""
    params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ConfigError(f"config.json rope_parameters.rope_type / rope_scaling = {kind!r} is not supported: jattn "
                          "implements RoFormer's rotary angles (rope_type 'default', Su et al. 2021). Fix: use a "
                          "checkpoint without RoPE scaling, or set rope_type to 'default' (a different model)")
    if float(params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))) != 1.0:
        raise ConfigError("config.json partial_rotary_factor != 1 is not supported: jattn rotates every dimension "
                          "of a head. Fix: use a checkpoint with partial_rotary_factor 1")
    return float(params.get("rope_theta", hf.get("rope_theta", 10_000.0)))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict, *, attention_bias: bool | None = None, attention_out_bias: bool | None = None):
    """config.json -> ``EncoderConfig`` (causal, RMSNorm, rotary, gated SiLU FFN, GQA)."""
    if hf["pretraining_tp"] not in (1, None):
        raise ConfigError("config.json pretraining_tp != 1 is not supported (a sliced matmul for tensor-parallel "
                          "pretraining). Fix: set pretraining_tp to 1 (the same function, one product)")
    H = hf["num_attention_heads"]
    K = hf["num_key_value_heads"] or H
    if H % K:
        raise ConfigError(f"config.json num_attention_heads={H} must be a multiple of num_key_value_heads={K}")
    d_h = hf["head_dim"] or hf["hidden_size"] // H
    if d_h % 2:
        raise ConfigError(f"head_dim={d_h} must be even for rotary positions (pairs of dimensions)")
    eos, pad = hf["eos_token_id"], hf["pad_token_id"]
    if isinstance(eos, list):
        if len(eos) != 1:
            raise ConfigError(f"config.json eos_token_id={eos}: several EOS ids are not supported. Fix: give one id")
        eos = eos[0]
    bias = hf["attention_bias"] if attention_bias is None else attention_bias
    generic = {**hf, "layer_norm_eps": hf["rms_norm_eps"], "type_vocab_size": 0,
               "pad_token_id": pad if pad is not None else eos,  # HF generate pads with EOS without a pad id
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": hf["attention_dropout"] or 0.0}
    if generic["hidden_size"] % H and not hf["head_dim"]:
        raise ConfigError("hidden_size must be divisible by num_attention_heads (or head_dim given)")
    generic["num_attention_heads"] = H if not generic["hidden_size"] % H else 1  # H set below; d_h is head_dim
    config = encoder_config(
        generic, position_embeddings=False, norm_position="pre", final_norm=True, causal=True, norm="rms",
        embedding_norm=False, norm_bias=False, gated_ffn=True, rotary_theta=rope_theta(hf), attention_bias=bias,
        attention_out_bias=attention_out_bias, ffn_bias=hf["mlp_bias"],
        tied_lm_head=hf["tie_word_embeddings"], num_kv_heads=K, attention_head_dim=d_h,
        bos_token_id=hf["bos_token_id"], eos_token_id=eos)
    return dataclasses.replace(config, num_heads=H)
