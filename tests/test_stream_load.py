"""The streaming load (``jattn.io.tensors``, ``jattn.models.load.streamed``): a sharded safetensors
checkpoint read tensor by tensor onto its devices equals the eager conversion of the whole state
dict bit for bit, keeps the checkpoint's dtype (bfloat16 stays bfloat16; ``dtype=`` chooses), fused
and joined tensors (GPT-2's c_attn, Llama's gate/up) read lazily, a mesh gets each parameter with
the sharding ``model.shard`` gives, and host memory while loading stays near the checkpoint's
size (a subprocess measures it on a Llama-shaped checkpoint: ``benchmarks/bench_scale.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jattn
from jattn import families
from jattn.io import tensors
from jattn.io.hf import ConversionError, open_state_dict, read_config, read_state_dict

ROOT = Path(__file__).resolve().parents[1]


def save_llama(folder: Path, dtype: str = "bfloat16", shard: str = "20KB", layers: int = 3) -> Path:
    """A tiny random Llama (GQA, gated FFN, untied head) saved in ``dtype`` as several shards."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=48, vocab_size=96, max_position_embeddings=64, tie_word_embeddings=False)
    LlamaForCausalLM(config).to(getattr(torch, dtype)).save_pretrained(folder, max_shard_size=shard)
    return folder


def eager(folder: Path) -> dict:
    """The whole state dict read and converted on the host (the eager path) in its own dtypes."""
    spec = families.get(read_config(folder)["model_type"])
    config = spec.config_from_hf(read_config(folder))
    return spec.convert({k: np.asarray(v) for k, v in open_state_dict(folder).items()}, config, str(folder))


def leaves(tree) -> dict:
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory):
    return save_llama(tmp_path_factory.mktemp("llama-bf16"))


def test_sharded_bfloat16_checkpoint_streams_bit_exact_in_its_dtype(llama_bf16):
    assert len(list(llama_bf16.glob("*.safetensors"))) > 1  # the index is followed across shards
    model = jattn.load(llama_bf16, tokenizer=False)
    got, want = leaves(nnx.to_pure_dict(model.params)), leaves(eager(llama_bf16))
    assert got.keys() == want.keys()
    for k, a in got.items():
        assert a.dtype == want[k].dtype == jnp.bfloat16, k
        np.testing.assert_array_equal(a.view(np.uint16), want[k].view(np.uint16), err_msg=k)


def test_dtype_option_casts_and_float32_checkpoint_stays_float32(llama_bf16, tmp_path):
    model = jattn.load(llama_bf16, tokenizer=False, dtype=jnp.float32)
    assert {x.dtype for x in jax.tree.leaves(model.params)} == {jnp.dtype(jnp.float32)}
    f32 = jattn.load(save_llama(tmp_path / "f32", "float32"), tokenizer=False)
    assert {x.dtype for x in jax.tree.leaves(f32.params)} == {jnp.dtype(jnp.float32)}


def test_bfloat16_parameters_compute_in_float32_like_their_float32_copy(llama_bf16):
    """Parameters in bfloat16, arithmetic in float32 (the default compute dtype): the forward equals
    the forward of the same weights held in float32 (the cast is exact), to float32 rounding."""
    from tolerance import assert_close, model_terms

    bf16 = jattn.load(llama_bf16, tokenizer=False)
    f32 = jattn.load(llama_bf16, tokenizer=False, dtype=jnp.float32)
    batch = {"input_ids": np.array([[1, 5, 9, 3, 7]]), "attention_mask": np.ones((1, 5), np.int32)}
    a, b = bf16.forward(batch), f32.forward(batch)
    assert a.last_hidden_state.dtype == jnp.float32
    assert_close(a.last_hidden_state, b.last_hidden_state, terms=model_terms(f32.config, 5))


