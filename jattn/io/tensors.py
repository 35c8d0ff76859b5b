"""Checkpoint tensors read when they are placed: the streaming load.

A safetensors shard's header gives each tensor's shape and dtype without reading it; ``Lazy``
holds that and reads the bytes (or a slice of them) only when asked. A converter's key table
(``jattn.io.hf.apply_table``) applied to lazy tensors gives ``Pending`` leaves (a tensor and its
transform) and ``Stacked`` leaves (the layers' ``Pending`` of one parameter), and ``place`` puts
that tree on its devices leaf by leaf, each device receiving only its slice of each tensor (all of
it without a ``sharding``), copied from a view of the file's pages: of several processes, each
reads only the slices its own devices hold. A stacked parameter (L, ...) is allocated once and each
layer written into it in place: on CPU devices, whose memory is the host's, one huge-page host
buffer per distinct slice, which the devices holding that slice then alias (a replicated parameter
is held once); elsewhere a device array updated by a donated write. The host holds about one
tensor beyond the parameters, in the checkpoint's dtype unless ``dtype`` is given.
"""

from __future__ import annotations

import functools
import json
import mmap
from pathlib import Path
from typing import Callable

import numpy as np  # ml_dtypes (numpy's bfloat16, JAX's) and jax are imported where a tensor is read or placed

from jattn.io.host_copy import aligned, contiguous, copy_into, floating, nonfinite


class Lazy:
    """A tensor of known shape and dtype whose values are read on demand: ``read(index)`` returns
    ``tensor[index]`` as a numpy array (the whole tensor for ``index=None``); ``view(populate)``
    the whole tensor as a view of its storage where it has one (``view``: ``populate -> array``),
    whose bytes are read where a slice of it is touched unless ``populate``."""

    def __init__(self, shape: tuple[int, ...], dtype, read: Callable, name: str = "", view: Callable | None = None):
        self.shape, self.dtype, self._read, self.name, self._view = tuple(shape), np.dtype(dtype), read, name, view

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def read(self, index=None) -> np.ndarray:
        return np.asarray(self._read(index))

    def view(self, populate: bool = True) -> np.ndarray:
        return self.read() if self._view is None else np.asarray(self._view(populate))

    def __array__(self, dtype=None, copy=None):
        x = self.read()
        return x if dtype is None else x.astype(dtype)

    def __repr__(self) -> str:
        return f"Lazy({self.name}, {self.shape}, {self.dtype})"


def safetensors_state(path: Path) -> dict[str, Lazy]:
    """Every tensor of the safetensors file ``path`` as a ``Lazy``: the header is read (and checked
    against the file's size by ``safe_open``) now, each tensor's bytes when it is read. Raises what
    ``safe_open`` raises on a damaged file."""
    import ml_dtypes
    from safetensors import safe_open

    _DTYPES.setdefault("BF16", ml_dtypes.bfloat16)
    spans = _data_spans(path)
    state = {}
    with safe_open(str(path), framework="numpy") as f:
        for key in f.keys():
            part = f.get_slice(key)
            dtype = _DTYPES[part.get_dtype()]
            whole = functools.partial(_read_mapped, str(path), spans[key], tuple(part.get_shape()), dtype)
            state[key] = Lazy(part.get_shape(), dtype, whole, key, lambda populate, whole=whole: whole(None, populate))
    return state


_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}  # and BF16 once a file is opened


def _data_spans(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's byte range in the file: the format is an 8-byte little-endian header length,
    a JSON header whose ``data_offsets`` count from the header's end, then the data."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return {k: (8 + size + v["data_offsets"][0], 8 + size + v["data_offsets"][1])
            for k, v in header.items() if k != "__metadata__"}


