"""Conversion: one clear error for every kind of broken checkpoint, the orbax cache, hub ids offline."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import jattn
from jattn.nn.config import ConfigError
from jattn.io.hf import ConversionError
from tiny_encoders import save_tiny


@pytest.fixture
def folder(tmp_path):
    return save_tiny(tmp_path / "m", "bert-2x4")


def _edit(folder, fn):
    state = load_file(folder / "model.safetensors")
    fn(state)
    save_file(state, folder / "model.safetensors")


def test_missing_tensor(folder):
    _edit(folder, lambda s: s.pop("encoder.layer.1.attention.self.key.bias"))
    with pytest.raises(ConversionError, match=r"1 missing tensors:\n\s+encoder.layer.1.attention.self.key.bias"):
        jattn.load(folder, use_cache=False)


def test_renamed_tensor_reports_both_sides(folder):
    def rename(s):
        s["encoder.layer.0.intermediate.dense_renamed.weight"] = s.pop("encoder.layer.0.intermediate.dense.weight")

    _edit(folder, rename)
    with pytest.raises(ConversionError) as err:
        jattn.load(folder, use_cache=False)
    msg = str(err.value)
    assert "missing tensors" in msg and "encoder.layer.0.intermediate.dense.weight" in msg
    assert "unexpected tensors" in msg and "dense_renamed" in msg


def test_wrong_shape(folder):
    _edit(folder, lambda s: s.update({"pooler.dense.bias": np.zeros(31, np.float32)}))
    with pytest.raises(ConversionError, match=r"pooler.dense.bias: has shape \(31,\), expected \(32,\)"):
        jattn.load(folder, use_cache=False)


def test_all_problems_in_one_error(folder):
    def break_all(s):
        s.pop("embeddings.LayerNorm.weight")
        s["extra.weight"] = np.zeros(3, np.float32)
        s["encoder.layer.0.output.dense.bias"] = np.zeros(5, np.float32)

    _edit(folder, break_all)
    with pytest.raises(ConversionError) as err:
        jattn.load(folder, use_cache=False)
    msg = str(err.value)
    assert "embeddings.LayerNorm.weight" in msg and "extra.weight" in msg and "output.dense.bias" in msg


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **changes}))


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "bloom"}, "unsupported model_type 'bloom'"),
    ({"position_embedding_type": "relative_key"}, "'relative_key' is not supported.*transformers ≥ 5"),
    ({"hidden_act": "mish"}, 'hidden_act is "mish"; bert needs one of'),
])
def test_unsupported_config(folder, changes, message):
    _edit_config(folder, **changes)
    with pytest.raises(ConfigError, match=message):
        jattn.load(folder, use_cache=False)


def test_mismatched_tokenizer(folder):
    _edit_config(folder, vocab_size=1000)
    _edit(folder, lambda s: s.update({"embeddings.word_embeddings.weight":
                                      s["embeddings.word_embeddings.weight"][:1000]}))
    with pytest.raises(ConfigError, match="tokenizer .* another model"):
        jattn.load(folder, use_cache=False)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        jattn.load(tmp_path, use_cache=False)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ConfigError, match="lacks vocab_size"):
        jattn.load(tmp_path, use_cache=False)
    config = save_tiny(tmp_path / "m", "bert-2x4") / "config.json"
    (tmp_path / "config.json").write_text(config.read_text())
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        jattn.load(tmp_path, use_cache=False)


def test_hub_id_offline_fails_fast(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set.*Fix"):
        jattn.load("some-org/some-model-that-is-not-cached")
    assert time.monotonic() - start < 30  # generous: it must not wait on the network


def test_safetensors_are_not_cached_by_default(folder, tmp_path):
    jattn.load(folder, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_pickle_checkpoints_are_cached_by_default(tmp_path):
    folder = save_tiny(tmp_path / "bin", "bert-2x4", safe=False)
    first = jattn.load(folder, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "converted").iterdir())) == 1
    second = jattn.load(folder, cache_dir=tmp_path / "cache")
    for a, b in zip(jax_leaves(first.params), jax_leaves(second.params)):
        np.testing.assert_array_equal(a, b)


def test_conversion_cache_round_trip(folder, tmp_path):
    first = jattn.load(folder, cache_dir=tmp_path / "cache", use_cache=True)
    entries = list((tmp_path / "cache" / "converted").iterdir())
    assert len(entries) == 1 and entries[0].name.startswith("bert-")
    second = jattn.load(folder, cache_dir=tmp_path / "cache", use_cache=True)
    for a, b in zip(*(jax_leaves(m.params) for m in (first, second))):
        np.testing.assert_array_equal(a, b)
    # A changed checkpoint gets a new key, not the stale cache.
    _edit(folder, lambda s: s.update({"pooler.dense.bias": s["pooler.dense.bias"] + 1}))
    third = jattn.load(folder, cache_dir=tmp_path / "cache", use_cache=True)
    assert len(list((tmp_path / "cache" / "converted").iterdir())) == 2
    np.testing.assert_allclose(np.asarray(third.params["pooler"]["bias"]),
                               np.asarray(first.params["pooler"]["bias"]) + 1)


def jax_leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]
