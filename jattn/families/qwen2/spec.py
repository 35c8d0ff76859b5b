"""Qwen2 (Yang et al. 2024, "Qwen2 Technical Report", §2.1): the Llama block layout (pre-RMSNorm,
rotary positions, SwiGLU, grouped-query attention; ``jattn.families.llama``) with biases on the
query, key and value projections (none on the output projection, none in the FFN). Sliding-window
attention (``use_sliding_window``) is refused: HF's Qwen2 checkpoints leave it off."""

from __future__ import annotations

from jattn.families.llama import convert
from jattn.families.llama.spec import config_from_hf as llama_config
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError


def config_from_hf(hf: dict):
    if hf.get("use_sliding_window", False) or any(t != "full_attention" for t in hf.get("layer_types") or ()):
        raise ConfigError("config.json use_sliding_window=True / sliding_attention layer_types are not supported for "
                          "qwen2. Fix: set use_sliding_window to false (Qwen2 checkpoints are trained without it)")
    return llama_config(hf, attention_bias=True, attention_out_bias=False)


SPEC = register(FamilySpec(
    model_type="qwen2", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("eos",),
))
