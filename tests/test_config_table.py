"""Config validation as a declared table (``jattn.families.config_table``): every family's
``config_from_hf`` checks ``config.json`` against its ``CONFIG_KEYS`` before mapping it. A value of
the wrong type or out of range is refused by name before conversion; an absent key is read as
Hugging Face reads it (its config class's default); an absent required key is refused by name.
The cases of issue #79 that jattn read otherwise than Hugging Face are pinned here."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jattn
import jattn.families as families
from jattn.families.config_table import OPTIONAL, REQUIRED
from jattn.nn.config import ConfigError
from test_contract_families import CONFIGS

FAMILIES = families.names()


def hf_class(model_type: str):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


def base(model_type: str) -> dict:
    """A complete tiny config.json dict of the family, as its Hugging Face config class writes it."""
    from transformers import AutoConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(model_type, **CONFIGS[model_type]).to_dict()


def read(model_type: str, hf: dict):
    return families.get(model_type).config_from_hf(hf)


ROWS = [(m, k) for m in FAMILIES for k in families.get(m).config_keys]
BASES = {m: base(m) for m in FAMILIES}


def bad_values(key) -> list:
    """Values of another type, and values just outside the key's range or choices."""
    values = ["text", 2.5, True, [1], {"a": 1}, 7, None]
    if key.low is not None:
        values += [key.low - 1, key.low - 0.5] + ([key.low] if key.open_low else [])
    if key.high is not None:
        values += [key.high + 1, key.high + 0.5]
    return [v for v in values if not key.valid(v)]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_base_configs_map(model_type):
    read(model_type, BASES[model_type])


@pytest.mark.parametrize("model_type", FAMILIES)
def test_wrong_type_or_range_is_refused_by_name(model_type):
    """Every key of the family's table: each value of a wrong type or out of range refused with a
    ConfigError naming the key."""
    for key in families.get(model_type).config_keys:
        for value in bad_values(key):
            with pytest.raises(ConfigError, match=rf"\b{key.name}\b"):
                read(model_type, {**BASES[model_type], key.name: value})


@pytest.mark.parametrize("model_type", FAMILIES)
def test_absent_keys(model_type):
    """An absent key with a default reads as Hugging Face's config class's default (where the
    class has that field) and the config still maps; an absent required key is refused by name."""
    from jattn.families.config_table import check

    fields = getattr(hf_class(model_type), "__dataclass_fields__", {})
    for key in families.get(model_type).config_keys:
        hf = {k: v for k, v in BASES[model_type].items() if k not in (key.name, *key.aliases)}
        if key.default is REQUIRED:
            with pytest.raises(ConfigError, match=rf"lacks {key.name}\b"):
                read(model_type, hf)
            continue
        checked = check(hf, families.get(model_type).config_keys, model_type)
        if key.default is OPTIONAL:
            assert key.name not in checked
            continue
        assert checked[key.name] == key.default
        if key.name in fields:
            field = fields[key.name]
            hf_default = field.default_factory() if field.default is dataclasses.MISSING else field.default
            assert key.default == hf_default, f"{model_type}.{key.name}: table {key.default!r}, HF {hf_default!r}"
        try:
            read(model_type, hf)
        except ConfigError as e:  # the default may conflict with the tiny config's other keys, said by name
            assert "config.json" in str(e) or "must" in str(e), str(e)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(-10, 10**6, allow_nan=False)
                    | st.text(max_size=6), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=4)


@settings(max_examples=300, deadline=None)
@given(row=st.sampled_from(ROWS), value=JSON)
def test_any_value_maps_or_is_refused_by_name(row, value):
    """Any JSON value of any key: refused by name where the table says so, and otherwise mapped or
    refused with a ConfigError (never a KeyError, TypeError or a silent reading)."""
    model_type, key = row
    hf = {**BASES[model_type], key.name: value}
    if not key.valid(value):
        with pytest.raises(ConfigError, match=rf"\b{key.name}\b"):
            read(model_type, hf)
    else:
        try:
            read(model_type, hf)
        except ConfigError:
            pass


def test_deberta_width_not_divisible_by_heads_is_refused_by_name():
    """Without attention_head_size, a width the heads do not divide is a ConfigError naming both keys
    (it was a KeyError on the absent attention_head_size while the message was formatted)."""
    with pytest.raises(ConfigError, match=r"hidden_size=1 must be divisible by num_attention_heads"):
        read("deberta-v2", {**BASES["deberta-v2"], "hidden_size": 1})
    with pytest.raises(ConfigError, match=r"attention_head_size=3 is not supported"):
        read("deberta-v2", {**BASES["deberta-v2"], "attention_head_size": 3})


# ---- issue #79: configs jattn ran otherwise than Hugging Face -------------------------------------------


@pytest.mark.parametrize("model_type", ["xlm-roberta", "roberta", "roberta-prelayernorm"])
def test_default_pad_id_is_hfs(model_type):
    """Without pad_token_id, HF's RoBERTa-style configs pad (and number positions) with 1, not 0."""
    hf = {k: v for k, v in BASES[model_type].items() if k != "pad_token_id"}
    assert read(model_type, hf).pad_token_id == hf_class(model_type)().pad_token_id == 1


