"""Subprocess for tests/test_sharding.py (not a test module).

    python sharding_worker.py MODEL OUT devices       # 1 device vs all (faked) devices -> OUT.npz
    python sharding_worker.py MODEL OUT meshes NAMES  # 1 device vs the meshes NAMES (comma-separated: data8,
                                                      # data2_model4, model8) -> OUT.npz
    python sharding_worker.py MODEL OUT process ADDR N I   # process I of N, gloo collectives
"""

from __future__ import annotations

import dataclasses

import sys

import jax
import numpy as np


SHORT = ["The cat sat.", ("Alice met Bob,", "then left."), "Short.", "One, two, three.", "Hi there.",
         ("Yes.", "No, never."), "Dogs bark.", "A b c d e f, g.", "Paris is big.", "Stop."]  # ≤ 16 tokens: one bucket


def statistics(model, devices, batch_size, mesh=None):
    from jattn.analyses.distance import JSDistance
    from jattn.analyses.grad import AttentionGradient
    from jattn.analyses.weights import ClassAttention, Entropy
    from jattn.runner import run_corpus

    methods = [ClassAttention(), Entropy(), JSDistance(), AttentionGradient(model)]
    res = run_corpus(model, SHORT, methods, batch_size=batch_size, devices=devices, mesh=mesh, progress=False)
    return {k: np.asarray(s.value) for k, s in res.statistics.items()} | {
        "meta_" + k: np.asarray(res.meta[k]) for k in ("segments", "tokens", "devices", "processes")}


MESHES = {"data8": ((8,), ("data",)), "data2_model4": ((2, 4), ("data", "model")), "model8": ((8,), ("model",))}


def mesh_of(name):
    shape, axes = MESHES[name]
    return jax.make_mesh(shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(axes))


def corpus_mesh(name):
    """run_corpus needs a ``data`` axis: the model-only mesh as (data 1, model 8)."""
    shape, axes = MESHES[name]
    return mesh_of(name) if "data" in axes else jax.make_mesh((1, *shape), ("data", *axes))


def placements(model) -> dict:
    """Each parameter's devices and the shape of the shard device 0 holds: 'placed/<path>' -> (devices, *shape)."""
    from flax import nnx

    out = {}
    for path, x in jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(model.params)):
        name = ".".join(str(getattr(k, "key", k)) for k in path)
        out["placed/" + name] = np.array([len(x.sharding.device_set), *x.addressable_shards[0].data.shape])
    return out


def forward_all(model, batch, mesh=None) -> dict:
    """Model.forward (every internal) and the pure face jitted with the batch sharded over ``data``."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jattn.nn import encoder

    res = model.forward(batch)
    out = {"forward/last_hidden_state": res.last_hidden_state, "forward/hidden_states": res.hidden_states,
           "forward/pooler_output": res.pooler_output,
           **{"internals/" + k: v for k, v in res.internals.items()}}
    inputs = {k: np.asarray(v, np.int32) for k, v in batch.inputs().items()}
    if mesh is not None and "data" in mesh.axis_names:
        inputs = jax.device_put(inputs, NamedSharding(mesh, P("data")))
    pure = jax.jit(encoder.forward, static_argnums=1, static_argnames="internals")
    outputs, _ = pure(model.params, model.config, inputs, internals=None)
    out["pure/last_hidden_state"] = outputs["last_hidden_state"]
    return {k: np.asarray(v) for k, v in out.items() if v is not None}  # no pooler in a masked-LM checkpoint


def norm_maps(model, batch) -> dict:
    import jattn

    return {"norms/" + k: np.asarray(v) for k, v in jattn.norms(model, batch, residual=True)["encoder"].items()}


COLLECTIVES = ("all-gather(", "all-to-all(", "collective-permute(", "all-reduce(", "reduce-scatter(")


def chunked_program(model, mesh) -> dict:
    """The lean forward of 16 sequences × 16 tokens sharded over ``data`` (8 devices: 2 rows
    each), its layers in 2 strided chunks: the collectives XLA compiles into each device's
    program, and the most token rows any of its 2-D products takes (1 row × 16 tokens if every
    device works on its own rows only)."""
    import re

    from jax.sharding import NamedSharding, PartitionSpec as P

    from jattn.nn import encoder, engine

    config = dataclasses.replace(model.config, chunk_rows=128)
    assert engine.chunk_count(16, 16, config.chunk_rows) == 2
    ids = np.full((16, 16), 1000, np.int32)
    inputs = jax.device_put({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": ids * 0},
                            NamedSharding(mesh, P("data")))
    lean = jax.jit(encoder.forward, static_argnums=1, static_argnames="internals")
    hlo = lean.lower(model.params, config, inputs, internals=None).compile().as_text()
    rows = [int(r) for r in re.findall(r"f32\[(\d+),\d+\]\{1,0\} dot\(", hlo)]
    return {"data8_chunked/collectives": np.array(sum(hlo.count(" " + op) for op in COLLECTIVES)),
            "data8_chunked/product_rows": np.array(max(rows))}


def meshes(folder, out, names):
    import os

    import jattn

    os.environ["JATTN_CHUNK_ROWS"] = "32"  # the 8 × ≤ 12-token batches below run their layers in strided chunks
    one = jattn.load(folder, use_cache=False)
    batch = one.tokenize(list(SHORT[:8]))  # 8 rows: one per data-parallel device
    result = {"one/" + k: v for k, v in {**forward_all(one, batch), **norm_maps(one, batch),
                                         **statistics(one, jax.devices()[:1], 8)}.items()}
    result.update({"one/" + k: v for k, v in placements(one).items()})
    for name in names.split(","):
        mesh = mesh_of(name)
        model = jattn.load(folder, use_cache=False, mesh=mesh)  # parameters placed by their metadata
        got = {**forward_all(model, batch, mesh), **norm_maps(model, batch), **placements(model)}
        stats = statistics(model, None, 8, corpus_mesh(name))
        result.update({f"{name}/{k}": v for k, v in {**got, **stats}.items()})
    result.update(chunked_program(model_on(folder, "data8"), mesh_of("data8")))
    np.savez(out, **result)


def model_on(folder, name):
    import jattn

    return jattn.load(folder, use_cache=False, mesh=mesh_of(name))


def main(folder, out, mode, *rest):
    if mode == "process":
        address, n, i = rest[0], int(rest[1]), int(rest[2])
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(address, num_processes=n, process_id=i)
    import jattn

    if mode == "meshes":
        return meshes(folder, out, *rest)
    model = jattn.load(folder, use_cache=False)
    if mode == "devices":
        one = statistics(model, jax.devices()[:1], 8)
        many = statistics(model, jax.devices(), 8)
        np.savez(out, **{"one_" + k: v for k, v in one.items()}, **{"many_" + k: v for k, v in many.items()})
    else:
        stats = statistics(model, jax.local_devices(), 4)
        if jax.process_index() == 0:
            np.savez(out, **stats)
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
