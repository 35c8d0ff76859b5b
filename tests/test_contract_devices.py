"""The functional contract on devices: every kernel of tests/test_contract.py, every registered
analysis through the runner and every sweep give on 8 faked CPU devices — meshes made by
``jax.make_mesh`` with Explicit axes (its default) and with Auto axes, the batch over ``data``
and, on data 4 × model 2, the heads and FFN columns over ``model`` — what they give on one
device, up to float32 sums in another order (tests/tolerance.py). The whole check takes minutes
(``--runslow``); a fast twin runs the encoder's norms kernel (an analysis that reads the layers'
internals inside the scan) on the Explicit data × model mesh; the model methods and the pure
forward on such meshes are tests/test_explicit_mesh.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jattn
import tiny_seq2seq
from test_sharding import _env
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms

WORKER = Path(__file__).with_name("contract_devices_worker.py")
EIGHT = "--xla_force_host_platform_device_count=8"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract_devices")
    return (save_tiny(tmp / "bert", "bert-2x4", head="mlm"), save_tiny(tmp / "cls", "bert-2x4", head="cls"),
            tiny_seq2seq.save_tiny(tmp / "marian", "marian"))


def worker(folders, out: Path, part: str, devices: int) -> dict:
    env = _env(**({"XLA_FLAGS": EIGHT} if devices == 8 else {}))
    done = subprocess.run([sys.executable, str(WORKER), *map(str, folders), str(out), part], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out))


def compare(folders, result: dict) -> None:
    one = {k[4:]: v for k, v in result.items() if k.startswith("one/")}
    many = {k[5:]: v for k, v in result.items() if k.startswith("many/")}
    assert set(one) == set(many) and one
    configs = [jattn.load(f, use_cache=False).config for f in (folders[0], folders[2])]
    terms = 2 * max(model_terms(c, 32, 32) for c in configs) + 8 * 32 * 32  # a gradient's chain, a corpus sum
    for key in sorted(one):
        want = np.asarray(one[key], np.float64)
        finite = np.isfinite(want)
        scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
        if key.endswith("patch_heads"):  # differences of the metric: their rounding is relative to it
            scale = float(np.abs(one[key.rsplit("/", 1)[0] + "/patch_metric"]).max())
        assert_close(many[key], want, terms=terms, scale=scale or 1.0, err_msg=key)


def test_one_kernel_on_an_explicit_mesh_equals_one_device(folders, tmp_path):
    result = worker(folders, tmp_path / "fast.npz", "fast", 8)
    assert {k.split("/")[1] for k in result} == {"explicit_data_model"}
    compare(folders, result)


@pytest.mark.slow
@pytest.mark.parametrize("part", ["kernels", "runner"])
def test_eight_devices_equal_one(folders, tmp_path, part):
    result = worker(folders, tmp_path / f"{part}.npz", part, 8)
    assert {k.split("/")[1] for k in result} == {"explicit_data", "explicit_data_model", "auto_data_model"}
    compare(folders, result)


@pytest.mark.slow
def test_every_sweep_on_eight_devices_equals_one(folders, tmp_path):
    result = {
        **worker(folders, tmp_path / "one.npz", "sweeps", 1),
        **worker(folders, tmp_path / "many.npz", "sweeps", 8),
    }
    compare(folders, result)
