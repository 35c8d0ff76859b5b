"""Internals and interventions of the encoder: f_h(x) identity, gates, disabled heads, compiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.models.encoder import EncoderModel, _forward
from tiny_encoders import random_batch, save_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4"), use_cache=False)


@pytest.fixture(scope="module")
def batch(tiny):
    return random_batch(tiny.config, [9, 6, 2], seed=3, pairs=True)


def test_transformed_vectors_reconstruct_attention_output(tiny, batch):
    """Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O equals the block output before the residual (Kobayashi Eq. 5)."""
    internals = tiny.forward(batch).internals
    alpha = np.asarray(internals["weights"], np.float64)  # (L, b, H, n, n)
    v = np.asarray(internals["values"], np.float64)  # (L, b, H, n, d_h)
    w_o = np.asarray(internals["out_kernel"], np.float64)  # (L, H, d_h, D)
    L, b, H, n, _ = alpha.shape
    for l in range(L):
        y = np.zeros((b, n, w_o.shape[-1]))
        for h in range(H):
            f = v[l, :, h] @ w_o[l, h]  # (b, n, D) f_h(x_j), explicit
            y += np.einsum("bij,bjd->bid", alpha[l, :, h], f)
        y += np.asarray(internals["out_bias"][l])
        np.testing.assert_allclose(y, internals["output"][l], atol=1e-5)
        np.testing.assert_allclose(np.asarray(internals["residual"][l]) + y, internals["pre_ln"][l], atol=1e-5)


def test_transformed_vectors_helper(tiny, batch):
    from jattn.nn.attention import transformed_vectors

    internals = tiny.forward(batch).internals
    f = jax.vmap(transformed_vectors)(internals["values"], internals["out_kernel"])  # (L, b, H, n, D)
    explicit = np.einsum("lbhnd,lhde->lbhne", np.asarray(internals["values"]), np.asarray(internals["out_kernel"]))
    np.testing.assert_allclose(f, explicit, atol=1e-5)


def test_all_ones_gates_equal_no_gates(tiny, batch):
    L, H = tiny.config.num_layers, tiny.config.num_heads
    a, b = tiny.forward(batch), tiny.forward(batch, head_gates=np.ones((L, H)))
    np.testing.assert_array_equal(a.last_hidden_state, b.last_hidden_state)


def test_zero_gate_equals_zeroing_output_rows(tiny, batch):
    """Michel et al. 2019's masking: ξ_h = 0 is the same as removing W_O^h (b_O still passes)."""
    layer, head = 1, 2
    gates = np.ones((tiny.config.num_layers, tiny.config.num_heads), np.float32)
    gates[layer, head] = 0.0
    gated = tiny.forward(batch, head_gates=gates)
    params = jax.tree.map(np.array, tiny.params)
    params["layers"]["attention"]["out"]["kernel"][layer, head] = 0.0  # (H, d_h, D) slice of layer
    edited = EncoderModel(tiny.config, params, tiny.tokenizer).forward(batch)
    np.testing.assert_allclose(gated.last_hidden_state, edited.last_hidden_state, atol=1e-6)
    ungated = tiny.forward(batch)
    assert np.abs(np.asarray(gated.last_hidden_state) - np.asarray(ungated.last_hidden_state)).max() > 1e-3
    # Earlier layers are untouched.
    np.testing.assert_array_equal(gated.attentions[0], ungated.attentions[0])


def test_disabled_head_is_uniform_over_real_tokens(tiny, batch):
    """Kovaleva et al. 2019: the disabled head attends uniformly to the non-padding keys."""
    disabled = np.zeros((tiny.config.num_layers, tiny.config.num_heads), bool)
    disabled[0, 1] = True
    alpha = np.asarray(tiny.forward(batch, disabled_heads=disabled).attentions)  # (L, b, H, n, n)
    mask = batch["attention_mask"]
    for i, length in enumerate(mask.sum(1)):
        rows = alpha[0, i, 1]  # (n, n)
        np.testing.assert_array_equal(rows[:, length:], 0.0)
        np.testing.assert_allclose(rows[:, :length], 1.0 / length, rtol=1e-6)
    # Other heads keep their softmax weights (not uniform).
    assert np.abs(alpha[0, 0, 0, 0, :9] - 1 / 9).max() > 1e-3


def test_gates_are_differentiable(tiny, batch):
    """Importance is a gradient w.r.t. the gates (Michel et al. 2019, Eq. 2): compare with a finite difference."""
    from jattn.nn.encoder import forward

    inputs = tiny.check_batch(batch)

    @jax.jit
    def loss(g):
        out, _ = forward(tiny.params, tiny.config, inputs, head_gates=g)
        return jnp.sum(out["last_hidden_state"] ** 2)

    g0 = jnp.ones((tiny.config.num_layers, tiny.config.num_heads))
    grad = jax.grad(loss)(g0)
    eps = 1e-2
    step = g0.at[1, 3].add(eps)
    numeric = (loss(step) - loss(g0.at[1, 3].add(-eps))) / (2 * eps)
    np.testing.assert_allclose(grad[1, 3], numeric, rtol=2e-2)


def test_no_recompilation_for_same_padded_shape(tiny):
    batches = [random_batch(tiny.config, lengths, seed=s) for s, lengths in enumerate([[8, 3], [5, 8], [8, 8]])]
    tiny.forward(batches[0])
    size = _forward._cache_size()
    for b in batches[1:]:
        tiny.forward(b)
        L, H = tiny.config.num_layers, tiny.config.num_heads
        tiny.forward(b, head_gates=np.full((L, H), 0.5), disabled_heads=np.eye(L, H, dtype=bool))
    assert _forward._cache_size() == size


def test_bfloat16_compute_close_to_float32(tiny, batch):
    a = tiny.forward(batch)
    b = tiny.forward(batch, compute_dtype=jnp.bfloat16)
    assert b.last_hidden_state.dtype == jnp.bfloat16
    assert b.attentions.dtype == jnp.float32  # softmax stays in float32
    np.testing.assert_allclose(np.asarray(b.attentions), a.attentions, atol=3e-2)
    np.testing.assert_allclose(np.asarray(b.last_hidden_state, np.float32), a.last_hidden_state, atol=0.15)


def test_dropout_only_with_rng(tiny, batch):
    from jattn.nn.encoder import forward

    inputs = tiny.check_batch(batch)
    run = jax.jit(lambda rng: forward(tiny.params, tiny.config, inputs, dropout_rng=rng)[0])
    a, b, c = run(None), run(jax.random.key(0)), run(jax.random.key(0))
    np.testing.assert_array_equal(b["last_hidden_state"], c["last_hidden_state"])
    assert np.abs(np.asarray(a["last_hidden_state"]) - np.asarray(b["last_hidden_state"])).max() > 1e-3


def test_bad_inputs_name_the_problem(tiny):
    L, H = tiny.config.num_layers, tiny.config.num_heads
    good = random_batch(tiny.config, [4, 2])
    with pytest.raises(ValueError, match="shape"):
        tiny.forward(good, head_gates=np.ones((L + 1, H)))
    with pytest.raises(ValueError, match="vocabulary"):
        tiny.forward({**good, "input_ids": good["input_ids"] + tiny.config.vocab_size})
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        tiny.forward({k: v[0] for k, v in good.items()})
    with pytest.raises(ValueError, match="positions"):
        tiny.forward(random_batch(tiny.config, [tiny.config.max_length + 1]))
