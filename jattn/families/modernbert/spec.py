"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer"): a pre-LN encoder
(Xiong et al. 2020) without absolute positions: token embeddings and a LayerNorm; in each block
x -> h = x + Attn(LN(x)) -> h + W_2 (act(u) * g) with [u; g] = W_1 LN(h) (GeGLU, Shazeer 2020),
layer 0 without the attention LayerNorm (``first_attention_norm``); rotary positions on queries
and keys (Su et al. 2021) with base ``global_rope_theta`` in global layers and
``local_rope_theta`` in local ones, which attend to keys with |i − j| ≤ ``local_attention`` / 2
only (every ``global_attn_every_n_layers``-th layer, from layer 0, is global); no biases where
config.json says so; a final LayerNorm; the masked-LM head W_E·LN(act(W h)) + b (decoder tied to
the word embeddings) and the classification head W_c·LN(act(W h_[CLS])) + b_c.

Hugging Face's eager attention keeps the padded layout: a local layer's mask is the window and
the padding mask together (``masking_utils.sliding_window_bidirectional_overlay``); jattn's
attention does the same (``jattn.nn.layer_terms``)."""

from __future__ import annotations

from jattn.families.config_table import (ENCODER, LAYER_TYPES, OPTIONAL, ConfigKey, activation, eps, flag, rate,
                                         reads, rope, token)
from jattn.families.modernbert import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

# ModernBertConfig's keys and defaults (the older global_attn_every_n_layers / *_rope_theta / rope_scaling as
# its __post_init__ and convert_rope_params_to_dict read them)
CONFIG_KEYS = (
    *(k for k in ENCODER if k.name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                       "intermediate_size", "max_position_embeddings", "pruned_heads")),
    activation("hidden_activation", "gelu"), eps("norm_eps", 1e-5), token("pad_token_id", 50283, "the padding token"),
    flag("norm_bias", False, "the LayerNorms' β"), flag("attention_bias", False, "the attention projections' biases"),
    flag("mlp_bias", False, "biases of the FFN"), flag("decoder_bias", True, "the masked-LM logits' bias"),
    flag("classifier_bias", False, "the classification head's dense bias"),
    flag("tie_word_embeddings", True, "the masked-LM decoder is the word-embedding table"),
    rate("attention_dropout", 0.0, "dropout on attention weights"), rate("embedding_dropout", 0.0, "on embeddings"),
    rate("mlp_dropout", 0.0, "inside the FFN"), rate("classifier_dropout", 0.0, "the classification head's dropout"),
    ConfigKey("classifier_pooling", str, default="cls", choices=("cls", "mean"), meaning="the classifier's input"),
    activation("classifier_activation", "gelu", "the heads' nonlinearity"),
    LAYER_TYPES,
    ConfigKey("global_attn_every_n_layers", int, 1, None, 3, "every n-th layer, from layer 0, is global (read "
              "where layer_types is null)"),
    ConfigKey("local_attention", int, 2, None, 128, "a local layer's window: |i − j| ≤ local_attention // 2"),
    ConfigKey("rope_parameters", dict, default=None, nullable=True, meaning="the rotary embedding per layer kind",
              fields=(rope("full_attention", None, "the global layers'"), rope("sliding_attention", None, "the local "
                                                                                 "layers'"))),
    rope("rope_scaling", OPTIONAL, "a rotary scaling both kinds take (older name)"),
    ConfigKey("global_rope_theta", float, 0, None, OPTIONAL, "the global layers' rotary base (older configs)",
              open_low=True),
    ConfigKey("local_rope_theta", float, 0, None, OPTIONAL, "the local layers' rotary base (older configs)",
              open_low=True),
)


def _layer_types(hf: dict) -> list[str]:
    """Per layer "full_attention" | "sliding_attention": ``layer_types`` (transformers 5) or, in older
    configs, every ``global_attn_every_n_layers``-th layer global from layer 0 (HF's rule)."""
    types = hf["layer_types"]
    if types is None:
        every = hf["global_attn_every_n_layers"]
        types = ["sliding_attention" if i % every else "full_attention" for i in range(hf["num_hidden_layers"])]
    if len(types) != hf["num_hidden_layers"] or set(types) - {"full_attention", "sliding_attention"}:
        raise ConfigError(f"config.json layer_types must give 'full_attention' or 'sliding_attention' for each of the "
                          f"{hf['num_hidden_layers']} layers, got {types!r}. Fix: remove layer_types (then "
                          "global_attn_every_n_layers decides) or correct it")
    return types


def _theta(hf: dict, kind: str, old: str, default: float) -> float:
    """The rotary base of one layer type: ``rope_parameters[kind]`` (transformers 5) or the old field,
    updated by ``rope_scaling`` where set (as HF's ``convert_rope_params_to_dict``)."""
    params = {**((hf["rope_parameters"] or {}).get(kind) or {}), **(hf.get("rope_scaling") or {})}
    if params.get("rope_type", "default") != "default":
        raise ConfigError(f"config.json rope_parameters.{kind}.rope_type={params['rope_type']!r} is not supported: "
                          "jattn implements RoFormer's rotary angles (rope_type 'default'). Fix: use a checkpoint "
                          "without RoPE scaling")
    return float(params.get("rope_theta", hf.get(old, default)))


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    """config.json -> ``EncoderConfig``, refusing what jattn does not compute as Hugging Face does."""
    if hf["classifier_pooling"] != "cls":
        raise ConfigError(f"config.json classifier_pooling={hf['classifier_pooling']!r} is not supported: jattn's "
                          "classification head, its [CLS]-only classify and the disabling sweep read h_[CLS]. Fix: "
                          "use a checkpoint with classifier_pooling 'cls'")
    if hf["pruned_heads"]:
        raise ConfigError("config.json pruned_heads: physically pruned ModernBERT models are not supported (the "
                          "fused Wqkv is not split by head). Fix: gate the heads to 0 instead (head_gates)")
    if hf["mlp_dropout"] or hf["embedding_dropout"] != hf["attention_dropout"]:
        raise ConfigError("config.json mlp_dropout must be 0 and embedding_dropout equal attention_dropout (jattn "
                          "has one rate for the embeddings and residuals, one for attention). Fix: set them so "
                          "(they act in training only)")
    if hf["hidden_size"] // hf["num_attention_heads"] % 2:
        raise ConfigError("hidden_size / num_attention_heads must be even for rotary positions (pairs of dimensions)")
    types = _layer_types(hf)
    radius = hf["local_attention"] // 2  # HF's sliding_window: |i − j| <= local_attention // 2
    generic = {**hf, "hidden_act": hf["hidden_activation"], "layer_norm_eps": hf["norm_eps"], "type_vocab_size": 0,
               "hidden_dropout_prob": hf["attention_dropout"], "attention_probs_dropout_prob": hf["attention_dropout"]}
    generic.pop("position_embedding_type", None)
    return encoder_config(
        generic, position_embeddings=False, classifier="dense_act_norm",
        classifier_dropout=float(hf["classifier_dropout"]), mlm_activation=hf["classifier_activation"],
        norm_position="pre", final_norm=True,
        first_attention_norm=False, gated_ffn=True,
        rotary_theta=_theta(hf, "full_attention", "global_rope_theta", 160_000.0),
        local_rotary_theta=_theta(hf, "sliding_attention", "local_rope_theta", 10_000.0),
        attention_radius=tuple(radius if t == "sliding_attention" else 0 for t in types),
        attention_bias=hf["attention_bias"], ffn_bias=hf["mlp_bias"], norm_bias=hf["norm_bias"],
        head_bias=hf["classifier_bias"], mlm_output_bias=hf["decoder_bias"])


SPEC = register(FamilySpec(
    model_type="modernbert", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",),), special_tokens=("cls", "sep", "pad"),
))
