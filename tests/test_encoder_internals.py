"""Internals and interventions of the encoder: f_h(x) identity, gates, disabled heads, compiles."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jattn
from jattn import Interventions
from jattn.models.encoder import EncoderModel, _forward
from tiny_encoders import random_batch, save_tiny
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4"), use_cache=False)


@pytest.fixture(scope="module")
def batch(tiny):
    return random_batch(tiny.config, [9, 6, 2], seed=3, pairs=True)


def test_transformed_vectors_reconstruct_attention_output(tiny, batch):
    """Σ_h Σ_j α[h,i,j] f_h(x_j) + b_O equals the block output before the residual (Kobayashi Eq. 5)."""
    internals, view = tiny.forward(batch).internals, tiny.module.view()
    alpha = np.asarray(internals["weights"], np.float64)  # (L, b, H, n, n)
    v = np.asarray(internals["values"], np.float64)  # (L, b, H, n, d_h)
    w_o = np.asarray(view["out_kernel"], np.float64)  # (L, H, d_h, D)
    L, b, H, n, _ = alpha.shape
    for l in range(L):
        y = np.zeros((b, n, w_o.shape[-1]))
        for h in range(H):
            f = v[l, :, h] @ w_o[l, h]  # (b, n, D) f_h(x_j), explicit
            y += np.einsum("bij,bjd->bid", alpha[l, :, h], f)
        y += np.asarray(view["out_bias"][l])
        terms = n + w_o.shape[-1]  # jattn's float32 context over n keys and projection over D; y is float64
        assert_close(y, internals["output"][l], terms=terms)
        assert_close(np.asarray(internals["residual"][l]) + y, internals["pre_ln"][l], terms=terms + 1)


def test_transformed_vectors_helper(tiny, batch):
    from jattn.nn.attention import transformed_vectors

    internals, w_o = tiny.forward(batch).internals, tiny.module.view()["out_kernel"]
    f = jax.vmap(transformed_vectors)(internals["values"], w_o)  # (L, b, H, n, D)
    explicit = np.einsum("lbhnd,lhde->lbhne", np.asarray(internals["values"]), np.asarray(w_o))
    assert_close(f, explicit, terms=w_o.shape[-2])  # XLA vs numpy float32 products over d_h


def test_all_ones_gates_equal_no_gates(tiny, batch):
    L, H = tiny.config.num_layers, tiny.config.num_heads
    a, b = tiny.forward(batch), tiny.forward(batch, Interventions(head_gates=np.ones((L, H), np.float32)))
    np.testing.assert_array_equal(a.last_hidden_state, b.last_hidden_state)
    c = tiny.forward(batch, Interventions(head_gates=np.full((L, H), 0.5, np.float32)))  # a changed gate changes it
    assert np.abs(np.asarray(a.last_hidden_state) - np.asarray(c.last_hidden_state)).max() > 1e-3


def test_zero_gate_equals_zeroing_output_rows(tiny, batch):
    """Michel et al. 2019's masking: ξ_h = 0 is the same as removing W_O^h (b_O still passes)."""
    layer, head = 1, 2
    gates = np.ones((tiny.config.num_layers, tiny.config.num_heads), np.float32)
    gates[layer, head] = 0.0
    gated = tiny.forward(batch, Interventions(head_gates=gates))
    params = jax.tree.map(np.array, nnx.to_pure_dict(tiny.params))
    params["layers"]["attention"]["out"]["kernel"][layer, head] = 0.0  # (H, d_h, D) slice of layer
    edited = EncoderModel(tiny.config, params, tiny.tokenizer).forward(batch)
    n = batch["input_ids"].shape[1]  # a gated program vs a zeroed W_O: float32 sums in other orders
    assert_close(gated.last_hidden_state, edited.last_hidden_state, terms=model_terms(tiny.config, n))
    ungated = tiny.forward(batch)
    assert np.abs(np.asarray(gated.last_hidden_state) - np.asarray(ungated.last_hidden_state)).max() > 1e-3
    # Earlier layers are untouched.
    np.testing.assert_array_equal(gated.attentions[0], ungated.attentions[0])


