"""DeBERTa-v2 / v3 (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled
Attention", Eq. 2–4; v3: He et al. 2023): BERT's post-LayerNorm blocks with disentangled
attention (``jattn.nn.positions``: content→position and position→content score terms on
relative embeddings shared by the layers, log-bucketed distances, scores / sqrt(d_h · f)),
absolute positions optional (``position_biased_input``), token types optional, the embedding
output multiplied by the attention mask, a ContextPooler (dense + ``pooler_hidden_act`` on token
0) under the classifier, and the masked-LM head in both of HF's layouts (``legacy``).

Refused: the convolution beside layer 0 (``conv_kernel_size`` > 0), embeddings narrower than the
model (``embedding_size`` != ``hidden_size``: HF projects before the LayerNorm, without a bias),
``p2p`` and other ``pos_att_type`` entries, ``norm_rel_ebd`` other than none / layer_norm, and an
``attention_head_size`` other than hidden_size / num_attention_heads. HF applies dropout to the
relative embeddings in training; jattn does not (evaluation is unchanged)."""

from jattn.families.config_table import ENCODER, OPTIONAL, ConfigKey, eps, flag, rate, reads, with_defaults
from jattn.families.deberta_v2 import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, DisentangledAttention, encoder_config
from jattn.nn.config import ACTIVATIONS

TERMS = ("c2p", "p2c")

# DebertaV2Config's keys and defaults (no token types, eps 1e-7); the optional ones HF reads with getattr
CONFIG_KEYS = (
    *with_defaults(ENCODER, type_vocab_size=ConfigKey("type_vocab_size", int, 0, None, 0, "token types (0: none)"),
                   layer_norm_eps=eps("layer_norm_eps", 1e-7)),
    flag("relative_attention", False, "relative position embeddings"),
    ConfigKey("max_relative_positions", int, default=-1, meaning="the distance span (< 1: max_position_embeddings)"),
    ConfigKey("position_buckets", int, default=-1, meaning="log buckets of the distance (≤ 0: none)"),
    ConfigKey("pos_att_type", (str, list), default=None, nullable=True, meaning="the position terms, 'c2p|p2c'",
              items=ConfigKey("", str)),
    ConfigKey("norm_rel_ebd", str, default="none", meaning="a LayerNorm on the relative embeddings"),
    flag("share_att_key", False, "the layer's W_q, W_k project the relative embeddings"),
    flag("position_biased_input", True, "absolute positions added to the word embeddings"),
    ConfigKey("conv_kernel_size", int, 0, None, 0, "the convolution beside layer 0 (0: none)"),
    ConfigKey("embedding_size", int, 1, None, OPTIONAL, "the embedding width (absent: hidden_size)"),
    ConfigKey("attention_head_size", int, 1, None, OPTIONAL, "the head width (absent: hidden_size / heads)"),
    ConfigKey("pooler_hidden_act", str, default="gelu", meaning="the ContextPooler's nonlinearity"),
    rate("cls_dropout", OPTIONAL, "the classification head's dropout (absent or null: hidden_dropout_prob)",
         nullable=True),
)


def terms(hf: dict) -> tuple[str, ...]:
    """``pos_att_type`` ("p2c|c2p", a list, or None) as jattn's ordered terms, refusing others."""
    given = hf.get("pos_att_type") or []
    given = [t.strip() for t in given.lower().split("|")] if isinstance(given, str) else [t.lower() for t in given]
    given = [t for t in given if t and t != "none"]
    if unknown := [t for t in given if t not in TERMS]:
        raise ConfigError(f"config.json pos_att_type {hf.get('pos_att_type')!r}: {unknown} not supported (jattn "
                          f"implements the terms {TERMS}). Fix: remove them from pos_att_type")
    return tuple(t for t in TERMS if t in given)


def disentangled(hf: dict) -> DisentangledAttention:
    """The position terms a DeBERTa-v2 ``config.json`` describes (HF's ``DisentangledSelfAttention``)."""
    pos = terms(hf)
    norm = [x.strip() for x in hf["norm_rel_ebd"].lower().split("|")]
    if set(norm) - {"none", "layer_norm"}:
        raise ConfigError(f"config.json norm_rel_ebd {hf['norm_rel_ebd']!r} is not supported. Fix: 'none' or "
                          "'layer_norm'")
    if not hf["relative_attention"]:  # no relative embeddings: the scale factor still counts the terms
        return DisentangledAttention(terms=(), scale_factor=1 + len(pos), span=0)
    max_rel = hf["max_relative_positions"]
    max_rel = hf["max_position_embeddings"] if max_rel < 1 else max_rel
    buckets = hf["position_buckets"]
    return DisentangledAttention(terms=pos, scale_factor=1 + len(pos), span=buckets if buckets > 0 else max_rel,
                                 buckets=max(buckets, 0), max_position=max_rel, layer_norm="layer_norm" in norm,
                                 shared_projections=hf["share_att_key"])


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if hf["conv_kernel_size"] > 0:
        raise ConfigError(f"config.json conv_kernel_size={hf['conv_kernel_size']}: the convolution beside layer 0 "
                          "(HF's ConvLayer) is not implemented. Fix: use a checkpoint without it (conv_kernel_size 0)")
    if hf.get("embedding_size", hf["hidden_size"]) != hf["hidden_size"]:
        raise ConfigError(f"config.json embedding_size={hf['embedding_size']} != hidden_size={hf['hidden_size']}: "
                          "the projection HF applies before the embedding LayerNorm (embed_proj) is not implemented")
    head_size = hf.get("attention_head_size")  # absent: hidden_size / num_attention_heads (checked by encoder_config)
    if head_size is not None and head_size * hf["num_attention_heads"] != hf["hidden_size"]:
        raise ConfigError(f"config.json attention_head_size={hf['attention_head_size']} is not supported: jattn's "
                          "heads have hidden_size / num_attention_heads dimensions. Fix: remove it")
    act = hf["pooler_hidden_act"]
    if act not in ACTIVATIONS and act != "tanh":
        raise ConfigError(f"config.json pooler_hidden_act {act!r} is not supported; supported: tanh, "
                          f"{', '.join(ACTIVATIONS)}")
    return encoder_config(hf, positions="absolute", classifier="pooler", disentangled=disentangled(hf),
                          position_embeddings=hf["position_biased_input"], mask_embeddings=True,
                          pooler_activation=act, classifier_dropout=hf.get("cls_dropout"))


SPEC = register(FamilySpec(
    model_type="deberta-v2", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=None,
    tokenizer_files=(("tokenizer.json",), ("spm.model",)), special_tokens=("cls", "sep", "pad"),
))
