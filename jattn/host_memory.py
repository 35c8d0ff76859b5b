"""Keep the memory XLA:CPU frees for its next call instead of giving it back to the kernel.

XLA's CPU runtime takes each call's temporary buffers and outputs from ``malloc``. glibc serves a
block of 32 MB or more, and any block too large for a worker thread's arena (64 MB heaps), with a
fresh ``mmap`` that ``free`` unmaps, so every call of a large program touches its memory for the
first time again and the kernel faults it in page by page. Attribution patching on MiniLM
(``jattn.attribution_patch_heads``, 16 pairs of 14 tokens) maps a 36 MB block on every call and
faults 8,800 pages; 64 pairs map 142 MB and fault 36,000; that is about a sixth of the call's time
(``benchmarks/bench_patching.py`` records the faults). The device allocators of GPUs and TPUs keep
what is freed; this gives the CPU heap the same habit: one arena, no block of its own ``mmap``, no
trimming of the heap's top. A freed block is then reused by the next call without a fault, and the
process's resident memory stays at its peak instead of shrinking after it.

``import jattn`` applies it before the first allocation of XLA's threads (glibc only; with another
C library nothing changes). Set ``JATTN_KEEP_FREED_MEMORY=0`` before the import to leave ``malloc``
as it is, e.g. where memory must go back to the system between large calls.
"""

from __future__ import annotations

import ctypes
import os

# glibc's <malloc.h>: mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))


def keep_freed_memory() -> bool:
    """Set glibc's ``malloc`` to keep freed memory for reuse (module docstring). Returns whether it
    is set: False with ``JATTN_KEEP_FREED_MEMORY=0`` or a C library other than glibc."""
    if os.environ.get("JATTN_KEEP_FREED_MEMORY", "1") == "0" or not _glibc():
        return False
    libc = ctypes.CDLL(None)  # the process's own symbols, glibc's mallopt among them
    return all(libc.mallopt(option, value) == 1 for option, value in SETTINGS)



def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")  # e.g. "glibc 2.36"
    except (AttributeError, ValueError, OSError):  # not a GNU system
        return False
