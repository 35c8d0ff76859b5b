"""The functional contract (docs/GUIDE.md, "Composing with JAX") as properties of every public
function and every registered analysis, on padded batches of tiny random models of both shapes.

``CONTRACT`` says for each name of ``jattn.__all__`` and of the analysis registry how the
contract applies: through a pure kernel — a function ``(params, inputs) -> pytree`` that is what
the public function computes (its jitted step) — or through the corpus runner (a registered
method's ``reduce``), or why it does not (host I/O). A new public name or registered analysis
without an entry fails ``test_every_public_name_and_analysis_is_covered``.

Properties of each kernel, on an encoder (BERT) and a translation model (Marian) where it has one:
  * jit = eager (``jax.disable_jit``), within the float32 bound of ``tests/tolerance.py``;
  * vmap over examples = a loop over examples;
  * gradients w.r.t. the parameters are finite on a padded batch, for every kernel whose output
    is differentiable in real arithmetic, and equal central finite differences along a random
    direction: the kernels compute in float32 by design (softmax and LayerNorm statistics in
    float32 whatever the compute dtype), so the differences are float32 ones and their error is
    bounded from the computation itself: the truncation error by Richardson's estimate from the
    steps h and h/2, the rounding error by tolerance.py's bound on F divided by the step.
Every registered method: the runner's step under ``jit`` = eager, totals finite. Devices
(8 faked CPU devices on explicit and auto meshes = 1) are ``tests/test_contract_devices.py``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
import jattn.sweeps.importance  # noqa: F401  registers "importance" (else only once another module imported it)
import tiny_seq2seq
from jattn.analyses import registry
from jattn.io.readers import read_conllu
from jattn.nn.interventions import Interventions
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms, tolerance


class Kernel(NamedTuple):
    """A pure function of (params, config, inputs) -> pytree for an encoder and/or a translation
    model, and whether its output is differentiable in real arithmetic."""
    encoder: Callable | None
    seq2seq: Callable | None
    differentiable: bool = True


def _norms(p, c, x):
    from jattn.analyses.norms import encoder_norms, seq2seq_norms

    return (seq2seq_norms if hasattr(c, "d_model") else encoder_norms)(p, c, x, True)


def _attributions(p, c, x):
    from jattn.analyses.attribution import encoder_attributions
    from jattn.analyses.context_mixing import seq2seq_alti_plus

    return (seq2seq_alti_plus if hasattr(c, "d_model") else encoder_attributions)(p, c, x)


def _value_zeroing(p, c, x):
    from jattn.analyses.context_mixing import encoder_value_zeroing

    return encoder_value_zeroing(p, c, x)


def _forward(c):
    from jattn.nn import encoder, seq2seq

    return seq2seq.forward if hasattr(c, "d_model") else encoder.forward


def _gate_gradient(p, c, x):
    """Michel et al.'s |∂L/∂ξ| per (layer, example, head) with L the squared last hidden state over
    real tokens (the importance kernel; ``jattn.sweeps.importance.gate_sums``)."""
    L, H = c.num_layers, c.num_heads
    mask = x["attention_mask"].astype(jnp.float32)  # (b, n)

    def loss(g):
        out, _ = _forward(c)(p, c, x, Interventions(head_gates=g), internals=None)
        return (jnp.square(out["last_hidden_state"]).sum(-1) * mask).sum()

    return jnp.abs(jax.grad(loss)(jnp.ones((L, mask.shape[0], H))))  # (L, b, H)


def _disabled(p, c, x):
    """The model with head (0, 1) made uniform (Kovaleva et al.) and head (1, 0) zeroed (Michel et al.)."""
    L, H = c.num_layers, c.num_heads
    iv = Interventions(
        head_gates=jnp.ones((L, H)).at[1, 0].set(0.0), disabled_heads=jnp.zeros((L, H), bool).at[0, 1].set(True)
    )
    return _forward(c)(p, c, x, iv, internals=None)[0]["last_hidden_state"]


def _patched(p, c, x):
    """Head outputs of layer 1 patched from a run on reversed token order (activation patching),
    blended at t = 0.5 (attribution patching's path)."""
    fwd = _forward(c)
    other = dict(x, input_ids=x["input_ids"][:, ::-1])
    _, source = fwd(p, c, other, internals=("context",))
    value = source["context"]  # (L, b, H, n, d_h)
    where = jnp.full((c.num_layers, 1, c.num_heads, 1), 0.5).at[0].set(0.0)  # (L, 1, H, 1)
    iv = Interventions(patch={"context": (value, where)})
    return fwd(p, c, x, iv, internals=None)[0]["last_hidden_state"]


KERNELS = {
    "norms": Kernel(_norms, _norms),
    "attributions": Kernel(_attributions, _attributions),
    "value-zeroing": Kernel(_value_zeroing, None),
    "importance": Kernel(_gate_gradient, None),
    "disable": Kernel(_disabled, None),
    "patch_heads": Kernel(_patched, None),
}

# How the contract applies to each public name and registered analysis.
CONTRACT = {
    # jattn.__all__
    "Interventions": "pytree: test_interventions_are_a_pytree",
    "attribution_patch_heads": "kernel patch_heads (its blend at t is the same patch)",
    "attributions": "kernel attributions",
    "data_path": "exempt: a path on the host",
    "finetune": "exempt: trains and writes a model folder on the host (its step: the classifier loss's gradient "
    "under jit, tests/test_finetune.py)",
    "disable": "kernel disable",
    "importance": "kernel importance; registered method importance",
    "load": "exempt: reads a folder on the host",
    "norms": "kernel norms",
    "patch_heads": "kernel patch_heads",
    "prune": "kernel importance (the gradient it ranks by); masks are gates (kernel disable)",
    "run_corpus": "the registered methods' steps",
    "view": "exempt: an HTML page of kernel norms' and kernel attributions' numbers",
    # registered analyses: the runner's step
    **{
        name: "runner"
        for name in (
            "confidence",
            "value-zeroing",
            "alti-plus",
            "weights",
            "entropy",
            "word-weights",
            "word-entropy",
            "alti",
            "js",
            "grad",
            "norms",
            "norm-freq",
            "mixing",
            "patterns",
            "syntax",
            "lm-attention",
        )
    },
    "coref": "runner (GAP labels: tests/test_coref.py); its reduce reads α as 'weights' does",
}


def test_every_public_name_and_analysis_is_covered():
    names = set(jattn.__all__) | set(registry.entries())
    assert not names - set(CONTRACT), f"add these to CONTRACT: {sorted(names - set(CONTRACT))}"
    assert not set(CONTRACT) - names, f"no longer public: {sorted(set(CONTRACT) - names)}"
    for name, how in CONTRACT.items():
        if how.startswith("kernel"):
            assert how.split()[1].strip(";") in KERNELS, name


def test_interventions_are_a_pytree():
    iv = Interventions(head_gates=jnp.ones((2, 4)), disabled_heads=jnp.zeros((2, 4), bool),
                       patch={"context": (jnp.zeros((2, 1, 4, 3, 8)), jnp.ones((2, 1, 4, 1), bool))}, detach_ln=True)
    leaves, tree = jax.tree.flatten(iv)
    assert len(leaves) == 4
    back = jax.tree.unflatten(tree, leaves)
    assert back.detach_ln and back.patch.keys() == {"context"}
    doubled = jax.jit(lambda i: jax.tree.map(lambda a: a * 2, i))(dict(g=iv.head_gates))
    assert float(doubled["g"].sum()) == 16.0


# ---------------------------------------------------------------- models and padded batches

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    bert = jattn.load(save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4", head="mlm"), use_cache=False)
    marian = jattn.load(tiny_seq2seq.save_tiny(tmp_path_factory.mktemp("marian"), "marian"), use_cache=False)
    bert_batch = bert.check_batch(bert.tokenize(["The cat sat on the mat.", "Hi.", "A b c, d."], max_length=32))
    marian_batch = marian.batch([("a b c d e", "f g h"), ("a", "b c d e f"), ("a b", "c")])
    assert bert_batch["attention_mask"].min() == 0 and marian_batch["attention_mask"].min() == 0  # padded
    return {"encoder": (bert, bert_batch), "seq2seq": (marian, marian_batch)}


CASES = [(name, shape) for name, k in KERNELS.items() for shape in ("encoder", "seq2seq")
         if getattr(k, shape) is not None]


def terms_of(model, inputs) -> int:
    n = inputs["input_ids"].shape[1]
    c = model.config
    return model_terms(c, n, inputs["decoder_input_ids"].shape[1]) if hasattr(c, "d_model") else model_terms(c, n)


def compare_trees(actual, desired, terms, what):
    for (path, a), d in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(desired)):
        d = np.asarray(d, np.float64)
        assert_close(a, d, terms=terms, scale=float(np.abs(d).max()) or 1.0,
                     err_msg=f"{what}{jax.tree_util.keystr(path)}")


def _cases(cases, slow):
    """``cases`` as pytest params ``name-shape``, those in ``slow`` ({(name, shape): twin}) marked slow."""
    return [pytest.param(n, s, id=f"{n}-{s}", marks=[pytest.mark.slow(twin=slow[n, s])] if (n, s) in slow else [])
            for n, s in cases]


RUNNER = "tests/test_contract.py::test_a_registered_method_is_the_same_under_jit_and_eager"
# kernels whose jit = eager is the registered method's on the same model: the method's jitted step and its eager run
# compute the same maps (plus a reduction to totals), so the kernel's own check runs with --runslow
JIT_SLOW = {
    # alti-plus's step computes alti_plus_maps (the kernel seq2seq_alti_plus's) on the same Marian model
    ("attributions", "seq2seq"): f"{RUNNER}[alti-plus]",
    # value-zeroing's step computes value_zeroing_maps on the same BERT (the rollout: the attributions kernel's)
    ("value-zeroing", "encoder"): f"{RUNNER}[value-zeroing]",
    # importance's step takes the same gate gradient through the BERT forward (|dL/d gate|, the MLM loss)
    ("importance", "encoder"): f"{RUNNER}[importance]",
    # seq2seq_norms applies the encoder's attention_norms / residual_norms to each attention type (12 s eager);
    # the Marian forward runs eager in alti-plus's step
    ("norms", "seq2seq"): "tests/test_contract.py::test_jit_equals_eager[norms-encoder]",
}


@pytest.mark.parametrize("name,shape", _cases(CASES, JIT_SLOW))
def test_jit_equals_eager(models, name, shape):
    model, inputs = models[shape]
    fn = getattr(KERNELS[name], shape)
    jitted = jax.jit(fn, static_argnums=1)(model.params, model.config, inputs)
    with jax.disable_jit():
        eager = fn(model.params, model.config, inputs)
    compare_trees(jitted, eager, 2 * terms_of(model, inputs), f"{name} jit vs eager")


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_vmap_equals_a_loop(models, name, shape):
    model, inputs = models[shape]
    fn = getattr(KERNELS[name], shape)
    one = lambda row: fn(model.params, model.config, jax.tree.map(lambda a: a[None], row))  # noqa: E731
    mapped = jax.jit(jax.vmap(one))(inputs)
    rows = [jax.jit(one)(jax.tree.map(lambda a, i=i: a[i], inputs)) for i in range(len(inputs["input_ids"]))]
    looped = jax.tree.map(lambda *r: np.stack(r), *rows)
    compare_trees(mapped, looped, 2 * terms_of(model, inputs), f"{name} vmap vs loop")


def weighted_sum(fn, model, inputs):
    """F(params) = Σ w ⊙ fn(params) with fixed random weights w, a scalar that reads every output,
    as one jitted ``value_and_grad`` (one compile serves the gradient and the differences)."""
    shapes = jax.eval_shape(lambda p: fn(p, model.config, inputs), model.params)
    keys = jax.random.split(jax.random.key(0), len(jax.tree.leaves(shapes)))
    weights = [jax.random.uniform(k, s.shape) for k, s in zip(keys, jax.tree.leaves(shapes))]
    F = lambda p: sum(jnp.sum(w * o) for w, o in zip(weights, jax.tree.leaves(fn(p, model.config, inputs))))  # noqa: E731
    return jax.jit(jax.value_and_grad(F))


# the translation model's norms go through the same attention_norms / residual_norms (post-LN) as the encoder's,
# and its ALTI+ self-attention layers through the encoder's alti_layer, checked against finite differences fast;
# on a translation model (ALTI+'s cross_alti_layer included) their gradients are finite in
# tests/test_contract_families.py (T5) and equal finite differences here with --runslow (27 s and 9 s)
GRAD = "tests/test_contract.py::test_gradients_are_finite_and_equal_finite_differences"
GRAD_SLOW = {("norms", "seq2seq"): f"{GRAD}[norms-encoder]",
             ("attributions", "seq2seq"): f"{GRAD}[attributions-encoder]"}


@pytest.mark.parametrize("name,shape", _cases([c for c in CASES if KERNELS[c[0]].differentiable], GRAD_SLOW))
def test_gradients_are_finite_and_equal_finite_differences(models, name, shape):
    model, inputs = models[shape]
    F = weighted_sum(getattr(KERNELS[name], shape), model, inputs)
    params = model.params
    f0, grad = F(params)
    bad = {jax.tree_util.keystr(path): int((~jnp.isfinite(g)).sum())
           for path, g in jax.tree_util.tree_leaves_with_path(grad) if not jnp.isfinite(g).all()}
    assert not bad, f"non-finite gradient entries: {bad}"
    keys = jax.random.split(jax.random.key(1), len(jax.tree.leaves(params)))
    u = jax.tree.unflatten(jax.tree.structure(params),
                           [jax.random.normal(k, g.shape) for k, g in zip(keys, jax.tree.leaves(grad))])
    norm = math.sqrt(sum(float(jnp.sum(x * x)) for x in jax.tree.leaves(u)))
    u = jax.tree.map(lambda x: x / norm, u)  # a unit direction over all parameters
    analytic = sum(float(jnp.sum(g * d)) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(u)))
    f0 = float(f0)

    def central(h):
        at = lambda s: float(F(jax.tree.map(lambda p, d: p + s * d, params, u))[0])  # noqa: E731
        return (at(h) - at(-h)) / (2 * h)

    h = 1e-2
    d1, d2 = central(h), central(h / 2)
    truncation = abs(d1 - d2) / 3  # Richardson: the error of the h/2 difference
    rounding = 2 * float(tolerance(abs(f0), 2 * terms_of(model, inputs))) / h  # two roundings of F over 2 · h/2
    assert abs(analytic - d2) <= 4 * truncation + rounding, (
        f"{name}: directional derivative {analytic:.6g} vs central differences {d2:.6g} (h/2) / {d1:.6g} (h); "
        f"bound {4 * truncation + rounding:.3g}")


