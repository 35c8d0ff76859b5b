"""Analyses on M2M100 / NLLB: ``jattn analyze`` (weights, entropy, norms, ALTI, ALTI+) from the command line on
the tiny checkpoint and its tokenizer, ``jattn.norms`` against the explicit αf tensor and
``jattn.patch_heads`` against HF PyTorch with hooks."""

from __future__ import annotations

import pytest

import seq2seq_family_analyses as analyses
import seq2seq_family_parity as parity
from tiny_m2m_100 import hf_model, save_tiny

folder, model = parity.one_case(save_tiny, "m2m_100")


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    analyses.check_analyze_cli(model, folder, tmp_path / "out")


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_norms_against_explicit_tensor(model):
    analyses.check_norms(model)


# pre-LN LayerNorm stacks as mBART's (M2M100 differs in embeddings only), fast twin: test_mbart_analyses.py, same name
@pytest.mark.slow
def test_patch_heads_equals_hf_hooks(model, folder):
    analyses.check_patch_heads(model, hf_model(folder))
