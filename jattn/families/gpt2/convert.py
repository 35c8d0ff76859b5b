"""Key table for GPT-2 checkpoints (``GPT2Model``, ``GPT2LMHeadModel``; Radford et al. 2019) -> jattn
params (``jattn.nn.encoder`` layout with a causal LM head).

GPT-2's projections are ``Conv1D`` modules whose weights are stored (in, out), the transpose of
``nn.Linear``'s: they reshape into jattn's kernels without a transpose. The fused ``attn.c_attn``
(D, 3·D) (columns q, k, v) is split into the query / key / value kernels (D, H, d_h), and joined
again on export. The LM head is tied to ``wte`` (``tie_word_embeddings``; a stored copy must
equal it) or, untied, ``lm_head.weight`` (V, D)."""

from __future__ import annotations

import numpy as np

from jattn.io import tensors
from jattn.io.hf import Entry, apply_table, check_tied, to_state_dict
from jattn.nn.config import EncoderConfig

IGNORED = (r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias",)  # the causal-mask buffers of old checkpoints


def _ln(key: str, path: tuple, d: int) -> list[Entry]:
    return [Entry(f"{key}.weight", path + ("scale",), (d,)), Entry(f"{key}.bias", path + ("bias",), (d,))]


def entries(c: EncoderConfig, prefix: str) -> list[Entry]:
    D, H, d_h, F = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size
    rows = [Entry(f"{prefix}wte.weight", ("embeddings", "word"), (c.vocab_size, D)),
            Entry(f"{prefix}wpe.weight", ("embeddings", "position"), (c.max_position_embeddings, D))]
    for i in range(c.num_layers):
        k, p = f"{prefix}h.{i}", ("layers", i)
        rows += _ln(f"{k}.ln_1", p + ("attention_ln",), D)
        for name in ("query", "key", "value"):  # Conv1D (in, out): (D, H·d_h) -> (D, H, d_h)
            rows.append(Entry(f"{k}.attn.c_{name[0]}.weight", p + ("attention", name, "kernel"), (D, H * d_h),
                              lambda w: w.reshape(D, H, d_h), lambda w: w.reshape(D, H * d_h)))
            rows.append(Entry(f"{k}.attn.c_{name[0]}.bias", p + ("attention", name, "bias"), (H * d_h,),
                              lambda b: b.reshape(H, d_h), lambda b: b.reshape(H * d_h)))
        rows.append(Entry(f"{k}.attn.c_proj.weight", p + ("attention", "out", "kernel"), (H * d_h, D),
                          lambda w: w.reshape(H, d_h, D), lambda w: w.reshape(H * d_h, D)))
        rows.append(Entry(f"{k}.attn.c_proj.bias", p + ("attention", "out", "bias"), (D,)))
        rows += _ln(f"{k}.ln_2", p + ("ffn_ln",), D)
        rows += [Entry(f"{k}.mlp.c_fc.weight", p + ("ffn_in", "kernel"), (D, F)),
                 Entry(f"{k}.mlp.c_fc.bias", p + ("ffn_in", "bias"), (F,)),
                 Entry(f"{k}.mlp.c_proj.weight", p + ("ffn_out", "kernel"), (F, D)),
                 Entry(f"{k}.mlp.c_proj.bias", p + ("ffn_out", "bias"), (D,))]
    rows += _ln(f"{prefix}ln_f", ("final_ln",), D)
    if not c.tied_lm_head:
        rows.append(Entry("lm_head.weight", ("lm_head", "weight"), (c.vocab_size, D)))
    return rows


def _split_fused(state: dict, c: EncoderConfig, prefix: str) -> dict:
    """``attn.c_attn`` (D, 3D) / (3D,) -> ``attn.c_q`` / ``c_k`` / ``c_v`` (columns q, k, v)."""
    state = dict(state)
    for i in range(c.num_layers):
        k = f"{prefix}h.{i}.attn.c_attn"
        for part in ("weight", "bias"):
            if f"{k}.{part}" in state:
                for name, block in zip("qkv", tensors.split(state.pop(f"{k}.{part}"), 3, axis=-1)):
                    state[f"{prefix}h.{i}.attn.c_{name}.{part}"] = block
    return state


def convert(state: dict[str, np.ndarray], config: EncoderConfig, source: str = "checkpoint") -> dict:
    """HF state dict -> jattn params."""
    prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    if config.tied_lm_head:
        check_tied(state, {"lm_head.weight": f"{prefix}wte.weight"}, source,
                   "the LM head must be the word embeddings (config.json tie_word_embeddings)")
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    return apply_table(_split_fused(state, config, prefix), entries(config, prefix), IGNORED, source)


def to_hf_state_dict(params, config: EncoderConfig) -> dict[str, np.ndarray]:
    """jattn params -> a ``GPT2LMHeadModel`` state dict (q, k, v joined into ``c_attn``), the inverse of ``convert``."""
    state = to_state_dict(params, entries(config, "transformer."))
    for i in range(config.num_layers):
        k = f"transformer.h.{i}.attn"
        for part in ("weight", "bias"):
            state[f"{k}.c_attn.{part}"] = np.concatenate([state.pop(f"{k}.c_{x}.{part}") for x in "qkv"], axis=-1)
    return state


def to_hf_config(config: EncoderConfig, label_names=None) -> dict:
    """The ``config.json`` dict of ``config`` (a ``GPT2LMHeadModel``)."""
    c = config
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": c.vocab_size,
            "n_embd": c.hidden_size, "n_layer": c.num_layers, "n_head": c.num_heads, "n_inner": c.intermediate_size,
            "n_positions": c.max_position_embeddings, "activation_function": c.hidden_act,
            "layer_norm_epsilon": c.layer_norm_eps, "resid_pdrop": c.hidden_dropout, "embd_pdrop": c.hidden_dropout,
            "attn_pdrop": c.attention_dropout, "bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id,
            "tie_word_embeddings": c.tied_lm_head}

