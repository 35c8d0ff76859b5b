"""Subprocess for tests/test_explicit_mesh.py (not a test module), run with 8 faked CPU devices.

    python explicit_mesh_worker.py ENCODER TRANSLATION MPNET OUT

For each mesh (``data8``: 8 × 1, ``data2_model4``) with Explicit axes (``jax.make_mesh``'s default)
and with Auto axes: the pure face jitted on a batch sharded over ``data`` (forward, and the
gradient w.r.t. head gates), ``model.forward`` and ``model.classify`` of a model placed on the mesh;
the pure face of an MPNet (positions after padding, a shared relative score bias) on
``data2_model4``; a translation model's ``forward`` and ``generate`` on ``data4_model2``; each
result's values and PartitionSpec, and the one-device results. Also the errors of a ``model`` axis that does not
divide the heads and of a sharded batch given to a model on one device. Writes OUT.npz:
``<mesh>/<axes>/<name>`` arrays, ``.../<name>/spec`` strings.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

MESHES = {"data8": ((8,), ("data",)), "data2_model4": ((2, 4), ("data", "model"))}


def spec(x) -> np.ndarray:
    return np.array(str(tuple(x.sharding.spec)))


def pure_results(model, inputs) -> dict:
    """The pure face jitted on ``inputs``: forward (last hidden state, α) and the gate gradient."""
    import jattn
    from jattn.nn import encoder

    params = model.params
    L, H = model.config.num_layers, model.config.num_heads
    pure = jax.jit(encoder.forward, static_argnums=1, static_argnames="internals")
    outputs, internals = pure(params, model.config, inputs, internals=("weights",))
    mask = inputs["attention_mask"][..., None].astype(jnp.float32)  # (b, n, 1)

    def loss(gates, params, inputs):
        out, _ = encoder.forward(params, model.config, inputs, jattn.Interventions(head_gates=gates), internals=None)
        return (out["last_hidden_state"] * mask).sum()

    grad = jax.jit(jax.grad(loss))(jnp.ones((L, H)), params, inputs)
    return {"pure/last_hidden_state": outputs["last_hidden_state"], "pure/weights": internals["weights"],
            "pure/grad": grad}


def encoder_results(model, inputs, mesh=None) -> dict:
    """``pure_results`` and the model's methods on ``inputs``, sharded over ``data`` on ``mesh``;
    ``host/...``: the model's methods on the host (numpy) batch."""
    host = {"host/forward/last_hidden_state": model.forward(inputs).last_hidden_state,
            "host/classify/logits": model.classify(inputs)}
    if mesh is not None:
        inputs = jax.device_put(inputs, NamedSharding(mesh, P("data")))
    result = model.forward(inputs)
    logits = model.classify(inputs)
    return {**host, **pure_results(model, inputs), "forward/last_hidden_state": result.last_hidden_state,
            "forward/attentions": result.attentions, "forward/pooler_output": result.pooler_output,
            "forward/logits": result.logits, "classify/logits": logits}


def translation_results(model, batch, mesh=None) -> dict:
    """A translation model's forward and generate (with attentions) on ``batch`` sharded over ``data``
    on ``mesh``; ``host/...``: its forward on the host (numpy) batch."""
    host = {"host/forward/logits": model.forward(batch).logits}
    if mesh is not None:
        batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    result = model.forward(batch)
    gen = model.generate(batch["input_ids"], batch["attention_mask"], max_length=8, return_attentions=True)
    return {**host, "forward/logits": result.logits, "forward/cross_attentions": result.cross_attentions,
            "generate/cross_attentions": gen.cross_attentions, "generate/sequences": gen.sequences}  # numpy ids


def record(out: dict, prefix: str, results: dict, sharded: bool) -> None:
    for name, x in results.items():
        out[f"{prefix}/{name}"] = np.asarray(x)
        if sharded and isinstance(x, jax.Array):
            out[f"{prefix}/{name}/spec"] = spec(x)


def main(encoder_folder, translation_folder, mpnet_folder, path, names):
    import jattn

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from tiny_encoders import random_batch
    from tiny_seq2seq import padded_batch

    assert len(jax.devices()) == 8
    out = {}
    one = jattn.load(encoder_folder, use_cache=False)
    inputs = {k: np.asarray(v, np.int32) for k, v in random_batch(one.config, [9, 6, 2, 5, 7, 3, 8, 4],
                                                                  seed=1, pairs=True).items()}
    record(out, "one", encoder_results(one, inputs), False)
    for name in names.split(","):  # the encoder's meshes (comma-separated MESHES names)
        shape, axes = MESHES[name]
        for kind in (AxisType.Explicit, AxisType.Auto):
            mesh = jax.make_mesh(shape, axes, axis_types=(kind,) * len(axes))
            model = jattn.load(encoder_folder, use_cache=False, mesh=mesh)
            record(out, f"{name}/{kind.name}", encoder_results(model, inputs, mesh), True)
    mpnet = jattn.load(mpnet_folder, use_cache=False, tokenizer=False)  # after-padding positions, score bias
    ids = {k: np.asarray(v, np.int32) for k, v in random_batch(mpnet.config, [9, 6, 2, 5, 7, 3, 8, 4], seed=2).items()}
    record(out, "mpnet/one", pure_results(mpnet, ids), False)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind,) * 2)
        placed = jattn.load(mpnet_folder, use_cache=False, tokenizer=False, mesh=mesh)
        record(out, f"mpnet/{kind.name}", pure_results(placed, jax.device_put(ids, NamedSharding(mesh, P("data")))),
               True)
    tone = jattn.load(translation_folder, use_cache=False)
    batch = {k: np.asarray(v, np.int32) for k, v in padded_batch(tone.config, seed=2, b=8).items()}
    record(out, "translation/one", translation_results(tone, batch), False)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind,) * 2)
        model = jattn.load(translation_folder, use_cache=False, mesh=mesh)
        record(out, f"translation/{kind.name}", translation_results(model, batch, mesh), True)
    try:  # a sharded batch, the model on one device
        one.forward(jax.device_put(inputs, NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))))
        out["unplaced/error"] = np.array("")
    except ValueError as e:
        out["unplaced/error"] = np.array(str(e))
    try:
        jattn.load(encoder_folder, use_cache=False, mesh=jax.make_mesh((1, 8), ("data", "model")))
        out["indivisible/error"] = np.array("")
    except ValueError as e:
        out["indivisible/error"] = np.array(str(e))
    np.savez(path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
