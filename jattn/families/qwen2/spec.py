"""Qwen2 (Yang et al. 2024, "Qwen2 Technical Report", §2.1): the Llama block layout (pre-RMSNorm,
rotary positions, SwiGLU, grouped-query attention; ``jattn.families.layouts.rotary_decoder``) with biases on the
query, key and value projections (none on the output projection, none in the FFN). Sliding-window
attention (``use_sliding_window``) is refused: HF's Qwen2 checkpoints leave it off."""

from __future__ import annotations

from jattn.families.config_table import (LAYER_TYPES, ROTARY_DECODER, TOKEN_IDS, ConfigKey, flag, reads, token,
                                         with_defaults)
from jattn.families.layouts import rotary_decoder
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError

# Qwen2Config's keys and defaults: Llama's without attention_bias, mlp_bias and pretraining_tp (Qwen2's
# modules fix them), and its sliding-window keys
CONFIG_KEYS = (
    *with_defaults(tuple(k for k in ROTARY_DECODER if k.name not in ("attention_bias", "mlp_bias", "pretraining_tp")),
                   num_key_value_heads=32, bos_token_id=None,
                   eos_token_id=ConfigKey("eos_token_id", (int, list), 0, None, None, "where generation stops",
                                          nullable=True, items=TOKEN_IDS),
                   pad_token_id=token("pad_token_id", None, "the padding token (null: eos_token_id)")),
    flag("use_sliding_window", False, "sliding-window attention in the upper layers"),
    LAYER_TYPES,
)


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if hf["use_sliding_window"] or any(t != "full_attention" for t in hf["layer_types"] or ()):
        raise ConfigError("config.json use_sliding_window=True / sliding_attention layer_types are not supported for "
                          "qwen2. Fix: set use_sliding_window to false (Qwen2 checkpoints are trained without it)")
    # Qwen2's projections: q/k/v biases, none on the output or in the FFN, whatever config.json says
    return rotary_decoder.config_from_hf({**hf, "mlp_bias": False, "pretraining_tp": 1}, attention_bias=True,
                                         attention_out_bias=False)


SPEC = register(FamilySpec(
    model_type="qwen2", shape="decoder", config_from_hf=config_from_hf,
    convert=rotary_decoder.convert, to_hf_state_dict=rotary_decoder.to_hf_state_dict,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("eos",),
))