def _read_mapped(path: str, span: tuple[int, int], shape: tuple[int, ...], dtype, index, populate: bool = True):
    """``tensor[index]`` as a read-only view of the file's pages, mapped for this read and
    unmapped when the last view of it is dropped: the bytes go from the page cache straight to
    where they are placed, with no copy through ``safe_open`` first (on one process the load takes
    as long either way: the copy's time goes to mapping the pages).
    ``populate``: the mapping is filled in one call (``MAP_POPULATE``; the whole range is read),
    else page by page where it is touched (a process that places only some slices reads only those)."""
    start, end = span
    if end == start:
        x = np.zeros(shape, dtype)
    else:
        base = start - start % mmap.ALLOCATIONGRANULARITY  # a mapping starts on a granularity boundary
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        with open(path, "rb") as f:
            pages = mmap.mmap(f.fileno(), end - base, flags=flags, prot=mmap.PROT_READ, offset=base)
        x = np.frombuffer(pages, np.dtype(dtype), count=int(np.prod(shape)), offset=start - base).reshape(shape)
    return x if index is None else x[index]


def on_bits(move: Callable, *xs: np.ndarray) -> np.ndarray:
    """``move(*xs)`` for a function that only moves elements (a key table's transposes, reshapes,
    slices, zero pads and joins), run on the arrays' bits where they are 2-byte floats: numpy
    copies uint16 at native speed, ml_dtypes' bfloat16 element by element (about 40x slower on a
    transposed 2,048 x 5,632 tensor). Zero bits are +0.0, so a zero pad is the same."""
    kind = xs[0].dtype
    if kind.itemsize != 2 or not floating(kind):
        return np.asarray(move(*xs))
    return np.asarray(move(*(x.view(np.uint16) for x in xs))).view(kind)  # a view: writes reach xs


def is_lazy(x) -> bool:
    return isinstance(x, (Lazy, Pending, Stacked))


def concat(parts: list, axis: int = 0):
    """``np.concatenate(parts, axis)``, read part by part when placed if any part is lazy."""
    if not any(is_lazy(p) for p in parts):
        return np.concatenate(parts, axis=axis)
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)

    def read(index):
        whole = on_bits(lambda *xs: np.concatenate(xs, axis=axis), *(np.asarray(p) for p in parts))
        return whole if index is None else whole[index]

    return Lazy(tuple(shape), parts[0].dtype, read, " + ".join(getattr(p, "name", "") for p in parts))


def split(x, sections: int, axis: int = 0) -> list:
    """``np.split(x, sections, axis)``; of a lazy tensor, each part reads only its own slice."""
    if not isinstance(x, Lazy):
        return np.split(x, sections, axis=axis)
    size = x.shape[axis] // sections
    axis %= x.ndim

    def part(i):
        where = (slice(None),) * axis + (slice(i * size, (i + 1) * size),)
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        return Lazy(shape, x.dtype, lambda index: x.read(where) if index is None else x.read(where)[index],
                    f"{x.name}[{i}/{sections}]")

    return [part(i) for i in range(sections)]


class Pending:
    """A converted parameter not read yet: ``transform(tensor)``, checked finite when read."""

    def __init__(self, tensor, transform: Callable, key: str):
        self.tensor, self.transform, self.key = tensor, transform, key

    def read(self) -> np.ndarray:
        return on_bits(self.transform, np.asarray(self.tensor))

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        return self.read().shape if self.tensor.ndim <= 1 else _transformed_shape(self)


class Stacked:
    """One parameter of every layer, stacked on a leading axis when placed: (L, ...)."""

    def __init__(self, items: list):
        self.items = items

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.items), *self.items[0].shape)


class NonFinite(ValueError):
    """A checkpoint tensor holding NaN or inf values."""

    def __init__(self, key: str, count: int, cast=None):
        """``cast``: the dtype whose range the finite checkpoint values left when converted to it."""
        super().__init__(f"{key} ({count} values" + (f" once cast to {cast})" if cast is not None else ")"))
        self.key, self.count, self.cast = key, count, cast


def _transformed_shape(p: Pending) -> tuple[int, ...]:
    """The shape ``p.transform`` gives, traced on a shape-only stand-in (the transforms are
    transposes, reshapes and pads: ``jax.eval_shape`` follows them with ``jnp`` semantics)."""
    import jax

    probe = jax.ShapeDtypeStruct(p.tensor.shape, np.float32)
    try:
        return tuple(jax.eval_shape(p.transform, probe).shape)
    except Exception:  # a transform written with numpy functions that tracers do not take: read it
        return p.read().shape