def test_llama_rope_scaling_read_as_hf():
    """HF (transformers 5) reads rope_scaling, where set, instead of rope_parameters."""
    cases = [({"rope_type": "default", "rope_theta": 500.0}, {"rope_type": "default", "rope_theta": 9000.0}, {}),
             ({"rope_type": "default", "rope_theta": 500.0}, {"type": "default"}, {"rope_theta": 700.0}),
             ({"rope_type": "default", "rope_theta": 500.0}, {"rope_type": "default"}, {})]
    for params, scaling, top in cases:
        hf = {**BASES["llama"], "rope_parameters": params, "rope_scaling": scaling, **top}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = hf_class("llama")(**{k: v for k, v in hf.items() if k != "model_type"}).rope_parameters
        assert read("llama", hf).rotary_theta == want["rope_theta"], (params, scaling, top)
    with pytest.raises(ConfigError, match="rope_type"):  # HF scales: beside a default rope_parameters too
        read("llama", {**BASES["llama"], "rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                       "rope_scaling": {"type": "linear", "factor": 2.0}})


def test_llama_rope_scaling_logits_equal_hf(tmp_path):
    """The logits of a Llama whose config.json has rope_scaling beside rope_parameters equal HF's."""
    from encoder_family_parity import new_hf, save_random
    from lm_family_parity import check_lm_outputs, lm_batch, load_lm_pair

    shape = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=24, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                 rope_parameters={"rope_type": "default", "rope_theta": 20.0})
    folder = save_random(new_hf("LlamaConfig", "LlamaForCausalLM", shape), tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "default", "rope_theta": 10_000.0}
    (folder / "config.json").write_text(json.dumps(config))
    model, oracle = load_lm_pair(folder)
    assert model.config.rotary_theta == 10_000.0
    check_lm_outputs(model, oracle, lm_batch(model.config, [9, 4], seed=1))


def test_llama_without_hidden_size_is_refused_by_name():
    hf = {k: v for k, v in BASES["llama"].items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match="config.json lacks hidden_size"):
        read("llama", hf)


@pytest.mark.parametrize("key, value", [("local_attention", 0), ("local_attention", 1), ("local_attention", 4.5),
                                        ("global_attn_every_n_layers", 0), ("global_attn_every_n_layers", -1)])
def test_modernbert_window_and_layout_refused(key, value):
    """local_attention 0 or 1 (HF: each token sees itself alone; jattn's radius 0 meant global) and
    global_attn_every_n_layers ≤ 0 (HF: a division by zero or a layout of its own)."""
    hf = {**BASES["modernbert"], "layer_types": None, key: value}
    with pytest.raises(ConfigError, match=rf"config.json: {key} is {value}; modernbert needs an integer ≥"):
        read("modernbert", hf)


@pytest.mark.parametrize("value", [0, -1, 4.5, None])
def test_gemma2_sliding_window_refused(value):
    """Gemma 2's window must be a positive integer (0 / -1 ran as global, 4.5 as 4; HF refuses null)."""
    with pytest.raises(ConfigError, match=rf"config.json: sliding_window is {json.dumps(value)}; gemma2 needs an "
                                          "integer ≥ 1"):
        read("gemma2", {**BASES["gemma2"], "sliding_window": value})


def test_gemma2_default_softcaps_are_hfs():
    """Without the soft-capping keys Gemma 2 caps as HF's defaults say (50, 30); null: none."""
    hf = {k: v for k, v in BASES["gemma2"].items() if "softcapping" not in k}
    config = read("gemma2", hf)
    assert (config.attention_softcap, config.logit_softcap) == (50.0, 30.0)
    config = read("gemma2", {**hf, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (config.attention_softcap, config.logit_softcap) == (0.0, 0.0)


def test_refused_before_conversion(tmp_path):
    """jattn.load refuses a bad key from config.json alone (no weights are read)."""
    (tmp_path / "config.json").write_text(json.dumps({**BASES["gemma2"], "sliding_window": 0}))
    with pytest.raises(ConfigError, match="sliding_window is 0"):
        jattn.load(tmp_path, tokenizer=False)


def test_sharded_index_wrong_shard_names_the_index(tmp_path):
    """An index that places a tensor in a shard which does not hold it is named, with the shard."""
    from safetensors.numpy import save_file

    from jattn.io.hf import ConversionError, read_state_dict

    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "model-1.safetensors"))
    save_file({"b": np.ones(2, np.float32)}, str(tmp_path / "model-2.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-2.safetensors", "b": "model-2.safetensors"}}))
    with pytest.raises(ConversionError, match=r"(?s)index.json: 1 tensor.*\ba: placed in model-2.safetensors"):
        read_state_dict(tmp_path)
    index.write_text(json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}))
    assert sorted(read_state_dict(tmp_path)) == ["a", "b"]
