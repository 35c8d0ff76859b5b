"""Head and layer disabling sweeps (issue 15): the batched sweep with prefix reuse equals one
complete forward per disabled head or layer; a disabled head is exactly uniform over real keys;
a zeroed head leaves the other heads' sum; the [CLS]-only classifier forward (``Encoder.classify``,
which the sweep's suffix and Michel's importance use) equals the full forward in logits and gate
gradients."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jattn
from jattn import Interventions
from jattn.sweeps import disable
from jattn.models.encoder import EncoderModel
from jattn.nn import encoder, state
from tiny_encoders import hf_model, hf_run, random_batch, save_tiny
from tolerance import assert_close, layer_terms, model_terms, tolerance

SENTENCES = ["A cat.", "The dog sat on the mat today.", "Nothing", "Is it raining, or not?", "Yes.",
             "An unusually long sentence, with commas, and more words than the others have."]


def classifier_model(folder, name: str, labels: int = 3, seed: int = 0) -> EncoderModel:
    """A tiny random encoder with a random classification head (BERT: pooler + linear)."""
    base = jattn.load(save_tiny(folder, name, max_positions=64), use_cache=False)
    config = dataclasses.replace(base.config, num_labels=labels, with_pooler=base.config.model_type == "bert")
    arrays = nnx.to_pure_dict(state.init(config, seed))  # the random classification head
    arrays.update({k: v for k, v in nnx.to_pure_dict(base.params).items() if k in arrays})  # the HF random encoder
    attention = arrays["layers"]["attention"]
    for k in ("query", "key"):  # peaked attention maps, so that a disabled head matters
        attention[k]["kernel"] = attention[k]["kernel"] * 6.0
    for head in ("pooler", "classifier"):  # logits that vary between examples and variants
        if head in arrays:
            part = arrays[head] if "kernel" in arrays[head] else arrays[head]["out"]
            part["kernel"] = part["kernel"] * 20.0
    return EncoderModel(config, state.from_arrays(config, arrays), base.tokenizer, source=name)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return classifier_model(tmp_path_factory.mktemp("disable") / "m", "bert-2x4")


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return classifier_model(tmp_path_factory.mktemp("disable") / "r", "roberta-2x4")


@pytest.mark.parametrize("name", ["bert-2x4", "roberta-2x4"])
def test_classify_equals_the_full_forward(name, model, roberta):
    model = model if name == "bert-2x4" else roberta
    c = model.config
    L, H = c.num_layers, c.num_heads
    batch = model.check_batch(random_batch(c, [9, 4, 7], seed=4, pairs=c.type_vocab_size > 1))
    b, n = batch["input_ids"].shape
    rng = np.random.default_rng(0)
    gates = jnp.asarray(rng.uniform(0.5, 1.5, (L, b, H, n)), jnp.float32)  # per query token
    off = np.zeros((L, b, H), bool)
    off[-1, 0, 1] = off[0, 2, 3] = True
    delta = jnp.asarray(rng.normal(0, 0.01, (L, b, H, n, n)), jnp.float32)
    for iv in (None, Interventions(head_gates=gates, disabled_heads=off, weights_delta=delta)):
        full = np.asarray(model.forward(batch, iv, internals=None).logits)  # (b, C)
        assert_close(model.classify(batch, iv), full, terms=model_terms(c, n))  # [CLS] row only: another program

    def loss(via):
        return lambda g: via(Interventions(head_gates=g)).sum()

    full = jax.grad(loss(lambda iv: encoder_forward(model, batch, iv)))(gates)  # (L, b, H, n)
    cheap = jax.grad(loss(lambda iv: encoder.classify(model.params, c, batch, iv)))(gates)
    assert_close(cheap, full, terms=2 * model_terms(c, n))  # forward and backward of two programs
    assert np.abs(np.asarray(full)[-1, :, :, 1:]).max() == 0.0  # the last layer's other queries: exactly 0
    assert np.abs(np.asarray(full)[-1, :, :, 0]).max() > 1e-4


def encoder_forward(model, batch, iv):
    return encoder.forward(model.params, model.config, batch, iv, internals=None)[0]["logits"]


@pytest.mark.parametrize("name, mode, unit", [("bert-2x4", "uniform", "head"), ("bert-2x4", "zero", "layer"),
                                              ("roberta-2x4", "zero", "head"), ("roberta-2x4", "uniform", "layer")])
def test_batched_logits_equal_one_forward_per_variant(name, mode, unit, model, roberta):
    model = model if name == "bert-2x4" else roberta
    c = model.config
    batch = model.check_batch(random_batch(c, [9, 4, 7], seed=1, pairs=c.type_vocab_size > 1))
    base, variants = disable.sweep_logits(model, batch, mode, unit)  # (b, C), (L, V, b, C)
    masks = disable.variant_masks(c, unit)
    assert variants.shape == (c.num_layers, len(masks), 3, c.num_labels)
    n = batch["input_ids"].shape[1]  # the sweep (prefix reuse, variants batched) vs one forward: other programs
    assert_close(base, disable._full_logits(model.params, c, batch, Interventions()), terms=model_terms(c, n))
    for l in range(c.num_layers):
        for v, m in enumerate(masks):
            full = np.zeros((c.num_layers, c.num_heads), bool)
            full[l] = m
            iv = Interventions(disabled_heads=full) if mode == "uniform" else \
                Interventions(head_gates=1.0 - full.astype(np.float32))
            want = disable._full_logits(model.params, c, batch, iv.check(c.num_layers, c.num_heads))  # (b, C)
            assert_close(variants[l, v], want, terms=model_terms(c, n), err_msg=f"layer {l} variant {v}")
            assert np.abs(np.asarray(want) - np.asarray(base)).max() > 1e-4  # the variant changes the logits


@pytest.mark.parametrize("mode, unit", [("uniform", "head"), ("zero", "layer")])
def test_sweep_metric_equals_the_loop(model, mode, unit):
    examples = [(s, i % 3) for i, s in enumerate(SENTENCES)] + [(("A question?", "An answer."), 1)]
    kw = dict(mode=mode, unit=unit, batch_size=8, max_length=32, progress=False)
    fast = disable.disable(model, examples, "accuracy", **kw)
    slow = disable.sweep_by_loop(model, examples, "accuracy", **kw)
    assert fast.baseline == slow.baseline
    np.testing.assert_allclose(fast.metric, slow.metric, atol=1e-6)
    np.testing.assert_array_equal(fast.predictions, slow.predictions)
    assert fast.metric.shape == ((model.config.num_layers, model.config.num_heads) if unit == "head"
                                 else (model.config.num_layers,))


def test_sweep_metric_by_hand(model):
    """The metric of each variant is the metric of its predictions; improving() lists Δ > 0."""
    examples = [(s, i % 2) for i, s in enumerate(SENTENCES)]
    r = disable.disable(model, examples, "matthews_corr", unit="head", batch_size=8, max_length=32,
                               progress=False)
    from jattn.io.glue import matthews_corr

    gold = np.array([y for _, y in examples])
    for l, h in np.ndindex(r.metric.shape):
        assert r.metric[l, h] == matthews_corr(r.predictions[l, h], gold)
    better = r.improving()
    assert [(d["layer"], d["head"]) for d in better] == \
        [tuple(map(int, i)) for i in np.argwhere(r.delta > 0)[np.argsort(-r.delta[r.delta > 0], kind="stable")]]


def test_disabled_head_is_uniform_over_real_tokens_and_zero_on_padding(model):
    c = model.config
    batch = model.check_batch(random_batch(c, [8, 5], seed=2))
    disabled = np.zeros((c.num_layers, c.num_heads), bool)
    disabled[-1, 0] = True
    w = np.asarray(model.forward(batch, Interventions(disabled_heads=disabled)).attentions)  # (L, b, H, n, n)
    mask = np.asarray(batch["attention_mask"])  # (b, n)
    for s in range(2):
        n = mask[s].sum()
        np.testing.assert_array_equal(w[-1, s, 0, :n, :n], np.full((n, n), 1.0 / n, np.float32))
        assert (w[-1, s, 0, :, n:] == 0).all()
        assert np.abs(w[-1, s, 1, :n, :n] - 1.0 / n).max() > 1e-3  # other heads untouched


@pytest.mark.parametrize("name", ["bert-2x4", "roberta-2x4"])
def test_hf_uniform_disabling_hooks_equal_disabled_heads(name, tmp_path):
    """The HF PyTorch loop of benchmarks/bench_disable.py (hooks of tests/hf_head_gates.py)
    disables heads exactly as ``Interventions.disabled_heads`` does, on a padded batch."""
    from hf_head_gates import disabled

    folder = save_tiny(tmp_path / name, name, max_positions=64)
    ours, hf = jattn.load(folder, use_cache=False), hf_model(folder)
    c = ours.config
    batch = ours.check_batch(random_batch(c, [9, 4, 7], seed=3))
    off = np.zeros((c.num_layers, c.num_heads), bool)
    off[0, 1] = off[1, 0] = off[1, 3] = True
    want = np.asarray(ours.forward(batch, Interventions(disabled_heads=off)).last_hidden_state)  # (b, n, D)
    with disabled(hf, off):
        got = hf_run(hf, batch).last_hidden_state.numpy()  # (b, n, D)
    intact = hf_run(hf, batch).last_hidden_state.numpy()
    real = np.asarray(batch["attention_mask"], bool)  # (b, n)
    terms = model_terms(c, real.shape[1])  # jattn vs HF PyTorch
    assert_close(got[real], want[real], terms=terms)
    assert np.abs(intact[real] - want[real]).max() > 5 * tolerance(np.abs(want).max(), terms)  # visible disabling


def test_zeroed_head_leaves_the_sum_of_the_other_heads(model):
    """Attention output with ξ_h = 0 equals b_O + Σ_{h'≠h} context_h' W_O^h', from the intact run."""
    c = model.config
    batch = model.check_batch(random_batch(c, [8, 5], seed=3))
    intact = model.forward(batch).internals
    gates = np.ones((c.num_layers, c.num_heads), np.float32)
    gates[0, 1] = 0.0
    zeroed = model.forward(batch, Interventions(head_gates=jnp.asarray(gates))).internals
    view = model.module.view()
    ctx = np.asarray(intact["context"][0], np.float64)  # (b, H, n, d_h) layer 0
    W, b_o = np.asarray(view["out_kernel"][0], np.float64), np.asarray(view["out_bias"][0], np.float64)
    want = b_o + sum(ctx[:, h] @ W[h] for h in range(c.num_heads) if h != 1)  # (b, n, D)
    assert_close(zeroed["output"][0], want, terms=layer_terms(1, c.hidden_size, ctx.shape[2], 0))  # gated program


def test_bad_input_is_named(model, tmp_path):
    with pytest.raises(ValueError, match="mode must be"):
        disable.disable(model, [("a", 0)], mode="random", max_length=32)
    with pytest.raises(ValueError, match="unit must be"):
        disable.disable(model, [("a", 0)], unit="neuron", max_length=32)
    with pytest.raises(ValueError, match="examples must be"):
        disable.disable(model, ["just text"])
    with pytest.raises(ValueError, match="unknown metric"):
        disable.disable(model, [("a", 0)], "f1", max_length=32)
    plain = jattn.load(save_tiny(tmp_path / "plain", "bert-2x4"), use_cache=False)
    with pytest.raises(ValueError, match="sequence classifier"):
        disable.disable(plain, [("a", 0)])
    with pytest.raises(ValueError, match="no classification head"):
        plain.classify(plain.tokenize(["a"], max_length=32))
    with pytest.raises(ValueError, match="classification head"):
        encoder.classify(plain.params, plain.config, plain.check_batch(plain.tokenize(["a"], max_length=32)))


def test_command_line(model, tmp_path, capsys):
    """Metric ×100 everywhere, named; every improving/hurting unit with its paired-bootstrap
    interval and p-value, recomputed here from the sweep's own predictions; signed figures."""
    from jattn.cli import main
    from jattn.io.glue import accuracy
    from jattn.stats import holm, paired_bootstrap
    from jattn.training.finetune import save_classifier

    folder = save_classifier(model, tmp_path / "clf")
    data = tmp_path / "dev.tsv"
    data.write_text("".join(f"{s}\t{i % 3}\n" for i, s in enumerate(SENTENCES)))
    out = tmp_path / "out"
    main(["disable", "--model", str(folder), "--input", str(data), "--out", str(out), "--mode", "zero",
          "--unit", "head,layer", "--max-length", "32", "--bootstrap", "200"])
    assert "intact accuracy (%)" in capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    examples = [(s, i % 3) for i, s in enumerate(SENTENCES)]
    want = disable.disable(jattn.load(folder), examples, mode="zero", max_length=32, progress=False)
    np.testing.assert_allclose(doc["delta_head_zero"]["value"], 100 * want.delta, atol=1e-9)
    assert (
        doc["meta"]["metric"] == "accuracy (%)" and len(doc["disable_layer_zero"]["value"]) == model.config.num_layers
    )
    labels = np.array([y for _, y in examples])
    p = np.ones(want.delta.shape)
    for l, h in np.ndindex(*want.delta.shape):
        if not np.array_equal(want.predictions[l, h], want.baseline_predictions):
            t = paired_bootstrap(lambda a, g: 100 * accuracy(a, g), want.predictions[l, h], want.baseline_predictions,
                                 labels, b=200)
            p[l, h] = t["p"]
            assert doc["ci_low_head_zero"]["value"][l][h] == pytest.approx(t["ci"][0])
    np.testing.assert_allclose(doc["p_head_zero"]["value"], p)
    np.testing.assert_array_equal(np.asarray(doc["significant_head_zero"]["value"], bool), holm(p))
    improving = doc["meta"]["improving"]["head_zero"]
    assert [(c["layer"], c["head"]) for c in improving] == [(c["layer"], c["head"]) for c in want.improving()]
    assert all({"ci", "p", "significant"} <= set(c) for c in improving + doc["meta"]["hurting"]["head_zero"])
    report = (out / "report.md").read_text()
    assert "paired-bootstrap" in report and "Holm" in report and "accuracy (%)" in report
    assert (out / "figures" / "delta_head_zero.png").is_file() and (out / "figures" / "delta_layer_zero.png").is_file()
    with pytest.raises(SystemExit, match="--mode"):
        main(["disable", "--model", str(folder), "--input", str(data), "--out", str(tmp_path / "o2"), "--mode", "x"])


def test_baseline_predictions_are_the_intact_models(model):
    from jattn.sweeps.pruning_curve import classification_predictions

    examples = [(s, i % 3) for i, s in enumerate(SENTENCES)]
    r = disable.disable(model, examples, mode="zero", unit="layer", max_length=32, progress=False)
    intact = classification_predictions(model, SENTENCES, max_length=32)(np.ones((model.config.num_layers,
                                                                                 model.config.num_heads)))
    np.testing.assert_array_equal(r.baseline_predictions, intact)
    np.testing.assert_array_equal(r.predictions[0], classification_predictions(model, SENTENCES, max_length=32)(
        np.concatenate([np.zeros((1, model.config.num_heads)),
                        np.ones((model.config.num_layers - 1, model.config.num_heads))])))


def test_sigterm_keeps_finished_sweeps_and_a_rerun_ends_the_same(model, tmp_path, monkeypatch):
    """SIGTERM during the second sweep: exit 143, --out untouched, the first sweep kept in
    OUT-work; the same command run again computes only the rest and writes what an uninterrupted
    run writes."""
    import os
    import signal

    from jattn.cli import main
    from jattn.training.finetune import save_classifier

    folder = save_classifier(model, tmp_path / "clf")
    data = tmp_path / "dev.tsv"
    data.write_text("".join(f"{s}\t{i % 3}\n" for i, s in enumerate(SENTENCES)))
    args = lambda out: ["disable", "--model", str(folder), "--input", str(data), "--out", str(out), "--mode",  # noqa
                        "uniform,zero", "--unit", "layer", "--max-length", "32", "--bootstrap", "100"]
    main(args(tmp_path / "whole"))
    from jattn.sweeps import disable as S

    done = []

    original = S.disable

    def once_then_term(*a, **kw):
        done.append(kw["mode"])
        if len(done) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*a, **kw)

    monkeypatch.setattr(S, "disable", once_then_term)
    with pytest.raises(SystemExit) as stopped:
        main(args(tmp_path / "out"))
    assert stopped.value.code == 143 and not (tmp_path / "out").exists()
    assert sorted(p.name for p in (tmp_path / "out-work").glob("sweep_*")) == ["sweep_layer_uniform.npz"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    main(args(tmp_path / "out"))
    assert done == ["uniform", "zero", "zero"]  # the finished sweep was not run again
    got, want = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("out", "whole"))
    for doc in (got, want):
        doc["meta"].pop("time")
    assert got == want and not (tmp_path / "out-work").exists()