def realize(tree):
    """A tree of ``Pending`` / ``Stacked`` leaves read into host numpy arrays (the eager path; each
    tensor checked finite as read, ``NonFinite``)."""
    if isinstance(tree, dict):
        return {k: realize(v) for k, v in tree.items()}
    if isinstance(tree, Stacked):
        return on_bits(lambda *xs: np.stack(xs), *(realize(x) for x in tree.items))
    return np.array(_read(tree))  # a copy: a read is a view of the file's pages


@functools.cache
def _layer_writer():
    """The jitted ``stack.at[i].set(layer)`` with the stack donated (written in place)."""
    import jax

    def write(stack, layer, i):
        return jax.lax.dynamic_update_index_in_dim(stack, layer, i, 0)  # (L, ...) with row i replaced

    return jax.jit(write, donate_argnums=0)


def _target(x: np.ndarray, dtype):
    """The dtype a tensor is placed in: ``dtype`` for floating tensors when given, else its own."""
    return np.dtype(dtype) if dtype is not None and floating(x.dtype) else x.dtype


def _put(x: np.ndarray, sharding, kind, key: str):
    """``x`` on its accelerator devices (CPU devices: ``_host_leaf``) in dtype ``kind``. Unsharded:
    checked already (``_read``). Sharded: each device receives only its slice, read from ``x`` (a
    view: ``_view``), checked finite (``NonFinite`` names ``key``) and converted as it is placed."""
    import jax

    if sharding is None:
        return jax.device_put(contiguous(x.astype(kind, copy=False)))

    def part(index):
        piece = contiguous(x[index])  # a transposed slice copied in tiles, then read once more to check it
        if floating(piece.dtype) and (bad := nonfinite(piece)):
            raise NonFinite(key, bad)
        return piece.astype(kind, copy=False)

    return jax.make_array_from_callback(x.shape, sharding, part)


def _on_host(where) -> bool:
    """Whether a leaf's devices are CPU devices (``where``: its sharding, None: the default
    device), whose memory is the host's: the leaf is then assembled in host buffers (``_host_leaf``)."""
    import jax

    if where is None:
        return jax.default_backend() == "cpu"
    return all(d.platform == "cpu" for d in where.device_set)


def _host_leaf(items: list, stacked: bool, where, dtype, populate: bool, progress: Callable | None):
    """A leaf on CPU devices. Each distinct slice this process's devices hold (``_slices``) is copied
    from each tensor's view (``_view``: of several processes, each reads only its own slices) into
    one aligned host buffer, (L, ...) of a stacked parameter layer by layer, and checked finite as
    placed (``NonFinite`` names the key); every device holding that slice then takes the buffer as
    its array without a copy (``jax.device_put`` aliases aligned host memory; a jitted call that
    donates such an array copies it first, so the devices that share a replicated buffer stay
    apart). No device-side stack, donated update per layer or program compiled per shape: on 8
    faked devices those took 1.4 s of the 0.67B Llama shape's 6.2 s load (cProfile)."""
    import jax

    first = _view(items[0], populate)
    kind = _target(first, dtype)
    slices = _slices(_drop_leading(where) if stacked else where, first.shape)  # [(index, devices)]
    lead = (len(items),) if stacked else ()  # a stacked parameter's layer axis
    shape = lead + first.shape  # (L, ...) or the tensor's
    buffers = [aligned(lead + first[index].shape, kind) for index, _ in slices]  # (L, ...) or (...): a slice
    for i, item in enumerate(items):
        x = first if i == 0 else _view(item, populate)
        first = None
        for (index, _), host in zip(slices, buffers):
            part = host[i] if stacked else host
            with np.errstate(over="ignore"):  # a value beyond kind's range is named just below
                copy_into(part, x[index].astype(kind, copy=False))
            if floating(kind) and (bad := nonfinite(part)):  # checked as placed: in the target dtype
                own = nonfinite(x[index]) if kind != x.dtype else bad  # the checkpoint's own values
                raise NonFinite(getattr(item, "key", "a parameter"), own or bad, cast=None if own else kind)
        del x
        if progress is not None:
            progress(1)
    arrays = [jax.device_put(host, device) for (_, devices), host in zip(slices, buffers) for device in devices]
    if where is None:
        return arrays[0]
    return jax.make_array_from_single_device_arrays(shape, where, arrays)