def test_disabled_head_is_uniform_over_real_tokens(tiny, batch):
    """Kovaleva et al. 2019: the disabled head attends uniformly to the non-padding keys."""
    disabled = np.zeros((tiny.config.num_layers, tiny.config.num_heads), bool)
    disabled[0, 1] = True
    alpha = np.asarray(tiny.forward(batch, Interventions(disabled_heads=disabled)).attentions)  # (L, b, H, n, n)
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
        out, _ = forward(tiny.params, tiny.config, inputs, Interventions(head_gates=g))
        return jnp.sum(out["last_hidden_state"] ** 2)

    g0 = jnp.ones((tiny.config.num_layers, tiny.config.num_heads))
    grad = jax.grad(loss)(g0)
    # The loss (~2e3) rounds by ~1e-3 in float32: over 2·eps = 0.2 that is ≤ 1 % of the derivative (~3),
    # as is the O(eps²) truncation (~0.3 %); at eps = 1e-2 the rounding alone would be ~2 %.
    eps = 0.1
    numeric = (loss(g0.at[1, 3].add(eps)) - loss(g0.at[1, 3].add(-eps))) / (2 * eps)
    np.testing.assert_allclose(grad[1, 3], numeric, rtol=2e-2)


def test_no_recompilation_for_same_padded_shape(tiny):
    """One compile per (padded shape, which interventions are given): new lengths, gate values and
    disabled heads reuse it."""
    L, H = tiny.config.num_layers, tiny.config.num_heads
    batches = [random_batch(tiny.config, lengths, seed=s) for s, lengths in enumerate([[8, 3], [5, 8], [8, 8]])]
    both = lambda g, d: Interventions(head_gates=np.full((L, H), g, np.float32), disabled_heads=d)
    tiny.forward(batches[0])
    tiny.forward(batches[0], both(1.0, np.zeros((L, H), bool)))
    size = _forward._cache_size()
    for b in batches[1:]:
        tiny.forward(b)
        tiny.forward(b, both(0.5, np.eye(L, H, dtype=bool)))
    assert _forward._cache_size() == size


def test_bfloat16_compute_close_to_float32(tiny, batch):
    a = tiny.forward(batch)
    b = tiny.forward(batch, compute_dtype=jnp.bfloat16)
    assert b.last_hidden_state.dtype == jnp.bfloat16
    assert b.attentions.dtype == jnp.float32  # softmax stays in float32
    # bfloat16 keeps 8 significant bits (eps 2**-7): ~4 of its ulps of the largest value (α ≤ 1, states ≈ 4)
    np.testing.assert_allclose(np.asarray(b.attentions), a.attentions, atol=3e-2)
    np.testing.assert_allclose(np.asarray(b.last_hidden_state, np.float32), a.last_hidden_state, atol=0.15)


BF16_ULP = 2.0 ** -7  # bfloat16's spacing at 1: 8 significant bits


