"""Keep the memory XLA:CPU frees for its next call instead of giving it back to the kernel.

XLA's CPU runtime takes each call's temporary buffers and outputs from ``malloc``. glibc serves a
block of 32 MB or more with a fresh ``mmap`` that ``free`` unmaps, and a worker thread's arena
(64 MB heaps) falls back to ``mmap`` for any block larger than that, so every call of a large
program touches its memory for the first time again and the kernel faults it in page by page. The
device allocators of GPUs and TPUs keep what is freed; this gives the CPU heap the same habit:

* glibc serves no block with ``mmap`` and gives the heap's free top back only beyond 2 GiB
  (``mallopt``: ``M_MMAP_MAX`` 0, ``M_TRIM_THRESHOLD`` 2³¹ − 1);
* JAX runs a single-device CPU computation in the calling thread (``jax_cpu_enable_async_dispatch``
  off, as JAX's CPU backend always did before asynchronous dispatch), so XLA allocates from that
  thread's arena: for the main thread, the heap, which has no 64 MB limit.

A freed block is then reused by the next call without a fault, and the process's resident memory
stays near its peak instead of shrinking after it. Other threads keep their own arenas, so
allocation-heavy threaded code (a fast tokenizer's batch call) runs as fast as before; one shared
arena would remove the faults too, but slowed that tokenizer call 1.7× (``benchmarks/
bench_host_memory.py``). Measured effects are in ``docs/BENCHMARKS.md`` (page faults).

``import jattn`` changes nothing in the process. A program that owns its process calls
``keep_freed_memory()`` before its first JAX computation (the ``jattn`` command does, first thing;
so do the benchmarks); ``KEPT`` then says whether ``malloc`` was set (glibc only).
``JATTN_KEEP_FREED_MEMORY=0`` makes the call leave both alone, e.g. where memory must go back to
the system between large calls or where Python must run ahead of CPU computations.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_memory"]

# glibc's <malloc.h>: mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
SETTINGS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))


KEPT = False  # whether keep_freed_memory() has set malloc in this process


def keep_freed_memory() -> bool:
    """Set glibc's ``malloc`` to keep freed memory for reuse and JAX's CPU dispatch to run in the
    calling thread (module docstring); call it before the process's first JAX computation.
    Returns (and records in ``KEPT``) whether ``malloc`` is set: False with
    ``JATTN_KEEP_FREED_MEMORY=0`` or a C library other than glibc."""
    global KEPT
    if os.environ.get("JATTN_KEEP_FREED_MEMORY", "1") == "0":
        return False
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)  # read when the CPU client is made
    if not _glibc():
        return False
    libc = ctypes.CDLL(None)  # the process's own symbols, glibc's mallopt among them
    KEPT = all(libc.mallopt(option, value) == 1 for option, value in SETTINGS)
    return KEPT


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # e.g. "glibc 2.36"
    except (AttributeError, ValueError, OSError):  # not a GNU system
        return False