def test_fused_and_joined_tensors_read_lazily_only_their_slice():
    calls = []
    whole = np.arange(24, dtype=np.float32).reshape(2, 12)
    lazy = tensors.Lazy(whole.shape, whole.dtype, lambda index: calls.append(index) or whole[() if index is None
                                                                                        else index], "qkv")
    q, k, v = tensors.split(lazy, 3, axis=-1)
    np.testing.assert_array_equal(np.asarray(k), whole[:, 4:8])
    assert calls == [(slice(None), slice(4, 8))]  # only k's columns were read
    joined = tensors.concat([q, v], axis=0)
    assert joined.shape == (4, 4)
    np.testing.assert_array_equal(np.asarray(joined), np.concatenate([whole[:, :4], whole[:, 8:]]))


def test_bits_transforms_equal_value_transforms():
    x = (np.arange(60, dtype=np.float32).reshape(6, 10) / 7).astype(jnp.bfloat16)
    move = lambda w: np.pad(w.T.reshape(5, 2, 6), [(0, 0), (0, 1), (0, 0)])  # noqa: E731
    np.testing.assert_array_equal(tensors.on_bits(move, x).astype(np.float32), move(x.astype(np.float32)))


@pytest.mark.parametrize("shape, axes, index", [
    ((56, 20), (1, 0), np.s_[:, 5:10]),  # a transposed kernel's column slice
    ((2, 56, 20), (2, 0, 1), np.s_[:, :, 7:14]),  # a joined gate/up kernel's slice: two transposes
    ((20, 8, 4), (1, 2, 0), np.s_[2:4]),  # the (heads, head dim, width) output kernel's heads: one transpose
    ((30, 1, 7), (2, 1, 0), np.s_[...]), ((0, 5), (1, 0), np.s_[...]), ((60, 70), (0, 1), np.s_[:, 3:30]),
    ((3, 4, 5, 6), (3, 1, 0, 2), np.s_[1:, :, 2:4])])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float32])
def test_tiled_copies_of_strided_slices_equal_plain_copies(shape, axes, index, dtype, monkeypatch):
    """``copy_into`` (tiles of the two axes it reads and writes along, other axes looped over, on a
    thread pool) copies every element of transposed tensors and their slices, bit for bit."""
    from jattn.io import host_copy

    monkeypatch.setattr(host_copy, "TILE", 4)  # several tiles and runs of tiles at these sizes
    src = np.random.default_rng(0).standard_normal(shape).astype(dtype).transpose(axes)[index]
    dst = np.empty(src.shape, dtype)
    host_copy.copy_into(dst, src)
    np.testing.assert_array_equal(dst.view(np.uint8), np.ascontiguousarray(src).view(np.uint8))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16, np.float32])
def test_nonfinite_count_on_bits_equals_isfinite(dtype):
    x = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3e4, 65504.0, -0.0], np.float32).astype(dtype)
    assert tensors.nonfinite(x) == int((~np.isfinite(x.astype(np.float32))).sum()) == 3


def test_nonfinite_weight_is_named_before_the_model_is_built(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = save_llama(tmp_path / "nan", "float32", shard="10GB")
    path = folder / "model.safetensors"
    state = load_file(path)
    state["model.layers.1.mlp.down_proj.weight"][0, 0] = np.nan
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(ConversionError, match=r"model\.layers\.1\.mlp\.down_proj\.weight \(1 values\)"):
        jattn.load(folder, tokenizer=False)


def test_a_finite_weight_out_of_the_requested_dtypes_range_is_named_as_such(tmp_path):
    """A float32 value beyond float16's 65,504 is finite in the checkpoint: loading with
    dtype=float16 names the cast and the fix, not a corrupt download."""
    from safetensors.numpy import load_file, save_file

    folder = save_llama(tmp_path / "wide", "float32", shard="10GB")
    path = folder / "model.safetensors"
    state = load_file(path)
    state["model.layers.1.mlp.down_proj.weight"][0, :2] = 1e6
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(ConversionError, match=r"down_proj\.weight is finite in the checkpoint but 2 of its values "
                                              r"exceed float16's range\. Fix: load with a wider dtype="):
        jattn.load(folder, tokenizer=False, dtype=jnp.float16, use_cache=False)


def test_eager_state_dict_conversion_is_unchanged(llama_bf16):
    """Callers that convert a read state dict (exports, tests) still get host numpy arrays."""
    spec = families.get("llama")
    config = spec.config_from_hf(read_config(llama_bf16))
    params = spec.convert(read_state_dict(llama_bf16), config, "x")
    assert all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in jax.tree.leaves(params))


