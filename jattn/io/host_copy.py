"""Host copies of checkpoint tensors as ``jattn.io.tensors`` places them: a strided (transposed)
tensor copied in cache-sized tiles, on the bits of 2-byte floats, the bands of tiles spread over the
process's cores (numpy releases the GIL while it copies a tile)."""

from __future__ import annotations

import functools
import os

import numpy as np


def floating(dtype) -> bool:
    """Whether ``dtype`` is a float type, ml_dtypes' bfloat16 included (numpy calls its kind 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


TILE = 256  # a strided copy moves TILE x TILE blocks: a transposed 2-byte tile of 128 KB stays in cache


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for a C-contiguous ``dst``, on the bits of 2-byte floats
    (``jattn.io.tensors.on_bits``), and in ``TILE`` x ``TILE`` blocks where ``src`` is read along
    another axis than ``dst``'s last (a transposed kernel, or a device's slice of one): a plain
    strided copy reads one element per cache line, measured 3-6x slower on a transposed 2,048 x 5,632
    matrix. The blocks pair ``src``'s fastest axis with ``dst``'s last, any other axes looped over
    (a device's slice of a joined gate/up kernel, (2,048, 2, 704), is two (2,048, 704) transposes),
    and run in runs of blocks on a thread per core."""
    if dst.dtype.itemsize == 2 and floating(dst.dtype):
        dst, src = dst.view(np.uint16), src.view(np.uint16)
    src, out = _merged(src, dst)  # fewest axes: those src walks in order joined
    fast = int(np.argmin(np.abs(src.strides))) if src.ndim else 0  # the axis src reads along
    if src.ndim < 2 or fast == src.ndim - 1:  # reads and writes run along the same axis: the plain copy
        out[...] = src
        return
    src, out = np.moveaxis(src, fast, -2), np.moveaxis(out, fast, -2)  # (..., n, m): src reads down n, out writes along m
    n, m = src.shape[-2:]
    tiles = [(b, i, j) for b in np.ndindex(src.shape[:-2]) for i in range(0, n, TILE) for j in range(0, m, TILE)]
    per = max(1, len(tiles) // (4 * _threads()))  # a few runs of tiles per thread

    def run(start: int) -> None:  # numpy releases the GIL while it copies each tile
        for b, i, j in tiles[start:start + per]:
            out[b][i:i + TILE, j:j + TILE] = src[b][i:i + TILE, j:j + TILE]

    list(_copy_pool().map(run, range(0, len(tiles), per)))


def _merged(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``src`` and ``dst`` (C-contiguous, the same shape) as views of fewer axes: axes of size 1
    dropped, and each axis joined to the next where ``src`` steps over it as one (a transposed
    (32, 64, 2,048) attention output kernel is a (2,048, 2,048) transpose)."""
    keep = [k for k in range(src.ndim) if src.shape[k] != 1]
    shape, strides = [], []
    for k in keep:
        if shape and strides[-1] == src.shape[k] * src.strides[k]:
            shape[-1], strides[-1] = shape[-1] * src.shape[k], src.strides[k]
        else:
            shape.append(src.shape[k])
            strides.append(src.strides[k])
    return np.reshape(src, shape, copy=False), dst.reshape(shape)  # views: no element is copied


def _threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@functools.cache
def _copy_pool():
    """Threads for ``copy_into``'s runs of tiles, one per core."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(_threads())


def contiguous(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous array (``copy_into`` a fresh one where it is strided)."""
    if x.flags.c_contiguous:
        return x
    out = np.empty(x.shape, x.dtype)
    copy_into(out, x)
    return out
