"""Hard-concrete head gates (jattn.nn.gates) and L0 gate training (jattn.training.l0): sample statistics
against the hard-concrete distribution's closed form, exact 0/1 evaluation gates, gradients, the λ = 0
control against plain optax training, gates closing under a large λ, resume, and the physically
pruned export against the gated model."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import jattn
from jattn.training import l0
from jattn.nn.interventions import Interventions
from jattn.nn import gates as G
from jattn.nn import encoder, seq2seq
from tiny_encoders import random_batch, save_tiny
from tiny_seq2seq import padded_batch
from tiny_seq2seq import save_tiny as save_tiny_seq2seq
from tolerance import EPS, assert_close, model_terms, tolerance

B, GAM, Z = G.BETA, G.GAMMA, G.ZETA


def _cdf_s(x, log_alpha):
    """P(s ≤ x) of the binary concrete s = σ((logit u + log α)/β): u ≤ σ(β logit x − log α)."""
    return 1.0 / (1.0 + np.exp(-(B * np.log(x / (1 - x)) - log_alpha)))


def _reference(log_alpha):
    """P(g = 0), P(g = 1) and E[g] of the stretched, clipped gate, from the CDF (quadrature for the mean)."""
    to_s = lambda t: (t - GAM) / (Z - GAM)  # g = t  <=>  s = (t - γ)/(ζ - γ)
    p0 = _cdf_s(to_s(0.0), log_alpha)
    p1 = 1.0 - _cdf_s(to_s(1.0), log_alpha)
    t = (np.arange(200_000) + 0.5) / 200_000
    mean = np.mean(1.0 - _cdf_s(to_s(t), log_alpha))  # E[g] = ∫_0^1 P(g > t) dt
    return p0, p1, mean


@pytest.mark.parametrize("log_alpha", [-2.0, -0.5, 0.0, 1.0, 3.0])
def test_sample_statistics_match_hard_concrete(log_alpha):
    n = 200_000
    g = np.asarray(G.sample(jnp.full((n,), log_alpha), jax.random.key(7)))
    p0, p1, mean = _reference(log_alpha)
    for got, want in ((np.mean(g == 0), p0), (np.mean(g == 1), p1)):
        assert abs(got - want) <= 5 * np.sqrt(want * (1 - want) / n) + 1e-4
    assert abs(g.mean() - mean) <= 5 * g.std() / np.sqrt(n)
    assert_close(G.prob_open(jnp.float32(log_alpha)), 1 - p0, terms=4, scale=1.0)  # P(g ≠ 0): float32 closed form


def test_evaluation_gates_exact_and_penalty():
    la = jnp.array([[-6.0, -3.0, 3.0, 6.0]])
    assert np.asarray(G.deterministic(la)).tolist() == [[0.0, 0.0, 1.0, 1.0]]
    assert 0 < float(G.deterministic(jnp.float32(0.0))) < 1  # σ(0)·1.2 − 0.1 = 0.5
    assert np.isclose(float(G.deterministic(jnp.float32(0.0))), 0.5)
    # normalisations: Σ over all heads vs the mean over gated layers of per-layer sums
    a = {"encoder": jnp.zeros((2, 3)), "cross": jnp.full((3, 3), 2.0)}
    p0, p2 = float(G.prob_open(jnp.float32(0.0))), float(G.prob_open(jnp.float32(2.0)))
    assert_close(G.regulariser(a, "sum_heads"), 6 * p0 + 9 * p2, terms=15)  # float32 sums of 15 heads
    assert_close(G.regulariser(a, "mean_layers"), (2 * 3 * p0 + 3 * 3 * p2) / 5, terms=15 + 5)
    with pytest.raises(ValueError, match="normalisation"):
        G.regulariser(a, "sum")


def test_one_sample_per_step_and_independent_types():
    la = {"encoder": jnp.zeros((3, 4)), "decoder": jnp.zeros((3, 4))}
    g = G.gates(la, jax.random.key(0))
    assert g["encoder"].shape == (3, 4) and not np.allclose(g["encoder"], g["decoder"])
    assert np.array_equal(G.gates(la, jax.random.key(0))["encoder"], g["encoder"])  # a key fixes the step's gates
    iv = G.interventions(g)
    assert set(iv) == {"encoder", "decoder"} and iv["encoder"].head_gates.shape == (3, 4)  # no batch axis


@pytest.fixture(scope="module")
def classifier():
    """Tiny random BERT with a 2-class head (dropout off)."""
    from jattn.nn.config import EncoderConfig
    from jattn.nn import state

    config = EncoderConfig(model_type="bert", vocab_size=50, hidden_size=16, num_layers=2, num_heads=4,
                           intermediate_size=24, hidden_act="gelu", max_position_embeddings=32, type_vocab_size=1,
                           layer_norm_eps=1e-12, pad_token_id=0, with_pooler=True, num_labels=2,
                           hidden_dropout=0.0, attention_dropout=0.0)
    params = nnx.to_pure_dict(state.init(config, seed=1))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(4):
        b = random_batch(config, [7, 5, 6, 3], seed=int(rng.integers(1e6)))
        b["labels"] = (b["input_ids"][:, 0] % 2).astype(np.int32)  # learnable from the first token
        batches.append({k: jnp.asarray(v) for k, v in b.items()})
    return config, params, batches


def test_gradient_reaches_log_alpha(classifier):
    config, params, batches = classifier
    gc = l0.GateConfig(lam=0.0)
    la = {"encoder": jnp.zeros((2, 4))}
    grad = jax.jit(jax.grad(lambda a: l0.objective(a, params, batches[0], jax.random.key(3), 0.0, config=config,
                                                   gc=gc)[0]))(la)
    assert np.isfinite(grad["encoder"]).all() and np.abs(grad["encoder"]).max() > 0
    # the penalty alone: ∂/∂log α of λ Σ P(open) = λ σ'(·) > 0 everywhere
    pen = jax.grad(lambda a: G.regulariser(a))(la)["encoder"]
    p = float(G.prob_open(jnp.float32(0.0)))
    assert_close(pen, np.full(pen.shape, p * (1 - p)), terms=4)  # float32 σ' vs σ(1 − σ) of float32 σ


def test_lambda_zero_gates_open_equals_plain_training(classifier, tmp_path):
    """Gates held open with λ = 0 and the model trained: the same parameters as a plain optax loop."""
    from jattn.nn.losses import classification_loss

    config, params, batches = classifier
    gc = l0.GateConfig(lam=0.0, fixed_open=True, model_lr=1e-2, steps=6, save_every=1000)
    trainer = l0.GateTrainer(config, params, gc, tmp_path / "gates", lambda epoch: batches)
    trainer.fit(progress=False)

    opt = optax.adam(1e-2)

    @jax.jit
    def plain_step(p, s, batch):
        def loss(q):
            out, _ = encoder.forward(q, config, {k: v for k, v in batch.items() if k != "labels"}, internals=None)
            return classification_loss(out["logits"], batch["labels"])

        u, s = opt.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, u), s

    p, s = params, opt.init(params)
    for step in range(6):
        p, s = plain_step(p, s, batches[step % len(batches)])
    # Two programs: each step may round p + u differently (an ulp of |p|) and Adam's update (≤ lr whatever
    # the gradient's size) carries the gradient's relative rounding (forward and backward, tests/tolerance.py).
    # Where the gradient is zero in exact arithmetic in every batch (the key bias: softmax ignores a shift
    # of a query's scores; embedding rows of tokens only padding reads), it is rounding alone, and Adam
    # turns any rounding into a step of up to lr: there the bound is Adam's, lr a step.
    size = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(p))
    terms = 2 * model_terms(config, 7)

    def grads(batch):
        def loss(q):
            out, _ = encoder.forward(q, config, {k: v for k, v in batch.items() if k != "labels"}, internals=None)
            return classification_loss(out["logits"], batch["labels"])
        return jax.grad(loss)(params)

    largest = jax.tree.map(lambda *g: jnp.max(jnp.abs(jnp.stack(g)), 0), *[grads(b) for b in batches])
    tight = 6 * (EPS * size + tolerance(1e-2, terms))
    noise = tolerance(max(float(jnp.max(g)) for g in jax.tree.leaves(largest)), terms)  # the gradients' rounding
    for got, want, g in zip(jax.tree.leaves(trainer.params), jax.tree.leaves(p), jax.tree.leaves(largest)):
        rounding_only = np.asarray(g) <= noise  # zero in exact arithmetic, or too small to tell from it
        bound = np.where(rounding_only, 6 * 1e-2, tight)
        assert (np.abs(np.asarray(got) - np.asarray(want)) <= bound).all()
    assert np.array_equal(trainer.log_alpha["encoder"], jnp.full((2, 4), gc.init_log_alpha))  # untouched


def test_large_lambda_closes_gates_small_keeps_them(classifier, tmp_path):
    config, params, batches = classifier
    closed = l0.GateTrainer(config, params, l0.GateConfig(lam=10.0, steps=80, lr=0.1), tmp_path / "big",
                            lambda e: batches)
    closed.fit(progress=False)
    assert l0.kept(closed.log_alpha)["encoder"].sum() == 0
    assert closed.meta["curve"][-1]["heads_kept"] == {"encoder": 0}
    kept = l0.GateTrainer(config, params, l0.GateConfig(lam=0.0, steps=20, lr=0.1), tmp_path / "zero",
                          lambda e: batches)
    kept.fit(progress=False)
    assert l0.kept(kept.log_alpha)["encoder"].all()


def test_resume_continues_the_same_run(classifier, tmp_path):
    """Gates trained with the model (``model_lr`` > 0: the checkpoint holds the parameters too, the
    paper's setting) stopped after 3 updates and resumed end where 6 uninterrupted updates end:
    gates and every parameter. (The frozen model's resume: the SIGINT test below.)"""
    config, params, batches = classifier
    gc = l0.GateConfig(lam=0.5, steps=6, save_every=3, model_lr=1e-3, dropout=True)
    whole = l0.GateTrainer(config, params, gc, tmp_path / "whole", lambda e: batches[:3])
    whole.fit(progress=False)
    part = l0.GateTrainer(config, params, dataclasses.replace(gc, steps=3), tmp_path / "part", lambda e: batches[:3])
    part.fit(progress=False)
    resumed = l0.GateTrainer(config, params, gc, tmp_path / "part", lambda e: batches[:3])
    assert resumed.meta["step"] == 3 and resumed.meta["epoch"] == 1
    resumed.fit(progress=False)
    np.testing.assert_array_equal(resumed.log_alpha["encoder"], whole.log_alpha["encoder"])  # the same program
    jax.tree.map(np.testing.assert_array_equal, resumed.params, whole.params)
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
                                           whole.params, params))
    assert any(changed)  # the model's parameters were trained too


