"""Llama (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models", §2.2): a
causal Transformer with pre-normalisation by RMSNorm (Zhang & Sennrich 2019), x -> h = x +
Attn(RMSNorm(x)) -> h + W_down (SiLU(W_gate u) ⊙ W_up u), u = RMSNorm(h) (SwiGLU, Shazeer 2020,
Eq. 6), rotary positions on queries and keys (Su et al. 2021, "rotate half" with base
``rope_theta``), no biases (``attention_bias``, ``mlp_bias``), grouped-query attention with
``num_key_value_heads`` key/value heads (Ainslie et al. 2023: query head h reads key/value head
h // (H / H_kv), ``EncoderConfig.kv_head``), a final RMSNorm and an untied ``lm_head`` (tied where
``tie_word_embeddings``). Run on jattn's pre-LN encoder stack with ``causal=True``."""

from jattn.families.layouts import rotary_decoder
from jattn.families.spec import FamilySpec, register

SPEC = register(FamilySpec(
    model_type="llama", shape="decoder", config_from_hf=rotary_decoder.config_from_hf,
    convert=rotary_decoder.convert, to_hf_state_dict=rotary_decoder.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("tokenizer.model",)), special_tokens=("eos",),
))
