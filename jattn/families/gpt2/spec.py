"""GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", §2.3): a
causal Transformer decoder without cross-attention, pre-LayerNorm blocks (the LayerNorm moved to
each sub-block's input, a final LayerNorm ``ln_f`` after the last block),
x -> h = x + Attn(LN(x)) -> h + W_2 gelu_new(W_1 LN(h)), learned absolute positions, token
embeddings without a LayerNorm and a next-token head tied to the word embeddings. Run on jattn's
pre-LN encoder stack with ``causal=True`` (``jattn.nn.layer_terms``: query i attends to keys j ≤ i).

Positions come from the attention mask (``positions="from_mask"``): a real token's is the count of
real tokens before it, as HF ``generate`` numbers a left-padded prompt (``cumsum(mask) − 1``) and
``jattn.nn.lm_decode`` does; on an unpadded or right-padded batch's real tokens that is 0..n−1,
HF's numbering when no ``position_ids`` are given."""

from __future__ import annotations

from jattn.families.gpt2 import convert, recipes  # noqa: F401  (recipes registers the induction models)
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config


def _refuse(hf: dict) -> None:
    """What GPT-2's config may ask for that jattn does not compute as HF does."""
    if not hf.get("scale_attn_weights", True) or hf.get("scale_attn_by_inverse_layer_idx", False):
        raise ConfigError("config.json scale_attn_weights=False or scale_attn_by_inverse_layer_idx=True is not "
                          "supported: jattn scales scores by 1/sqrt(d_h) (Vaswani et al. 2017) in every layer. "
                          "Fix: use a checkpoint with scale_attn_weights true and scale_attn_by_inverse_layer_idx false")
    if hf.get("reorder_and_upcast_attn", False):
        raise ConfigError("config.json reorder_and_upcast_attn=True is not supported (jattn computes the scores in "
                          "the compute dtype and the softmax in float32). Fix: set it to false")
    if hf.get("add_cross_attention", False):
        raise ConfigError("config.json add_cross_attention=True (GPT-2 as a cross-attending decoder) is not "
                          "supported. Fix: use a plain GPT-2 language model")
    if hf.get("embd_pdrop", 0.1) != hf.get("resid_pdrop", 0.1):
        raise ConfigError("config.json embd_pdrop must equal resid_pdrop (jattn has one rate for the embeddings and "
                          "the residuals). Fix: set them equal (they act in training only)")


def config_from_hf(hf: dict):
    """config.json (GPT-2's own field names, or the generic ones HF's attribute map allows) ->
    ``EncoderConfig`` with ``causal`` and a next-token head."""
    _refuse(hf)
    D = hf.get("n_embd", hf.get("hidden_size"))
    eos, pad = hf.get("eos_token_id"), hf.get("pad_token_id")
    generic = {"model_type": hf.get("model_type"), "vocab_size": hf.get("vocab_size"), "hidden_size": D,
               "num_hidden_layers": hf.get("n_layer", hf.get("num_hidden_layers")),
               "num_attention_heads": hf.get("n_head", hf.get("num_attention_heads")),
               "intermediate_size": hf.get("n_inner") or 4 * D,
               "max_position_embeddings": hf.get("n_positions", hf.get("max_position_embeddings")),
               "hidden_act": hf.get("activation_function", "gelu_new"),
               "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5), "type_vocab_size": 0,
               "pad_token_id": pad if pad is not None else eos,  # HF generate pads with EOS without a pad id
               "hidden_dropout_prob": hf.get("resid_pdrop", 0.1), "attention_probs_dropout_prob": hf.get("attn_pdrop", 0.1),
               "tie_word_embeddings": hf.get("tie_word_embeddings", True)}
    if missing := [k for k, v in generic.items() if v is None and k != "pad_token_id"]:
        raise ConfigError(f"config.json lacks {', '.join(missing)}: not a complete gpt2 config")
    return encoder_config(generic, positions="from_mask", norm_position="pre", final_norm=True, causal=True,
                          embedding_norm=False, tied_lm_head=bool(hf.get("tie_word_embeddings", True)),
                          bos_token_id=hf.get("bos_token_id"), eos_token_id=eos)


SPEC = register(FamilySpec(
    model_type="gpt2", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("eos",),
))