def test_bad_kinds_fail(classifier, tmp_path):
    config, params, batches = classifier
    with pytest.raises(ValueError, match="cannot gate"):
        l0.GateTrainer(config, params, l0.GateConfig(kinds=("cross",)), tmp_path, lambda e: batches)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return jattn.load(save_tiny_seq2seq(tmp_path_factory.mktemp("marian"), "marian"), use_cache=False)


def _gate_values(shapes, seed):
    """Gates with exact zeros, exact ones and values in between (a half-trained state)."""
    rng = np.random.default_rng(seed)
    return {
        k: np.asarray(G.deterministic(jnp.asarray(rng.normal(0.5, 3.0, s), jnp.float32))) for k, s in shapes.items()
    }


def test_fold_gates_equals_interventions_seq2seq(marian):
    shapes = l0.gate_shapes(marian.config)
    values = _gate_values(shapes, 0)
    batch = marian.check_batch(padded_batch(marian.config, seed=2))
    params = nnx.to_pure_dict(marian.params)
    ref, _ = seq2seq.forward(
        params, marian.config, batch, G.interventions({k: jnp.asarray(v) for k, v in values.items()}), internals=None
    )
    folded = l0.fold_gates(params, marian.config, values)
    got, _ = seq2seq.forward(folded, marian.config, batch, internals=None)
    # gates folded into W_O round differently than gates applied to the context
    assert_close(got["logits"], ref["logits"], terms=model_terms(marian.config, 9, 7))


