"""jattn.host_memory: after ``keep_freed_memory()`` a jitted CPU program's large buffers are reused from
one call to the next without faulting their pages in again; with ``JATTN_KEEP_FREED_MEMORY=0``
glibc maps them afresh on every call."""

import json
import os
import statistics
import subprocess
import sys

import pytest

# In a fresh interpreter: a program whose output (96 MB, above glibc's 32 MB mmap threshold and
# a thread arena's 64 MB heaps) is freed after each call; prints whether malloc is set, whether
# asynchronous CPU dispatch is on, and the minor page faults of each of 16 calls. A result's
# memory may be freed only after the next call has taken its own: such a call grows the heap by
# fresh pages once, and the heap then holds one more block for the calls after it. So the test
# reads the median call after the first, not one call.
PROBE = """
import json, resource
import jattn
jattn.host_memory.keep_freed_memory()
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.sin(x) * 2)
x = jnp.ones(24 << 20, jnp.float32)
faults = []
for _ in range(16):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(x).block_until_ready()  # the result dies at once: its memory is freed
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps([jattn.host_memory.KEPT, jax.config.values["jax_cpu_enable_async_dispatch"], faults]))
"""


def probe(keep: str) -> tuple[bool, bool, float]:
    """(malloc set, asynchronous dispatch, the median page faults of calls 2..16)."""
    env = {**os.environ, "JATTN_KEEP_FREED_MEMORY": keep}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    kept, dispatch, faults = json.loads(out.stdout)
    return kept, dispatch, statistics.median(faults[1:])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_output_is_reused_without_faults():
    kept, dispatch, faults = probe("1")
    assert (kept, dispatch) == (True, False)
    assert faults <= 8  # 96 MB is 24,576 pages of 4 KiB (48 huge pages)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_opting_out_leaves_malloc_and_dispatch_as_they_are():
    kept, dispatch, faults = probe("0")
    assert (kept, dispatch) == (False, True)
    assert faults >= 48  # glibc maps the block afresh: at least one fault per 2 MB page


def test_import_jattn_leaves_the_process_as_it_is():
    """Neither malloc nor JAX's config nor the environment changes at ``import jattn``."""
    probe = ("import json, os, jax; before = jax.config.values['jax_cpu_enable_async_dispatch']; import jattn; "
             "print(json.dumps([before, jax.config.values['jax_cpu_enable_async_dispatch'], jattn.host_memory.KEPT, "
             "'TRANSFORMERS_NO_ADVISORY_WARNINGS' in os.environ]))")
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    before, after, kept, advisory = json.loads(out.stdout)
    assert (after, kept, advisory) == (before, False, False)
