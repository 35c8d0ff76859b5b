"""Shared fixtures: tiny random Hugging Face models saved locally (no download), the real MiniLM."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One OpenMP thread for the PyTorch oracle (and OpenBLAS): the suite's workers already fill the cores, and a
# parallel region whose second thread waits for a core another worker holds spins until it gets one.
# tests/test_importance.py (HF float64 gradients) beside two other busy processes on 2 cores, twice each:
# 59 and 64 s of CPU with PyTorch's default of one thread per core, 38 and 36 s with one; the encoder families'
# conformance, test_context_mixing and test_patching together: 139 and 115 s with two threads, 94 and 84 s with
# one (AMD EPYC, 2 cores).
# Set before PyTorch or numpy loads (a test's subprocesses inherit it); a value set outside is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The suite compiles thousands of small programs (a run with `jax.disable_jit` compiles each primitive
# on its own), and most of its time is XLA compiling them. Two settings of the CPU backend's code
# generation make that faster; the programs compute the same operations, and what changes is the
# rounding the tests' float32 tolerances bound (tests/tolerance.py, which also hold without FMA):
#   * LLVM's passes at level 0: about a fifth faster (BART's analyses, now in tests/families, and
#     tests/test_train_nmt.py: 103 s -> 82 s);
#   * fusions emitted by the older elemental emitter instead of XLA's fusion emitters: about a quarter
#     less CPU time (tests/test_norms.py, a BART parity test and an eager norms kernel: 38 s -> 27 s);
#   * each program's LLVM module compiled whole, without LLVM's expensive passes: the split into parts
#     compiled in parallel is overhead for the suite's small programs on cores its workers already fill
#     (the 67 programs of the DeBERTa kernels' gradients, each compiled both ways in one process, in
#     random order: 17 % less compile CPU time; AMD EPYC).
# Set before JAX starts its backend; subprocesses inherit them (tests/test_sharding.py passes them on).
SUITE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false",
                   "--xla_cpu_parallel_codegen_split_count=1", "--xla_llvm_disable_expensive_passes=true")
os.environ["XLA_FLAGS"] = " ".join(filter(None, (os.environ.get("XLA_FLAGS"), *SUITE_XLA_FLAGS)))
# One JAX compilation cache for the run, shared by the pytest-xdist workers and the CLI processes the tests
# start: tests compile many of the same programs (the same tiny models' forwards, an eager run's primitives,
# `jattn analyze` on the same model in several tests), and a compile found in the cache is a file read: a
# tenth less CPU time for the suite. A cache hit is the executable compiled before, so results are unchanged.
# Every program is cached (no minimum compile time or size). No size limit: with one, JAX locks the folder and
# scans all its entries on every write, which made the suite far slower than no cache. Without the lock, a process
# that reads an entry while another writes it gets a short read; JAX then warns and compiles the program
# itself. Processes a test stops or kills run without the cache (``without_shared_cache``). The folder is this
# run's own (created by the first process, removed at its end), unless JAX_COMPILATION_CACHE_DIR is set, which
# then is used as it is.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE = tempfile.mkdtemp(prefix="jattn-tests-xla-cache-")
    os.environ.update(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
else:
    _OWN_CACHE = None

# Tests run the encoder's layers as real batches on CPU would at their size: tiny batches in one
# chunk. The chunked layer (``jattn.nn.engine.over_chunks``) is checked where it can differ:
# tests/test_chunks.py (outputs, every internal, layerwise rows and totals, [CLS] logits and gate
# gradients under every kind of intervention, chunked vs whole) and tests/test_batch_invariance.py
# (every registered analysis on chunked batches vs each example alone), which set their chunk sizes
# themselves. Chunking every test's layers as well cost about a fifth of the compile time of the
# test files measured (test_norms, test_weights, test_importance).


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true",
                     help="also run the tests marked slow: experiment-scale ones, and further instances of code "
                          "paths a default test runs fast (slow(twin=...))")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run only with ``--runslow``. ``@pytest.mark.slow(twin="tests/x.py::test_y")``
    (or ``pytest.param(..., marks=pytest.mark.slow(twin=...))``) names the default-suite test that runs the
    same code path fast: the default suite stays under 15 minutes on 2 cores (README, Tests) and still runs
    every code path once. A twin is checked whenever its file is collected whole: it must exist and not be slow."""
    ids = {item.nodeid: item for item in items}
    # files collected whole: a file named with a test (path::test) holds only that test's items
    from pathlib import Path

    named = {Path(a.split("::")[0]).resolve() for a in config.args if "::" in a}
    files = {f for f in (nodeid.split("::")[0] for nodeid in ids) if (config.rootpath / f).resolve() not in named}
    broken = []
    for item in items:
        for mark in item.iter_markers("slow"):
            twin = mark.kwargs.get("twin")
            if twin is None or twin.split("::")[0] not in files:
                continue
            found = [ids[n] for n in ids if n == twin or n.startswith(twin + "[")]
            if not found or all(t.get_closest_marker("slow") for t in found):
                broken.append(f"{item.nodeid}: twin {twin} " + ("is slow too" if found else "not found"))
    if broken:
        raise pytest.UsageError("slow tests whose fast twin is missing:\n" + "\n".join(broken))
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
    """Drop JAX's compiled programs after each test file. Every XLA CPU executable holds a few
    memory mappings; the whole suite compiles enough of them in one process to approach Linux's
    vm.max_map_count (65,530), where a late compile aborted or segfaulted inside XLA (test_view,
    the last files of the suite)."""
    yield
    import jax

    jax.clear_caches()


@pytest.fixture(scope="session")
def minilm():
    """The embedded all-MiniLM-L6-v2, converted once per session (conversion cache off)."""
    import jattn

    return jattn.load(use_cache=False)


@pytest.fixture(scope="session")
def minilm_path():
    from jattn.models.load import default_model_path

    return default_model_path()


# One copy per session of the tiny random checkpoints several test files build the same way.

@pytest.fixture(scope="session")
def tiny_bert_folder(tmp_path_factory):
    """A random 2-layer × 3-head BERT with MiniLM's tokenizer (``analysis_helpers.tiny_bert``)."""
    from analysis_helpers import tiny_bert

    return tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "model", layers=2, heads=3)


@pytest.fixture(scope="session")
def tiny_marian_folder(tmp_path_factory):
    """A random Marian model (2 + 3 layers) with its SentencePiece tokenizer (``tiny_seq2seq.save_tiny``)."""
    from tiny_seq2seq import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny_marian") / "model", "marian")


@pytest.fixture(scope="session")
def tiny_marian(tiny_marian_folder):
    import jattn

    return jattn.load(str(tiny_marian_folder), use_cache=False)


@pytest.fixture(scope="session")  # no state: module fixtures may use it too
def data_set():
    """``data_set(name)``: the folder of real data set ``name`` in the data folder (``$JATTN_DATA``,
    else the user cache), or a skip saying how to get it."""
    from jattn.io.manifest import data_dir, data_path

    def get(name: str):
        try:
            return data_path(name)
        except FileNotFoundError:
            pytest.skip(f"data set {name} is not in the data folder {data_dir()}: set JATTN_DATA to a folder that "
                        f"has it, or run `jattn data fetch {name}`")

    return get


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        import shutil

        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def without_shared_cache(env: dict) -> dict:
    """``env`` for a process a test stops or kills: without the run's compilation cache, since a process
    stopped while JAX writes an entry leaves it cut short, and every later process reading it would warn
    and compile again."""
    return {k: v for k, v in env.items() if k != "JAX_COMPILATION_CACHE_DIR"}
