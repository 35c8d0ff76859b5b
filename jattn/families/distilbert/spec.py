"""DistilBERT (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"): BERT's post-LayerNorm
blocks (half as many, distilled from BERT), absolute positions 0..n-1 (a learned table, or the
sinusoids of Vaswani et al. 2017 stored in the weights when ``sinusoidal_pos_embds``), no token
types and no pooler; LayerNorm eps fixed at 1e-12; the classification head dense + ReLU + linear
on h_[CLS] ("dense_relu"). ``config.json`` names its sizes ``dim``, ``n_layers``, ``n_heads``,
``hidden_dim``, ``activation``, ``dropout``, ``attention_dropout``, ``seq_classif_dropout``."""

from jattn.families.config_table import ConfigKey, activation, flag, rate, reads, size, token
from jattn.families.distilbert import convert
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

# DistilBertConfig's keys and defaults
CONFIG_KEYS = (
    size("vocab_size", "rows of the word-embedding table"), size("dim", "the model width D"),
    size("n_layers", "layers"), size("n_heads", "heads per layer"), size("hidden_dim", "the feed-forward width"),
    size("max_position_embeddings", "rows of the position table"), activation("activation", "gelu"),
    rate("dropout", 0.1, "dropout on embeddings and residuals"),
    rate("attention_dropout", 0.1, "dropout on attention weights"),
    rate("seq_classif_dropout", 0.2, "the classification head's dropout"),
    token("pad_token_id", 0, "the padding token"),
    flag("tie_word_embeddings", True, "the masked-LM decoder is the word-embedding table"),
    ConfigKey("pruned_heads", dict, default={}, meaning="{layer: [removed heads]} of a physically pruned model"),
)
# DistilBERT's config.json field -> the generic field encoder_config reads
FIELDS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
          "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
          "attention_dropout": "attention_probs_dropout_prob", "vocab_size": "vocab_size",
          "max_position_embeddings": "max_position_embeddings", "pad_token_id": "pad_token_id"}
LAYER_NORM_EPS = 1e-12  # Hugging Face's DistilBERT hard-codes it (config.json has no field)


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    generic = {name: hf[field] for field, name in FIELDS.items()}
    if generic["hidden_size"] % generic["num_attention_heads"]:
        raise ConfigError(f"config.json dim={generic['hidden_size']} is not divisible by n_heads="
                          f"{generic['num_attention_heads']}. Fix: correct config.json")
    generic.update(model_type=hf.get("model_type"), type_vocab_size=0, layer_norm_eps=LAYER_NORM_EPS,
                   tie_word_embeddings=hf["tie_word_embeddings"], pruned_heads=hf["pruned_heads"])
    return encoder_config(generic, positions="absolute", classifier="dense_relu",
                          classifier_dropout=hf["seq_classif_dropout"])


SPEC = register(FamilySpec(
    model_type="distilbert", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("vocab.txt",)), special_tokens=("cls", "sep", "pad"),
))
