"""The models' methods under ``jax.jit``, ``jax.grad`` and ``jax.vmap``, and their results as pytrees
(issue #59, item 4): the input checks read values only where they are concrete."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from jattn.models.encoder import EncoderResult
from jattn.models.seq2seq import Generation, Seq2SeqResult
from jattn.nn import encoder
from tiny_encoders import random_batch, save_tiny
from tiny_seq2seq import padded_batch, save_tiny as save_tiny_seq2seq
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4", head="cls"), use_cache=False)


@pytest.fixture(scope="module")
def batch(bert):
    return random_batch(bert.config, [9, 6, 2], seed=3, pairs=True)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return jattn.load(save_tiny_seq2seq(tmp_path_factory.mktemp("marian"), "marian", seed=1), use_cache=False)


def test_jit_forward_equals_eager(bert, batch):
    eager = bert.forward(batch)
    jitted = jax.jit(lambda b: bert.forward(b).last_hidden_state)(batch)
    assert_close(jitted, eager.last_hidden_state, terms=model_terms(bert.config, batch["input_ids"].shape[1]))


def test_result_is_a_pytree(bert, batch):
    """A jitted forward returns the result itself; ``jax.tree.map`` and ``jax.device_get`` reach every
    array, None fields (no hidden-state stack, no MLM logits here) included."""
    eager = bert.forward(batch, internals=None)
    assert eager.stack is None and eager.mlm_logits is None and eager.logits is not None
    jitted = jax.jit(lambda b: bert.forward(b, internals=None))(batch)
    assert isinstance(jitted, EncoderResult) and jitted.stack is None and jitted.internals == {}
    host = jax.device_get(jitted)
    assert isinstance(host.last_hidden_state, np.ndarray) and isinstance(host.logits, np.ndarray)
    doubled = jax.tree.map(lambda a: 2 * a, eager)
    np.testing.assert_array_equal(doubled.pooler_output, 2 * np.asarray(eager.pooler_output))
    assert len(jax.tree.leaves(eager)) == 3  # last hidden state, pooler output, logits


def test_grad_wrt_head_gates_through_forward(bert, batch):
    """``jax.grad`` w.r.t. head gates through ``model.forward`` equals it through the pure face."""
    L, H = bert.config.num_layers, bert.config.num_heads
    gates = jnp.full((L, H), 0.9, jnp.float32)
    mask = jnp.asarray(batch["attention_mask"], jnp.float32)[..., None]  # (b, n, 1)

    def through_model(g):
        return (bert.forward(batch, Interventions(head_gates=g), internals=None).last_hidden_state * mask).sum()

    def through_pure(g):
        inputs = {k: jnp.asarray(v) for k, v in batch.items()}
        out, _ = encoder.forward(bert.params, bert.config, inputs, Interventions(head_gates=g), internals=None)
        return (out["last_hidden_state"] * mask).sum()

    got, want = jax.grad(through_model)(gates), jax.jit(jax.grad(through_pure))(gates)
    assert got.shape == (L, H) and np.abs(np.asarray(got)).max() > 0
    assert_close(got, want, terms=2 * model_terms(bert.config, batch["input_ids"].shape[1]))


def test_grad_wrt_per_example_gates_and_traced_disabled_heads(bert, batch):
    """Traced gates of every shape and traced 0/1 disabled heads (ints, made bool) go through the checks."""
    L, H = bert.config.num_layers, bert.config.num_heads
    b = batch["input_ids"].shape[0]
    disabled = np.zeros((L, H), np.int32)
    disabled[0, 1] = 1

    def loss(g, d):
        return bert.forward(batch, Interventions(head_gates=g, disabled_heads=d), internals=None).logits.sum()

    g = jax.jit(jax.grad(loss))(jnp.ones((L, b, H)), disabled)
    eager = bert.forward(batch, Interventions(disabled_heads=disabled.astype(bool)), internals=None).logits.sum()
    assert g.shape == (L, b, H)
    assert_close(jax.jit(loss)(jnp.ones((L, b, H)), disabled), eager, terms=model_terms(bert.config, 9))


def test_vmap_over_examples_equals_a_loop(bert, batch):
    """vmap over the examples, each a batch of one (b, 1, n), equals a loop of forwards."""
    stacked = {k: np.asarray(v)[:, None] for k, v in batch.items()}  # (b, 1, n)
    mapped = jax.vmap(lambda one: bert.forward(one, internals=("weights",)))(stacked)
    for i in range(batch["input_ids"].shape[0]):
        one = bert.forward({k: v[i] for k, v in stacked.items()}, internals=("weights",))
        terms = model_terms(bert.config, batch["input_ids"].shape[1])
        assert_close(mapped.last_hidden_state[i], one.last_hidden_state, terms=terms)
        assert_close(mapped.attentions[i], one.attentions, terms=terms)


def test_vmap_over_gate_settings(bert, batch):
    L, H = bert.config.num_layers, bert.config.num_heads
    settings = np.random.default_rng(0).uniform(0, 1, (3, L, H)).astype(np.float32)
    mapped = jax.vmap(lambda g: bert.classify(batch, Interventions(head_gates=g)))(settings)
    for i, g in enumerate(settings):
        assert_close(mapped[i], bert.classify(batch, Interventions(head_gates=g)), terms=model_terms(bert.config, 9))


def test_traced_inputs_keep_shape_checks(bert, batch):
    """Under jit the values are unknown, but a wrong shape or dtype is still the clear error."""
    bad = dict(batch, attention_mask=np.ones((3, 4), np.int32))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        jax.jit(lambda b: bert.forward(b).last_hidden_state)(bad)
    with pytest.raises(ValueError, match="must be an integer array"):
        jax.jit(lambda b: bert.forward(b).last_hidden_state)(dict(batch, input_ids=np.zeros((3, 9), np.float32)))
    L, H = bert.config.num_layers, bert.config.num_heads
    with pytest.raises(ValueError, match="head_gates"):
        jax.jit(lambda g: bert.forward(batch, Interventions(head_gates=g)).last_hidden_state)(jnp.ones((L, H + 1)))
    with pytest.raises(ValueError, match="outside the vocabulary"):  # concrete values are still read
        bert.forward(dict(batch, input_ids=np.full((3, 9), bert.config.vocab_size, np.int32)))


def test_seq2seq_forward_under_jit_grad_vmap(marian):
    batch = padded_batch(marian.config, seed=2, b=3)
    eager = marian.forward(batch)
    jitted = jax.jit(lambda b: marian.forward(b))(batch)
    assert isinstance(jitted, Seq2SeqResult)
    terms = model_terms(marian.config, 9)
    assert_close(jitted.logits, eager.logits, terms=terms)
    assert_close(jitted.cross_attentions, eager.cross_attentions, terms=terms)
    assert jax.tree.structure(jax.device_get(eager)) == jax.tree.structure(eager)
    c = marian.config
    gates = jnp.ones((c.decoder_layers, c.decoder_heads))
    grad = jax.grad(lambda g: marian.forward(batch, {"cross": Interventions(head_gates=g)}).logits.sum())(gates)
    assert grad.shape == gates.shape and np.abs(np.asarray(grad)).max() > 0
    stacked = {k: np.asarray(v)[:, None] for k, v in batch.items()}  # (b, 1, ...)
    mapped = jax.vmap(lambda one: marian.forward(one).logits)(stacked)
    for i in range(3):
        assert_close(mapped[i], marian.forward({k: v[i] for k, v in stacked.items()}).logits, terms=terms)


def test_generate_under_jit(marian):
    """Traced, the rows' lengths are values: the ids come untrimmed (b, max_length), equal to the
    eager ids padded with the fill; with attentions, a ``Generation`` pytree."""
    batch = padded_batch(marian.config, seed=2, b=3)
    eager = marian.generate(batch["input_ids"], batch["attention_mask"], max_length=10).sequences
    jitted = np.asarray(jax.jit(lambda i, m: marian.generate(i, m, max_length=10).sequences)(batch["input_ids"],
                                                                                              batch["attention_mask"]))
    assert jitted.shape == (3, 10)
    np.testing.assert_array_equal(jitted[:, : eager.shape[1]], eager)
    assert (jitted[:, eager.shape[1]:] == marian.config.pad_token_id).all()
    got = jax.jit(lambda i, m: marian.generate(i, m, max_length=10, return_attentions=True))(
        batch["input_ids"], batch["attention_mask"])
    assert isinstance(got, Generation) and got.decoder_attentions.shape[3:] == (9, 9)


def test_jit_grad_wrt_a_patch_blend(bert, batch):
    """Attribution patching through ``model.forward`` under jit: a traced float ``where`` (and a
    traced weights_delta) pass the checks; at t = 0 the forward is the unpatched one."""
    c = bert.config
    L, (b, n), D = c.num_layers, batch["input_ids"].shape, c.hidden_size
    value = np.random.default_rng(1).normal(size=(L, b, n, D)).astype(np.float32)

    def logits(t, delta):
        iv = Interventions(patch={"residual": (value, t)}, weights_delta=delta)
        return bert.forward(batch, iv, internals=None).logits

    t0, delta0 = jnp.zeros((L, b, 1)), jnp.zeros((L, b, c.num_heads, n, n))
    assert_close(jax.jit(logits)(t0, delta0), bert.forward(batch, internals=None).logits,
                 terms=model_terms(c, n))
    g = jax.jit(jax.grad(lambda t, d: logits(t, d).sum(), argnums=(0, 1)))(t0, delta0)
    assert g[0].shape == t0.shape and np.abs(np.asarray(g[0])).max() > 0


def test_first_call_inside_jit(bert, batch):
    """A model whose first forward is traced caches concrete per-layer weight views, not tracers
    that a later call would find leaked."""
    fresh = jattn.load(bert.source, use_cache=False)
    jitted = jax.jit(lambda b: fresh.forward(b, internals=None).last_hidden_state)(batch)
    eager = fresh.forward(batch, internals=None).last_hidden_state
    assert_close(jitted, eager, terms=model_terms(fresh.config, batch["input_ids"].shape[1]))


def test_grad_wrt_inputs_embeds_through_forward(bert, batch):
    """Saliency through ``model.forward``: traced ``inputs_embeds`` pass the checks (their values,
    unknown, are not read); at the ids' embeddings the forward is the forward on the ids."""
    embeds = encoder.word_embeddings(bert.params, bert.config, jnp.asarray(batch["input_ids"]))  # (b, n, E)
    rest = {k: v for k, v in batch.items() if k != "input_ids"}

    def hidden(e):
        return bert.forward({**rest, "inputs_embeds": e}, internals=None).last_hidden_state

    terms = model_terms(bert.config, batch["input_ids"].shape[1])
    assert_close(jax.jit(hidden)(embeds), bert.forward(batch, internals=None).last_hidden_state, terms=terms)
    g = jax.jit(jax.grad(lambda e: hidden(e).sum()))(embeds)
    assert g.shape == embeds.shape and np.abs(np.asarray(g)).max() > 0
