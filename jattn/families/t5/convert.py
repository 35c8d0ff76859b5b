"""Key table for Hugging Face ``T5ForConditionalGeneration`` / ``MT5ForConditionalGeneration`` /
``T5Model`` checkpoints <-> jattn seq2seq params (layout in ``jattn.nn.seq2seq``).

HF's names: ``{encoder,decoder}.block.{i}.layer.0.SelfAttention.{q,k,v,o}`` (no biases; q, k, v
(H·d_kv, D), o (D, H·d_kv)) and ``layer.0.layer_norm`` (the RMSNorm before it), a decoder's
``layer.1.EncDecAttention`` and ``layer.1.layer_norm``, then ``layer.{1|2}.DenseReluDense``
(``wi`` and ``wo``; gated: ``wi_0``, the GELU's input, and ``wi_1``, the linear one, held as one
(D, 2, F) kernel, ``jattn.nn.layer_terms.ffn_hidden``) and its ``layer_norm``; the relative bias
``block.0.layer.0.SelfAttention.relative_attention_bias`` (buckets, H) of each stack; each stack's
``final_layer_norm``; ``shared``, its copies ``{encoder,decoder}.embed_tokens`` and, tied, ``lm_head``.
"""

from __future__ import annotations

import numpy as np

from jattn.io.hf import ConversionError, Entry, apply_table, check_tied, split_heads_in, split_heads_out, \
    to_state_dict
from jattn.nn.config import ConfigError, Seq2SeqConfig

FIX = ("load it with transformers (which uses the table it ties to) and save_pretrained it, or export it again "
       "from the model it was trained as")
# The tied copies of the shared table; the decoder's cross-attention has no relative bias (HF ignores one)
IGNORED = (r"(encoder|decoder)\.embed_tokens\.weight", r"decoder\.block\.0\.layer\.1\.EncDecAttention\."
           r"relative_attention_bias\.weight")
GATED = "DenseReluDense.wi_0_1.weight"  # not an HF name: the (2, F, D) stack of wi_0, wi_1 a gated FFN's row reads


def _vector(key, path, n) -> Entry:
    return Entry(key, path, (n,))


def _linear(key, path, n_in, n_out) -> Entry:
    """An HF (out, in) weight <-> our (in, out) kernel."""
    return Entry(key, path, (n_out, n_in), lambda w: w.T, lambda k: k.T)


def layer_rows(config: Seq2SeqConfig, side: str) -> list[Entry]:
    """Rows for every layer of the ``side`` ("encoder" | "decoder") stack."""
    D, dec = config.d_model, side == "decoder"
    H = config.decoder_heads if dec else config.encoder_heads
    d_h = config.decoder_head_dim if dec else config.encoder_head_dim
    F = config.decoder_ffn_dim if dec else config.encoder_ffn_dim
    rows = []
    for i in range(config.decoder_layers if dec else config.encoder_layers):
        k, p = f"{side}.block.{i}.layer", (side, "layers", i)
        blocks = [(f"{k}.0.SelfAttention", f"{k}.0.layer_norm", "self_attn")]
        if dec:
            blocks.append((f"{k}.1.EncDecAttention", f"{k}.1.layer_norm", "cross_attn"))
        for hf, ln, ours in blocks:
            for proj, name in (("q", "query"), ("k", "key"), ("v", "value")):
                shape, fn, inv = split_heads_in(D, H, d_h)
                rows.append(Entry(f"{hf}.{proj}.weight", p + (ours, name, "kernel"), shape, fn, inv))
            shape, fn, inv = split_heads_out(D, H, d_h)
            rows += [Entry(f"{hf}.o.weight", p + (ours, "out", "kernel"), shape, fn, inv),
                     _vector(f"{ln}.weight", p + (f"{ours}_ln", "scale"), D)]
        f = f"{k}.{2 if dec else 1}"
        if config.gated_ffn:  # (2, F, D) <-> (D, 2, F): wi_0 the gate's input, wi_1 the linear one
            rows.append(Entry(f"{f}.{GATED}", p + ("ffn_in", "kernel"), (2, F, D), lambda w: w.transpose(2, 0, 1),
                              lambda k: k.transpose(1, 2, 0)))
        else:
            rows.append(_linear(f"{f}.DenseReluDense.wi.weight", p + ("ffn_in", "kernel"), D, F))
        rows += [_linear(f"{f}.DenseReluDense.wo.weight", p + ("ffn_out", "kernel"), F, D),
                 _vector(f"{f}.layer_norm.weight", p + ("ffn_ln", "scale"), D)]
    return rows


