"""Host copies of checkpoint tensors as ``jattn.io.tensors`` places them: a strided (transposed)
tensor, or a device's slice of one, copied in cache-sized tiles, on the bits of 2-byte floats, the
runs of tiles spread over the process's cores (numpy releases the GIL while it copies a tile), into
page-aligned host buffers that CPU devices take without a copy (``aligned``), and checked finite on
the bits (``nonfinite``)."""

from __future__ import annotations

import functools
import mmap
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
    src, out = np.moveaxis(src, fast, -2), np.moveaxis(out, fast, -2)  # (..., n, m): src read down n, out along m
    n, m = src.shape[-2:]
    tiles = [(b, i, j) for b in np.ndindex(src.shape[:-2]) for i in range(0, n, TILE) for j in range(0, m, TILE)]
    per = max(-(-m // TILE), len(tiles) // (4 * _threads()))  # a run: a band of tiles or more, a few per thread

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


def aligned(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised host array in a fresh anonymous mapping: page-aligned, so XLA's CPU client
    takes it as a device array without copying it (``jax.device_put`` aliases 64-byte-aligned
    memory), and backed by transparent huge pages where the kernel grants them (``madvise``): a
    parameter's first touch then faults 2 MB pages in, not 4 KB ones (touching 1 GB measured
    0.9 s against 4.9 s on a busy 2-core Xeon)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = mmap.mmap(-1, max(size, 1))
    if size >= HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        pages.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(pages, np.uint8, count=size).view(dtype).reshape(shape)


HUGE = 2 << 20  # a parameter of at least one huge page asks for huge pages


# A 2-byte float is NaN or inf exactly when its exponent bits are all ones.
_EXPONENT = {"bfloat16": 0x7F80, "float16": 0x7C00}  # by dtype name


def nonfinite(x: np.ndarray) -> int:
    """The count of NaN and inf values of a float array (2-byte floats read on their bits: numpy's
    ``isfinite`` on ml_dtypes' bfloat16 runs element by element)."""
    mask = _EXPONENT.get(x.dtype.name)
    if mask is None:
        return 0 if np.isfinite(x).all() else int((~np.isfinite(x)).sum())
    bits = np.ascontiguousarray(x).view(np.uint16).reshape(-1)
    magnitude = np.empty(min(bits.size, CHUNK), np.uint16)  # one small buffer: no fresh pages per tensor
    bad = 0
    for start in range(0, bits.size, CHUNK):
        part = magnitude[:min(CHUNK, bits.size - start)]
        np.bitwise_and(bits[start:start + CHUNK], 0x7FFF, out=part)  # sign cleared: exponent all ones <=> >= mask
        if part.max() >= mask:
            bad += int(np.count_nonzero(part >= mask))
    return bad


CHUNK = 1 << 18  # elements a finiteness check reads at a time (512 KB of 2-byte floats)
