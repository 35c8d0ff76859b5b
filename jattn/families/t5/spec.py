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

from jattn.families.spec import FamilySpec, register
from jattn.families.t5 import convert
from jattn.nn.config import ACTIVATIONS, ConfigError, seq2seq_config


def feed_forward(hf: dict) -> tuple[str, bool]:
    """``feed_forward_proj`` -> (activation, gated): "relu" -> ("relu", False), "gated-gelu" ->
    ("gelu_new", True) (HF's alias), "gated-<act>" -> (act, True)."""
    proj = hf.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or act not in ACTIVATIONS:
        raise ConfigError(f"config.json feed_forward_proj={proj!r} is not supported: jattn runs '<act>' or "
                          f"'gated-<act>' with <act> one of {', '.join(ACTIVATIONS)}. Fix: set feed_forward_proj "
                          "to 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1, mT5)")
    return act, len(parts) == 2


def config_from_hf(hf: dict):
    if hf.get("is_encoder_decoder", True) is False or hf.get("is_decoder"):
        raise ConfigError(f"a decoder-only {hf.get('model_type')} config (is_encoder_decoder false / is_decoder "
                          "true) is not supported. Fix: load the encoder–decoder checkpoint")
    if hf.get("jattn_pruned_heads"):
        raise ConfigError("config.json jattn_pruned_heads: physically pruned T5 models are not supported. Fix: gate "
                          "the heads (Interventions(head_gates=...)) instead of removing them")
    buckets = hf.get("relative_attention_num_buckets", 32)
    if buckets < 4:
        raise ConfigError(f"config.json relative_attention_num_buckets={buckets}: T5's buckets need at least 4 "
                          "(exact ones are a quarter of them). Fix: check the config against the checkpoint")
    act, gated = feed_forward(hf)
    tied = hf.get("tie_word_embeddings", True) is not False
    mt5 = hf.get("model_type") == "mt5"
    scaled = False if mt5 else bool(hf.get("scale_decoder_outputs", tied))
    D, L, F = hf.get("d_model", 512), hf.get("num_layers", 6), hf.get("d_ff", 2048)
    pad, H = hf.get("pad_token_id", 0), hf.get("num_heads", 8)
    rate = hf.get("dropout_rate", 0.1)  # HF T5: on embeddings, α, the FFN's hidden and every sublayer output
    mapped = {
        **{k: hf[k] for k in ("forced_eos_token_id", "forced_bos_token_id", "bad_words_ids", "bos_token_id")
           if k in hf},
        "model_type": hf.get("model_type"), "d_model": D, "encoder_layers": L,
        "decoder_layers": hf.get("num_decoder_layers") or L, "encoder_attention_heads": H,
        "decoder_attention_heads": H, "encoder_ffn_dim": F, "decoder_ffn_dim": F, "activation_function": act,
        "max_position_embeddings": hf.get("n_positions", 512),  # relative positions: no table; T5's 512 tokens
        "pad_token_id": pad, "eos_token_id": hf.get("eos_token_id", 1),
        "decoder_start_token_id": hf.get("decoder_start_token_id", pad), "dropout": rate,
        "attention_dropout": rate, "activation_dropout": rate,
    }
    V = hf.get("vocab_size", 32128)
    return seq2seq_config(mapped, default_activation="relu", vocab_sizes=(V, V), positions="none",
                          norm_position="pre", final_norm=True, norm="rms",
                          layer_norm_eps=hf.get("layer_norm_epsilon", 1e-6),
                          shared_embeddings=True, tie_output=tied, scale_embedding=False, final_logits_bias=False,
                          decoder_mask="all", attention_head_dim=hf.get("d_kv", 64), score_scale=1.0,
                          gated_ffn=gated, linear_bias=False, relative_attention_num_buckets=buckets,
                          relative_attention_max_distance=hf.get("relative_attention_max_distance", 128),
                          output_scale=D ** -0.5 if scaled else 1.0)


for _model_type in ("t5", "mt5"):
    register(FamilySpec(
        model_type=_model_type, shape="encoder-decoder", config_from_hf=config_from_hf,
        convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
        # SentencePiece (Kudo & Richardson 2018): tokenizer.json, or spiece.model
        tokenizer_files=(("tokenizer.json",), ("spiece.model",)), special_tokens=("pad", "eos"),
    ))
