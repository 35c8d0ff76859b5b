"""Analyses on T5 v1.1 (gated GELU, untied output, RMSNorm, relative bias): ``jattn analyze``
(weights, entropy, norms, ALTI, ALTI+) from the command line on the tiny checkpoint and its
tokenizer, ``jattn.norms`` against the explicit αf tensor, ``jattn.patch_heads`` against HF
PyTorch with hooks (the patched suffix runs the stacks' layers with their relative bias)."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import seq2seq_family_analyses as analyses
import seq2seq_family_parity as parity
from tiny_t5 import hf_model, save_tiny

KIND = "t5-v1.1"
folder, model = parity.one_case(save_tiny, KIND)


# the same command and pre-norm seq2seq analyses (weights, entropy, norms, ALTI, ALTI+) as mBART's; T5's kernels
# (norms, ALTI+) are under jit, vmap and grad in tests/test_contract_families.py
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_analyses.py::test_analyze_cli")
def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    doc = analyses.check_analyze_cli(model, folder, tmp_path / "out")
    norms = [k for k in doc if "norm" in k and isinstance(doc[k], dict) and "value" in doc[k]]
    assert any(k.startswith("cross_norm") for k in norms), norms
    for key in norms:  # a statistic with no events in the corpus (no punctuation here) is None, not a number
        value = np.asarray(doc[key]["value"], object)
        assert all(np.isfinite(v) for v in value.ravel() if v is not None), key


# the same check of jattn.norms on a pre-norm seq2seq model as mBART's (T5's values and W_O without biases; the
# kernel on T5 is under jit, vmap and grad in tests/test_contract_families.py)
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_analyses.py::test_norms_against_explicit_tensor")
def test_norms_against_explicit_tensor(model):
    analyses.check_norms(model)


def test_patch_heads_equals_hf_hooks(model, folder):
    analyses.check_patch_heads(model, hf_model(folder, KIND))


PAIRS = [("un homme court sur la plage", "the man runs on the beach"), ("le chien", "the dog"),
         ("deux enfants jouent dans le parc", "two children play in the park")]


# > 30 s: its code path runs fast on a translation model in tests/test_api_shape.py
@pytest.mark.slow
def test_public_api_runs_per_type(model):
    """The rest of the public API on T5 answers per attention type with finite numbers: the
    pre-LN attributions (ALTI's per-layer maps), gradient importance with a masked head (0 there),
    attribution patching, the pruning curve's per-type masks, the viewer page; the classifier-only
    ``disable`` and LRP refuse by name."""
    types = ("encoder", "decoder", "cross")
    assert tuple(model.head_shapes) == types
    maps = jattn.attributions(model, PAIRS)
    assert "encoder" in maps and all(np.isfinite(np.asarray(v)).all() for a in maps.values() for v in a.values())
    mask = {k: np.ones(s, np.float32) for k, s in model.head_shapes.items()}
    mask["cross"][0, 0] = 0
    imp = jattn.importance(model, PAIRS, mask=mask, batch_size=2, progress=False)
    assert tuple(imp) == types and imp["cross"][0, 0] == 0
    assert all(imp[k].shape == model.head_shapes[k] and np.isfinite(imp[k]).all() and imp[k].any() for k in types)
    clean = model.batch(PAIRS)
    corrupted = {k: v.copy() for k, v in clean.items()}
    corrupted["input_ids"][:, 1] = clean["input_ids"][::-1, 1]
    approx = jattn.attribution_patch_heads(model, clean, corrupted, lambda out: out["logits"][:, 1, 5], batch_size=2)
    assert all(approx[k].shape == model.head_shapes[k] and np.isfinite(approx[k]).all() for k in types)
    curve = jattn.prune(model, PAIRS, lambda m: float(sum(v.sum() for v in m.values())), scores=imp, step=0.5)
    assert curve[-1][0] == 1.0
    page = jattn.view(model, PAIRS[0][0], target=PAIRS[0][1])
    assert isinstance(page, str) and "<html" in page.lower()
    with pytest.raises(ValueError, match="classif"):
        jattn.disable(model, [(x, 0) for x in PAIRS], progress=False)
    from jattn.analyses.lrp import head_relevance

    with pytest.raises(ValueError, match="pre-LN"):
        head_relevance(model.params, model.config, clean)
