"""Parameters as module state: build an ``nnx.State`` from converted arrays, random init, and
placement on a device mesh by the parameters' partitioning metadata.

Converters (``jattn.convert``) produce nested dicts keyed like the modules' attributes; this
module is where those dicts become the modules' ``nnx.Param`` state.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

MODULES: dict[type, type] = {}  # config class -> NNX module class (each model module registers itself)


def module_class(config):
    """The NNX module class of a config's model shape (``jattn.nn`` imports every model module,
    which registers its class here)."""
    if type(config) not in MODULES:
        raise TypeError(f"no jattn model for config type {type(config).__name__}")
    return MODULES[type(config)]


def abstract(config) -> nnx.State:
    """Parameter shapes/dtypes and metadata of ``config``'s module, without allocating."""
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
    """``mesh`` with every axis ``AxisType.Auto``: the models leave intermediate shardings to JAX's
    SPMD partitioner (``jax.make_mesh`` makes Explicit axes by default, under which an embedding
    lookup on a sharded batch has no unambiguous output sharding)."""
    auto = (jax.sharding.AxisType.Auto,) * len(mesh.axis_names)
    if tuple(mesh.axis_types) == auto:
        return mesh
    return jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=auto)


def partition_specs(params, mesh) -> nnx.State:
    """Each parameter's ``PartitionSpec`` from its ``out_sharding`` names, keeping only the axis
    names ``mesh`` has (a 1-D ``data`` mesh replicates everything) and only where the axis divides
    evenly (otherwise that axis is replicated)."""
    def spec(v):
        shape = v.get_value().shape  # an array, or a ShapeDtypeStruct of abstract parameters
        names = v.get_metadata().get("out_sharding") or (None,) * len(shape)
        axes = [n if n in mesh.axis_names and shape[i] % mesh.shape[n] == 0 else None
                for i, n in enumerate(names)]
        return P(*axes)

    return jax.tree.map(spec, params, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard(params, mesh) -> nnx.State:
    """Place ``params`` on ``mesh`` by their partitioning metadata (heads and FFN columns over a
    ``model`` axis, everything else replicated); JAX's SPMD partitioner does the rest under jit."""
    mesh = auto_mesh(mesh)
    specs = partition_specs(params, mesh)
    return jax.tree.map(lambda v, s: v.replace(jax.device_put(v.get_value(), NamedSharding(mesh, s))), params, specs,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
