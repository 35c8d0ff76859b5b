"""bfloat16 layer stacks on CPU (``jattn.nn.engine.layer_slice``): XLA:CPU widens a 16-bit float
stack's per-layer slice to float32 and hoists the conversion of the whole stack out of the layer
loop. The layer loop slices those stacks behind an optimization barrier instead. Checked against
the plain path (the stacks scanned as ``jax.lax.scan`` slices them: ``held_whole`` off): the same
forward values and attention weights, the same gradients w.r.t. the bfloat16 weights and the head
gates (with and without ``remat``), and a compiled forward without the float32 copy of the stacks."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jattn.nn import encoder, engine, state
from jattn.nn.config import EncoderConfig
from jattn.nn.interventions import Interventions
from tiny_encoders import random_batch
from tolerance import assert_close, model_terms, tolerance

CONFIG = EncoderConfig(model_type="bert", vocab_size=50, hidden_size=16, num_layers=3, num_heads=4,
                       intermediate_size=24, hidden_act="gelu", max_position_embeddings=32, type_vocab_size=1,
                       layer_norm_eps=1e-12, pad_token_id=0)


def bf16(params):
    return jax.tree.map(lambda a: a.astype(jnp.bfloat16) if jnp.issubdtype(a.dtype, jnp.floating) else a, params)


@pytest.fixture(scope="module")
def params():
    return bf16(jax.tree.map(jnp.asarray, nnx.to_pure_dict(state.init(CONFIG, seed=3))))


@pytest.fixture(scope="module")
def batch():
    return {k: jnp.asarray(v) for k, v in random_batch(CONFIG, [9, 6, 4], seed=1).items()}


@pytest.fixture
def plain(monkeypatch):
    """``fn()`` run with the stacks scanned (the path before ``layer_slice``), traced afresh."""
    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(engine, "held_whole", lambda a: False)
            return fn()
    return run


def stacked(params):
    """The bfloat16 layer stacks (L, ...) of ``params``, as a flat list."""
    return [a for path, a in jax.tree_util.tree_leaves_with_path(params)
            if engine._is_stacked(path) and a.dtype == jnp.bfloat16]


def test_the_stacks_are_held(params):
    """The case these tests exercise: on CPU every bfloat16 stack goes through the barrier."""
    assert jax.default_backend() == "cpu"
    assert stacked(params) and all(engine.held_whole(a) for a in stacked(params))


def test_forward_values_equal_the_scanned_path(params, batch, plain):
    fwd = lambda: jax.jit(lambda p: encoder.forward(p, CONFIG, batch))(params)  # noqa: E731
    (out, ints), (ref, ref_ints) = fwd(), plain(fwd)
    for key in ("last_hidden_state", "hidden_states"):
        np.testing.assert_array_equal(np.asarray(out[key]), np.asarray(ref[key]))
    np.testing.assert_array_equal(np.asarray(ints["weights"]), np.asarray(ref_ints["weights"]))  # α (L, b, H, n, n)
    assert out["last_hidden_state"].dtype == jnp.float32


@pytest.mark.parametrize("remat", [False, True])
def test_gradients_equal_the_scanned_path(params, batch, plain, monkeypatch, remat):
    """∂/∂ weights (bfloat16) and ∂/∂ head gates (Michel et al.'s importance) equal the plain
    path's, nonzero: a slice whose tangent were lost (the stacks bitcast to uint16 through the
    loop) would give zero weight gradients."""
    monkeypatch.setattr(engine, "remat_pays", lambda *a: True)  # remat taken at this tiny shape
    probe = jax.random.normal(jax.random.key(0), (3, 9, CONFIG.hidden_size))  # (b, n, D)

    def loss(p, gates):
        out, _ = encoder.forward(p, CONFIG, batch, Interventions(head_gates=gates), internals=None, remat=remat)
        return (out["last_hidden_state"] * probe).sum()

    gates = jnp.ones((CONFIG.num_layers, CONFIG.num_heads))  # (L, H)
    grads = lambda: jax.jit(jax.grad(loss, argnums=(0, 1)))(params, gates)  # noqa: E731
    (g_params, g_gates), (r_params, r_gates) = grads(), plain(grads)
    terms = 2 * 3 * model_terms(CONFIG, 9)  # a gradient over 3 rows of 9 tokens: other XLA fusions, other roundings
    assert_close(g_gates, r_gates, terms=terms)  # (L, H)
    assert np.abs(np.asarray(g_gates)).min() > 0
    scale = max(float(np.abs(np.asarray(r, np.float32)).max()) for r in stacked(r_params))  # some cancel (a key bias)
    for g, r in zip(stacked(g_params), stacked(r_params)):
        assert g.dtype == jnp.bfloat16  # rounded to bfloat16 from float32: a rounding may flip by its unit (2^-7)
        g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
        np.testing.assert_allclose(g, r, rtol=2.0**-7, atol=tolerance(scale, terms))
    assert all(np.abs(np.asarray(g, np.float32)).max() > 0 for g in stacked(g_params)[:4])


def test_no_float32_copy_of_the_stacks(plain):
    """The compiled forward of a bfloat16 model holds no copy of its stacks: its temporary buffers
    stay under half the stacks' float32 bytes (a 16-bit copy's), where the plain path's exceed the
    float32 bytes (XLA's buffer assignment, ``memory_analysis``; nothing run)."""
    config = dataclasses.replace(CONFIG, hidden_size=128, intermediate_size=512, num_layers=4)
    p = bf16(jax.tree.map(jnp.asarray, nnx.to_pure_dict(state.init(config, seed=0))))
    b = {k: jnp.asarray(v) for k, v in random_batch(config, [8, 8], seed=0).items()}
    f32_bytes = sum(a.size * 4 for a in stacked(p))  # the stacks widened to float32

    def temp():
        fn = jax.jit(lambda p: encoder.forward(p, config, b, internals=None)[0]["last_hidden_state"])
        return fn.lower(p).compile().memory_analysis().temp_size_in_bytes

    held, scanned = temp(), plain(temp)
    assert scanned >= f32_bytes, (scanned, f32_bytes)  # XLA:CPU's float32 copy, which the barrier avoids
    assert held < f32_bytes / 2, (held, f32_bytes)