# ---------------------------------------------------------------- registered methods through the runner

@pytest.fixture(scope="module")
def runner_setup(models, tmp_path_factory):
    from pathlib import Path

    bert, _ = models["encoder"]
    ranks = tmp_path_factory.mktemp("ranks") / "ranks.txt"
    ranks.write_text("".join(f"{r} {1000 - r} {i}\n" for r, i in enumerate([1996, 4937, 1012, 1010, 1997], 1)))
    sample = Path(jattn.__file__).parent / "io" / "sample" / "en_ewt-ud-dev.sample.conllu"
    pool = [ex for ex in read_conllu(sample) if 3 <= len(ex.a) <= 12][:3]  # words: every method reads them
    relations = tuple(sorted({r for ex in pool for r in ex.labels["relations"]}))
    options = registry.Options(rank_file=ranks, relations=relations, min_count=1)
    return pool, options, tmp_path_factory.mktemp("lm")


# registered methods whose step is another default test's under jit and eager: their forward and reduce pieces
RUNNER_SLOW = {
    # alti's over_layers(alti_layer) and rollout are the attributions kernel's on the same BERT (jit = eager below);
    # its class sums and diagonal: value-zeroing's step
    "alti": "tests/test_contract.py::test_jit_equals_eager[attributions-encoder]",
    # mixing's over_layers(residual_norms) is the norms kernel's residual part on the same BERT; its per-id sums and
    # masked forward: norm-freq's and grad's steps
    "mixing": "tests/test_contract.py::test_jit_equals_eager[norms-encoder]",
    # word-entropy is entropy's reduction on word-weights' word-level map
    "word-entropy": f"{RUNNER}[word-weights]",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow(twin=t) for t in [RUNNER_SLOW.get(n)] if t])
                                  for n in sorted(set(registry.entries()) - {"coref"})])
