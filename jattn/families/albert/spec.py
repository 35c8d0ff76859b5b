"""ALBERT (Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language
Representations"): BERT's post-LayerNorm blocks with factorised embeddings (tables of width E =
``embedding_size`` < D, projected E -> D by ``embedding_hidden_mapping_in``) and cross-layer
parameter sharing (one layer's weights run by every layer when ``num_hidden_groups`` = 1);
absolute positions, token types, the pooler (dense + tanh) and its classifier; the masked-LM head
D -> E -> V tied to the word embeddings; ``hidden_act`` defaults to "gelu_new".

Sharing: jattn holds L copies of the shared layer on its stacked layer axis (``convert.py``), so
that every internal, gate and intervention stays per layer (a gate per layer × head, like every
other encoder). The copies are equal when loaded; fine-tuning updates each on its own gradient
and so unties them. Export writes one group per layer (``num_hidden_groups`` = L), which
Hugging Face reads as the same function, tied or not.

Refused (``ConfigError``): ``inner_group_num`` != 1 (several layers per group call),
``num_hidden_groups`` outside 1..L, ``embedding_size`` equal to ``hidden_size`` (jattn projects
the embeddings only when the widths differ) and ``pruned_heads`` (Hugging Face's ALBERT counts
them per stored layer, not per layer run)."""

from jattn.families.albert import convert
from jattn.families.config_table import ENCODER, ConfigKey, activation, rate, reads, with_defaults
from jattn.families.spec import FamilySpec, register
from jattn.nn.config import ConfigError, encoder_config

# AlbertConfig's defaults where they differ from BERT's, and its own keys
CONFIG_KEYS = (
    *with_defaults(ENCODER, hidden_act=activation("hidden_act", "gelu_new"),
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    ConfigKey("embedding_size", int, 1, None, 128, "the embedding tables' width E, projected to hidden_size"),
    ConfigKey("num_hidden_groups", int, 1, None, 1, "groups of shared layer weights"),
    ConfigKey("inner_group_num", int, 1, None, 1, "layers per group call"),
    rate("classifier_dropout_prob", 0.1, "the classification head's dropout"),
)


@reads(CONFIG_KEYS)
def config_from_hf(hf: dict):
    if hf["inner_group_num"] != 1:
        raise ConfigError(f"config.json inner_group_num={hf['inner_group_num']} is not supported: jattn runs ALBERT "
                          "with one layer per group (inner_group_num 1, as every published checkpoint). Fix: use a "
                          "checkpoint with inner_group_num 1")
    layers, groups = hf["num_hidden_layers"], hf["num_hidden_groups"]
    if groups > layers:
        raise ConfigError(f"config.json num_hidden_groups={groups!r} must be an integer from 1 to "
                          f"num_hidden_layers ({layers}). Fix: correct config.json (1: one layer shared by all)")
    if hf["embedding_size"] == hf["hidden_size"]:
        raise ConfigError(f"config.json embedding_size={hf['embedding_size']} equals hidden_size: jattn projects the "
                          "embeddings (embedding_hidden_mapping_in) only when the widths differ. Fix: use a "
                          "checkpoint with embedding_size < hidden_size (every published ALBERT)")
    if hf.get("pruned_heads"):
        raise ConfigError("config.json pruned_heads is not supported for ALBERT (Hugging Face counts them per stored "
                          "layer, shared by several layers). Fix: remove pruned_heads and gate the heads instead "
                          "(Interventions(head_gates=...))")
    return encoder_config(hf, positions="absolute", classifier="pooler", embedding_size=hf["embedding_size"],
                          classifier_dropout=hf["classifier_dropout_prob"])


SPEC = register(FamilySpec(
    model_type="albert", shape="encoder", config_from_hf=config_from_hf,
    convert=convert.convert, to_hf_state_dict=convert.to_hf_state_dict, to_hf_config=convert.to_hf_config,
    tokenizer_files=(("tokenizer.json",), ("spiece.model",)), special_tokens=("cls", "sep", "pad"),
))
