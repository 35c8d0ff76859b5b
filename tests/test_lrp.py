"""LRP head relevance (jattn.analyses.lrp) and head confidence (jattn.analyses.confidence): each relprop
step against numpy loops of the α-β rule (on linear functions the analytic decomposition), conservation
per layer on tiny BERT-classifier and Marian models, padding invariance, and confidence against loops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.analyses import lrp
from tiny_encoders import random_batch, save_tiny
from tiny_seq2seq import padded_batch
from tiny_seq2seq import save_tiny as save_tiny_seq2seq
from tolerance import assert_close, model_terms


def relprop_terms(layers: int, n: int, D: int) -> int:
    """The float32 reductions of relprop through ``layers`` encoder layers of width D on n tokens
    (H·d_h = D): per layer the token-wise step (shares over 2D inputs of D outputs, its sum over
    them, the rescaling over n·2D relevances) and the value path (shares over n·D inputs of n·D
    units, their sum, the rescaling)."""
    return layers * (2 * D + D + 2 * n * D + 3 * n * D)


def _ab(z):
    """The α-β shares of one output over its inputs, by the definition (numpy, one output)."""
    pos, neg = np.maximum(z, 0), np.minimum(z, 0)
    return lrp.ALPHA * pos / (pos.sum() + lrp.EPS) + lrp.BETA * neg / (neg.sum() - lrp.EPS)


def test_linear_positive_toy_equals_analytic_decomposition():
    """o = Σ w_i x_i + b with every term positive: R_i = (w_i x_i + b/N) / o (the exact shares)."""
    rng = np.random.default_rng(0)
    w, x, b = rng.uniform(0.1, 1, (3, 4)), rng.uniform(0.1, 1, (3, 4)), 0.7
    f = lambda v: jnp.sum(jnp.asarray(w) * v) + b
    got = np.asarray(lrp.relprop_scalar(f, jnp.asarray(x), jnp.ones(3)))
    want = (w * x + b / 12) / (np.sum(w * x) + b)
    assert_close(got, want, terms=12)  # float32 sums of the 12 contributions vs float64
    assert_close(got.sum(), 1.0, terms=2 * 12)


def test_linear_mixed_signs_toy_equals_loop():
    """Mixed signs: R_i = α z⁺_i/Σz⁺ + β z⁻_i/Σz⁻, rescaled to Σ|R| = 1; padded rows get nothing."""
    rng = np.random.default_rng(1)
    w, x = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    mask = np.array([1, 1, 1, 0])
    f = lambda v: jnp.sum(jnp.asarray(w) * v) - 0.3
    got = np.asarray(lrp.relprop_scalar(f, jnp.asarray(x), jnp.asarray(mask)))
    z = (w * x - 0.3 / 9) * mask[:, None]
    want = _ab(z.ravel()).reshape(4, 3)
    want /= np.abs(want).sum()
    assert_close(got, want, terms=12)  # float32 sums of 12 contributions, rescaled
    assert (got[3] == 0).all()


def test_tokenwise_step_on_a_linear_layer_equals_loop():
    rng = np.random.default_rng(2)
    n, D, H, d_h = 3, 4, 2, 2
    A, B, b0 = rng.normal(size=(D, D)), rng.normal(size=(H * d_h, D)), rng.normal(size=D)
    x, c, R = rng.normal(size=(n, D)), rng.normal(size=(n, H, d_h)), rng.uniform(0, 1, (n, D))
    mask = np.array([1, 1, 0])
    R[2] = 0.0  # a padded token carries no relevance
    g = lambda xi, ci: xi @ jnp.asarray(A) + ci.reshape(-1) @ jnp.asarray(B) + jnp.asarray(b0)
    r_x, r_c = lrp.relprop_tokenwise(g, jnp.asarray(R), jnp.asarray(x), jnp.asarray(c), jnp.asarray(mask))
    want = np.zeros((n, D + H * d_h))
    for i in range(n):
        inp = np.concatenate([x[i], c[i].ravel()])
        W = np.concatenate([A, B])  # (P, D)
        for o in range(D):
            z = W[:, o] * inp + b0[o] / inp.size  # exact contributions of a linear map
            want[i] += R[i, o] * _ab(z) * mask[i]
    want *= np.abs(R).sum() / np.abs(want).sum()
    terms = D + n * (D + H * d_h)  # float32 sums over the D outputs and all inputs (the rescaling)
    assert_close(r_x, want[:, :D], terms=terms)
    assert_close(np.asarray(r_c).reshape(n, -1), want[:, D:], terms=terms)


def test_value_path_equals_loop():
    rng = np.random.default_rng(3)
    n, D, H, d_h = 3, 4, 2, 2
    mask = np.array([1, 1, 0])
    a = rng.uniform(0, 1, (H, n, n)) * mask[None, None, :]
    a /= a.sum(-1, keepdims=True)
    x, w, b = rng.normal(size=(n, D)), rng.normal(size=(D, H, d_h)), rng.normal(size=(H, d_h))
    R = rng.uniform(0, 1, (n, H, d_h)) * mask[:, None, None]
    got = np.asarray(lrp.relprop_values(jnp.asarray(R), jnp.asarray(a), jnp.asarray(x), jnp.asarray(w),
                                        jnp.asarray(b), jnp.asarray(mask)))
    want = np.zeros((n, D))
    for h in range(H):
        for i in range(n):
            for e in range(d_h):
                z = np.zeros((n, D))
                for j in range(n):
                    for k in range(D):
                        if mask[i] and mask[j]:
                            z[j, k] = a[h, i, j] * x[j, k] * w[k, h, e] + b[h, e] / (2 * D)
                want += R[i, h, e] * _ab(z.ravel()).reshape(n, D)
    want *= np.abs(R).sum() / np.abs(want).sum()
    assert_close(got, want, terms=n * D * H * d_h)  # float32 sums over the inputs and units
    assert (got[2] == 0).all()


@pytest.fixture(scope="module")
def bert_cls(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert-cls"), "bert-2x4", head="cls"), use_cache=False)


def test_conservation_and_padding_invariance_classifier(bert_cls):
    batch = {k: jnp.asarray(v) for k, v in random_batch(bert_cls.config, [7, 4, 6], seed=1).items()}
    out = jax.tree.map(np.asarray, lrp.head_relevance(bert_cls.params, bert_cls.config, batch))
    L, H = bert_cls.config.num_layers, bert_cls.config.num_heads
    assert out["heads"].shape == (3, L, H)
    n, D = batch["input_ids"].shape[1], bert_cls.config.hidden_size
    terms = relprop_terms(L, n, D)  # conservation is exact in real arithmetic
    assert_close(out["layer_input"], np.ones((3, L)), terms=terms)  # Σ R(x_l) = the logit's unit, every layer
    assert_close(out["heads"].sum(-1) + out["residual"], np.ones((3, L)), terms=terms)  # heads + residual
    assert (out["heads"] >= -1e-7).all()
    alone = {k: v[1:2, :4] for k, v in batch.items()}  # example 1 without its padding
    single = jax.tree.map(np.asarray, lrp.head_relevance(bert_cls.params, bert_cls.config, alone))
    assert_close(single["heads"][0], out["heads"][1], terms=model_terms(bert_cls.config, n) + terms)  # unpadded
    norm = lrp.normalise_per_layer(out["heads"])
    assert np.allclose(norm.sum(-1), 1.0)


def test_conservation_translation_model(tmp_path):
    model = jattn.load(save_tiny_seq2seq(tmp_path / "marian", "marian"), use_cache=False)
    raw = padded_batch(model.config, seed=2, b=3, s=7, t=5)
    batch = {k: jnp.asarray(v) for k, v in model.check_batch(raw).items()}
    batch["target_mask"] = jnp.asarray(raw["decoder_attention_mask"])
    out = jax.tree.map(np.asarray, lrp.head_relevance(model.params, model.config, batch))
    predictions = np.asarray(raw["decoder_attention_mask"]).sum(1)  # one unit per explained target position
    assert out["heads"].shape == (3, model.config.encoder_layers, model.config.encoder_heads)
    c = model.config  # conservation is exact in real arithmetic; relevance of ≤ 5 target positions
    terms = relprop_terms(c.encoder_layers, 7, c.d_model) + 5
    want = np.broadcast_to(predictions[:, None], out["residual"].shape)
    assert_close(out["layer_input"], want, terms=terms)
    assert_close(out["heads"].sum(-1) + out["residual"], want, terms=terms)


def test_classifier_needed(tmp_path):
    model = jattn.load(save_tiny(tmp_path / "bert", "bert-2x4"), use_cache=False)
    batch = {k: jnp.asarray(v) for k, v in random_batch(model.config, [5], seed=0).items()}
    with pytest.raises(ValueError, match="needs a prediction"):
        lrp.head_relevance(model.params, model.config, batch)


def test_confidence_equals_loop(bert_cls):
    from jattn.analyses.confidence import HeadConfidence
    from jattn.runner import run_corpus

    texts = ["the cat sat on the mat .", "a dog", "who is there ? nobody knows"]
    result = run_corpus(bert_cls, texts, [HeadConfidence()], batch_size=2, max_length=32, progress=False)
    got = result.statistics["confidence"].value
    enc = bert_cls.tokenizer(texts)
    sep = bert_cls.tokenizer.sep_token_id
    want, count = 0.0, 0
    for ids in enc["input_ids"]:
        a = np.asarray(
            bert_cls.forward(
                {"input_ids": np.asarray([ids]), "attention_mask": np.ones((1, len(ids)), np.int32)}
            ).internals["weights"]
        )[:, 0]  # (L, H, n, n)
        rows = [i for i, t in enumerate(ids) if t != sep]
        want = want + a[:, :, rows].max(-1).mean(-1)
        count += 1
    assert_close(got, want / count, terms=model_terms(bert_cls.config, 32) + count)  # batches of 2 vs alone
