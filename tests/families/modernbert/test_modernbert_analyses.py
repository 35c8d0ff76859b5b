"""The analyses on a tiny random ModernBERT with a tiny word-level ``tokenizer.json`` built offline
(``tokenizers``): ``jattn analyze --methods weights,entropy,norms,alti`` end to end, and
``jattn.patch_heads`` on token-id batches (local and global layers, rotary positions)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
from jattn.cli import main
from test_modernbert import save_modernbert
from tolerance import model_terms, tolerance

WORDS = "the cat sat on mat alice met bob then left he stayed short . , a dog ran home".split()
SPECIAL = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"]  # ids 0, 1, 2 as the config's cls / pad / sep


def save_tokenizer(folder, vocab_size: int = 80):
    """A word-level tokenizer.json with [CLS] A [SEP] (B [SEP]) templates, ``vocab_size`` tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = SPECIAL + WORDS
    tokens += [f"w{i}" for i in range(vocab_size - len(tokens))]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 0), ("[SEP]", 2)])
    PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                            unk_token="[UNK]", mask_token="[MASK]").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    f = tmp_path_factory.mktemp("modernbert_tok")
    save_modernbert(f)
    return save_tokenizer(f)


# the same command and pre-LN encoder analyses (weights, entropy, norms, ALTI) as RoBERTa-PreLayerNorm's; ModernBERT's
# kernels are under jit, vmap and grad in tests/test_contract_families.py, its score bias in the analyses' layer
# reruns below
@pytest.mark.slow(twin="tests/families/roberta_prelayernorm/test_roberta_prelayernorm.py::test_analyze_command")
def test_analyze_cli(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat .\nalice met bob , then left .\the stayed .\nshort .\n")
    out = tmp_path / "out"
    main(["analyze", "--model", str(folder), "--input", str(corpus), "--methods", "weights,entropy,norms,alti",
          "--out", str(out), "--batch-size", "2", "--max-length", "32"])
    doc = json.loads((out / "results.json").read_text())
    for name in ("attn_to_cls", "entropy"):
        assert doc[name]["shape"] == [4, 4], name
        assert np.isfinite(np.array(doc[name]["value"])).all(), name
    for name, entry in doc.items():
        if name != "meta" and isinstance(entry, dict) and "value" in entry:
            assert np.isfinite(np.array(entry["value"], dtype=float)).all(), name


# head patching on ModernBERT (its suffix rerunning the local and global layers with their score bias) runs fast,
# under grad and with finite values, in tests/test_contract_families.py (modernbert in GRADIENT_PATHS)
@pytest.mark.slow(twin="tests/test_contract_families.py::test_every_kernel_has_finite_gradients")
def test_patch_heads(folder):
    model = jattn.load(folder)
    clean = model.tokenizer(["the cat sat on the mat .", "alice met bob , then left ."], padding=True,
                            return_tensors="np")
    corrupted = {k: v.copy() for k, v in clean.items()}
    corrupted["input_ids"][:, 2] = 7
    keep = ("input_ids", "attention_mask")
    clean, corrupted = ({k: v for k, v in b.items() if k in keep} for b in (clean, corrupted))
    w = np.random.default_rng(0).normal(size=model.config.hidden_size).astype(np.float32)
    effects = jattn.patch_heads(model, clean, corrupted, lambda out: out["last_hidden_state"][:, 0] @ w)
    effects = effects["encoder"] if isinstance(effects, dict) else effects
    assert effects.shape == (model.config.num_layers, model.config.num_heads)
    assert np.isfinite(effects).all() and np.abs(effects).max() > 0


def test_value_zeroing(folder):
    """Value zeroing (``jattn.analyses.context_mixing``, which runs each layer with its
    ``score_bias``: here the layer's rotary tables and window) on a padded token-id batch: row-
    normalised maps over the real tokens, and no mixing beyond a local layer's window in layer 1
    (its input already mixes tokens, so only its own window can move a token's output)."""
    from jattn.analyses.context_mixing import value_zeroing

    model = jattn.load(folder)
    batch = model.tokenizer(["the cat sat on the mat . a dog ran home", "alice met bob"], padding=True,
                            return_tensors="np")
    batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
    maps = value_zeroing(model, batch)["value_zeroing_layers"]  # (L, b, n, n)
    real = batch["attention_mask"].astype(bool)
    assert np.isfinite(maps).all()
    for b in range(len(real)):
        m = maps[:, b][:, real[b]][:, :, real[b]]  # (L, r, r)
        np.testing.assert_allclose(m.sum(-1), 1.0, rtol=1e-5)
    i = np.arange(real.shape[1])
    far = (np.abs(i[:, None] - i[None]) > 2)[None] & real[:, :, None] & real[:, None, :]  # (b, n, n) real pairs
    # zeroing a value α never reads changes the output by rounding only (other XLA fusions of the same sums)
    assert maps[1][far].max() <= tolerance(1.0, model_terms(model.config, real.shape[1])), maps[1][far].max()
