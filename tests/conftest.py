"""Shared fixtures: tiny random Hugging Face models saved locally (no download), the real MiniLM."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run experiment-scale tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow experiment-scale test: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def minilm():
    """The embedded all-MiniLM-L6-v2, converted once per session (conversion cache off)."""
    import jattn

    return jattn.load(use_cache=False)


@pytest.fixture(scope="session")
def minilm_path():
    from jattn.load import default_model_path

    return default_model_path()