# the same fold_gates + export_pruned against the gated model, with 0, fractional and 1 gates
# (translation model, gates of every type), as jattn gates --export runs them:
# test_export_removes_closed_heads_and_folds_fractional_ones
@pytest.mark.slow(twin="tests/test_cli_gates.py::test_export_removes_closed_heads_and_folds_fractional_ones")
def test_pruned_export_equals_gated_evaluation_seq2seq(marian, tmp_path):
    from jattn.sweeps.pruning import export_pruned

    shapes = l0.gate_shapes(marian.config)
    values = _gate_values(shapes, 1)
    assert any((v == 0).any() for v in values.values()) and any(((v > 0) & (v < 1)).any() for v in values.values())
    folded = l0.fold_gates(nnx.to_pure_dict(marian.params), marian.config, values)
    gated = type(marian)(marian.config, folded, marian.tokenizer, marian.source)
    pruned = jattn.load(export_pruned(gated, {k: v > 0 for k, v in values.items()}, tmp_path / "pruned"),
                        use_cache=False)
    batch = padded_batch(marian.config, seed=4)
    iv = {k: Interventions(head_gates=jnp.asarray(v)) for k, v in values.items()}
    assert_close(pruned.forward(batch).logits, marian.forward(batch, iv).logits,
                 terms=model_terms(marian.config, 9, 7))  # fewer heads: other shapes, other float32 orders


