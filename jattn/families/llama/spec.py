"""Llama (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models", §2.2): a
causal Transformer with pre-normalisation by RMSNorm (Zhang & Sennrich 2019), x -> h = x +
Attn(RMSNorm(x)) -> h + W_down (SiLU(W_gate u) ⊙ W_up u), u = RMSNorm(h) (SwiGLU, Shazeer 2020,
Eq. 6), rotary positions on queries and keys (Su et al. 2021, "rotate half" with base
``rope_theta``), no biases (``attention_bias``, ``mlp_bias``), grouped-query attention with
``num_key_value_heads`` key/value heads (Ainslie et al. 2023: query head h reads key/value head
h // (H / H_kv), ``EncoderConfig.kv_head``), a final RMSNorm and an untied ``lm_head`` (tied where
``tie_word_embeddings``). Run on jattn's pre-LN encoder stack with ``causal=True``.

``config_from_hf`` is shared by the Llama-layout families (Qwen2 adds q/k/v biases)."""

from __future__ import annotations

import dataclasses

from jattn.families.config_table import ROTARY_DECODER, reads
from jattn.families.llama import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

CONFIG_KEYS = ROTARY_DECODER  # LlamaConfig's keys and defaults


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


SPEC = register(FamilySpec(
    model_type="llama", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("tokenizer.model",)), special_tokens=("eos",),
))