MESH_PROBE = r"""
import json, sys, jax, numpy as np, jattn
mesh = jax.make_mesh((1, 2), ("data", "model"))
folder, cache = sys.argv[1], sys.argv[2]
placed = jattn.load(folder, tokenizer=False).shard(mesh)
streamed = jattn.load(folder, tokenizer=False, mesh=mesh)
jattn.load(folder, tokenizer=False, use_cache=True, cache_dir=cache)  # converted into the orbax cache
restored = jattn.load(folder, tokenizer=False, use_cache=True, cache_dir=cache, mesh=mesh, verbose=True)
rows = []
for name, model, like in (("streamed", streamed, placed), ("restored", restored, placed)):
    for (p, x), y in zip(jax.tree_util.tree_flatten_with_path(model.params)[0], jax.tree.leaves(like.params)):
        rows.append([name, jax.tree_util.keystr(p), x.sharding == y.sharding,
                     bool(np.array_equal(np.asarray(x), np.asarray(y))), len(x.sharding.device_set)])
print(json.dumps(rows))
"""


def test_mesh_load_places_each_parameter_as_shard_does(llama_bf16, tmp_path):
    """Streamed from safetensors and restored from the orbax conversion cache, each straight onto a
    2-device mesh in the checkpoint's dtype: every parameter placed and valued as ``model.shard``
    places the same parameters."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", MESH_PROBE, str(llama_bf16), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "restored from" in out.stdout  # the second cached load read orbax's files, not the checkpoint
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert {name for name, *_ in rows} == {"streamed", "restored"}
    assert all(same_sharding and same for _, _, same_sharding, same, _ in rows), rows
    assert any("kernel" in key and devices == 2 for _, key, *_, devices in rows)


DEVICES_PROBE = r"""
import json, sys, jax, numpy as np, jattn
mesh = jax.make_mesh((4, 2), ("data", "model"))  # 8 devices: each slice of a sharded leaf held by 4, the rest by all
one = jattn.load(sys.argv[1], tokenizer=False)
placed = one.shard(mesh)
streamed = jattn.load(sys.argv[1], tokenizer=False, mesh=mesh)
rows = []
for (p, x), y, z in zip(jax.tree_util.tree_flatten_with_path(streamed.params)[0], jax.tree.leaves(one.params),
                        jax.tree.leaves(placed.params)):
    y = np.asarray(y).view(np.uint16)
    rows.append([jax.tree_util.keystr(p), str(x.dtype), x.sharding == z.sharding, len(x.sharding.device_set),
                 all(np.array_equal(np.asarray(s.data).view(np.uint16), y[s.index]) for s in x.addressable_shards),
                 len({s.data.unsafe_buffer_pointer() for s in x.addressable_shards}),
                 len({str(s.index) for s in x.addressable_shards})])
