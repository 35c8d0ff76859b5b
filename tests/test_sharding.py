"""8 faked CPU devices (data 8, data 2 × model 4, model 8 meshes) and 2 processes (gloo) give the
1-device forward, internals, norms and runner statistics; parameters are really split over ``model``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis_helpers import tiny_bert
from tolerance import ULPS, assert_close, layer_terms

WORKER = Path(__file__).with_name("sharding_worker.py")


def _env(**extra):
    """The workers' environment: only the XLA flags given here, besides the suite's (conftest.SUITE_XLA_FLAGS)."""
    from conftest import SUITE_XLA_FLAGS

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(WORKER.parent), **extra)
    env["XLA_FLAGS"] = " ".join([*SUITE_XLA_FLAGS, *extra.get("XLA_FLAGS", "").split()])
    return env


def _run_faked(args: list[str], timeout: int) -> None:
    """``sharding_worker.py ARGS`` with 8 faked devices. XLA:CPU runs the devices' programs on one
    pool with as many threads as devices; if a device runs two independent collectives at once,
    the last device can be left without a thread while the others wait for it at a rendezvous,
    until XLA aborts the process ("Termination timeout", SIGABRT). That rare deadlock of the
    runtime, and only it, earns one more attempt; any other failure fails the test."""
    cmd = [sys.executable, str(WORKER), *args]
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
    for attempt in (1, 2):
        done = subprocess.run(cmd, timeout=timeout, env=env, capture_output=True, text=True)
        if done.returncode == 0:
            return
        deadlock = done.returncode == -signal.SIGABRT and "Termination timeout" in done.stderr
        if not (deadlock and attempt == 1):
            raise AssertionError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-3000:]}")


def test_only_the_runtime_deadlock_is_run_again(monkeypatch):
    """_run_faked repeats a run once after XLA's rendezvous abort, never after another failure."""
    calls = []

    def fake(codes):
        def run(cmd, **kw):
            calls.append(cmd)
            code, err = codes[len(calls) - 1]
            return subprocess.CompletedProcess(cmd, code, "", err)
        return run

    abort = (-signal.SIGABRT, "F1127 rendezvous.cc:161] Termination timeout for `all gather ...`")
    monkeypatch.setattr(subprocess, "run", fake([abort, (0, "")]))
    _run_faked(["x"], timeout=1)
    assert len(calls) == 2
    for codes, runs in (([abort, abort], 2), ([(1, "Traceback ... ValueError")], 1),
                        ([(-signal.SIGABRT, "double free")], 1)):
        calls.clear()
        monkeypatch.setattr(subprocess, "run", fake(codes))
        with pytest.raises(AssertionError, match="exited with"):
            _run_faked(["x"], timeout=1)
        assert len(calls) == runs


def _terms(layers: int, heads: int, rows: int) -> int:
    """tiny_bert(layers, heads) (D = 8·heads, FFN 32) on ≤ 16 tokens, forward and backward
    (AttentionGradient), then sums over ``rows`` token rows of the corpus (tests/tolerance.py)."""
    return 2 * (layer_terms(layers, 8 * heads, 16, 32) + 8 * heads) + rows


def _compare(got: dict, want: dict, names, terms: int):
    """Sharded runs split the batch and the sums: other shapes, float32 sums in other orders."""
    for k in names:
        a, b = got[k], want[k]
        if k.startswith("meta_"):
            np.testing.assert_array_equal(a, b, err_msg=k)
            continue
        if k == "js_mds":  # an embedding is defined up to rotation/reflection: compare its distances
            a, b = (np.linalg.norm(x[:, None] - x[None], axis=-1) for x in (a, b))
        assert_close(a, b, terms=terms, ulps=2 * ULPS if k == "js_mds" else ULPS, err_msg=k)  # MDS's gain: ≤ 2


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    """One subprocess with 8 faked devices: the 1-device and the 8-device results."""
    tmp = tmp_path_factory.mktemp("shard")
    folder = tiny_bert(tmp / "model", mlm=True, layers=1, heads=2)
    out = tmp / "devices.npz"
    _run_faked([str(folder), str(out), "devices"], timeout=600)
    data = np.load(out)
    one = {k[4:]: data[k] for k in data if k.startswith("one_")}
    many = {k[5:]: data[k] for k in data if k.startswith("many_")}
    return folder, one, many


