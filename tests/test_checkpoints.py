"""Orbax save/restore of the module state, and conversion-cache entries in another layout
(written before the models were NNX modules, flat keys, another format marker) rebuilt, never misread."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import jattn
from analysis_helpers import tiny_bert
from jattn.io import checkpoints
from jattn.models.load import _warned as load_warnings
from jattn.nn import state

TEXTS = ["The cat sat on the mat.", ("A pair,", "of segments.")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("ckpt") / "model", mlm=True, layers=2, heads=4)


@pytest.fixture(scope="module")
def model(folder):
    return jattn.load(folder, use_cache=False)


def _outputs(model):
    res = model.forward(model.tokenize(TEXTS))
    return [np.asarray(res.hidden_states), np.asarray(res.attentions), np.asarray(res.pooler_output),
            np.asarray(model.module.mlm_logits(res.last_hidden_state))]


def _assert_same(a, b):
    for x, y in zip(_outputs(a), _outputs(b)):
        np.testing.assert_array_equal(x, y)


def test_save_restore_module_state(model, tmp_path):
    path = tmp_path / "state"
    checkpoints.save_params(path, model.params)  # an nnx.State
    assert (path / checkpoints.FORMAT_FILE).read_text().strip() == checkpoints.FORMAT
    restored = checkpoints.restore_params(path, model.config)
    assert isinstance(restored, type(model.params))
    want = jax.tree_util.tree_leaves_with_path(state.to_arrays(model.params))
    got = dict(jax.tree_util.tree_leaves_with_path(state.to_arrays(restored)))
    assert len(want) == len(got) > 10
    for key, value in want:
        np.testing.assert_array_equal(got[key], value, err_msg=jax.tree_util.keystr(key))
    again = type(model)(model.config, restored, model.tokenizer, model.source)
    _assert_same(again, model)
    plain = checkpoints.restore_params(path)  # no config: the nested dict of numpy arrays
    assert isinstance(plain["embeddings"]["word"], np.ndarray)


def _entry(cache: Path) -> Path:
    (entry,) = (cache / "converted").iterdir()
    return entry


def _write_pre_nnx(entry: Path, arrays: dict) -> None:
    """What jattn's save_params wrote before the NNX modules (commit 0f838ec): an orbax
    StandardCheckpointer tree, no format marker, no checksum."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(entry, arrays, force=True)


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _flat_layout(entry: Path, arrays: dict) -> None:
    """A sound entry (marker, checksum) whose tree is a flat dict of dotted names."""
    checkpoints.save_params(entry, _flat(arrays))


def _other_marker(entry: Path, arrays: dict) -> None:
    checkpoints.save_params(entry, arrays)
    (entry / checkpoints.FORMAT_FILE).write_text("jattn nnx.State 0\n")
    (entry / checkpoints.CHECKSUM_FILE).write_text(checkpoints.checksum(entry) + "\n")


def _missing_head(entry: Path, arrays: dict) -> None:
    """The current format, but the arrays of another module (the MLM head's decoder bias dropped)."""
    arrays = dict(arrays, mlm_head={k: v for k, v in arrays["mlm_head"].items() if k != "bias"})
    checkpoints.save_params(entry, arrays)


OLD = [("pre-NNX (no marker, no checksum)", _write_pre_nnx, "before its models were NNX modules"),
       ("flat dict layout", _flat_layout, "does not hold this model's parameters"),
       ("another format marker", _other_marker, "'jattn nnx.State 0'"),
       ("another module's arrays", _missing_head, "missing ['mlm_head.bias']")]


@pytest.mark.parametrize("case,write,reason", OLD, ids=[c[0] for c in OLD])
def test_old_cache_is_detected_and_rebuilt(case, write, reason, folder, model, tmp_path, capfd):
    load_warnings.clear()
    cache = tmp_path / "cache"
    jattn.load(folder, cache_dir=cache, use_cache=True)
    entry = _entry(cache)
    checkpoints.remove(entry)
    write(entry, state.to_arrays(model.params))
    again = jattn.load(folder, cache_dir=cache, use_cache=True, verbose=True)
    err = capfd.readouterr().err
    assert "in an older layout" in err and str(entry) in err and reason in err and "converting again" in err, err
    _assert_same(again, model)
    assert (entry / checkpoints.FORMAT_FILE).read_text().strip() == checkpoints.FORMAT  # rewritten
    load_warnings.clear()
    third = jattn.load(folder, cache_dir=cache, use_cache=True, verbose=True)
    captured = capfd.readouterr()
    assert "restored from" in captured.out and "older layout" not in captured.err
    _assert_same(third, model)
