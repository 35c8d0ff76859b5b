"""The analyses that read several layers' α at once, bounded by recomputing each layer's α from its
input (``jattn.nn.recompute``), and a translation model's runner reducing its layerwise methods
inside the layer loops, each equal to its materialised path at a tiny shape:

* JS between every pair of heads (Clark et al. 2019 §6) from the layers' inputs equals brute-force
  loops over the stacked α, and its traced program holds no array near every layer's α;
* on a translation model, the runner's layerwise methods (weights, entropy, norms, confidence, ALTI
  with its carried rollout) reduced inside the encoder's and decoder's loops, and JS from the layers'
  inputs, equal their reductions of the stacked internals; the bounded forward keeps only the
  layers' inputs (JS's) and no layer's α;
* LRP head relevance (Voita et al. 2019 §4.2) with α recomputed per layer equals the relevance from
  the stacked α, and gradient × input with its layers rematerialised equals it without;
* path patching's sender passes, one at a time where all at once do not fit, equal all at once and
  take less memory."""

from __future__ import annotations

import dataclasses

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from analysis_helpers import brute_js
from jattn.analyses.distance import JSDistance, pairwise_js
from jattn.nn import encoder, engine, seq2seq, state
from jattn.nn.config import EncoderConfig
from jattn.runner.loop import self_attention_fields
from jattn.runner.protocol import StepContext
from tiny_encoders import random_batch
from tolerance import assert_close, model_terms

DEEP = EncoderConfig(model_type="bert", vocab_size=50, hidden_size=16, num_layers=6, num_heads=2,
                     intermediate_size=24, hidden_act="gelu", max_position_embeddings=32, type_vocab_size=1,
                     layer_norm_eps=1e-12, pad_token_id=0)


def sharpened(params, by: float = 30.0) -> dict:
    """``params`` (a pure dict) with every layer's query kernel scaled by ``by``: a random model's α,
    near uniform at its initial scale, peaked, so that a layer's α is told from another's."""
    params = jax.tree.map(jnp.asarray, params if isinstance(params, dict) else nnx.to_pure_dict(params))
    query = params["layers"]["attention"]["query"]
    return {**params, "layers": {**params["layers"], "attention": {
        **params["layers"]["attention"], "query": {**query, "kernel": query["kernel"] * by}}}}


def largest_array(fn, *args) -> int:
    """The most elements of any array the traced program of ``fn(*args)`` holds (nested programs too)."""
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield from (v.aval.size for v in eqn.outvars if hasattr(v.aval, "size"))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                yield from walk(sub)

    return max(walk(jax.make_jaxpr(fn)(*args).jaxpr))


def test_js_from_layer_inputs_equals_brute_force_and_holds_two_layers():
    """Six layers: the program's largest array is under three layers' α (the stacked reduction holds
    all six layers' α); the distances equal loops over the stacked maps."""
    params = sharpened(nnx.to_pure_dict(state.init(DEEP, seed=1)))
    lengths = [24, 16, 10]  # n > D: every layer's α outweighs the hidden states (L+1, b, n, D)
    batch = {k: jnp.asarray(v) for k, v in random_batch(DEEP, lengths).items()}
    batch["token_class"] = jnp.where(batch["attention_mask"] > 0, 3, -1)
    fields = dict(batch, **self_attention_fields(batch, False))

    def js(params, batch):
        outputs, ints = encoder.forward(params, DEEP, batch, internals=("residual",))
        return JSDistance().reduce(StepContext(params, DEEP, fields, {}, outputs, ints, None, None))["js_distance"]

    got = jax.jit(js)(params, batch)
    _, ints = encoder.forward(params, DEEP, batch, internals=("weights",))
    W = np.asarray(ints["weights"], np.float64)  # (L, b, H, n, n)
    want = brute_js([{"maps": W[:, s, :, :n, :n]} for s, n in enumerate(lengths)])
    assert_close(got, want, terms=model_terms(DEEP, 24) + sum(n * n for n in lengths))
    b, H, n = len(lengths), DEEP.num_heads, max(lengths)
    assert largest_array(js, params, batch) < 3 * b * H * n * n  # two layers' α, padded to the row blocks

    def materialised(params, batch):  # every layer's α kept by the forward, then paired
        weights = encoder.forward(params, DEEP, batch, internals=("weights",))[1]["weights"]  # (L, b, H, n, n)
        return pairwise_js(lambda l: weights[l], DEEP.num_layers, fields["allowed"])

    assert largest_array(materialised, params, batch) >= DEEP.num_layers * b * H * n * n
    assert_close(got, jax.jit(materialised)(params, batch), terms=model_terms(DEEP, 24))


class Stacked:
    """The same method reduced after the layer loops, on the stacked internals ("all" kept)."""

    layerwise = False
    internals = "all"

    def __init__(self, method):
        self.method, self.name = method, method.name

    def __getattr__(self, attr):
        return getattr(self.method, attr)


