"""Parameters as module state: build an ``nnx.State`` from converted arrays, random init, and
placement on a device mesh by the parameters' partitioning metadata.

Converters (``jattn.convert``) produce nested dicts keyed like the modules' attributes; this
module is where those dicts become the modules' ``nnx.Param`` state.
"""

from __future__ import annotations

import functools
import importlib
import math

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

__all__ = ["auto_mesh", "on_auto_axes"]

MODULES: dict[type, type] = {}  # config class -> NNX module class (each model module registers itself)
MODEL_MODULES = ("jattn.nn.encoder", "jattn.nn.seq2seq")  # the model modules, imported on first use


def module_class(config):
    """The NNX module class of a config's model shape (each model module registers its class here
    when imported; both are imported on first use)."""
    if type(config) not in MODULES:
        for name in MODEL_MODULES:  # each registers its class when imported
            importlib.import_module(name)
    if type(config) not in MODULES:
        raise TypeError(f"no jattn model for config type {type(config).__name__}")
    return MODULES[type(config)]


def abstract(config) -> nnx.State:
    """Parameter shapes/dtypes and metadata of ``config``'s module, without allocating: a copy of
    ``_abstract``'s (callers fill it in, ``from_arrays``), whose tracing of the module's initialisers
    happens once per config."""
    return jax.tree.map(lambda x: x, _abstract(config))


@functools.lru_cache(maxsize=32)
def _abstract(config) -> nnx.State:
    cls = module_class(config)
    return nnx.state(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0))), nnx.Param)


@functools.lru_cache(maxsize=32)
def graphdef(config):
    """The module graph of ``config``'s family (no arrays are allocated)."""
    cls = module_class(config)
    return nnx.split(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0))))[0]


def merge(params, config):
    """The module with ``params`` as its parameters: an ``nnx.State``, or the same tree as a
    nested dict of arrays (``nnx.to_pure_dict``; what optax and orbax hold while training)."""
    if not isinstance(params, nnx.State):
        params = from_arrays(config, params)
    return nnx.merge(graphdef(config), params)


def init(config, seed: int = 0) -> nnx.State:
    """Random parameters (each module's documented initialiser)."""
    return nnx.state(module_class(config)(config, rngs=nnx.Rngs(seed)), nnx.Param)


def _flat(tree: dict, prefix=()) -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def from_arrays(config, arrays) -> nnx.State:
    """A nested dict of arrays (a converter's output, an orbax restore) -> the module's state.
    Every missing, unexpected or mis-shaped array is reported in one error."""
    if isinstance(arrays, nnx.State):
        arrays = nnx.to_pure_dict(arrays)
    state = abstract(config)
    want = {k: v.shape for k, v in _flat(nnx.to_pure_dict(state)).items()}
    got = _flat(dict(arrays))
    missing = sorted(".".join(map(str, k)) for k in want.keys() - got.keys())
    extra = sorted(".".join(map(str, k)) for k in got.keys() - want.keys())
    bad = sorted(f"{'.'.join(map(str, k))}: {tuple(np.shape(got[k]))}, expected {tuple(want[k])}"
                 for k in want.keys() & got.keys() if tuple(np.shape(got[k])) != tuple(want[k]))
    if missing or extra or bad:
        raise ValueError(f"parameters do not match the {module_class(config).__name__} module of this config: "
                         f"missing {missing}, unexpected {extra}, wrong shape {bad}. Fix: convert the checkpoint "
                         "again with the config it came with")
    nnx.replace_by_pure_dict(state, jax.tree.map(jax.numpy.asarray, dict(arrays)))
    return state


def to_arrays(params) -> dict:
    """The state as a nested dict of numpy arrays (what orbax and the converters read/write)."""
    return jax.tree.map(np.asarray, nnx.to_pure_dict(params))


def auto_mesh(mesh):
    """``mesh`` with every axis ``AxisType.Auto``. The runner (``jattn.runner.run_corpus``) places
    its batches and parameters on this form of the mesh it is given, whatever its axis types: its
    step is its own program, and the SPMD partitioner chooses every intermediate sharding."""
    auto = (AxisType.Auto,) * len(mesh.axis_names)
    if tuple(mesh.axis_types) == auto:
        return mesh
    return jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=auto)


def explicit(x) -> bool:
    """Whether ``x`` (an array, or a tracer) is typed on a mesh with ``AxisType.Explicit`` axes,
    ``jax.make_mesh``'s default: its sharding is part of its type, and every operation on it must
    have an unambiguous output sharding."""
    return AxisType.Explicit in jax.typeof(x).sharding.mesh.axis_types


def lookup(table: jax.Array, ids: jax.Array) -> jax.Array:
    """``table[ids]``: rows of a table (V, ...) for ids (b, n) -> (b, n, ...). Under Explicit axes a
    gather of sharded ids from a replicated table has no unambiguous output sharding, so it is
    named: the ids' sharding, the table's own axes replicated (``.at[].get(out_sharding=)``)."""
    if not explicit(ids):
        return table[ids]
    sharding = jax.typeof(ids).sharding
    spec = P(*sharding.spec, *(None,) * (table.ndim - 1))
    return table.at[ids].get(out_sharding=NamedSharding(sharding.mesh, spec))  # (b, n, ...)


