"""Generic encoder capabilities that families switch on by config (``jattn.nn``): an additive
relative-position score bias, no token types. Each against a slow, obviously correct reference;
the families using them are checked against Hugging Face in tests/families/."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jattn import Interventions
from jattn.models.encoder import EncoderModel
from jattn.nn import state
from jattn.nn.config import EncoderConfig
from jattn.nn.encoder import forward
from jattn.nn.relative import relative_position_bucket
from jattn.sweeps.pruning import remove_heads
from tiny_encoders import random_batch
from tolerance import assert_close, model_terms

BASE = dict(model_type="test", vocab_size=60, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=24,
            hidden_act="gelu", max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-12,
            pad_token_id=1, positions="after_padding", classifier="dense_tanh", hidden_dropout=0.0,
            attention_dropout=0.0)


def slow_bucket(rel: int, buckets: int, max_distance: int) -> int:
    """The bidirectional bucket of one distance j − i, written out (Raffel et al. 2020, T5)."""
    half = buckets // 2
    bucket = half if rel > 0 else 0  # keys after the query: upper half
    n = abs(rel)
    exact = half // 2
    if n < exact:
        return bucket + n
    log_bucket = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (half - exact))
    return bucket + min(log_bucket, half - 1)


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 16), (16, 64)])
def test_bucket_matches_slow_reference(buckets, max_distance):
    rel = np.arange(-700, 701)
    got = np.asarray(relative_position_bucket(jnp.asarray(rel), buckets, max_distance))
    want = np.array([slow_bucket(int(r), buckets, max_distance) for r in rel])
    np.testing.assert_array_equal(got, want)


def test_bucket_matches_hugging_face():
    """MPNet's (and T5's bidirectional) bucketing, float32 as theirs, over every distance of 2,048 positions."""
    import torch
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    rel = np.arange(-2047, 2048)
    want = MPNetEncoder.relative_position_bucket(torch.tensor(rel)).numpy()
    np.testing.assert_array_equal(np.asarray(relative_position_bucket(jnp.asarray(rel), 32, 128)), want)


def _model(seed=0, **kw) -> tuple[EncoderConfig, dict]:
    config = EncoderConfig(**{**BASE, **kw})
    params = nnx.to_pure_dict(state.init(config, seed=seed))
    if config.relative_position_buckets:  # a bias large enough to move α visibly
        params["relative_bias"] = 2.0 * jax.random.normal(jax.random.key(seed + 7), params["relative_bias"].shape)
    return config, params


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_score_bias_enters_every_layers_scores():
    """α of every layer from its input, the layer's q/k and the shared table, in float64 by loops."""
    config, params = _model(relative_position_buckets=8, relative_position_max_distance=6)
    batch = random_batch(config, [9, 6, 3], seed=1)
    out, ints = forward(params, config, batch, internals=("weights", "residual"))
    att, table = params["layers"]["attention"], np.asarray(params["relative_bias"], np.float64)  # (R, H)
    n = batch["input_ids"].shape[1]
    d_h = config.head_dim
    for layer in range(config.num_layers):
        x = np.asarray(ints["residual"][layer], np.float64)  # (b, n, D)
        q = (
            np.einsum("bnd,dhe->bhne", x, att["query"]["kernel"][layer])
            + np.asarray(att["query"]["bias"][layer])[:, None]
        )
        k = np.einsum("bnd,dhe->bhne", x, att["key"]["kernel"][layer]) + np.asarray(att["key"]["bias"][layer])[:, None]
        s = np.einsum("bhie,bhje->bhij", q, k) / math.sqrt(d_h)  # (b, H, n, n)
        for i in range(n):
            for j in range(n):
                s[:, :, i, j] += table[slow_bucket(j - i, 8, 6)]
        s = np.where(batch["attention_mask"][:, None, None, :] == 1, s, -np.inf)
        assert_close(ints["weights"][layer], _softmax(s), terms=model_terms(config, n) * (layer + 1),
                     err_msg=f"layer {layer}")
    # a zero table is no bias
    plain = dataclasses.replace(config, relative_position_buckets=0)
    zero = {**params, "relative_bias": jnp.zeros_like(params["relative_bias"])}
    del_bias = {k: v for k, v in params.items() if k != "relative_bias"}
    assert_close(forward(zero, config, batch, internals=None)[0]["last_hidden_state"],
                 forward(del_bias, plain, batch, internals=None)[0]["last_hidden_state"],
                 terms=model_terms(config, n))


