"""``FamilySpec``: what jattn knows about one Hugging Face model family, as data, and the registry.

A spec maps a ``config.json`` to a generic jattn config (``jattn.nn.config``), holds the
family's parameter key table (its converter and exporter), the tokenizer files and special
tokens the family needs and its tokenizer quirks. Models, the runner, analyses and commands
ask the spec; nothing outside ``jattn.families`` names a family.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jattn.families.config_table import ConfigKey
from jattn.nn.config import ConfigError

SHAPES = ("encoder", "encoder-decoder", "decoder")  # decoder: a causal LM, the encoder stack with a causal mask


def side_vocab(tokenizer, side: str) -> dict[str, int]:
    """token -> id of one side ("source" | "target") of a tokenizer: tokenizers with separate
    vocabularies keep the target's apart (``target_encoder``); others have one."""
    if side == "target" and getattr(tokenizer, "separate_vocabs", False):
        return dict(tokenizer.target_encoder)
    return tokenizer.get_vocab()


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    model_type: str  # Hugging Face config.json "model_type"
    shape: str  # "encoder" | "encoder-decoder" | "decoder" (a causal LM): which generic model runs it
    # config.json dict -> EncoderConfig | Seq2SeqConfig, checked first against its table (config_table.reads)
    config_from_hf: Callable[[dict], object]
    convert: Callable  # (HF state dict, config, source name) -> params (nested dict of arrays)
    to_hf_state_dict: Callable  # (params, config) -> HF state dict, the inverse of convert
    tokenizer_files: tuple[tuple[str, ...], ...]  # one of these sets of files must be in the folder
    special_tokens: tuple[str, ...]  # tokenizer attributes "<name>_token_id" the model needs
    to_hf_config: Callable | None = None  # (config, **kw) -> config.json dict, where the family exports
    side_vocab: Callable[[object, str], dict[str, int]] = side_vocab  # (tokenizer, side) -> token -> id

    @property
    def config_keys(self) -> tuple[ConfigKey, ...]:
        """Every config.json key ``config_from_hf`` reads: type, range, Hugging Face's default."""
        return self.config_from_hf.config_keys


_FAMILIES: dict[str, FamilySpec] = {}


def register(spec: FamilySpec) -> FamilySpec:
    """Add a family (called by each family folder's ``spec.py``). Its ``config_from_hf`` must be
    checked against a declared table (``@config_table.reads(CONFIG_KEYS)``): every config.json is
    checked, and absent keys set to Hugging Face's defaults, before the family's mapping reads it."""
    if spec.shape not in SHAPES:
        raise ValueError(f"family {spec.model_type!r}: shape must be one of {SHAPES}, got {spec.shape!r}")
    if not getattr(spec.config_from_hf, "config_keys", None):
        raise ValueError(f"family {spec.model_type!r}: config_from_hf declares no table of the config.json keys it "
                         "reads (decorate it with jattn.families.config_table.reads(CONFIG_KEYS))")
    _FAMILIES[spec.model_type] = spec
    return spec


def get(model_type) -> FamilySpec:
    """The spec of a ``model_type``, or a ``ConfigError`` listing the supported ones."""
    if model_type not in _FAMILIES:
        raise ConfigError(f"unsupported model_type {model_type!r}; jattn supports {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[model_type]


def names() -> tuple[str, ...]:
    return tuple(sorted(_FAMILIES))


def encoder_hf_config(config, architecture: str, label_names: list[str] | None = None, **fields) -> dict:
    """The ``config.json`` dict of an encoder with the BERT block layout: the fields every such
    family writes (sizes, activation, dropout, ``pruned_heads``, the label maps of a classifier)
    and the family's own ``fields``; ``architecture``: HF's class name, e.g. "BertModel"."""
    out = {
        "model_type": config.model_type, "architectures": [architecture], "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.pruned.heads if config.pruned else config.num_heads,
        "intermediate_size": config.intermediate_size, "hidden_act": config.hidden_act,
        "max_position_embeddings": config.max_position_embeddings, "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id, "hidden_dropout_prob": config.hidden_dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "tie_word_embeddings": config.tied_mlm_decoder, **fields,
    }
    if config.pruned:
        out["pruned_heads"] = config.pruned.removed()
    if config.num_labels:
        names = label_names or [f"LABEL_{i}" for i in range(config.num_labels)]
        if len(names) != config.num_labels:
            raise ValueError(f"{len(names)} label names for {config.num_labels} classes")
        out["id2label"] = {str(i): n for i, n in enumerate(names)}
        out["label2id"] = {n: i for i, n in enumerate(names)}
    return out



def seq2seq_hf_config(config, architecture: str, **fields) -> dict:
    """The ``config.json`` dict of an encoder–decoder with BART's field names (BART, mBART,
    M2M100): sizes, activation, positions, special tokens (the forced BOS where set), dropout and
    LayerDrop rates, jattn's record of pruned heads (transformers has no head pruning for these),
    and the family's own ``fields``; ``architecture``: HF's class name."""
    out = {
        "model_type": config.model_type, "architectures": [architecture], "vocab_size": config.tgt_vocab_size,
        "d_model": config.d_model, "encoder_layers": config.encoder_layers, "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.pruned[0].heads if config.pruned else config.encoder_heads,
        "decoder_attention_heads": config.pruned[1].heads if config.pruned else config.decoder_heads,
        "encoder_ffn_dim": config.encoder_ffn_dim, "decoder_ffn_dim": config.decoder_ffn_dim,
        "activation_function": config.activation, "max_position_embeddings": config.max_position_embeddings,
        "scale_embedding": config.scale_embedding, "tie_word_embeddings": True,
        "pad_token_id": config.pad_token_id, "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.decoder_start_token_id, "forced_eos_token_id": config.forced_eos_token_id,
        "dropout": config.dropout, "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "encoder_layerdrop": config.layerdrop[0], "decoder_layerdrop": config.layerdrop[1],
        "is_encoder_decoder": True, **fields,
    }
    if config.forced_bos_token_id is not None:
        out["forced_bos_token_id"] = config.forced_bos_token_id
    if config.pruned:  # jattn's key: see jattn.sweeps.pruning
        out["jattn_pruned_heads"] = {k: p.removed() for k, p in zip(("encoder", "decoder", "cross"), config.pruned)}
    return out