scale = next(x for x in jax.tree.leaves(streamed.params) if x.ndim == 2 and x.sharding.is_fully_replicated)
a, b = (s.data for s in scale.addressable_shards[:2])  # two devices' arrays of one host buffer
before = np.asarray(b).copy()
jax.jit(lambda v: v.at[0].set(7), donate_argnums=0)(a).block_until_ready()  # written in place if it could be
print(json.dumps([rows, bool(np.array_equal(np.asarray(b), before))]))
"""


def test_eight_devices_hold_the_one_device_values_sharing_each_slice_once(llama_bf16):
    """On 8 faked CPU devices (data 4 x model 2) every parameter is placed with the sharding
    ``model.shard`` gives, in bfloat16, each device's slice bit for bit the 1-device load's; the
    devices holding the same slice (replicated leaves: all 8) share one host buffer, and a jitted
    call that donates one device's array leaves the others' values as they were."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", DEVICES_PROBE, str(llama_bf16)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, kept = json.loads(out.stdout.strip().splitlines()[-1])
    assert kept and rows
    for key, dtype, same_sharding, devices, same, buffers, slices in rows:
        assert dtype == "bfloat16" and same_sharding and devices == 8 and same and buffers == slices, key
    assert {slices for *_, slices in rows} == {1, 2}  # replicated leaves and leaves split over the model axis


# The benchmark's timing and reporting are one code path: the default suite runs it on the decoder LM; the
# encoder and the translation model (each loaded by jattn in the analyses test below) with --runslow.
LOADERS_TWIN = pytest.mark.slow(
    twin="tests/test_stream_load.py::test_bench_scale_measures_both_loaders_on_a_tiny_checkpoint[llama]")


@pytest.mark.parametrize("family", ["llama", pytest.param("xlm-roberta", marks=LOADERS_TWIN),
                                    pytest.param("nllb", marks=LOADERS_TWIN)])
def test_bench_scale_measures_both_loaders_on_a_tiny_checkpoint(tmp_path, family):
    """A decoder LM, an encoder and a translation model: HF's loader and jattn's (stream and orbax
    cache) each load the sharded bfloat16 checkpoint and run its first forward, keeping bfloat16."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_scale
    finally:
        sys.path.pop(0)
    result = bench_scale.run("tiny", [1], tmp_path, family=family)
    who = {r["who"] for r in result["rows"]}
    assert who == {"hf", "jattn", "orbax"} and result["shards"] > 1
    assert all(r["dtypes"] in (["bfloat16"], ["torch.bfloat16"]) for r in result["rows"])


PROCESS_PROBE = r"""
import json, sys, jax, numpy as np
folder, address, n, i, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(address, num_processes=n, process_id=i)
import jattn
from flax import nnx
mesh = jax.make_mesh((2, 2), ("data", "model"))  # 4 devices over 2 processes; 2 KV heads split by 2
streamed = nnx.to_pure_dict(jattn.load(folder, tokenizer=False, mesh=mesh).params)
whole = nnx.to_pure_dict(jattn.load(folder, tokenizer=False).params)  # this process's own full copy
rows = []
for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(streamed)[0], jax.tree.leaves(whole)):
    y = np.asarray(y)
    rows.append([jax.tree_util.keystr(path), len(x.sharding.device_set), len(x.addressable_shards),
                 all(np.array_equal(np.asarray(s.data), y[s.index]) for s in x.addressable_shards)])
json.dump(rows, open(f"{out}.{i}", "w"))
jax.distributed.shutdown()
"""


def test_two_processes_each_place_their_own_slices(llama_bf16, tmp_path):
    """Multi-host loading: two processes of 2 CPU devices each load onto one 2 x 2 mesh; each
    process places only its devices' slices (its addressable shards), and they equal the same
    slices of the whole parameter."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "PYTHONPATH": str(ROOT),
           "JAX_PLATFORMS": "cpu"}
    out = tmp_path / "rows"
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS_PROBE, str(llama_bf16), address, "2", str(i), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
    for i in range(2):
        rows = json.loads(Path(f"{out}.{i}").read_text())
        assert rows and all(devices == 4 and local == 2 and same for _, devices, local, same in rows), rows