def test_score_bias_in_classify_and_pruning():
    """The cheap [CLS]-only path and a pruned model read the bias of their heads: classify equals
    the forward's logits; the pruned model equals the masked one (the table stays indexed by the
    original heads)."""
    config, params = _model(relative_position_buckets=8, relative_position_max_distance=6, num_labels=3)
    model = EncoderModel(config, params, tokenizer=None)
    batch = random_batch(config, [9, 6, 3], seed=2)
    full = model.forward(batch, internals=("weights",))
    assert_close(model.classify(batch), full.logits, terms=model_terms(config, 9))
    keep = np.array([[0, 1, 0, 1], [0, 0, 1, 0]], bool)
    pruned = remove_heads(model, keep)
    assert pruned.config.num_heads == 2
    masked = model.forward(batch, Interventions(head_gates=jnp.asarray(keep, jnp.float32)), internals=("weights",))
    got = pruned.forward(batch, internals=("weights",))
    assert_close(got.logits, masked.logits, terms=model_terms(config, 9))
    for layer in range(2):
        slots = np.flatnonzero(keep[layer])
        assert_close(got.attentions[layer][:, : len(slots)], masked.attentions[layer][:, slots],
                     terms=model_terms(config, 9))


def test_no_token_types():
    """type_vocab_size 0: no token-type table; the embeddings are word + position, the ids ignored."""
    config, params = _model(type_vocab_size=0)
    assert "token_type" not in params["embeddings"]
    batch = random_batch(config, [7, 4], seed=3)
    other = {**batch, "token_type_ids": np.ones_like(batch["token_type_ids"])}
    h0 = forward(params, config, batch, internals=None)[0]["hidden_states"][0]
    np.testing.assert_array_equal(h0, forward(params, config, other, internals=None)[0]["hidden_states"][0])
    e = params["embeddings"]
    pos = np.where(batch["input_ids"] != 1, np.cumsum(batch["input_ids"] != 1, 1), 0) + 1  # after padding
    x = np.asarray(e["word"], np.float64)[batch["input_ids"]] + np.asarray(e["position"], np.float64)[pos]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    assert_close(h0, x * np.asarray(e["ln"]["scale"]) + np.asarray(e["ln"]["bias"]), terms=config.hidden_size)
    model = EncoderModel(config, params, tokenizer=None)
    assert model.check_batch(other)["input_ids"].shape == (2, 7)  # any token type ids pass: they are ignored


def test_embedding_projection():
    """embedding_size E != D: tables of width E, LayerNorm over E, then a learned E -> D projection;
    the layers see D."""
    config, params = _model(embedding_size=8)
    e = params["embeddings"]
    assert e["word"].shape == (60, 8) and e["ln"]["scale"].shape == (8,) and e["project"]["kernel"].shape == (8, 16)
    batch = random_batch(config, [7, 4], seed=5)
    out, _ = forward(params, config, batch, internals=None)
    pos = np.where(batch["input_ids"] != 1, np.cumsum(batch["input_ids"] != 1, 1), 0) + 1
    x = (np.asarray(e["word"], np.float64)[batch["input_ids"]] + np.asarray(e["position"], np.float64)[pos]
         + np.asarray(e["token_type"], np.float64)[batch["token_type_ids"]])
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    x = x * np.asarray(e["ln"]["scale"]) + np.asarray(e["ln"]["bias"])  # (b, n, E)
    want = x @ np.asarray(e["project"]["kernel"], np.float64) + np.asarray(e["project"]["bias"])  # (b, n, D)
    assert_close(out["hidden_states"][0], want, terms=2 * 8)
    assert out["last_hidden_state"].shape == (2, 7, 16)
    assert "project" not in _model()[1]["embeddings"]  # E = D: no projection
