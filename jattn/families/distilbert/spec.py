"""DistilBERT (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"): BERT's post-LayerNorm
blocks (half as many, distilled from BERT), absolute positions 0..n-1 (a learned table, or the
sinusoids of Vaswani et al. 2017 stored in the weights when ``sinusoidal_pos_embds``), no token
types and no pooler; LayerNorm eps fixed at 1e-12; the classification head dense + ReLU + linear
on h_[CLS] ("dense_relu"). ``config.json`` names its sizes ``dim``, ``n_layers``, ``n_heads``,
``hidden_dim``, ``activation``, ``dropout``, ``attention_dropout``, ``seq_classif_dropout``."""

from jattn.families.distilbert import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ACTIVATIONS, ConfigError, encoder_config

# DistilBERT's config.json field -> (the generic field encoder_config reads, Hugging Face's default)
FIELDS = {"dim": ("hidden_size", 768), "n_layers": ("num_hidden_layers", 6), "n_heads": ("num_attention_heads", 12),
          "hidden_dim": ("intermediate_size", 3072), "activation": ("hidden_act", "gelu"),
          "dropout": ("hidden_dropout_prob", 0.1), "attention_dropout": ("attention_probs_dropout_prob", 0.1),
          "vocab_size": ("vocab_size", 30522), "max_position_embeddings": ("max_position_embeddings", 512),
          "pad_token_id": ("pad_token_id", 0)}
LAYER_NORM_EPS = 1e-12  # Hugging Face's DistilBERT hard-codes it (config.json has no field)


def config_from_hf(hf: dict):
    act = hf.get("activation", "gelu")
    if act not in ACTIVATIONS:
        raise ConfigError(f"config.json activation={act!r} is not supported; supported: {', '.join(ACTIVATIONS)}")
    generic = {name: hf.get(field, default) for field, (name, default) in FIELDS.items()}
    if generic["hidden_size"] % generic["num_attention_heads"]:
        raise ConfigError(f"config.json dim={generic['hidden_size']} is not divisible by n_heads="
                          f"{generic['num_attention_heads']}. Fix: correct config.json")
    generic.update(model_type=hf.get("model_type"), type_vocab_size=0, layer_norm_eps=LAYER_NORM_EPS,
                   tie_word_embeddings=hf.get("tie_word_embeddings", True), pruned_heads=hf.get("pruned_heads"))
    return encoder_config(generic, positions="absolute", classifier="dense_relu",
                          classifier_dropout=hf.get("seq_classif_dropout", 0.2))


SPEC = register(FamilySpec(
    model_type="distilbert", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
