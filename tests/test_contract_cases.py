"""The functional contract's reported cases (issue list of docs/GUIDE.md "Composing with JAX"),
each as a user met it: gradients through the norm analysis on a padded batch, a custom importance
loss that averages over real tokens, errors in the caller's terms, dropout and a frozen copy.
Each test failed before the change it names."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
import jattn.runner.loop
import tiny_seq2seq
from jattn.analyses.norms import encoder_norms
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms

TEXTS = ["The cat sat on the mat today.", "Hi."]  # the second padded to the first


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4"), use_cache=False)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return jattn.load(tiny_seq2seq.save_tiny(tmp_path_factory.mktemp("marian"), "marian"), use_cache=False)


def nonfinite(tree) -> int:
    return sum(int((~jnp.isfinite(x)).sum()) for x in jax.tree.leaves(tree))


# the same encoder_norms(residual=True) gradients of a padded BERT-2x4 batch, every output weighted, are finite and
# equal finite differences there
@pytest.mark.slow(twin="tests/test_contract.py::test_gradients_are_finite_and_equal_finite_differences[norms-encoder]")
def test_norm_gradients_are_finite_on_a_padded_batch(bert):
    """Case 1: sqrt(max(sq, 0)) at a masked pair (sq = 0) gave 0·∞ = NaN in every parameter's
    gradient (12,272 entries for ‖Σαf‖ here). Every other kernel's padded-batch gradients, the
    translation model's included, are tests/test_contract.py's."""
    inputs = bert.check_batch(bert.tokenize(TEXTS, max_length=32))
    assert inputs["attention_mask"].min() == 0  # padded
    maps = lambda p: encoder_norms(p, bert.config, inputs, True)  # noqa: E731
    names = sorted(maps(bert.params))
    total = jax.jit(jax.grad(lambda p: sum(maps(p)[k].sum() for k in names)))(bert.params)  # one NaN spoils it
    if nonfinite(total):  # name them
        bad = [k for k in names if nonfinite(jax.grad(lambda p, k=k: maps(p)[k].sum())(bert.params))]
        raise AssertionError(f"non-finite gradients through {bad}")
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(total))


def mean_over_real_tokens(params, config, outputs, batch):
    """A user's loss: the mean over a row's real tokens of the squared last hidden state -> (b,)."""
    mask = batch["attention_mask"].astype(jnp.float32)  # (b, n)
    per_token = jnp.square(outputs["last_hidden_state"]).sum(-1)  # (b, n)
    return (per_token * mask).sum(1) / mask.sum(1)  # (b,)  0/0 on a padding-only row


def test_a_custom_loss_never_sees_a_padding_only_row(bert):
    """Case 2: three examples at batch_size=2 left a filler row of padding only in the second
    batch; the loss's 0/0 there made every importance NaN (finite at batch_size=3: no filler
    row). Now the importance is finite and the same for every batch size."""
    texts = ["the cat sat on the mat", "a dog barks", "birds fly"]
    runs = [jattn.importance(bert, texts, loss=mean_over_real_tokens, batch_size=b, max_length=32,
                             estimator="example", normalize=False, progress=False)["encoder"] for b in (2, 3, 4)]
    for imp in runs:
        assert np.isfinite(imp).all() and imp.max() > 0
    terms = 2 * model_terms(bert.config, 16)
    for imp in runs[1:]:
        assert_close(imp, runs[0], terms=terms, scale=float(runs[0].max()))


def test_a_custom_translation_loss_never_sees_a_padding_only_row(marian):
    def mean_target_loss(params, config, outputs, batch):
        real = batch["decoder_input_ids"] != config.pad_token_id  # (b, t) the copies' tokens
        logp = jax.nn.log_softmax(outputs["logits"], -1)  # (b, t, V)
        return -(jnp.take_along_axis(logp, batch["labels"][..., None], -1)[..., 0] * real).sum(1) / real.sum(1)

    pairs = [("a b c", "d e f"), ("g h", "i j k l")]
    imp = jattn.importance(marian, pairs, loss=mean_target_loss, batch_size=4, progress=False)
    assert all(np.isfinite(v).all() and v.max() > 0 for v in imp.values())


# ---------------------------------------------------------------- case 9: errors in the caller's terms

def test_a_too_long_example_in_an_analysis_names_what_the_caller_can_pass(bert):
    """Case 9: ``jattn.norms`` said "pass truncate=True", an argument it does not have."""
    from jattn.io.tokenize import SequenceTooLongError

    with pytest.raises(SequenceTooLongError, match=r"example 0 has \d+ tokens, more than the model's positions, 64.*"
                                                   r"model\.tokenize\(examples, truncate=True\)") as info:
        jattn.norms(bert, ["word " * 80])
    assert "truncate=True to cut it" not in str(info.value)


def test_run_corpus_names_its_arguments_and_the_cli_its_flags(bert, tmp_path):
    """Case 9: ``run_corpus`` named ``--max-length``, ``--truncate``, ``--skip-too-long``."""
    from jattn.analyses.weights import Entropy
    from jattn.cli import main

    long = "word " * 40
    with pytest.raises(ValueError, match=r"more than max_length=16\. Fix: a larger max_length= .*truncate=True.*"
                                         r"skip_too_long=True") as info:
        jattn.run_corpus(bert, ["short", long], [Entropy()], max_length=16, progress=False)
    assert "--" not in str(info.value)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"short\n{long}\n")
    with pytest.raises(SystemExit, match=r"more than --max-length 16\. Fix: a larger --max-length .*--truncate.*"
                                         r"--skip-too-long") as info:
        main(["analyze", "--model", bert.source, "--input", str(corpus), "--methods", "entropy", "--max-length", "16",
              "--out", str(tmp_path / "out")])
    assert "_length=" not in str(info.value)


def test_a_statistic_name_clash_is_reported_before_the_corpus_runs(bert):
    """Case 9: a user's ``Method`` whose statistic shares a built-in one's name was reported
    after the whole corpus had run."""
    import dataclasses

    from jattn.runner.protocol import Method, Statistic
    from jattn.analyses.weights import Entropy

    @dataclasses.dataclass(frozen=True)
    class Mine(Method):
        name = "mine"

        def reduce(self, ctx):
            return {"rows": (ctx.batch["example"] >= 0).sum().astype(jnp.float32)}

        def finalize(self, totals, meta):
            return {"entropy": Statistic(totals["rows"], "rows seen")}

    ran = []
    step = jattn.runner.loop.make_step

    def counting(*args):  # the runner's compiled step, with a count of the batches it ran (not traced)
        run, *rest = step(*args)

        def counted(*a):
            if not isinstance(jax.tree.leaves(a)[0], jax.core.Tracer):
                ran.append(1)
            return run(*a)

        counted.trace = run.trace  # the first batch's trace (its output shapes name the statistics): no run
        return counted, *rest

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jattn.runner.loop, "make_step", counting)
        with pytest.raises(ValueError, match="methods 'entropy' and 'mine' both produce a statistic named 'entropy'"):
            jattn.run_corpus(bert, ["a cat"] * 40, [Entropy(), Mine()], batch_size=4, max_length=32, progress=False)
    assert ran == []


# ---------------------------------------------------------------- case 10: Flax conventions

def test_dropout_follows_train_and_eval(bert):
    """Case 10: dropout was a ``dropout_rng=`` argument alone; now the module's mode decides, as
    NNX's ``train()`` / ``eval()`` set it, and the key (or ``nnx.Rngs``) is what it draws from."""
    from flax import nnx

    from jattn.nn.encoder import forward

    inputs = bert.check_batch(bert.tokenize(TEXTS, max_length=32))
    module = bert.copy().module
    assert module.deterministic  # loaded for evaluation
    plain, _ = module(inputs, internals=None)
    with pytest.raises(ValueError, match=r"evaluation mode.*module\.train\(\)"):
        module(inputs, dropout_rng=jax.random.key(0))
    module.train()
    with pytest.raises(ValueError, match=r"training mode.*dropout_rng=jax\.random\.key"):
        module(inputs)
    a, _ = module(inputs, dropout_rng=jax.random.key(0), internals=None)
    b, _ = module(inputs, dropout_rng=nnx.Rngs(dropout=0), internals=None)
    pure, _ = forward(bert.params, bert.config, inputs, dropout_rng=jax.random.key(0), internals=None)
    assert not np.allclose(a["last_hidden_state"], plain["last_hidden_state"])  # dropout acted
    assert np.array_equal(a["last_hidden_state"], pure["last_hidden_state"])  # the pure face: a key = training
    assert b["last_hidden_state"].shape == a["last_hidden_state"].shape
    module.eval()
    again, _ = module(inputs, internals=None)
    assert np.array_equal(again["last_hidden_state"], plain["last_hidden_state"])


def test_a_frozen_copy_stays_as_it_was_while_the_module_trains(bert):
    """Case 10: training ``model.module`` in place left no cheap way to keep the model before it."""
    import optax
    from flax import nnx

    model = bert.copy()
    frozen = model.copy()
    assert all(a is b for a, b in zip(jax.tree.leaves(model.params), jax.tree.leaves(frozen.params)))  # no copy
    inputs = model.check_batch(model.tokenize(TEXTS, max_length=32))
    before = frozen.forward(inputs).last_hidden_state
    model.module.train()
    optimizer = nnx.Optimizer(model.module, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(module, optimizer, key):
        loss = lambda m: m(inputs, dropout_rng=key, internals=None)[0]["last_hidden_state"].mean()  # noqa: E731
        optimizer.update(module, nnx.grad(loss)(module))

    for seed in range(2):
        step(model.module, optimizer, jax.random.key(seed))
    model.module.eval()
    assert not np.allclose(model.forward(inputs).last_hidden_state, before)
    assert np.array_equal(frozen.forward(inputs).last_hidden_state, before)
    assert np.array_equal(bert.forward(inputs).last_hidden_state, before)  # the loaded model too
