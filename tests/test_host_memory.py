"""jattn.host_memory: after ``import jattn`` a large block freed by a worker thread is reused
without faulting its pages in again; with ``JATTN_KEEP_FREED_MEMORY=0`` glibc maps it afresh."""

import os
import subprocess
import sys

import pytest

# In a fresh interpreter: a worker thread (as XLA's are) takes an 80 MB block (above both glibc's
# 32 MB mmap threshold and its 64 MB thread heaps), writes it, frees it, and does it again; prints
# the minor page faults of the second round.
PROBE = """
import ctypes, resource, threading
import jattn
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
n, faults = 80 << 20, []
def twice():
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        block = libc.malloc(n)
        ctypes.memset(block, 1, n)
        libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
thread = threading.Thread(target=twice)
thread.start(); thread.join()
print(jattn.host_memory.keep_freed_memory(), faults[1])
"""


def probe(keep: str) -> tuple[str, int]:
    env = {**os.environ, "JATTN_KEEP_FREED_MEMORY": keep}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    kept, faults = out.stdout.split()
    return kept, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_block_is_reused_without_faults():
    kept, faults = probe("1")
    assert kept == "True"
    assert faults <= 4  # 80 MB is 20,480 pages of 4 KiB (40 huge pages)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_opting_out_leaves_malloc_as_it_is():
    kept, faults = probe("0")
    assert kept == "False"
    assert faults >= 40  # glibc maps the block afresh: at least one fault per 2 MB page
