"""T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", JMLR, §2.1) and mT5 (Xue et al. 2021), model_type "t5" and "mt5", on the generic
encoder–decoder (``jattn.nn.seq2seq``):

- pre-normalisation blocks, h = x + Sublayer(RMSNorm(x)) (an RMSNorm: no mean subtraction, no β;
  Zhang & Sennrich 2019), and a final RMSNorm on each stack's output (``final_layer_norm``);
- no absolute positions: a relative-position score bias B[bucket(j − i), h] learned by the first
  layer of each stack and added in every layer's self-attention — bidirectional buckets in the
  encoder, one-sided in the decoder, none in cross-attention (``relative_attention_num_buckets``,
  ``relative_attention_max_distance``; ``jattn.nn.relative``);
- scores q·k with no 1/sqrt(d_h) (the scaling is folded into the initialisation), head width
  ``d_kv`` independent of d_model / heads, no biases anywhere;
- a ReLU feed-forward (T5 v1.0, ``feed_forward_proj`` "relu") or a gated one, GELU(x W_0) ⊙ x W_1
  (``"gated-gelu"``, T5 v1.1 and mT5: Shazeer 2020's GEGLU with the tanh GELU);
- one token table for source, target and (tied) output, token embeddings unscaled; the decoder
  output multiplied by d_model^-½ before a tied output projection.

What Hugging Face transformers 5 (jattn's oracle) computes, which the mapping follows: T5 scales the
decoder output unless config.json says ``tie_word_embeddings: false`` (or ``scale_decoder_outputs:
false``, which transformers 5 writes); mT5 never scales it (transformers 4 scaled a tied mT5).
``tie_word_embeddings: false`` (the released v1.1 and mT5 configs) reads ``lm_head.weight`` as a
separate output projection (the shared table where the checkpoint has none, as HF then ties
them). Decoding starts from the pad id (``decoder_start_token_id`` 0); without a decoder mask HF
attends to every target position."""

from jattn.families.config_table import (OPTIONAL, TOKEN_IDS, ConfigKey, eps, flag, rate, reads, size, token,
                                         with_defaults)
from jattn.families.spec import FamilySpec, register
from jattn.families.t5 import convert
from jattn.nn.config import ACTIVATIONS, ConfigError, seq2seq_config

# T5Config's keys and defaults (MT5Config's differ in feed_forward_proj and decoder_start_token_id)
CONFIG_KEYS = (
    size("vocab_size", "rows of the shared token table"), size("d_model", "the model width"),
    size("d_kv", "the head width"), size("d_ff", "the feed-forward width"), size("num_layers", "encoder layers"),
    size("num_heads", "heads per layer"),
    ConfigKey("num_decoder_layers", int, 1, None, None, "decoder layers (null: num_layers)", nullable=True),
    ConfigKey("relative_attention_num_buckets", int, 4, None, 32, "relative-position buckets; the exact ones are "
              "a quarter of them"),
    ConfigKey("relative_attention_max_distance", int, 1, None, 128, "distances beyond it share the last bucket"),
    rate("dropout_rate", 0.1, "dropout on embeddings, attention, the FFN and sublayer outputs"),
    eps("layer_norm_epsilon", 1e-6),
    ConfigKey("feed_forward_proj", str, default="relu", meaning="the FFN: '<act>' or 'gated-<act>'"),
    token("pad_token_id", 0, "the padding token", nullable=False),
    token("eos_token_id", 1, "the end-of-sentence token", nullable=False),
    token("decoder_start_token_id", OPTIONAL, "the decoder's first token (absent or null: pad_token_id)"),
    token("bos_token_id", OPTIONAL, "unused by T5"),
    token("forced_eos_token_id", OPTIONAL, "forced as the last token at max_length"),
    token("forced_bos_token_id", OPTIONAL, "forced as the first generated token"),
    ConfigKey("bad_words_ids", list, default=OPTIONAL, nullable=True, meaning="token ids never generated",
              items=ConfigKey("", list, items=TOKEN_IDS)),
    flag("is_encoder_decoder", True, "the encoder–decoder (false: a decoder alone)"),
    flag("is_decoder", False, "a decoder alone"),
    flag("tie_word_embeddings", True, "the output projection is the shared table"),
    flag("scale_decoder_outputs", OPTIONAL, "the decoder output times d_model^-½ (absent: tie_word_embeddings)"),
    ConfigKey("n_positions", int, 1, None, OPTIONAL, "the longest sequence jattn pads to (absent: 512)"),
    ConfigKey("jattn_pruned_heads", dict, default=OPTIONAL, meaning="jattn's record of physically pruned heads"),
)
MT5_KEYS = with_defaults(CONFIG_KEYS, feed_forward_proj="gated-gelu", decoder_start_token_id=0)


