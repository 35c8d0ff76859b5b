"""The runner on a translation model: (source, target) pairs teacher-forced, statistics per
attention type equal to a per-example numpy loop over the model's own unpadded forward."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from jattn.methods.distance import JSDistance
from jattn.methods.base import Method
from jattn.methods.norm_stats import NormClassAttention
from jattn.methods.weights import ClassAttention, Entropy
from jattn.run import run_corpus
from tiny_seq2seq import save_tiny, sentences

KINDS = ("encoder", "decoder", "cross")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return jattn.load(str(save_tiny(tmp_path_factory.mktemp("marian"), "marian")), use_cache=False)


def pairs(n=9):
    return list(zip(sentences(n, 1), sentences(n, 2)))


def one(model, src: str, tgt: str):
    """The unpadded teacher-forced forward of one pair: weights and norms per kind, key classes."""
    c = model.config
    x = np.asarray(model.tokenizer([src])["input_ids"][0])
    y = np.asarray(model.tokenizer(text_target=[tgt])["input_ids"][0])
    dec = np.concatenate([[c.decoder_start_token_id], y[:-1]])
    batch = {"input_ids": x[None], "attention_mask": np.ones((1, len(x)), int), "decoder_input_ids": dec[None],
             "decoder_attention_mask": np.ones((1, len(y)), int)}
    out = model.forward(batch)
    norms = jattn.norms(model, batch)
    weights = {k: np.asarray(out.internals[k]["weights"], np.float64)[:, 0] for k in KINDS}  # (L, H, q, k)
    weighted = {k: np.asarray(norms[k]["weighted_norm"], np.float64)[:, 0] for k in KINDS}  # (L, H, q, k)
    keys_eos = {"encoder": x == c.eos_token_id, "decoder": dec == c.eos_token_id, "cross": x == c.eos_token_id}
    return weights, weighted, keys_eos


def test_translation_statistics_equal_per_example_loops(marian):
    data = pairs()
    got = run_corpus(marian, data, [ClassAttention(), Entropy(), NormClassAttention(), JSDistance()],
                     batch_size=4, max_length=32, progress=False).statistics
    to_sep = {k: [] for k in KINDS}
    norm_to_sep = {k: [] for k in KINDS}
    entropy = {k: [] for k in KINDS}
    prev = []
    js = {k: 0.0 for k in KINDS}
    for src, tgt in data:
        weights, weighted, eos = one(marian, src, tgt)
        for k in KINDS:
            A = weights[k]  # (L, H, q, k)
            L, H, q, n = A.shape
            to_sep[k].append(A[..., eos[k]].sum(-1).mean(-1))
            norm_to_sep[k].append(weighted[k][..., eos[k]].sum(-1).mean(-1))
            rows = np.zeros((L, H, q))
            for i in range(q):
                m = i + 1 if k == "decoder" else n  # keys row i may attend
                p = 0.9999 * A[..., i, :m] + 0.0001 / m
                rows[..., i] = -(p * np.log(p)).sum(-1)
                # JS between every pair of heads on this row, smoothing 0.999 / 0.001 over the m keys
                s = (0.999 * A[..., i, :m] + 0.001 / m).reshape(L * H, m)
                mid = 0.5 * (s[:, None] + s[None])
                kl = lambda a, b: (a * np.log(a / b)).sum(-1)  # noqa: E731
                js[k] = js[k] + 0.5 * (kl(s[:, None], mid) + kl(s[None], mid))
            entropy[k].append(rows.mean(-1))
        A = weights["decoder"]
        prev.append(np.mean([A[..., i, i - 1] for i in range(1, A.shape[2])], 0))
    for k in KINDS:
        np.testing.assert_allclose(got[f"{k}_attn_to_sep"].value, np.mean(to_sep[k], 0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got[f"{k}_norm_to_sep"].value, np.mean(norm_to_sep[k], 0), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got[f"{k}_entropy"].value, np.mean(entropy[k], 0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[f"{k}_js_distance"].value, js[k], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["decoder_attn_prev"].value, np.mean(prev, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["decoder_attn_next"].value, 0.0, atol=1e-7)  # causal: no key i + 1
    assert "cross_attn_prev" not in got and got["cross_attn_to_sep"].value.shape == (3, 2)
    assert got["encoder_attn_to_sep"].value.shape == (2, 4)


def test_batch_size_invariance(marian):
    data = pairs(11)
    a = run_corpus(marian, data, [ClassAttention()], batch_size=2, max_length=32, progress=False)
    b = run_corpus(marian, data, [ClassAttention()], batch_size=8, max_length=32, progress=False)
    assert a.meta["segments"] == b.meta["segments"] == 11
    for k in a.statistics:
        np.testing.assert_allclose(a.statistics[k].value, b.statistics[k].value, rtol=1e-5, atol=1e-8, err_msg=k)


def test_mismatched_methods_and_inputs_are_clear_errors(marian):
    class EncoderOnly(Method):  # the default families: ("encoder",)
        name = "encoder-only"

    with pytest.raises(ValueError, match="reads encoder models.*translation"):
        run_corpus(marian, pairs(), [EncoderOnly()], max_length=32, progress=False)
    with pytest.raises(ValueError, match="word-level"):
        run_corpus(marian, pairs(), [ClassAttention("word")], max_length=32, progress=False)
    with pytest.raises(ValueError, match=r"\(source, target\) pairs"):
        run_corpus(marian, sentences(3), [ClassAttention()], max_length=32, progress=False)
