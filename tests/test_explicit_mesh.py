"""Meshes as ``jax.make_mesh`` makes them (Explicit axes) and with Auto axes, on 8 faked CPU devices
(issue #59, item 5): the pure face jitted on a data-sharded batch (forward, gate gradients),
``model.forward`` / ``classify`` and a translation model's ``forward`` / ``generate`` give the
one-device results, and what they return stays sharded over ``data``. A ``model`` axis that does
not divide the heads is an error. The runs: tests/explicit_mesh_worker.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_sharding import _env
from tiny_encoders import save_tiny
from tiny_seq2seq import save_tiny as save_tiny_seq2seq
from tolerance import assert_close, model_terms

WORKER = Path(__file__).with_name("explicit_mesh_worker.py")
MESHES = ("data8", "data2_model4")
# The default suite runs the encoder on data 2 x model 4 (batch and heads split at once); the data-only mesh
# runs the same code with --runslow (its share of the worker's run: about 30 s).
DEFAULT_MESH = "data2_model4"


def mesh_params(test: str) -> list:
    """``test``'s meshes, those other than ``DEFAULT_MESH`` slow (its twin: the same test on the default one)."""
    twin = pytest.mark.slow(twin=f"tests/test_explicit_mesh.py::{test}")
    return [pytest.param(name, id=name, marks=() if name == DEFAULT_MESH else twin) for name in MESHES]
AXES = ("Explicit", "Auto")
BATCH_LEADS = ("pure/last_hidden_state", "forward/last_hidden_state", "forward/pooler_output", "forward/logits",
               "classify/logits")  # (b, ...) results
LAYER_LEADS = ("pure/weights", "forward/attentions")  # (L, b, ...) results


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("explicit")
    bert = save_tiny(tmp / "bert", "bert-2x4", head="cls")  # 4 heads, FFN 48: split by model 4
    marian = save_tiny_seq2seq(tmp / "marian", "marian", seed=1)  # 4 / 2 heads: split by model 2
    mpnet = save_mpnet(tmp / "mpnet")
    out = tmp / "out.npz"
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
    names = MESHES if request.config.getoption("--runslow") else (DEFAULT_MESH,)
    done = subprocess.run([sys.executable, str(WORKER), str(bert), str(marian), str(mpnet), str(out), ",".join(names)],
                          env=env, timeout=900, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    import jattn

    configs = [jattn.load(f, use_cache=False, tokenizer=False).config for f in (bert, marian, mpnet)]
    return dict(np.load(out)), *configs


def save_mpnet(folder):
    """A tiny random MPNet (4 heads, FFN 48) with a relative-position bias large enough to move α."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    from encoder_family_parity import save_random

    torch.manual_seed(0)
    model = MPNetModel(MPNetConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=48, max_position_embeddings=64, layer_norm_eps=1e-5))
    with torch.no_grad():
        model.encoder.relative_attention_bias.weight.normal_(0, 1.0)
    return save_random(model, folder)


@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("mesh", mesh_params("test_encoder_on_mesh_equals_one_device"))
def test_encoder_on_mesh_equals_one_device(runs, mesh, axes):
    """The pure face's forward and gate gradient, model.forward and classify (on the sharded batch
    and on the host batch, the model placed on the mesh): 8 devices give one device's numbers to
    float32 rounding (sums in another order)."""
    got, config, _, _ = runs
    terms = model_terms(config, 9)
    names = [k[len("one/"):] for k in got if k.startswith("one/")]
    assert {"pure/grad", "forward/attentions", "classify/logits", "host/classify/logits"} <= set(names)
    for name in names:
        assert_close(got[f"{mesh}/{axes}/{name}"], got[f"one/{name}"], terms=2 * terms if "grad" in name else terms,
                     err_msg=f"{mesh}/{axes}/{name}")


@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("mesh", mesh_params("test_results_stay_sharded_over_data"))
def test_results_stay_sharded_over_data(runs, mesh, axes):
    """A data-sharded batch gives data-sharded results: (b, ...) on axis 0, (L, b, ...) on axis 1."""
    got, _, _, _ = runs
    for name in BATCH_LEADS:
        assert got[f"{mesh}/{axes}/{name}/spec"].item().startswith("('data',"), name
    for name in LAYER_LEADS:
        assert got[f"{mesh}/{axes}/{name}/spec"].item().startswith("(None, 'data'"), name
    grad = got[f"{mesh}/{axes}/pure/grad/spec"].item()  # (L, H): the heads' split, or replicated
    assert grad == ("(None, 'model')" if "model" in mesh else "()")


@pytest.mark.parametrize("axes", AXES)
def test_translation_model_on_mesh(runs, axes):
    """A translation model on data 4 × model 2: forward and generate (with attentions) equal one
    device's, sharded over data."""
    got, _, config, _ = runs
    terms = model_terms(config, 9, 8)
    for name in ("host/forward/logits", "forward/logits", "forward/cross_attentions", "generate/cross_attentions"):
        assert_close(got[f"translation/{axes}/{name}"], got[f"translation/one/{name}"], terms=terms, err_msg=name)
    np.testing.assert_array_equal(got[f"translation/{axes}/generate/sequences"],
                                  got["translation/one/generate/sequences"])
    assert got[f"translation/{axes}/forward/logits/spec"].item().startswith("('data',")
    assert got[f"translation/{axes}/generate/cross_attentions/spec"].item().startswith("(None, 'data'")


def test_indivisible_model_axis_is_an_error(runs):
    """4 heads over a model axis of 8: an error naming the parameters and the sizes that divide them,
    never a silent replication."""
    got, _, _, _ = runs
    error = got["indivisible/error"].item()
    assert error.startswith("mesh: its 'model' axis of 8 devices does not divide layers.attention.")
    assert "of size 4" in error and "1 or 2 or 4 devices" in error


def test_sharded_batch_needs_a_placed_model(runs):
    got, _, _, _ = runs
    assert got["unplaced/error"].item() == (
        "the batch is sharded over 8 devices, the model's parameters are on 1. Fix: place the model on the "
        "batch's mesh: model.shard(mesh), or jattn.load(..., mesh=mesh)")


@pytest.mark.parametrize("axes", AXES)
def test_mpnet_pure_face_on_mesh(runs, axes):
    """Positions counted after the padding (a gather of sharded ids) and the layers' shared score
    bias (an argument of the Auto region under Explicit axes): one device's numbers, data-sharded."""
    got, _, _, config = runs
    for name in ("pure/last_hidden_state", "pure/weights", "pure/grad"):
        assert_close(got[f"mpnet/{axes}/{name}"], got[f"mpnet/one/{name}"],
                     terms=(2 if "grad" in name else 1) * model_terms(config, 9), err_msg=name)
    assert got[f"mpnet/{axes}/pure/weights/spec"].item().startswith("(None, 'data'")