def test_eight_devices_match_one(eight_devices):
    _, one, many = eight_devices
    assert int(one["meta_devices"]) == 1 and int(many["meta_devices"]) == 8
    stats = [k for k in one if not k.startswith("meta_")]
    assert {"attn_to_sep", "entropy", "js_distance", "grad_to_sep"} <= set(stats)
    _compare(many, one, stats + ["meta_segments", "meta_tokens"], _terms(1, 2, 10 * 16))


MESHES = {"data8": 1, "data2_model4": 4, "model8": 8}  # mesh -> size of its model axis
# The default suite runs data 2 x model 4, which splits the batch and the heads at once; the meshes with one
# axis only (data 8, model 8) run the same placement and forward code with --runslow (their fixture's run: 45 s).
DEFAULT_MESH = "data2_model4"


def mesh_params(test: str) -> list:
    """``test``'s parameters: every mesh, those other than ``DEFAULT_MESH`` slow (its twin: the default one)."""
    twin = pytest.mark.slow(twin=f"tests/test_sharding.py::{test}[{DEFAULT_MESH}]")
    return [pytest.param(name, id=name, marks=() if name == DEFAULT_MESH else twin) for name in MESHES]
SPLIT = {  # parameter -> the axis a model axis splits (heads; FFN columns; a token table's width); every other
    # one is replicated
    "embeddings.word": 1,
    "layers.attention.query.kernel": 2,
    "layers.attention.key.kernel": 2,
    "layers.attention.value.kernel": 2,
    "layers.attention.query.bias": 1,
    "layers.attention.key.bias": 1,
    "layers.attention.value.bias": 1,
    "layers.attention.out.kernel": 1,
    "layers.ffn_in.kernel": 2,
    "layers.ffn_in.bias": 1,
    "layers.ffn_out.kernel": 1,
}


@pytest.fixture(scope="module")
def meshes(tmp_path_factory, request):
    """One subprocess with 8 faked devices: the 1-device results and those of each mesh run
    (``DEFAULT_MESH``; every mesh with --runslow)."""
    tmp = tmp_path_factory.mktemp("meshes")
    folder = tiny_bert(tmp / "model", mlm=True, layers=2, heads=8)  # 8 heads, FFN 32: split by 4 and 8
    out = tmp / "meshes.npz"
    names = list(MESHES) if request.config.getoption("--runslow") else [DEFAULT_MESH]
    _run_faked([str(folder), str(out), "meshes", ",".join(names)], timeout=900)
    return dict(np.load(out))


@pytest.mark.parametrize("name", mesh_params("test_mesh_matches_one_device"))
def test_mesh_matches_one_device(meshes, name):
    """Forward outputs, every internal, jattn.norms (with the residual extension) and the runner's
    statistics on the mesh equal one device's up to float32 sums in another order (per array, the
    float32 tolerance of tests/tolerance.py relative to its largest magnitude)."""
    one = {k[4:]: v for k, v in meshes.items() if k.startswith("one/") and not k.startswith("one/placed/")}
    assert {"forward/hidden_states", "internals/weights", "norms/summed_norm", "norms/mixing_attnresln_n",
            "pure/last_hidden_state", "entropy", "grad_to_sep"} <= set(one)
    for k, want in one.items():
        got = meshes[f"{name}/{k}"]
        if k == "meta_devices":
            assert int(want) == 1 and int(got) == 8
        else:
            _compare({k: got}, {k: want}, [k], _terms(2, 8, 8 * 16))