def test_a_registered_method_is_the_same_under_jit_and_eager(models, runner_setup, name):
    pool, options, lm_folder = runner_setup
    bert, _ = models["encoder"]
    method = registry.entries()[name].factory(bert, options)
    families = getattr(method, "families", ("encoder",))
    if "encoder" in families:
        model, corpus = bert, pool
    elif "decoder" in families:  # a causal LM's method
        from tiny_lm import save_tiny_gpt2

        model = jattn.load(save_tiny_gpt2(lm_folder / "gpt2"), use_cache=False)
        method = registry.entries()[name].factory(model, options)
        corpus = ["the cat sat on the mat .", "alice met bob , then left .", "short ."]
    else:
        model = models["seq2seq"][0]
        method = registry.entries()[name].factory(model, options)
        corpus = [("a b c d e", "f g h"), ("a", "b c d e f"), ("a b", "c")]
    run = lambda: jattn.run_corpus(model, corpus, [method], batch_size=4, max_length=32, progress=False)  # noqa: E731
    jitted = run()
    with jax.disable_jit():
        eager = run()
    n = 32
    terms = 2 * (model_terms(model.config, n, n) if hasattr(model.config, "d_model") else model_terms(model.config, n))
    totals = [k for k in eager.totals if k == method.name or k.endswith(f"-{method.name}")]  # a translation
    assert totals                                                                      # model's: <kind>-<name>
    for total in totals:
        for key, want in eager.totals[total].items():
            got = np.asarray(jitted.totals[total][key])
            assert np.isfinite(got).all(), f"{total}.{key} is not finite"
            want = np.asarray(want, np.float64)
            assert_close(got, want, terms=terms, scale=float(np.abs(want).max()) or 1.0, err_msg=f"{total}.{key}")
