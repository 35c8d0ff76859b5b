"""Analyses on T5 v1.1 (gated GELU, untied output, RMSNorm, relative bias): ``jattn analyze``
(weights, entropy, norms, ALTI, ALTI+) from the command line on the tiny checkpoint and its
tokenizer, ``jattn.norms`` against the explicit αf tensor, ``jattn.patch_heads`` against HF
PyTorch with hooks (the patched suffix runs the stacks' layers with their relative bias)."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_t5 import hf_model, save_tiny

KIND = "t5-v1.1"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("t5") / "model", KIND)


@pytest.fixture(scope="module")
def model(folder):
    return jattn.load(folder, use_cache=False)


def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    doc = parity.check_analyze_cli(model, folder, tmp_path / "out")
    for key in doc:
        if "norm" in key and isinstance(doc[key], dict) and "value" in doc[key]:
            assert np.isfinite(np.asarray(doc[key]["value"], np.float64)).all(), key


def test_norms_against_explicit_tensor(model):
    parity.check_norms(model)


def test_patch_heads_equals_hf_hooks(model, folder):
    parity.check_patch_heads(model, hf_model(folder, KIND))