def entries(config: Seq2SeqConfig) -> list[Entry]:
    """The key table (``T5ForConditionalGeneration`` names; gated FFNs under ``GATED``)."""
    D, V, R = config.d_model, config.tgt_vocab_size, config.relative_attention_num_buckets
    rows = [Entry("shared.weight", ("embeddings", "shared"), (V, D))]
    if not config.tie_output:
        rows.append(Entry("lm_head.weight", ("output",), (V, D)))
    for side, H in (("encoder", config.encoder_heads), ("decoder", config.decoder_heads)):
        rows += [Entry(f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", (side, "relative_bias"),
                       (R, H)),
                 _vector(f"{side}.final_layer_norm.weight", (side, "final_ln", "scale"), D)]
        rows += layer_rows(config, side)
    return rows


def convert(state: dict[str, np.ndarray], config: Seq2SeqConfig, source: str = "checkpoint") -> dict:
    """HF T5 / mT5 state dict -> jattn seq2seq params."""
    check_tied(state, {k: "shared.weight" for k in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")},
               source, FIX)
    state = dict(state)
    if config.tie_output:
        if "lm_head.weight" in state and not np.array_equal(state["lm_head.weight"], state.get("shared.weight")):
            raise ConversionError(f"{source}: lm_head.weight differs from shared.weight while config.json ties them "
                                  "(tie_word_embeddings true, or absent); Hugging Face then uses lm_head.weight as a "
                                  "separate output projection. Fix: set \"tie_word_embeddings\": false in config.json "
                                  "(a T5 config keeping the d_model^-1/2 output scaling also sets "
                                  "\"scale_decoder_outputs\": true)")
        state.pop("lm_head.weight", None)
    elif "lm_head.weight" not in state and "shared.weight" in state:  # HF ties an absent lm_head to shared
        state["lm_head.weight"] = state["shared.weight"]
    if config.gated_ffn:  # wi_0, wi_1 -> one (2, F, D) row per layer
        for key in [k for k in state if k.endswith("DenseReluDense.wi_0.weight")]:
            other = key.replace("wi_0.", "wi_1.")
            if other in state:
                state[key.replace("wi_0.", "wi_0_1.")] = np.stack([state.pop(key), state.pop(other)])
    return apply_table(state, entries(config), IGNORED, source)


def to_hf_state_dict(params, config: Seq2SeqConfig) -> dict[str, np.ndarray]:
    """jattn seq2seq params -> a ``T5ForConditionalGeneration`` state dict (tied copies not written)."""
    if config.pruned:
        raise ConfigError("physically pruned T5 models cannot be exported: the pruning sweep does not move the "
                          "relative-position bias's head columns. Fix: gate the heads (Interventions(head_gates=...))")
    out = to_state_dict(params, entries(config))
    for key in [k for k in out if k.endswith(GATED)]:
        gate, linear = out.pop(key)
        out[key.replace("wi_0_1.", "wi_0.")] = np.ascontiguousarray(gate)
        out[key.replace("wi_0_1.", "wi_1.")] = np.ascontiguousarray(linear)
    return out


def to_hf_config(config: Seq2SeqConfig) -> dict:
    """The T5 / mT5 ``config.json`` dict describing ``config``."""
    if config.model_type not in ("t5", "mt5"):
        raise ValueError(f"only T5 / mT5 configs can be exported as T5 folders, got model_type {config.model_type!r}")
    act = "gelu" if config.activation == "gelu_new" and config.gated_ffn else config.activation
    out = {
        "model_type": config.model_type,
        "architectures": ["T5ForConditionalGeneration" if config.model_type == "t5" else "MT5ForConditionalGeneration"],
        "vocab_size": config.tgt_vocab_size, "d_model": config.d_model, "d_kv": config.encoder_head_dim,
        "d_ff": config.encoder_ffn_dim, "num_layers": config.encoder_layers,
        "num_decoder_layers": config.decoder_layers,
        "num_heads": config.encoder_heads, "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "feed_forward_proj": f"gated-{act}" if config.gated_ffn else act, "layer_norm_epsilon": config.layer_norm_eps,
        "dropout_rate": config.dropout, "tie_word_embeddings": config.tie_output, "n_positions": config.max_length,
        "pad_token_id": config.pad_token_id, "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.decoder_start_token_id, "is_encoder_decoder": True,
    }
    if config.model_type == "t5":
        out["scale_decoder_outputs"] = config.output_scale != 1.0
    for key in ("forced_bos_token_id", "forced_eos_token_id"):
        if getattr(config, key) is not None:
            out[key] = getattr(config, key)
    return out