# the same fold_gates + export_pruned against the gated model, with 0, fractional and 1 gates
# (encoder), as jattn gates --export runs them: test_export_removes_closed_heads_and_folds_fractional_ones
@pytest.mark.slow(twin="tests/test_cli_gates.py::test_export_removes_closed_heads_and_folds_fractional_ones")
def test_pruned_export_equals_gated_evaluation_encoder(tmp_path):
    from jattn.sweeps.pruning import export_pruned

    model = jattn.load(save_tiny(tmp_path / "bert", "bert-2x4", head="cls"), use_cache=False)
    values = _gate_values(l0.gate_shapes(model.config), 2)
    folded = l0.fold_gates(nnx.to_pure_dict(model.params), model.config, values)
    gated = type(model)(model.config, folded, model.tokenizer, model.source)
    pruned = jattn.load(export_pruned(gated, values["encoder"] > 0, tmp_path / "pruned"), use_cache=False)
    batch = random_batch(model.config, [9, 4, 6], seed=5)
    ref, _ = encoder.forward(model.params, model.config, {k: jnp.asarray(v) for k, v in batch.items()},
                             Interventions(head_gates=jnp.asarray(values["encoder"])), internals=None)
    got, _ = encoder.forward(pruned.params, pruned.config, {k: jnp.asarray(v) for k, v in batch.items()},
                             internals=None)
    assert_close(got["logits"], ref["logits"], terms=model_terms(model.config, 9))  # folded, fewer heads


def test_resume_refuses_other_arguments(classifier, tmp_path):
    """A work folder remembers its run's arguments: more steps resume it, another λ is refused."""
    config, params, batches = classifier
    gc = l0.GateConfig(lam=0.5, steps=2, save_every=1)
    l0.GateTrainer(config, params, gc, tmp_path / "run", lambda e: batches[:3]).fit(progress=False)
    longer = l0.GateTrainer(config, params, dataclasses.replace(gc, steps=4), tmp_path / "run", lambda e: batches[:3])
    assert longer.meta["step"] == 2
    with pytest.raises(ValueError, match=r"lam=0\.5 \(now 0\.25\).*another work folder"):
        l0.GateTrainer(config, params, dataclasses.replace(gc, lam=0.25), tmp_path / "run", lambda e: batches[:3])


def test_interrupt_checkpoints_and_a_rerun_finishes_the_same(classifier, tmp_path):
    """SIGINT during training: a checkpoint after the current update and KeyboardInterrupt; the
    same run started again resumes there and ends where an uninterrupted run ends."""
    import os
    import signal

    config, params, batches = classifier
    gc = l0.GateConfig(lam=0.5, steps=6, save_every=100)
    whole = l0.GateTrainer(config, params, gc, tmp_path / "whole", lambda e: batches[:2])
    whole.fit(progress=False)

    def interrupted(epoch):  # Ctrl-C arrives while the second epoch's batches are being made
        if epoch == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return batches[:2]

    first = l0.GateTrainer(config, params, gc, tmp_path / "part", interrupted)
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a pytest-xdist worker
    with pytest.raises(KeyboardInterrupt):
        first.fit(progress=False)
    assert first.meta["step"] == 3  # the update under way when the signal came was finished and saved
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    resumed = l0.GateTrainer(config, params, gc, tmp_path / "part", lambda e: batches[:2])
    assert resumed.meta["step"] == 3
    resumed.fit(progress=False)
    np.testing.assert_array_equal(resumed.log_alpha["encoder"], whole.log_alpha["encoder"])  # the same program
