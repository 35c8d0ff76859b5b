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

from jattn.families.gpt2 import convert
from jattn.families.config_table import ConfigKey, activation, eps, flag, rate, reads, size, token
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

# GPT2Config's keys and defaults; the generic names its attribute_map reads are aliases
CONFIG_KEYS = (
    size("vocab_size", "rows of the word-embedding table"), size("n_embd", "the model width D", ("hidden_size",)),
    size("n_layer", "layers", ("num_hidden_layers",)), size("n_head", "heads per layer", ("num_attention_heads",)),
    size("n_positions", "rows of the position table", ("max_position_embeddings",)),
    ConfigKey("n_inner", int, 1, None, None, "the feed-forward width (null: 4 n_embd)", nullable=True),
    activation("activation_function", "gelu_new"), eps("layer_norm_epsilon", 1e-5),
    rate("resid_pdrop", 0.1, "dropout on the residuals"), rate("embd_pdrop", 0.1, "dropout on the embeddings"),
    rate("attn_pdrop", 0.1, "dropout on attention weights"),
    flag("scale_attn_weights", True, "scores divided by sqrt(d_h)"),
    flag("scale_attn_by_inverse_layer_idx", False, "scores also divided by the layer's index + 1"),
    flag("reorder_and_upcast_attn", False, "scores computed in float32"),
    flag("add_cross_attention", False, "cross-attention layers"),
    token("bos_token_id", 50256, "the first token of a prompt"), token("eos_token_id", 50256, "where generation stops"),
    token("pad_token_id", None, "the padding token (null: eos_token_id)"),
    flag("tie_word_embeddings", True, "the LM head is the word-embedding table"),
)


def _refuse(hf: dict) -> None:
    """What GPT-2's config may ask for that jattn does not compute as HF does."""
    if not hf["scale_attn_weights"] or hf["scale_attn_by_inverse_layer_idx"]:
        raise ConfigError(
            "config.json scale_attn_weights=False or scale_attn_by_inverse_layer_idx=True is not "
            "supported: jattn scales scores by 1/sqrt(d_h) (Vaswani et al. 2017) in every layer. "
            "Fix: use a checkpoint with scale_attn_weights true and scale_attn_by_inverse_layer_idx false"
        )
    if hf["reorder_and_upcast_attn"]:
        raise ConfigError("config.json reorder_and_upcast_attn=True is not supported (jattn computes the scores in "
                          "the compute dtype and the softmax in float32). Fix: set it to false")
    if hf["add_cross_attention"]:
        raise ConfigError("config.json add_cross_attention=True (GPT-2 as a cross-attending decoder) is not "
                          "supported. Fix: use a plain GPT-2 language model")
    if hf["embd_pdrop"] != hf["resid_pdrop"]:
        raise ConfigError("config.json embd_pdrop must equal resid_pdrop (jattn has one rate for the embeddings and "
                          "the residuals). Fix: set them equal (they act in training only)")


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    """config.json (GPT-2's own field names, or the generic ones HF's attribute map allows) ->
    ``EncoderConfig`` with ``causal`` and a next-token head."""
    _refuse(hf)
    D, eos, pad = hf["n_embd"], hf["eos_token_id"], hf["pad_token_id"]
    generic = {"model_type": hf.get("model_type"), "vocab_size": hf["vocab_size"], "hidden_size": D,
               "num_hidden_layers": hf["n_layer"], "num_attention_heads": hf["n_head"],
               "intermediate_size": hf["n_inner"] or 4 * D, "max_position_embeddings": hf["n_positions"],
               "hidden_act": hf["activation_function"], "layer_norm_eps": hf["layer_norm_epsilon"],
               "type_vocab_size": 0,
               "pad_token_id": pad if pad is not None else eos,  # HF generate pads with EOS without a pad id
               "hidden_dropout_prob": hf["resid_pdrop"], "attention_probs_dropout_prob": hf["attn_pdrop"],
               "tie_word_embeddings": hf["tie_word_embeddings"]}
    return encoder_config(generic, positions="from_mask", norm_position="pre", final_norm=True, causal=True,
                          embedding_norm=False, tied_lm_head=hf["tie_word_embeddings"],
                          bos_token_id=hf["bos_token_id"], eos_token_id=eos)


SPEC = register(FamilySpec(
    model_type="gpt2", shape="decoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.json", "merges.txt")), special_tokens=("eos",),
))