def test_bfloat16_parity_on_minilm(minilm):
    """The parity ``docs/GUIDE.md`` states for ``compute_dtype=jnp.bfloat16`` on real weights, by the
    benchmark's own measurement (``benchmarks/bf16_parity.py``): α on real query-key pairs within 6
    of bfloat16's units at 1 (here 0.011; 0.024 over 64 SST-2 sentences: a softmax turns the
    scores' rounding into weight), the last hidden state within 2 units of its largest magnitude
    (here 0.53 %), per token cosine ≥ 0.999 (here 0.99985)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bf16_parity import parity

    texts = ["The quick brown fox jumps over the lazy dog near the river bank.", "She said that he would come.",
             "Attention heads often attend to separator tokens.", "Yes."]
    p = parity(minilm, texts)
    assert p["alpha_max_abs_diff"] <= 6 * BF16_ULP
    assert p["hidden_max_abs_diff_over_max_abs"] <= 2 * BF16_ULP
    assert p["hidden_min_cosine"] >= 0.999


def test_dropout_only_with_rng(tiny, batch):
    from jattn.nn.encoder import forward

    inputs = tiny.check_batch(batch)
    run = jax.jit(lambda rng: forward(tiny.params, tiny.config, inputs, dropout_rng=rng)[0])
    a, b, c = run(None), run(jax.random.key(0)), run(jax.random.key(0))
    np.testing.assert_array_equal(b["last_hidden_state"], c["last_hidden_state"])
    assert np.abs(np.asarray(a["last_hidden_state"]) - np.asarray(b["last_hidden_state"])).max() > 1e-3


BAD = {  # (batch edit, interventions, compute dtype) -> the phrase the error must contain
    "gate shape": (
        None,
        Interventions(head_gates=np.ones((3, 9), np.float32)),
        None,
        r"head_gates .*axis 0 \(layer\) is 3, not 2. Fix",
    ),
    "NaN gate": (None, Interventions(head_gates=np.full((2, 4), np.nan, np.float32)), None, "NaN"),
    "int gate": (None, Interventions(head_gates=np.ones((2, 4), int)), None, "float array"),
    "half-disabled": (None, Interventions(disabled_heads=np.full((2, 4), 0.5)), None, "boolean"),
    "not Interventions": (None, {"head_gates": np.ones((2, 4))}, None, "jattn.Interventions"),
    "vocabulary": (lambda g, c: {**g, "input_ids": g["input_ids"] + c.vocab_size}, None, None, "vocabulary"),
    "float ids": (lambda g, c: {**g, "input_ids": g["input_ids"].astype(float)}, None, None, "integer"),
    "rank": (lambda g, c: {k: v[0] for k, v in g.items()}, None, None, r"\(batch, length\)"),
    "empty": (lambda g, c: {k: v[:, :0] for k, v in g.items()}, None, None, "non-empty"),
    "mask values": (lambda g, c: {**g, "attention_mask": g["attention_mask"] * 2}, None, None, "0 .padding."),
    "token types": (lambda g, c: {**g, "token_type_ids": g["token_type_ids"] + 5}, None, None, "token_type_ids"),
    "strings": (lambda g, c: ["a sentence"], None, None, "model.tokenize"),
    "no mask": (lambda g, c: {"input_ids": g["input_ids"]}, None, None, "attention_mask"),
    "dtype": (None, None, jnp.int32, "float type"),
    "positions": (lambda g, c: random_batch(c, [c.max_length + 1]), None, None, "positions"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_name_the_problem(tiny, case):
    edit, iv, dtype, phrase = BAD[case]
    good = random_batch(tiny.config, [4, 2])
    batch = good if edit is None else edit(good, tiny.config)
    with pytest.raises(ValueError, match=phrase):
        tiny.forward(batch, iv, compute_dtype=dtype or jnp.float32)


def test_per_example_and_per_token_gates(tiny, batch):
    """(L, b, H) gates act on one example only; (L, b, H, n) gates on one query token only."""
    L, H = tiny.config.num_layers, tiny.config.num_heads
    base = tiny.forward(batch)
    g = np.ones((L, 3, H), np.float32)
    g[1, 0, 2] = 0.0  # example 0 only
    per_example = tiny.forward(batch, Interventions(head_gates=g))
    head = np.ones((L, H), np.float32)
    head[1, 2] = 0.0
    per_head = tiny.forward(batch, Interventions(head_gates=head))
    np.testing.assert_allclose(per_example.last_hidden_state[0], per_head.last_hidden_state[0], atol=1e-6)
    np.testing.assert_array_equal(per_example.last_hidden_state[1:], base.last_hidden_state[1:])
    n = batch["input_ids"].shape[1]
    t = np.ones((L, 3, H, n), np.float32)
    t[1, 0, 2, 3] = 0.0  # example 0, query token 3, head (1, 2)
    per_token = tiny.forward(batch, Interventions(head_gates=t))
    ctx, ctx0 = np.asarray(per_token.internals["context"]), np.asarray(base.internals["context"])
    np.testing.assert_array_equal(ctx[1, 0, 2, 3], 0.0)
    np.testing.assert_array_equal(np.delete(ctx[1, 0, 2], 3, axis=0), np.delete(ctx0[1, 0, 2], 3, axis=0))


def test_internals_selection(tiny, batch):
    """internals=("weights",) returns α alone, equal to the full forward's; None returns none."""
    full = tiny.forward(batch)
    lean = tiny.forward(batch, internals=("weights",))
    assert set(lean.internals) == {"weights"}
    np.testing.assert_array_equal(lean.attentions, full.attentions)
    np.testing.assert_array_equal(lean.last_hidden_state, full.last_hidden_state)
    assert tiny.forward(batch, internals=None).internals == {}
    with pytest.raises(ValueError, match="unknown internals"):
        tiny.forward(batch, internals=("nonsense",))


def test_nnx_grad_on_module_equals_pure_face(tiny, batch):
    """nnx.grad through the module and jax.grad through the pure forward agree on head gates."""
    from jattn.nn.encoder import forward

    inputs = tiny.check_batch(batch)
    g0 = jnp.full((tiny.config.num_layers, tiny.config.num_heads), 0.9)
    pure = jax.grad(lambda g: forward(tiny.params, tiny.config, inputs,
                                      Interventions(head_gates=g))[0]["last_hidden_state"].sum())(g0)
    module_grad = nnx.grad(lambda m, g: m(inputs, Interventions(head_gates=g))[0]["last_hidden_state"].sum(),
                           argnums=1)(tiny.module, g0)
    np.testing.assert_allclose(module_grad, pure, atol=1e-6)