def test_translation_runner_reduces_each_layer_inside_the_loops(tiny_marian, monkeypatch):
    """Weights, entropy, norms, confidence and ALTI (encoder kind, its rollout carried) inside the
    loops, and JS from the layers' inputs, equal the stacked reductions; the bounded forward keeps
    the layers' inputs only (JS's), none of the layerwise methods' internals."""
    from jattn.analyses.attribution import Alti
    from jattn.analyses.confidence import HeadConfidence
    from jattn.analyses.norm_stats import NormClassAttention
    from jattn.analyses.weights import ClassAttention, Entropy
    from jattn.runner import run_corpus, translation
    from tiny_seq2seq import sentences

    kept = recorded_internals(monkeypatch)
    data = list(zip(sentences(6, 1), sentences(6, 2)))
    inside = [ClassAttention(), Entropy(), NormClassAttention(), HeadConfidence(), Alti()]
    assert all(m.layerwise for m in inside)
    run = lambda methods: run_corpus(tiny_marian, data, methods, batch_size=4, max_length=32,  # noqa: E731
                                     progress=False)
    a = run(inside + [JSDistance()])
    assert kept and all(names == ["residual"] for step in kept for names in step.values()), kept
    kept.clear()
    b = run([Stacked(m) for m in inside] + [Stacked(JSDistance())])
    assert kept and all("weights" in names for step in kept for names in step.values())
    assert a.totals.keys() == b.totals.keys()
    terms = model_terms(tiny_marian.config, 32, 32) + a.meta["tokens"]
    for name, totals in b.totals.items():
        for key, want in jax.tree_util.tree_leaves_with_path(totals):
            got = jax.tree_util.tree_leaves_with_path(a.totals[name])
            assert_close(dict(got)[key], want, terms=terms, err_msg=f"{name}{jax.tree_util.keystr(key)}")
    translation.make_step.cache_clear()


class StackedAltiPlus:
    """ALTI+ from every layer's stacked internals of the three types (``alti_plus_maps``: the previous path)."""

    name, families, kinds, layerwise, internals = "alti-plus", ("seq2seq",), ("cross",), False, "all"

    def __init__(self):
        from jattn.analyses.context_mixing import AltiPlus

        self.method = AltiPlus()

    def prepare(self, batch):
        return {}

    def finalize(self, totals, meta):
        return self.method.finalize(totals, meta)

    def reduce(self, ctx):
        from jattn.analyses.context_mixing import alti_plus_maps

        _, internals = ctx.forward(internals="all")
        module = seq2seq.module(ctx.params, ctx.config)
        views = {k: module.view(k) for k in seq2seq.KINDS}
        real = (ctx.batch["example"] >= 0)[:, None]  # (b, 1)
        batch = {"attention_mask": ctx.batch["attention_mask"] * real,
                 "decoder_attention_mask": ctx.batch["decoder_attention_mask"] * real}
        maps = alti_plus_maps(internals, views, batch, ctx.config.layer_norm_eps,
                              ctx.config.norm_position)["decoder"]["alti_plus"]  # (L, b, t, s + t)
        source = maps[..., :batch["attention_mask"].shape[1]].sum(-1)  # (L, b, t)
        target = batch["decoder_attention_mask"].astype(jnp.float32)  # (b, t)
        return {"source": jnp.einsum("lbt,bt->l", source, target), "n": target.sum()}


def test_alti_plus_inside_the_loops_equals_its_stacked_maps(tiny_marian, monkeypatch):
    """ALTI+ with the encoder's rollout and the decoder's contributions carried through its own
    forward's layer loops equals ALTI+ from every layer's stacked internals; no forward of the bounded
    run keeps a layer's internals."""
    from jattn.analyses.context_mixing import AltiPlus
    from jattn.runner import run_corpus, translation
    from tiny_seq2seq import sentences

    kept = recorded_internals(monkeypatch)
    data = list(zip(sentences(6, 1), sentences(6, 2)))
    run = lambda m: run_corpus(tiny_marian, data, [m], batch_size=4, max_length=32, progress=False)  # noqa: E731
    got = run(AltiPlus())
    assert kept and all(not names for step in kept for names in step.values()), kept
    want = run(StackedAltiPlus())
    translation.make_step.cache_clear()
    for key, value in want.totals["cross-alti-plus"].items():
        assert_close(got.totals["cross-alti-plus"][key], value, terms=model_terms(tiny_marian.config, 32, 32),
                     err_msg=key)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    import jattn
    from tiny_encoders import save_tiny

    return jattn.load(save_tiny(tmp_path_factory.mktemp("bert-cls"), "bert-2x4", head="cls"), use_cache=False)


