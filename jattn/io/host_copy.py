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
    """``dst[...] = src``, on the bits of 2-byte floats (``jattn.io.tensors.on_bits``), and in
    ``TILE`` x ``TILE`` blocks where ``src`` is strided (a transposed kernel): a plain strided copy
    reads one element per cache line; measured 3-6x slower on a transposed 2,048 x 5,632 matrix.
    The bands of tiles run on a thread per core: the 0.67B Llama shape's streamed load took 1.58 s
    against 1.97 s on one thread (quiet 2-core Xeon, ``benchmarks/bench_scale.py``)."""
    if dst.dtype.itemsize == 2 and floating(dst.dtype):
        dst, src = dst.view(np.uint16), src.view(np.uint16)
    if src.ndim < 2 or src.flags.c_contiguous:
        dst[...] = src
        return
    rows = src.shape[0]
    try:
        flat = np.reshape(src, (rows, -1), copy=False)  # (n, m): the layout the copy walks
    except ValueError:  # not a view of 2-D strides: the plain copy
        dst[...] = src
        return
    out = dst.reshape(rows, -1)  # (n, m), a view: dst is contiguous

    def band(start: int) -> None:  # TILE rows of tiles; numpy releases the GIL while it copies each
        for j in range(0, flat.shape[1], TILE):
            out[start:start + TILE, j:j + TILE] = flat[start:start + TILE, j:j + TILE]

    list(_copy_pool().map(band, range(0, rows, TILE)))


@functools.cache
def _copy_pool():
    """Threads for ``copy_into``'s bands of tiles, one per core this process may run on."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())


def contiguous(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous array (``copy_into`` a fresh one where it is strided)."""
    if x.flags.c_contiguous:
        return x
    out = np.empty(x.shape, x.dtype)
    copy_into(out, x)
    return out