SLICE_PROBE = r"""
import json, jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from jattn.io import tensors
mesh = jax.make_mesh((2,), ("model",))
whole = np.arange(2 * 6 * 4, dtype=np.float32).reshape(2, 6, 4)  # (L, out, in) as a checkpoint holds it
def lazy(i, x):
    def read(index):
        raise AssertionError("a sharded leaf was read whole")
    return tensors.Lazy(x.shape, x.dtype, read, f"w{i}", view=lambda populate: x)
stacked = tensors.Stacked([tensors.Pending(lazy(i, whole[i]), lambda w: w.T, f"w{i}") for i in range(2)])
placed = tensors.place({"w": stacked}, sharding=lambda path: NamedSharding(mesh, P(None, None, "model")))["w"]
same = bool(np.array_equal(np.asarray(placed), whole.transpose(0, 2, 1)))
bad = whole.copy(); bad[1, 5, 0] = np.nan  # in the second device's slice of layer 1
try:
    tensors.place({"w": tensors.Stacked([tensors.Pending(lazy(i, bad[i]), lambda w: w.T, f"w{i}") for i in range(2)])},
                  sharding=lambda path: NamedSharding(mesh, P(None, None, "model")))
    named = None
except tensors.NonFinite as e:
    named = e.key
print(json.dumps([same, len(placed.sharding.device_set), named]))
"""


def test_sharded_leaves_are_placed_slice_by_slice_from_a_view():
    """On a mesh each device's slice is copied from the tensor's view (never read whole: a process
    of several reads only its own slices), transformed, and checked finite: a NaN in one slice is
    named by its checkpoint key."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SLICE_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, 2, "w1"]


@pytest.mark.parametrize("family", ["llama", "xlm-roberta", "nllb"])
def test_bench_scale_analyses_run_each_case_on_a_tiny_checkpoint(tmp_path, family):
    """``bench_scale.py --analyses``'s cases at the tiny shape, in this process (the benchmark runs each
    in a fresh one): the forward with attention weights, importance and patching, jattn and HF, agree
    where both compute the same numbers; a forward whose kept α cannot fit is recorded, not run; the
    memory plot draws. Numbers are not judged."""
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
    try:
        import bench_scale
        import bench_scale_analyses as A
        import bench_scale_plot
    finally:
        del sys.path[:2]
    folder = bench_scale.make_checkpoint("tiny", tmp_path, family)
    spec = bench_scale.SHAPES[family]["tiny"]
    base = dict(folder=str(folder), family=family, config=spec, devices=1, calls=1)
    whos = ["hf", "jattn"] + (["jattn-layerwise"] if family == "llama" else [])
    rows = [{"case": "forward", "who": w, "n": 16, "devices": 1, "gflop": A.forward_gflop(family, spec, 16),
             "kept_weights_bytes": A.kept_weights_bytes(family, spec, 16), "layer_weights_bytes": 1,
             **A.child({**base, "who": w, "case": "forward", "n": 16, "b": 1})} for w in whos]
    for case, n, b in (("importance", 16, 1), ("patching", 8, 2)):
        rows += [{"case": case, "who": w, "n": n, "b": b, "devices": 1, "forwards": 3,
                  **A.child({**base, "who": w, "case": case, "n": n, "b": b})} for w in ("hf", "jattn")]
    A.compare(rows, rate=1.0)
    assert all(r["seconds"] > 0 and r["peak_above_baseline"] >= 0 for r in rows)
    assert all(r["max_abs_diff_vs_hf"] < 1e-4 for r in rows if r["case"] != "forward" and r["who"] == "jattn")
    too_long = A.forward_row(folder, family, spec, "hf", 10**6, 1, 1)  # every layer's α: terabytes
    assert "needs" in too_long["not_run"] and "seconds" not in too_long
    result = {"family": family, "shape": "tiny", "config": spec, "rows": rows + [dict(rows[0], n=32)]}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / f"bench_scale_analyses_{family}_tiny.json").write_text(json.dumps(result))
    assert bench_scale_plot.plot(tmp_path / "results", tmp_path / "memory.png").stat().st_size > 0
