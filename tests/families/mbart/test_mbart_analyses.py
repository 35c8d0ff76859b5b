"""Analyses on mBART: ``jattn analyze`` (weights, entropy, norms, ALTI, ALTI+) from the command line on
the tiny checkpoint and its tokenizer, ``jattn.norms`` against the explicit αf tensor and
``jattn.patch_heads`` against HF PyTorch with hooks."""

from __future__ import annotations

import pytest

import seq2seq_family_analyses as analyses
import seq2seq_family_parity as parity
from tiny_mbart import hf_model, save_tiny

folder, model = parity.one_case(save_tiny, "mbart-50")


def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    analyses.check_analyze_cli(model, folder, tmp_path / "out")


def test_norms_against_explicit_tensor(model):
    analyses.check_norms(model)


# the patched layers' suffix runs the same pre-norm Seq2SeqLayers and final norms as T5's (which adds the relative
# bias), against HF hooks there
@pytest.mark.slow(twin="tests/families/t5/test_t5_analyses.py::test_patch_heads_equals_hf_hooks")
def test_patch_heads_equals_hf_hooks(model, folder):
    analyses.check_patch_heads(model, hf_model(folder))