def test_lrp_with_alpha_recomputed_equals_the_stacked_alpha(classifier, monkeypatch):
    """Relevance with each layer's α recomputed from its input (its program holds no stacked α)
    equals relevance read from every layer's stacked α, example by example; gradient × input with
    its layers rematerialised equals it without."""
    from jattn.analyses import lrp

    params, config = sharpened(classifier.params, 8.0), classifier.config
    batch = {k: jnp.asarray(v) for k, v in random_batch(config, [9, 5, 7], seed=3).items()}
    def fresh(fn):  # traced anew (a jit of the same function would reuse its traced program)
        return jax.jit(lambda p, b: fn.__wrapped__(p, config, b))

    program = str(jax.make_jaxpr(lambda p, b: lrp.head_relevance.__wrapped__(p, config, b))(params, batch))
    L, H, (b, n) = config.num_layers, config.num_heads, batch["input_ids"].shape
    assert f"f32[{L},{b},{H},{n},{n}]" not in program and f"f32[{L},{b},{H},{n},{n}]" in str(
        jax.make_jaxpr(lambda p, b: encoder.forward(p, config, b, internals=("weights",)))(params, batch))
    for e in range(b):  # one example a call (two padded): a near tie of the top logits is then the same
        one = {k: v[e:e + 1] for k, v in batch.items()}
        got = fresh(lrp.head_relevance)(params, one)
        W = encoder.forward(params, config, one, internals=("weights",))[1]["weights"]  # (L, 1, H, n, n)
        with monkeypatch.context() as m:  # the previous path: every layer's α from the stacked internals
            m.setattr(lrp, "layer_weights", lambda *args, W=W: (lambda l, x: W[l]))
            want = fresh(lrp.head_relevance)(params, one)
        for key in got:
            assert_close(got[key], want[key], terms=model_terms(config, n) * 8, err_msg=f"{key} {e}")
    monkeypatch.setattr(engine, "remat_pays", lambda step, carry, xs: True)
    remat = fresh(lrp.head_gradient_x_input)(params, batch)
    assert "remat2[" in str(jax.make_jaxpr(lambda p, b: lrp.head_gradient_x_input.__wrapped__(p, config, b))(
        params, batch))
    monkeypatch.setattr(engine, "remat_pays", lambda step, carry, xs: False)
    plain = fresh(lrp.head_gradient_x_input)(params, batch)
    assert_close(remat, plain, terms=2 * model_terms(config, n))


def test_path_patching_runs_the_senders_that_fit(monkeypatch):
    """Where memory is short the default runs one sender pass at a time (its compiled temporary memory
    below all at once: each pass holds its own layer's α); the effects are the same."""
    import types

    from jattn.sweeps import path_patching as pp

    config = dataclasses.replace(DEEP, num_layers=3, num_heads=2)
    params = jax.tree.map(jnp.asarray, nnx.to_pure_dict(state.init(config, seed=4)))
    clean, corrupted = ({k: jnp.asarray(v) for k, v in random_batch(config, [24, 17], seed=s).items()} for s in (0, 1))
    corrupted["attention_mask"] = clean["attention_mask"]
    model = types.SimpleNamespace(config=config, head_shapes={"encoder": (3, 2)})
    S = 6
    senders = {"encoder": jnp.eye(S, dtype=bool).reshape(S, 3, 1, 2, 1)}
    metric = lambda out: out["last_hidden_state"][:, 0, :4].sum(-1)  # noqa: E731  (b,)
    monkeypatch.setattr(engine, "available_bytes", lambda: 10**12)
    assert pp.senders_that_fit(model, 2, 24) == S
    monkeypatch.setattr(engine, "available_bytes", lambda: 16 * 4 * 2 * (2 * 2 * 24 * 24 + 2 * 3 * 24 * 16))
    assert pp.senders_that_fit(model, 2, 24) == 1
    run = lambda step: pp._path_effects.lower(params, config, clean, corrupted, senders, None, metric, step)  # noqa: E731
    temp = {step: run(step).compile().memory_analysis().temp_size_in_bytes for step in (S, 1)}
    assert temp[1] < temp[S], temp
    all_at_once = pp._path_effects(params, config, clean, corrupted, senders, None, metric, S)  # (S, b)
    one_at_a_time = pp._path_effects(params, config, clean, corrupted, senders, None, metric, 1)
    assert_close(one_at_a_time, all_at_once, terms=model_terms(config, 24))


def recorded_internals(monkeypatch) -> list:
    """A list that each traced ``seq2seq.forward`` appends what it keeps to, per attention type."""
    from jattn.nn import seq2seq
    from jattn.runner import translation

    kept, forward = [], seq2seq.forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        kept.append({kind: sorted(ints) for kind, ints in out[1].items()})
        return out

    monkeypatch.setattr(seq2seq, "forward", recording)
    translation.make_step.cache_clear()
    return kept
