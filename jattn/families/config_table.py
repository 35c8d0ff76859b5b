"""Config validation as a declared table: each family's ``CONFIG_KEYS`` lists every ``config.json``
key its ``config_from_hf`` reads, with the JSON type, the range and Hugging Face's default, and
``reads(CONFIG_KEYS)`` checks a config against it (the registry requires it) before the family's
mapping runs. So a value Hugging Face would refuse, or would read otherwise than jattn, is refused
by name, and a key the file omits is read as Hugging Face reads it (its config class's default).

The sizes that shape the weights (vocabulary, widths, layers, heads, positions) are required even
where Hugging Face's config class has a default: that default is one released checkpoint's size,
and a ``config.json`` without the key describes weights of unknown shape.

The shared groups below are the keys the generic builders read (``jattn.nn.config.encoder_config``
with BERT's names, ``seq2seq_config`` with BART's, and the rotary decoders' with Llama's); a family
takes a group and sets its own defaults with ``with_defaults``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from typing import Any, Callable

from jattn.nn.config import ACTIVATIONS, ConfigError


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED = _Marker("REQUIRED")  # config.json must give the key
OPTIONAL = _Marker("OPTIONAL")  # an absent key stays absent (its absence means something to the family's mapping)

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
               dict: "an object"}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One ``config.json`` key: its JSON ``type`` (or a tuple of types), its range [``low``,
    ``high``] (``open_low``: ``low`` itself excluded), the strings it may be (``choices``), whether
    null is allowed, Hugging Face's ``default`` (``REQUIRED``, ``OPTIONAL`` or a value), other
    names Hugging Face's ``attribute_map`` reads it under (``aliases``) and what it means. A list's
    elements are checked against ``items``, an object's entries against ``fields`` (by name; an
    entry not named there is Hugging Face's business, not read by jattn)."""

    name: str
    type: type | tuple[type, ...]
    low: float | None = None
    high: float | None = None
    default: Any = REQUIRED
    meaning: str = ""
    nullable: bool = False
    choices: tuple = ()
    open_low: bool = False
    aliases: tuple[str, ...] = ()
    items: ConfigKey | None = None
    fields: tuple[ConfigKey, ...] = ()

    @property
    def types(self) -> tuple[type, ...]:
        return self.type if isinstance(self.type, tuple) else (self.type,)

    def requirement(self) -> str:
        """What a valid value is, in words: "an integer ≥ 1", "a number from 0 to 1", "one of 'cls'"."""
        if self.choices:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = " or ".join(_TYPE_NAMES[t] for t in self.types)
            if self.low is not None and self.high is not None:
                text += f" from {self.low} to {self.high}"
            elif self.low is not None:
                text += f" {'>' if self.open_low else '≥'} {self.low}"
            elif self.high is not None:
                text += f" ≤ {self.high}"
        if self.items is not None:
            text += f" (each {self.items.requirement()})"
        if self.fields:
            text += " with " + ", ".join(f"{f.name}: {f.requirement()}" for f in self.fields)
        return text + (" or null" if self.nullable else "")

    def valid(self, value) -> bool:
        """Whether ``value`` (as JSON gives it) is of the declared type, range and choices."""
        if value is None:
            return self.nullable
        if not any(_is(value, t) for t in self.types):
            return False
        if self.choices and value not in self.choices:
            return False
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
                return False
            if self.high is not None and value > self.high:
                return False
        if isinstance(value, list) and self.items is not None:
            return all(self.items.valid(v) for v in value)
        if isinstance(value, dict) and self.fields:
            return all(f.valid(value[f.name]) for f in self.fields if f.name in value)
        return True


def _is(value, kind: type) -> bool:
    """JSON typing: an integer is not a bool; a number may be an integer; an integer is not 4.0."""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def check(hf: dict, keys: tuple[ConfigKey, ...], family: str) -> dict:
    """``hf`` checked against ``keys``: a copy with each absent key set to Hugging Face's default
    (an alias's value where the file uses another name), or a ``ConfigError`` naming the key,
    its value, what the family needs and the fix."""
    out = dict(hf)
    for key in keys:
        given = next((n for n in (key.name, *key.aliases) if n in hf), None)
        if given is None:
            if key.default is REQUIRED:
                raise ConfigError(f"config.json lacks {key.name}: {family} needs {key.requirement()} "
                                  f"({key.meaning}). Fix: add {key.name} to config.json (the value the checkpoint "
                                  "was trained with)")
            if key.default is not OPTIONAL:
                out[key.name] = copy.deepcopy(key.default)
            continue
        value = hf[given]
        if not key.valid(value):
            default = "" if key.default in (REQUIRED, OPTIONAL) else \
                f", or remove it to get Hugging Face's default {key.default!r}"
            raise ConfigError(f"config.json: {given} is {json.dumps(value)[:80]}; {family} needs {key.requirement()} "
                              f"({key.meaning}). Fix: set {given} to {key.requirement()}{default}")
        out[key.name] = value
    return out


