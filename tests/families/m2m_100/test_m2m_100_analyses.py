"""Analyses on M2M100 / NLLB: ``jattn analyze`` (weights, entropy, norms, ALTI, ALTI+) from the command line on
the tiny checkpoint and its tokenizer, ``jattn.norms`` against the explicit αf tensor and
``jattn.patch_heads`` against HF PyTorch with hooks."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_m2m_100 import hf_model, save_tiny


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("m2m_100") / "model", "m2m_100")


@pytest.fixture(scope="module")
def model(folder):
    return jattn.load(folder, use_cache=False)


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    parity.check_analyze_cli(model, folder, tmp_path / "out")


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_norms_against_explicit_tensor(model):
    parity.check_norms(model)


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_patch_heads_equals_hf_hooks(model, folder):
    parity.check_patch_heads(model, hf_model(folder))