def test_detach_switches(tiny, batch):
    """detach_weights stops the gradient through α (queries/keys get none); detach_ln through σ;
    neither changes the forward values."""
    from jattn.nn.encoder import forward

    inputs = tiny.check_batch(batch)

    def grads(iv):
        loss = lambda p: forward(p, tiny.config, inputs, iv)[0]["last_hidden_state"].sum()
        return jax.grad(loss)(tiny.params)

    plain, no_alpha = grads(Interventions()), grads(Interventions(detach_weights=True))
    no_sigma = grads(Interventions(detach_ln=True))
    q = lambda g: np.abs(np.asarray(g["layers"]["attention"]["query"]["kernel"][...])).max()
    assert q(plain) > 0 and q(no_alpha) == 0
    v = lambda g: np.asarray(g["layers"]["attention"]["value"]["kernel"][...])
    assert np.abs(v(no_sigma) - v(plain)).max() > 1e-6
    for iv in (Interventions(detach_weights=True), Interventions(detach_ln=True)):
        np.testing.assert_allclose(tiny.forward(batch, iv).last_hidden_state, tiny.forward(batch).last_hidden_state,
                                   atol=1e-6)


def test_params_follow_the_module(tmp_path):
    """``model.params`` (rebuilt from the module's pytree leaves after the first ``nnx.state``)
    sees in-place updates, replaced submodules and structural changes, like ``nnx.state``."""
    model = jattn.load(save_tiny(tmp_path, "bert-2x4"), use_cache=False)

    def check():
        got, want = model.params, nnx.state(model.module, nnx.Param)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert a is b

    check()  # the graph walk
    check()  # the cached layout
    model.module.embeddings.word[...] = model.module.embeddings.word[...] + 1.0  # what an optimizer step does
    check()
    old = model.module.layers.ffn_ln
    model.module.layers.ffn_ln = type(old)(model.config.hidden_size, old.eps, stack=(model.config.num_layers,))
    check()  # same structure, new arrays
    model.module.pooler = None  # structure changed
    check()
    assert "pooler" not in model.params


def test_recycled_result_lends_its_memory(tiny, batch):
    """``forward(..., recycle=previous)`` writes into the previous result's donated buffers and
    returns what a fresh call returns; misuse is a clear error."""
    asked = ("weights", "values", "hidden_states")
    first = tiny.forward(batch, internals=asked)
    want = jax.tree.map(np.array, (first.last_hidden_state, first.hidden_states, first.internals))  # copies
    address = first.internals["weights"].unsafe_buffer_pointer()
    again = tiny.forward(batch, internals=asked, recycle=first)
    assert first.internals["weights"].is_deleted() and first.hidden_states.is_deleted()
    assert again.internals["weights"].unsafe_buffer_pointer() == address  # the same memory
    for got, ref in zip(jax.tree.leaves((again.last_hidden_state, again.hidden_states, again.internals)),
                        jax.tree.leaves(want)):
        np.testing.assert_array_equal(got, ref)
    with pytest.raises(ValueError, match="already recycled"):
        tiny.forward(batch, internals=asked, recycle=first)
    with pytest.raises(ValueError, match="same batch shape and internals"):
        tiny.forward(batch, internals=("weights",), recycle=again)
    with pytest.raises(ValueError, match="same batch shape and internals"):
        tiny.forward({k: v[:2] for k, v in batch.items()}, internals=asked, recycle=again)
    view = np.asarray(again.internals["weights"])  # a live numpy view: that buffer is left alone
    third = tiny.forward(batch, internals=asked, recycle=again)
    assert not again.internals["weights"].is_deleted() and again.internals["values"].is_deleted()
    np.testing.assert_array_equal(view, want[2]["weights"])
    np.testing.assert_array_equal(third.internals["weights"], want[2]["weights"])


def test_the_hidden_state_stack_is_returned_when_asked_for(tiny, batch):
    """The lean forward (internals=None) returns the last hidden state only, as HF does by
    default; "all" or a tuple naming "hidden_states" returns the (L+1) stack, the same either way."""
    lean = tiny.forward(batch, internals=None)
    assert lean.stack is None and lean.internals == {}
    with pytest.raises(ValueError, match="did not return the hidden states"):
        lean.hidden_states
    full = tiny.forward(batch)
    asked = tiny.forward(batch, internals=("hidden_states",))
    np.testing.assert_array_equal(asked.hidden_states, full.hidden_states)
    np.testing.assert_array_equal(asked.hidden_states[-1], lean.last_hidden_state)
    assert asked.internals == {} and full.hidden_states.shape[0] == tiny.config.num_layers + 1
