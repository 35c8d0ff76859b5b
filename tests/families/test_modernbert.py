"""ModernBERT's quirks (``jattn/families/modernbert``): local layers (a window |i − j| ≤ 2 smaller than the
padded length, where a padding query may see no key at all) between global ones, rotary positions with other
bases per layer type, biases where the checkpoint has them; value zeroing, which reruns each layer with its
window, on a folder with a tiny word-level ``tokenizer.json``. The rest of ModernBERT's checks (disabled heads
against HF hooks that know the window, ``jattn analyze`` and ``jattn.patch_heads`` among them): the table."""

from __future__ import annotations


import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from encoder_family_parity import check_outputs, load_pair
from encoder_family_smoke import wordlevel_tokenizer
from family_pairs import pair_fixture, save
from tolerance import model_terms, tolerance

pair = pair_fixture("modernbert")
PRELN = "tests/families/test_roberta_prelayernorm.py::"


def test_local_layers_mask_beyond_the_window(pair):
    """A local layer's α is 0 beyond |i − j| = 2 (real queries); a global layer's is not."""
    model, _, batch = pair
    w = np.asarray(model.forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)
    i = np.arange(w.shape[-1])
    far = np.abs(i[:, None] - i[None]) > 2
    assert np.all(w[1][0][:, far] == 0) and np.all(w[3][0][:, far] == 0)
    assert np.any(w[0][0][:, far] > 0)


def test_biases_and_first_norm(pair, tmp_path):
    """With biases everywhere (attention, FFN, LayerNorm β), still HF's numbers."""
    model, oracle = load_pair(save(tmp_path, "modernbert", attention_bias=True, mlp_bias=True, norm_bias=True))
    check_outputs(model, oracle, pair[2], types=False)


def test_rotary_scores_depend_on_the_offset_only():
    """RoFormer Eq. 16: ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩, so shifting both positions keeps the score."""
    from jattn.nn.rotary import rotate, tables

    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 8)).astype(np.float32)
    cos, sin = tables(10.0, 12, 8)  # (12, 8)
    score = lambda m, n: float(rotate(jnp.asarray(q)[None], cos[m:m + 1], sin[m:m + 1])[0]  # noqa: E731
                               @ rotate(jnp.asarray(k)[None], cos[n:n + 1], sin[n:n + 1])[0])
    np.testing.assert_allclose(score(2, 5), score(6, 9), rtol=1e-5)
    np.testing.assert_allclose(score(0, 0), float(q @ k), rtol=1e-5)
    assert abs(score(2, 5) - score(2, 6)) > 1e-3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The checkpoint with a word-level tokenizer.json ([CLS] A [SEP] (B [SEP]), ids 0, 1, 2 as the config's
    cls / pad / sep; 80 tokens)."""
    f = save(tmp_path_factory.mktemp("modernbert_tok"), "modernbert")
    wordlevel_tokenizer(f)
    return f


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