def on_auto_axes(fn, args: tuple, like: jax.Array, batch_axis):
    """``fn(*args)``, where an array of ``args`` is typed on Explicit axes (a batch sharded over
    ``data``, parameters placed over ``model``), with those axes Auto for its duration
    (``jax.sharding.auto_axes``). The models leave intermediate shardings to the SPMD
    partitioner; under Explicit axes a head split, a contraction over heads split on ``model`` or
    a gather of sharded ids has no unambiguous output sharding. ``fn`` takes every array it reads
    as an argument (an Explicit array it closes over is an error inside). Each result leaves
    sharded as the batch axis of ``like`` (b, ...) is (replicated if ``like`` is not on the mesh),
    on the axis ``batch_axis(path)`` names for the result at ``path`` (a ``jax.tree_util`` key
    path; None: replicated). Without Explicit axes: ``fn(*args)``."""
    mesh = next((jax.typeof(a).sharding.mesh for a in jax.tree.leaves(args) if explicit(a)), None)
    if mesh is None:
        return fn(*args)
    spec = jax.typeof(like).sharding.spec if explicit(like) else ()
    batch = spec[0] if len(spec) else None
    whole = NamedSharding(mesh, P())
    shapes = jax.eval_shape(jax.sharding.auto_axes(fn, out_sharding=whole), *args)

    def placed(path, _):
        axis = batch_axis(path)
        return whole if axis is None or batch is None else NamedSharding(mesh, P(*(None,) * axis, batch))

    return jax.sharding.auto_axes(fn, out_sharding=jax.tree_util.tree_map_with_path(placed, shapes))(*args)


def pure_call(params, config, batch: dict, interventions, batch_axis, method: str = "__call__", **kwargs):
    """The pure face of a model module: the module holding ``params`` (``merge``) with its
    ``method`` called on ``batch`` and ``interventions`` (and ``kwargs``); a ``dropout_rng`` makes
    it a training call (the module in ``train()`` mode). On a mesh with Explicit axes it runs with
    them Auto (``on_auto_axes``), each result sharded over the batch as ``attention_mask`` is, on
    the axis ``batch_axis(path)`` names; a callback among ``kwargs`` then takes the arrays it reads
    from its arguments, not from arrays on that mesh it closes over."""
    def run(params, batch, interventions):
        model = merge(params, config)
        if kwargs.get("dropout_rng") is not None:
            model.train()
        return getattr(model, method)(batch, interventions, **kwargs)

    return on_auto_axes(run, (params, batch, interventions), batch["attention_mask"], batch_axis)


def partition_specs(params, mesh) -> nnx.State:
    """Each parameter's ``PartitionSpec`` from its ``out_sharding`` names, keeping only the axis
    names ``mesh`` has (a 1-D ``data`` mesh replicates everything). An axis a mesh axis does not
    divide (12 heads over a ``model`` axis of 8) is an error naming the sizes that would divide
    every split axis: splitting some parameters and replicating others would be a silent choice."""
    bad, sizes = [], {}

    def spec(path, v):
        shape = v.get_value().shape  # an array, or a ShapeDtypeStruct of abstract parameters
        names = v.get_metadata().get("out_sharding") or (None,) * len(shape)
        for i, n in enumerate(names):
            if n in mesh.axis_names:
                sizes.setdefault(n, []).append(shape[i])
                if shape[i] % mesh.shape[n]:
                    where = jax.tree_util.keystr(path, simple=True, separator=".")
                    bad.append(f"{where} (axis {i} of size {shape[i]})")
        return P(*(n if n in mesh.axis_names else None for n in names))

    specs = jax.tree_util.tree_map_with_path(spec, params, is_leaf=lambda x: isinstance(x, nnx.Variable))
    if bad:
        axis = next(n for n in sizes if any(k % mesh.shape[n] for k in sizes[n]))
        g = math.gcd(*sizes[axis])
        fits = [d for d in range(1, g + 1) if g % d == 0]
        raise ValueError(f"mesh: its {axis!r} axis of {mesh.shape[axis]} devices does not divide {', '.join(bad[:3])}"
                         f"{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}. Fix: a {axis!r} axis of "
                         f"{' or '.join(map(str, fits))} devices, which divide every axis split over it (heads, "
                         f"FFN columns), e.g. jax.make_mesh((DATA, {fits[-1]}), ('data', {axis!r}))")
    return specs


def shard(params, mesh) -> nnx.State:
    """Place ``params`` on ``mesh`` by their partitioning metadata (heads, FFN columns and the token
    tables' width over a ``model`` axis, everything else replicated), on the mesh with Auto axes
    (``auto_mesh``): the same devices and layout, and every program over the parameters (a
    sweep's, a user's) leaves the intermediate shardings to the SPMD partitioner; a batch typed on
    Explicit axes still meets them in the models' calls, which run with those axes Auto
    (``on_auto_axes``)."""
    mesh = auto_mesh(mesh)
    specs = partition_specs(params, mesh)
    return jax.tree.map(lambda v, s: v.replace(jax.device_put(v.get_value(), NamedSharding(mesh, s))), params, specs,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