def test_chunked_layers_keep_the_batch_on_its_devices(meshes):
    """Layers run in strided chunks of the batch (``jattn.nn.engine.over_chunks``): on a data-only
    mesh each chunk holds rows of every device, so each device computes its own 2 rows, one a
    chunk (16 token rows a product; contiguous chunks made every device compute 2 rows of each
    chunk), and the forward compiles without any collective."""
    assert int(meshes["data8_chunked/product_rows"]) == 16
    assert int(meshes["data8_chunked/collectives"]) == 0


@pytest.mark.parametrize("name", mesh_params("test_parameters_are_placed_by_their_metadata"))
def test_parameters_are_placed_by_their_metadata(meshes, name):
    """Each parameter lives on all 8 devices; heads and FFN columns are split over the model axis
    (device 0 holds 1/model of them), everything else is replicated."""
    prefix = f"{name}/placed/"
    placed = {k[len(prefix):]: v for k, v in meshes.items() if k.startswith(prefix)}
    assert set(SPLIT) <= set(placed) and len(placed) > len(SPLIT)
    for path, v in placed.items():
        full = meshes[f"one/placed/{path}"]
        assert full[0] == 1 and v[0] == 8, path
        want = list(full[1:])
        if path in SPLIT:
            want[SPLIT[path]] //= MESHES[name]
        assert list(v[1:]) == want, f"{name}: {path} shard {v[1:]} of {full[1:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_together(commands: list[list[str]], env: dict) -> None:
    """Start every command at once (the processes of one distributed run); all must succeed."""
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in commands]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=600)[0])
        finally:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)


def test_two_processes_match_one(eight_devices, tmp_path):
    folder, one, _ = eight_devices
    out = tmp_path / "processes.npz"
    address = f"127.0.0.1:{_free_port()}"
    _run_together([[sys.executable, str(WORKER), str(folder), str(out), "process", address, "2", str(i)]
                   for i in range(2)], _env())
    got = dict(np.load(out))
    assert int(got["meta_processes"]) == 2
    stats = [k for k in one if not k.startswith("meta_")]
    _compare(got, one, stats + ["meta_segments", "meta_tokens"], _terms(1, 2, 10 * 16))


# the same two-process run (gloo collectives, run_corpus over both processes' devices) as the twin; this one
# adds the command's --coordinator/--num-processes/--process-id, which only hand those to jax.distributed
@pytest.mark.slow(twin="tests/test_sharding.py::test_two_processes_match_one")
def test_cli_two_processes_match_one_process(tmp_path):
    """``jattn analyze --coordinator … --num-processes 2 --process-id i``, launched twice, writes
    (from process 0) the results of a single-process ``jattn analyze`` on the same corpus."""
    import json

    folder = tiny_bert(tmp_path / "model", layers=1, heads=2)
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat.\nAlice met Bob, then left.\tHe stayed.\nShort.\n"
                      "A fourth line, with a comma.\nAnd a fifth one.\n")

    def analyze(out, *extra):
        return [sys.executable, "-m", "jattn.cli", "analyze", "--model", str(folder), "--input", str(corpus),
                "--methods", "weights,entropy,js", "--batch-size", "2", "--out", str(out), *extra]

    env = _env(JATTN_CACHE=str(tmp_path / "cache"))
    subprocess.run(analyze(tmp_path / "one"), check=True, timeout=600, env=env, capture_output=True)
    address = f"127.0.0.1:{_free_port()}"
    _run_together([analyze(tmp_path / "two", "--coordinator", address, "--num-processes", "2", "--process-id", str(i))
                   for i in range(2)], env)
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    assert two["meta"]["processes"] == 2 and one["meta"]["processes"] == 1
    assert two["meta"]["segments"] == one["meta"]["segments"] == 5
    names = [k for k in one if k not in ("meta", "js_mds")]
    _compare({k: np.array(two[k]["value"], float) for k in names},
             {k: np.array(one[k]["value"], float) for k in names}, names, _terms(1, 2, 5 * 16))