def _slices(sharding, shape: tuple[int, ...]) -> list[tuple]:
    """The distinct slices of a tensor of ``shape`` that this process's devices hold under
    ``sharding``, each with the devices holding it: ``[(index, [device, ...])]`` (None: the whole
    tensor, on the default device)."""
    if sharding is None:
        return [(..., [None])]
    groups = {}
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        same = tuple(s.indices(n) for s, n in zip(index, shape))  # slices are hashable from Python 3.12 only
        groups.setdefault(same, (index, []))[1].append(device)
    return list(groups.values())


def place(tree, dtype=None, sharding: Callable | None = None, progress: Callable | None = None):
    """``tree`` (nested dict of ``Pending`` / ``Stacked`` / arrays) as jax arrays, one tensor read at
    a time. ``dtype``: floating parameters cast to it (None: the checkpoint's own). ``sharding``:
    ``path -> Sharding | None`` for each leaf (None: the default device). ``progress(n)`` is called
    after each tensor read."""

    import jax
    import jax.numpy as jnp

    populate = jax.process_count() == 1  # one process places every slice; of several, each only its own

    def leaf(path: tuple, node):
        where = sharding(path) if sharding is not None else None
        stacked = isinstance(node, Stacked)
        items = node.items if stacked else [node]
        if _on_host(where):
            return _host_leaf(items, stacked, where, dtype, populate, progress)
        read = _read if where is None else functools.partial(_view, populate=populate)
        first = read(items[0])
        kind = _target(first, dtype)
        if stacked:  # (L, ...) on its devices, filled layer by layer
            stack = jnp.zeros((len(items), *first.shape), kind, device=where)
        for i, item in enumerate(items):
            x = first if i == 0 else read(item)
            first = None
            key = getattr(item, "key", "a parameter")
            if stacked:
                stack = _layer_writer()(stack, _put(x, _drop_leading(where), kind, key), i)
            else:
                stack = _put(x, where, kind, key)
            del x
            if progress is not None:
                progress(1)
        return stack

    def walk(path, node):
        if isinstance(node, dict):
            return {k: walk(path + (k,), v) for k, v in node.items()}
        return leaf(path, node)

    return walk((), tree)


def count(tree) -> int:
    """The tensors ``place`` reads for ``tree``."""
    if isinstance(tree, dict):
        return sum(count(v) for v in tree.values())
    return len(tree.items) if isinstance(tree, Stacked) else 1


def _read(node) -> np.ndarray:
    """A leaf's values, checked finite as read, before its transform strides them (``NonFinite``
    names the checkpoint key)."""
    raw = np.asarray(node.tensor if isinstance(node, Pending) else node)
    if floating(raw.dtype) and (bad := nonfinite(raw)):
        raise NonFinite(getattr(node, "key", "a parameter"), bad)
    return on_bits(node.transform, raw) if isinstance(node, Pending) else raw


def _view(node, populate: bool) -> np.ndarray:
    """A leaf's values, transformed, as a view of its storage where it has one (``Lazy.view``):
    not checked here (``_put`` and ``_host_leaf`` check each slice they place)."""
    raw = node.tensor if isinstance(node, Pending) else node
    raw = raw.view(populate) if isinstance(raw, Lazy) else np.asarray(raw)
    return on_bits(node.transform, raw) if isinstance(node, Pending) else raw


def _drop_leading(sharding):
    """The sharding of one layer of a stacked parameter: its spec without the layer axis."""
    if sharding is None:
        return None
    from jax.sharding import NamedSharding, PartitionSpec as P

    return NamedSharding(sharding.mesh, P(*tuple(sharding.spec)[1:]))