def feed_forward(hf: dict) -> tuple[str, bool]:
    """``feed_forward_proj`` -> (activation, gated): "relu" -> ("relu", False), "gated-gelu" ->
    ("gelu_new", True) (HF's alias), "gated-<act>" -> (act, True)."""
    proj = hf["feed_forward_proj"]
    parts = proj.split("-")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or act not in ACTIVATIONS:
        raise ConfigError(f"config.json feed_forward_proj={proj!r} is not supported: jattn runs '<act>' or "
                          f"'gated-<act>' with <act> one of {', '.join(ACTIVATIONS)}. Fix: set feed_forward_proj "
                          "to 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1, mT5)")
    return act, len(parts) == 2


def config_from_hf(hf: dict):
    if not hf["is_encoder_decoder"] or hf["is_decoder"]:
        raise ConfigError(f"a decoder-only {hf.get('model_type')} config (is_encoder_decoder false / is_decoder "
                          "true) is not supported. Fix: load the encoder–decoder checkpoint")
    if hf.get("jattn_pruned_heads"):
        raise ConfigError("config.json jattn_pruned_heads: physically pruned T5 models are not supported. Fix: gate "
                          "the heads (Interventions(head_gates=...)) instead of removing them")
    act, gated = feed_forward(hf)
    tied = hf["tie_word_embeddings"]
    mt5 = hf.get("model_type") == "mt5"
    scaled = False if mt5 else hf.get("scale_decoder_outputs", tied)
    D, L, F = hf["d_model"], hf["num_layers"], hf["d_ff"]
    pad, H = hf["pad_token_id"], hf["num_heads"]
    p_drop = hf["dropout_rate"]  # HF T5: on embeddings, α, the FFN's hidden and every sublayer output
    mapped = {
        **{k: hf[k] for k in ("forced_eos_token_id", "forced_bos_token_id", "bad_words_ids", "bos_token_id")
           if k in hf},
        "model_type": hf.get("model_type"), "d_model": D, "encoder_layers": L,
        "decoder_layers": hf.get("num_decoder_layers") or L, "encoder_attention_heads": H,
        "decoder_attention_heads": H, "encoder_ffn_dim": F, "decoder_ffn_dim": F, "activation_function": act,
        "max_position_embeddings": hf.get("n_positions", 512),  # relative positions: no table; T5's 512 tokens
        "pad_token_id": pad, "eos_token_id": hf["eos_token_id"],
        "decoder_start_token_id": hf.get("decoder_start_token_id", pad), "dropout": p_drop,
        "attention_dropout": p_drop, "activation_dropout": p_drop,
    }
    V = hf["vocab_size"]
    return seq2seq_config(mapped, default_activation="relu", vocab_sizes=(V, V), positions="none",
                          norm_position="pre", final_norm=True, norm="rms",
                          layer_norm_eps=hf["layer_norm_epsilon"],
                          shared_embeddings=True, tie_output=tied, scale_embedding=False, final_logits_bias=False,
                          decoder_mask="all", attention_head_dim=hf["d_kv"], score_scale=1.0,
                          gated_ffn=gated, linear_bias=False,
                          relative_attention_num_buckets=hf["relative_attention_num_buckets"],
                          relative_attention_max_distance=hf["relative_attention_max_distance"],
                          output_scale=D ** -0.5 if scaled else 1.0)


for _model_type, _keys in (("t5", CONFIG_KEYS), ("mt5", MT5_KEYS)):
    register(FamilySpec(
        model_type=_model_type, shape="encoder-decoder", config_from_hf=reads(_keys)(config_from_hf),
        convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
        # SentencePiece (Kudo & Richardson 2018): tokenizer.json, or spiece.model
        tokenizer_files=(("tokenizer.json",), ("spiece.model",)), special_tokens=("pad", "eos"),
    ))