def reads(keys: tuple[ConfigKey, ...]) -> Callable:
    """Decorate a family's ``config_from_hf``: the ``config.json`` dict is checked against ``keys``
    (and absent keys set to Hugging Face's defaults) before the mapping reads it; the table is the
    function's ``config_keys``, which the registry requires."""
    def decorate(read: Callable) -> Callable:
        @functools.wraps(read)
        def config_from_hf(hf: dict, **kw):
            return read(check(hf, keys, hf.get("model_type") or "this model"), **kw)
        config_from_hf.config_keys = keys
        return config_from_hf
    return decorate


def with_defaults(keys: tuple[ConfigKey, ...], **changes) -> tuple[ConfigKey, ...]:
    """``keys`` with the defaults of some replaced: ``with_defaults(ENCODER, pad_token_id=1)``; a
    ``ConfigKey`` as the value replaces the whole row."""
    unknown = set(changes) - {k.name for k in keys}
    if unknown:
        raise ValueError(f"with_defaults: no key {sorted(unknown)} in the table")
    return tuple(changes[k.name] if isinstance(changes.get(k.name), ConfigKey)
                 else dataclasses.replace(k, default=changes[k.name]) if k.name in changes else k for k in keys)


def size(name: str, meaning: str, aliases: tuple[str, ...] = ()) -> ConfigKey:
    """A size that shapes the weights: a positive integer config.json must give."""
    return ConfigKey(name, int, low=1, meaning=meaning, aliases=aliases)


def rate(name: str, default: float, meaning: str, nullable: bool = False) -> ConfigKey:
    """A dropout rate in [0, 1] (training only)."""
    return ConfigKey(name, float, 0, 1, default, meaning, nullable=nullable)


def token(name: str, default, meaning: str, nullable: bool = True) -> ConfigKey:
    """A token id (≥ 0)."""
    return ConfigKey(name, int, 0, None, default, meaning, nullable=nullable)


def flag(name: str, default, meaning: str, nullable: bool = False) -> ConfigKey:
    return ConfigKey(name, bool, default=default, meaning=meaning, nullable=nullable)


def activation(name: str, default, meaning: str = "the feed-forward nonlinearity") -> ConfigKey:
    return ConfigKey(name, str, default=default, meaning=meaning, choices=ACTIVATIONS)


def eps(name: str, default: float) -> ConfigKey:
    return ConfigKey(name, float, 0, None, default, "the normalisers' epsilon", open_low=True)


TOKEN_IDS = ConfigKey("", int, 0)  # a list's token ids
LAYER_TYPES = ConfigKey("layer_types", list, default=None, nullable=True, meaning="each layer's attention kind",
                        items=ConfigKey("", str, choices=("full_attention", "sliding_attention")))
# a rotary embedding's parameters (transformers 5's rope_parameters; rope_scaling): the entries jattn reads
ROPE_FIELDS = (ConfigKey("rope_type", str), ConfigKey("type", str),
               ConfigKey("rope_theta", float, 0, None, open_low=True),
               ConfigKey("partial_rotary_factor", float, 0, 1, open_low=True))


def rope(name: str, default, meaning: str) -> ConfigKey:
    return ConfigKey(name, dict, default=default, nullable=True, meaning=meaning, fields=ROPE_FIELDS)


# the keys jattn.nn.config.encoder_config reads, BertConfig's names and defaults
ENCODER = (
    size("vocab_size", "rows of the word-embedding table"), size("hidden_size", "the model width D"),
    size("num_hidden_layers", "layers"), size("num_attention_heads", "heads per layer"),
    size("intermediate_size", "the feed-forward width"),
    size("max_position_embeddings", "rows of the position table"),
    activation("hidden_act", "gelu"),
    ConfigKey("type_vocab_size", int, 1, None, 2, "token types (segments); Hugging Face indexes its table"),
    eps("layer_norm_eps", 1e-12),
    token("pad_token_id", 0, "the padding token"),
    rate("hidden_dropout_prob", 0.1, "dropout on embeddings and residuals"),
    rate("attention_probs_dropout_prob", 0.1, "dropout on attention weights"),
    flag("tie_word_embeddings", True, "the masked-LM decoder is the word-embedding table"),
    ConfigKey("position_embedding_type", str, default=OPTIONAL, meaning="the position scheme; jattn runs 'absolute'"),
    flag("is_decoder", False, "a causal decoder with cross-attention; jattn runs the encoder"),
    flag("add_cross_attention", False, "cross-attention layers; jattn runs the encoder"),
    ConfigKey("pruned_heads", dict, default={}, meaning="{layer: [removed heads]} of a physically pruned model"),
)

# the keys jattn.nn.config.seq2seq_config reads, BartConfig's names and defaults
SEQ2SEQ = (
    size("d_model", "the model width"), size("encoder_layers", "encoder layers"),
    size("decoder_layers", "decoder layers"), size("encoder_attention_heads", "encoder heads per layer"),
    size("decoder_attention_heads", "decoder heads per layer"), size("encoder_ffn_dim", "the encoder's FFN width"),
    size("decoder_ffn_dim", "the decoder's FFN width"), size("max_position_embeddings", "positions per side"),
    activation("activation_function", "gelu"),
    token("pad_token_id", 1, "the padding token", nullable=False),
    token("eos_token_id", 2, "the end-of-sentence token", nullable=False),
    token("bos_token_id", 0, "the beginning-of-sentence token"),
    token("decoder_start_token_id", 2, "the decoder's first token (null: bos_token_id, as HF generate)"),
    token("forced_eos_token_id", OPTIONAL, "forced as the last token at max_length"),
    token("forced_bos_token_id", OPTIONAL, "forced as the first generated token"),
    ConfigKey("bad_words_ids", list, default=OPTIONAL, nullable=True, meaning="token ids never generated",
              items=ConfigKey("", list, items=TOKEN_IDS)),
    rate("dropout", 0.1, "dropout on embeddings and residuals"), rate("attention_dropout", 0.0, "on attention"),
    rate("activation_dropout", 0.0, "inside the FFN"),
    rate("encoder_layerdrop", 0.0, "LayerDrop, training only", nullable=True),
    rate("decoder_layerdrop", 0.0, "LayerDrop, training only", nullable=True),
    flag("scale_embedding", False, "token embeddings times sqrt(d_model)"),
    flag("tie_word_embeddings", True, "the output projection is the target token table"),
    flag("normalize_before", OPTIONAL, "pre-LayerNorm blocks (older configs)"),
    flag("add_final_layer_norm", OPTIONAL, "a final LayerNorm per stack (older configs)"),
    flag("normalize_embedding", OPTIONAL, "a LayerNorm on the embeddings (older configs)"),
    flag("static_position_embeddings", OPTIONAL, "sinusoidal positions (older configs)"),
    ConfigKey("extra_pos_embeddings", int, 0, None, OPTIONAL, "the position table's offset (older configs)"),
    ConfigKey("jattn_pruned_heads", dict, default=OPTIONAL, meaning="jattn's record of physically pruned heads"),
)

# the keys the Llama-layout decoders read (jattn.families.layouts.rotary_decoder.config_from_hf), LlamaConfig's defaults
ROTARY_DECODER = (
    size("vocab_size", "rows of the word-embedding table"), size("hidden_size", "the model width D"),
    size("num_hidden_layers", "layers"), size("num_attention_heads", "query heads per layer"),
    size("intermediate_size", "the feed-forward width"),
    size("max_position_embeddings", "the longest sequence"),
    ConfigKey("num_key_value_heads", int, 1, None, None, "key/value heads (null: one per query head)",
              nullable=True),
    ConfigKey("head_dim", int, 2, None, None, "the head width (null: hidden_size / num_attention_heads)",
              nullable=True),
    activation("hidden_act", "silu"), eps("rms_norm_eps", 1e-6),
    token("pad_token_id", None, "the padding token (null: eos_token_id)"),
    token("bos_token_id", 1, "the first token of a prompt"),
    ConfigKey("eos_token_id", (int, list), 0, None, 2, "where generation stops", nullable=True, items=TOKEN_IDS),
    ConfigKey("pretraining_tp", int, 1, None, 1, "tensor-parallel slices of pretraining", nullable=True),
    flag("tie_word_embeddings", False, "the LM head is the word-embedding table"),
    rope("rope_parameters", None, "the rotary embedding"),
    rope("rope_scaling", OPTIONAL, "the rotary embedding (older name; Hugging Face reads it instead of "
         "rope_parameters where set)"),
    ConfigKey("rope_theta", float, 0, None, OPTIONAL, "the rotary base (older configs)", open_low=True),
    ConfigKey("partial_rotary_factor", float, 0, 1, OPTIONAL, "the rotated share of a head", open_low=True),
    flag("attention_bias", False, "biases of the attention projections"),
    flag("mlp_bias", False, "biases of the feed-forward projections"),
    rate("attention_dropout", 0.0, "dropout on attention weights", nullable=True),
)
