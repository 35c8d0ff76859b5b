"""Public names of jattn's modules (``__all__``) that no other test file names, each tested for
what it does: against a hand-computed or independently computed reference, or, for a constant,
against what it means (the command line offers exactly its entries, the function taking it
accepts each entry and refuses anything else)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest


# ---------------------------------------------------------------- helpers

def cli_choices(command: str, option: str):
    """The ``choices`` of ``--option`` of ``jattn <command>``."""
    from jattn.cli import build_parser

    root, _ = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return next(a for a in sub._actions if option in a.option_strings).choices


@pytest.fixture(scope="module")
def tiny_bert(tiny_bert_folder):
    import jattn

    return jattn.load(str(tiny_bert_folder), use_cache=False)


def is_png(path) -> bool:
    path = Path(path)
    return path.is_file() and path.stat().st_size > 100 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- jattn.nn.state

def test_auto_mesh_makes_every_axis_auto_and_keeps_devices_and_names():
    from jax.sharding import AxisType

    from jattn.nn.state import auto_mesh

    mesh = jax.make_mesh((1, 1), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    auto = auto_mesh(mesh)
    assert tuple(auto.axis_types) == (AxisType.Auto, AxisType.Auto)
    assert auto.axis_names == mesh.axis_names
    assert np.array_equal(auto.devices, mesh.devices)
    assert tuple(mesh.axis_types) == (AxisType.Explicit, AxisType.Explicit)  # the given mesh is left as it was
    assert auto_mesh(auto) is auto  # an all-Auto mesh is returned as it is
    mixed = jax.make_mesh((1, 1), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Explicit))
    assert tuple(auto_mesh(mixed).axis_types) == (AxisType.Auto, AxisType.Auto)


def test_on_auto_axes_runs_what_explicit_axes_refuse_and_places_results_on_the_batch_axis():
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jattn.nn.state import on_auto_axes

    mesh = jax.make_mesh((1,), ("data",))  # Explicit axes: jax.make_mesh's default
    table_np = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    ids_np = np.array([[0, 3], [2, 1]], np.int32)
    table = jax.device_put(table_np, NamedSharding(mesh, P()))
    ids = jax.device_put(ids_np, NamedSharding(mesh, P("data")))

    def fn(t, i):
        return {"rows": t[i], "total": t.sum(), "swapped": jnp.swapaxes(t[i], 0, 1)}

    with pytest.raises(Exception, match="out_sharding"):  # a gather of sharded ids under Explicit axes
        fn(table, ids)
    axis = {"rows": 0, "total": None, "swapped": 1}
    out = on_auto_axes(fn, (table, ids), ids, lambda path: axis[path[0].key])
    np.testing.assert_array_equal(np.asarray(out["rows"]), table_np[ids_np])
    np.testing.assert_array_equal(np.asarray(out["swapped"]), np.swapaxes(table_np[ids_np], 0, 1))
    assert float(out["total"]) == table_np.sum()
    spec = lambda x: tuple(jax.typeof(x).sharding.spec) + (None,) * (x.ndim - len(jax.typeof(x).sharding.spec))  # noqa: E731
    assert spec(out["rows"]) == ("data", None, None)
    assert spec(out["swapped"]) == (None, "data", None)
    assert spec(out["total"]) == ()

    # ``like`` off the mesh: every result replicated
    out = on_auto_axes(fn, (table, ids), jnp.asarray(ids_np), lambda path: axis[path[0].key])
    assert spec(out["rows"]) == (None, None, None)

    # without Explicit axes: fn(*args) itself, called once, its result returned as it is
    calls, sentinel = [], object()
    got = on_auto_axes(lambda *a: calls.append(a) or sentinel, (table_np, ids_np), ids_np, lambda path: 0)
    assert got is sentinel and len(calls) == 1 and calls[0][0] is table_np


# ---------------------------------------------------------------- jattn.nn.gates

def test_normalisations_are_the_cli_choices_and_each_is_its_documented_penalty():
    from jattn.nn import gates
    from jattn.nn.gates import NORMALISATIONS

    assert tuple(cli_choices("gates", "--normalisation")) == NORMALISATIONS
    log_alphas = {"encoder": jnp.array([[0.0, 1.0, -2.0], [3.0, 0.5, -1.0]]), "cross": jnp.array([[2.0, -3.0, 0.0]])}
    shift = gates.BETA * math.log(-gates.GAMMA / gates.ZETA)
    per_layer = [sum(1 / (1 + math.exp(-(a - shift))) for a in row)  # Σ_h P(g_h ≠ 0) of each gated layer
                 for v in log_alphas.values() for row in np.asarray(v).tolist()]
    expected = {"sum_heads": sum(per_layer), "mean_layers": sum(per_layer) / len(per_layer)}
    assert set(expected) == set(NORMALISATIONS)
    for name in NORMALISATIONS:
        assert float(gates.regulariser(log_alphas, name)) == pytest.approx(expected[name], rel=1e-5)
    with pytest.raises(ValueError, match="normalisation must be one of"):
        gates.regulariser(log_alphas, "sum_layers")


# ---------------------------------------------------------------- jattn.runner

def test_round_up():
    from jattn.runner import round_up

    for n in range(0, 40):
        for step in (1, 8, 16):
            r = round_up(n, step)
            assert r % step == 0 and r >= max(n, step) and r - max(n, step) < step
    assert round_up(8) == 8 and round_up(9) == 16 and round_up(0) == 8 and round_up(17, 16) == 32


def test_pad_rows():
    from jattn.runner import pad_rows

    seqs = [np.array([5, 6, 7]), np.array([9])]
    values, mask = pad_rows(seqs, rows=3, length=5, fill=-1, offset=1)
    assert values.shape == mask.shape == (3, 5) and values.dtype == mask.dtype == np.int32
    np.testing.assert_array_equal(values, [[-1, 5, 6, 7, -1], [-1, 9, -1, -1, -1], [-1] * 5])
    np.testing.assert_array_equal(mask, [[0, 1, 1, 1, 0], [0, 1, 0, 0, 0], [0] * 5])
    values, mask = pad_rows([], rows=2, length=2, fill=4)
    np.testing.assert_array_equal(values, np.full((2, 2), 4)) and np.testing.assert_array_equal(mask, 0)


def test_model_batches_cover_each_example_once_padded_as_the_tokenizer_encodes_it(tiny_bert):
    from jattn.runner import model_batches

    texts = ["the cat sat on the mat with a hat", "hi", "a dog", "", "one two three four", ("a pair", "of segments")]
    skipped: list = []
    seen = []
    for inputs, idx in model_batches(tiny_bert, texts, batch_size=2, max_length=32, skipped=skipped):
        ids, mask, types = (np.asarray(inputs[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
        assert ids.shape[0] == 2 and ids.shape == mask.shape == types.shape
        for r, i in enumerate(idx):
            ref = tiny_bert.tokenize([texts[i]], max_length=32)
            n = int(ref.attention_mask[0].sum())
            assert int(mask[r].sum()) == n and mask[r, :n].all()
            np.testing.assert_array_equal(ids[r, :n], ref.input_ids[0, :n])
            np.testing.assert_array_equal(types[r, :n], ref.token_type_ids[0, :n])
        assert not mask[len(idx):].any()  # filler rows are empty
        seen += list(map(int, idx))
    assert sorted(seen) == [0, 1, 2, 4, 5] and skipped == [3]
    assert tiny_bert.tokenize([texts[5]], max_length=32).token_type_ids.max() == 1  # the pair's types were checked
    with pytest.raises(ValueError, match="no text"):
        list(model_batches(tiny_bert, texts, batch_size=2, max_length=32))


# ---------------------------------------------------------------- jattn.analyses

def test_register_declares_a_method_make_methods_builds_and_another_module_cannot_take_its_name(monkeypatch):
    from jattn.analyses import make_methods, register, registry

    # every method module imported first: none registers into the copy, to be lost with it
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry.entries()))

    @dataclasses.dataclass
    class Fake:
        name: str
        model: object

    factory = lambda model, options: Fake("zz_public_api_method", model)  # noqa: E731
    entry = register("zz_public_api_method", "a test method", factory)
    assert registry.entries()["zz_public_api_method"] is entry and entry.factory is factory
    (built,) = make_methods("the model", ["zz_public_api_method", "zz_public_api_method"])
    assert built == Fake("zz_public_api_method", "the model")
    register("zz_public_api_method", "again, same module", factory)  # a module imported twice

    def elsewhere(model, options):
        return Fake("zz_public_api_method", model)

    elsewhere.__module__ = "some.other.module"
    with pytest.raises(ValueError, match="two modules register a method named 'zz_public_api_method'"):
        register("zz_public_api_method", "clash", elsewhere)
    register("zz_misnamed", "factory builds another name", factory)
    with pytest.raises(ValueError, match="names must agree"):
        make_methods(None, ["zz_misnamed"])


def test_pronouns_are_lower_case_personal_pronouns_counted_case_insensitively():
    from jattn.analyses.coref import PRONOUNS, litbank_query_profile
    from jattn.io.labels import Mention

    assert all(p == p.lower() for p in PRONOUNS)
    assert {"he", "his", "him", "she", "her", "hers", "it", "they", "them", "i", "we", "you"} <= PRONOUNS
    assert not {"the", "alice", "bob", "a", "this"} & PRONOUNS
    words = "Alice met Bob . She saw him and Bob left".split()
    # clusters: Alice / She (0), Bob / him / Bob (1); the queries are She, him, the second Bob
    mentions = [Mention(0, 0, 0), Mention(2, 2, 1), Mention(4, 4, 0), Mention(6, 6, 1), Mention(8, 8, 1)]
    profile = litbank_query_profile(mentions, words)
    assert profile["queries"] == 3 and profile["pronoun"] == 2  # "She" (capitalised) and "him"


def test_map_cosine_against_numpy_over_real_tokens():
    from jattn.analyses.patterns import map_cosine

    rng = np.random.default_rng(0)
    L, b, H, n = 2, 3, 2, 4
    A, B = rng.random((2, L, b, H, n, n)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], np.int32)  # the last row: padding only
    cosine = jax.jit(map_cosine)  # op by op, the test took seconds
    got = np.asarray(cosine(jnp.asarray(A), jnp.asarray(B), jnp.asarray(mask)))
    assert got.shape == (L, b, H)
    for l in range(L):
        for r in range(b):
            k = int(mask[r].sum())
            for h in range(H):
                if k == 0:
                    assert got[l, r, h] == 0.0
                    continue
                a, c = A[l, r, h, :k, :k].ravel(), B[l, r, h, :k, :k].ravel()
                ref = a @ c / (np.linalg.norm(a) * np.linalg.norm(c))
                assert got[l, r, h] == pytest.approx(ref, rel=1e-5)
    assert np.allclose(np.asarray(cosine(jnp.asarray(A), jnp.asarray(A), jnp.asarray(mask)))[:, :2], 1.0, atol=1e-6)
    grad = jax.jit(jax.grad(lambda x: map_cosine(x, jnp.asarray(B), jnp.asarray(mask)).sum()))(jnp.asarray(A))
    assert np.isfinite(np.asarray(grad)).all() and not np.asarray(grad)[:, 2].any()  # padding row: gradient 0


def test_frequency_rank_by_count_ties_to_the_lower_id_unseen_last():
    from jattn.analyses.roles import frequency_rank

    # counts over ids 0..5: id 3 ×3, id 1 ×2, id 4 ×2, id 0 ×1, ids 2 and 5 unseen
    rank = frequency_rank([np.array([3, 1, 3]), np.array([4, 0]), np.array([3, 1, 4])], vocab_size=6)
    np.testing.assert_array_equal(rank, [3, 1, 4, 0, 2, 5])
    assert sorted(rank.tolist()) == list(range(6))


def test_directions_name_the_map_and_its_transpose_in_the_dependency_table():
    from jattn.analyses.syntax import DIRECTIONS, sentence_counts, table

    assert len(DIRECTIONS) == 2 and DIRECTIONS[0] != DIRECTIONS[1]
    # three words; word 2 heads words 1 and 3 (word 2 is the root). Rows of A point away from the
    # heads, but the columns find them: only A's transpose ("head->dep") finds every head.
    A = np.array([[0, 0.2, 0.3], [0.9, 0, 0.9], [0.3, 0.2, 0]])
    heads, relations = np.array([2, 0, 2]), ("dep",)
    for word_map_of, direction in ((A, DIRECTIONS[1]), (A.T, DIRECTIONS[0])):
        word_map = np.zeros((1, 1, 5, 5))  # [CLS], three words, [SEP]
        word_map[0, 0, 1:4, 1:4] = word_map_of
        result = table(sentence_counts(word_map, heads, np.zeros(3, np.int64), relations), min_count=1)
        assert result["dep"]["best_head"] == [0, 0, direction] and result["dep"]["head_accuracy"] == 100.0


# ---------------------------------------------------------------- jattn.sweeps.disable

def test_metric_function_by_name_and_callable():
    from jattn.io import glue
    from jattn.sweeps.disable import metric_function

    pred, gold = np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1])
    name, fn = metric_function("accuracy")
    assert name == "accuracy" and fn(pred, gold) == 0.75
    name, fn = metric_function("matthews_corr")
    tp, tn, fp, fn_ = 2, 1, 1, 0
    mcc = (tp * tn - fp * fn_) / math.sqrt((tp + fp) * (tp + fn_) * (tn + fp) * (tn + fn_))
    assert name == "matthews_corr" and fn(pred, gold) == pytest.approx(mcc)

    def f1(p, g):
        return 0.5

    assert metric_function(f1) == ("f1", f1)
    assert metric_function(lambda p, g: 1.0)[0] == "<lambda>"
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        metric_function("bleu")
    assert set(cli_choices("disable", "--metric")) == {"accuracy", "matthews_corr"}
    assert all(metric_function(m)[1] is getattr(glue, m) for m in glue.METRICS.values())


def test_modes_and_units_are_what_the_cli_and_the_sweep_accept(tiny_bert):
    from jattn.cli.disable import _choices
    from jattn.sweeps.disable import MODES, UNITS, disable

    assert MODES == ("uniform", "zero") and UNITS == ("head", "layer")
    assert _choices(",".join(MODES), MODES, "--mode") == list(MODES)
    assert _choices(",".join(UNITS), UNITS, "--unit") == list(UNITS)
    with pytest.raises(ValueError, match="--mode 'mean'"):
        _choices("mean", MODES, "--mode")
    with pytest.raises(ValueError, match=r"mode must be one of \('uniform', 'zero'\)"):
        disable(tiny_bert, [("a", 0)], mode="mean")
    with pytest.raises(ValueError, match=r"unit must be one of \('head', 'layer'\)"):
        disable(tiny_bert, [("a", 0)], unit="neuron")
    for mode in MODES:  # every entry passes the mode and unit checks, to the classifier check
        for unit in UNITS:
            with pytest.raises(ValueError, match="needs a sequence classifier"):
                disable(tiny_bert, [("a", 0)], mode=mode, unit=unit)


def test_sweep_result_delta_improving_and_json():
    from jattn.sweeps.disable import SweepResult

    metric = np.array([[0.5, 0.8], [0.7, 0.6]])
    r = SweepResult("zero", "head", "accuracy", 0.6, metric, np.zeros((2, 2, 3), int))
    np.testing.assert_allclose(r.delta, metric - 0.6)
    improving = r.improving()
    assert [(u["layer"], u["head"]) for u in improving] == [(0, 1), (1, 0)]  # best first; 0.6 - 0.6 is no gain
    assert improving[0]["delta"] == pytest.approx(0.2) and improving[1]["delta"] == pytest.approx(0.1)
    out = json.loads(json.dumps(r.to_json()))
    assert out["mode"] == "zero" and out["unit"] == "head" and out["metric"] == "accuracy"
    assert out["baseline_metric"] == 0.6 and out["metric_disabled"] == metric.tolist()
    np.testing.assert_allclose(out["delta"], metric - 0.6)
    layers = SweepResult("uniform", "layer", "accuracy", 0.5, np.array([0.4, 0.9]), np.zeros((2, 3), int))
    assert layers.improving() == [{"layer": 1, "delta": pytest.approx(0.4)}]


# ---------------------------------------------------------------- jattn.sweeps.importance

def test_translation_batches(tiny_marian):
    from jattn.sweeps.importance import translation_batches

    pairs = [("a longer source sentence here", "and its target"), ("hi", "yo"), ("one two", "three four five")]
    tok, c = tiny_marian.tokenizer, tiny_marian.config
    prepare = getattr(tiny_marian, "prepare_texts", list)
    src = [tok(prepare([s]))["input_ids"][0] for s, _ in pairs]
    tgt = [tok(text_target=prepare([t]))["input_ids"][0] for _, t in pairs]
    seen, last = [], 0
    for batch, idx in translation_batches(tiny_marian, pairs, batch_size=2, max_length=32):
        rows, n = batch.input_ids.shape
        assert rows == 2 and n % 16 == 0 and n >= max(max(len(src[i]), len(tgt[i])) for i in idx)
        assert batch.labels.shape == batch.decoder_input_ids.shape == (2, n)
        for r, i in enumerate(idx):
            s, t = src[i], tgt[i]
            np.testing.assert_array_equal(batch.input_ids[r, :len(s)], s)
            np.testing.assert_array_equal(batch.attention_mask[r], np.arange(n) < len(s))
            np.testing.assert_array_equal(batch.labels[r, :len(t)], t)
            np.testing.assert_array_equal(batch.label_mask[r], np.arange(n) < len(t))
            assert batch.decoder_input_ids[r, 0] == c.decoder_start_token_id
            np.testing.assert_array_equal(batch.decoder_input_ids[r, 1:len(t)], t[:-1])
        assert not batch.label_mask[len(idx):].any()  # filler rows carry no labels
        longest = max(max(len(src[i]), len(tgt[i])) for i in idx)
        assert longest >= last  # length-sorted
        last = longest
        seen += list(map(int, idx))
    assert sorted(seen) == [0, 1, 2]
    with pytest.raises(ValueError, match="example 1: a translation model's importance needs"):
        list(translation_batches(tiny_marian, [("a", "b"), ("only a source",)], 2, 32))


# ---------------------------------------------------------------- jattn.sweeps.pruning_curve

def test_as_lists_is_json_of_every_array():
    from jattn.sweeps.pruning_curve import as_lists

    x = {"encoder": np.arange(6.0).reshape(2, 3), "cross": jnp.ones((1, 2)), "n": np.int64(3)}
    out = as_lists(x)
    assert json.loads(json.dumps(out)) == {"encoder": [[0, 1, 2], [3, 4, 5]], "cross": [[1, 1]], "n": 3}
    assert all(not isinstance(v, (np.ndarray, jax.Array)) for v in out.values())


def test_flat_scores_follow_head_shapes_order(tiny_marian, tiny_bert):
    from jattn.sweeps.pruning_curve import flat_scores

    shapes = tiny_marian.head_shapes
    scores = {k: np.full(s, float(i)) + np.arange(s[0] * s[1]).reshape(s) / 100 for i, (k, s) in
              enumerate(shapes.items())}
    flat = flat_scores(tiny_marian, dict(reversed(list(scores.items()))))  # dict order does not matter
    np.testing.assert_array_equal(flat, np.concatenate([scores[k].ravel() for k in shapes]))
    assert flat.dtype == np.float64
    with pytest.raises(ValueError, match="no scores for the attention types"):
        flat_scores(tiny_marian, {"encoder": scores["encoder"]})
    with pytest.raises(ValueError, match="give one value per type"):
        flat_scores(tiny_marian, scores["encoder"])
    L, H = tiny_bert.config.num_layers, tiny_bert.config.num_heads
    bare = np.arange(L * H, dtype=np.float32).reshape(L, H)
    np.testing.assert_array_equal(flat_scores(tiny_bert, bare), bare.ravel())


def test_schedules_are_the_cli_choices_once_ranks_once_reestimate_before_every_step(tiny_bert, monkeypatch):
    from jattn.sweeps import pruning_curve
    from jattn.sweeps.pruning_curve import SCHEDULES, prune

    assert tuple(cli_choices("prune", "--schedule")) == SCHEDULES == ("once", "reestimate")
    L, H = tiny_bert.config.num_layers, tiny_bert.config.num_heads
    calls = []

    def fake_importance(model, examples, *, mask, **kw):
        calls.append(mask["encoder"].copy())
        return {"encoder": np.arange(L * H, dtype=float).reshape(L, H)[::-1]}  # the last layer least important

    monkeypatch.setattr(pruning_curve, "importance", fake_importance)
    metric = lambda mask: float(mask["encoder"].sum())  # noqa: E731
    step = 1 / (L * H)  # one head per step
    for schedule in SCHEDULES:
        calls.clear()
        curve = prune(tiny_bert, ["x"], metric, schedule=schedule, step=step)
        # one head masked per point, down to none left; the fraction masked goes with it
        assert [p[1] for p in curve] == [float(L * H - k) for k in range(L * H + 1)]
        np.testing.assert_allclose([p[0] for p in curve], np.arange(L * H + 1) / (L * H), rtol=1e-6)  # float32 mask
        assert len(calls) == (1 if schedule == "once" else L * H + 1)  # reestimated before every step
        if schedule == "reestimate":  # each estimate at the current mask
            assert [int(m.sum()) for m in calls] == list(range(L * H, -1, -1))
    with pytest.raises(ValueError, match="unknown schedule 'twice'"):
        prune(tiny_bert, ["x"], metric, schedule="twice")
    with pytest.raises(ValueError, match="cannot be re-estimated"):
        prune(tiny_bert, ["x"], metric, schedule="reestimate", scores=np.zeros((L, H)))


# ---------------------------------------------------------------- jattn.training

def test_token_losses_equal_hugging_face_cross_entropy(tmp_path):
    import torch
    from transformers import GPT2LMHeadModel

    import jattn
    from jattn.training.lm import token_losses
    from tiny_lm import save_tiny_gpt2

    folder = save_tiny_gpt2(tmp_path / "gpt2")
    model = jattn.load(str(folder), use_cache=False)
    ids = np.array([[0, 5, 9, 3, 7, 2], [1, 1, 4, 8, 6, 0]], np.int32)
    got = np.asarray(token_losses(model.params, model.config, jnp.asarray(ids)))
    hf = GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        logits = hf(torch.tensor(ids, dtype=torch.long)).logits[:, :-1].double()  # (b, n-1, V)
    ref = torch.nn.functional.cross_entropy(logits.transpose(1, 2), torch.tensor(ids[:, 1:], dtype=torch.long),
                                            reduction="none").numpy()
    assert got.shape == (2, 5)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_translate_ids_equals_hugging_face_greedy_generation(tiny_marian, tiny_marian_folder):
    import torch
    from transformers import MarianMTModel

    from jattn.training.nmt import translate_ids

    tok, c = tiny_marian.tokenizer, tiny_marian.config
    texts = ["a longer sentence to translate here", "hi", "one two three"]
    src = [np.asarray(x, np.int32) for x in tok(texts)["input_ids"]]
    M = 12
    got = translate_ids(tiny_marian.params, c, src, num_beams=1, max_length=M, rows=2)  # two batches, a filler row
    hf = MarianMTModel.from_pretrained(str(tiny_marian_folder)).eval()
    for x, y in zip(src, got):
        with torch.no_grad():
            ref = hf.generate(torch.tensor(x[None], dtype=torch.long), num_beams=1, do_sample=False,
                              max_length=M)[0].numpy()
        assert y.shape == (M,) and y[0] == c.decoder_start_token_id
        np.testing.assert_array_equal(y[:len(ref)], ref)
        assert (y[len(ref):] == c.pad_token_id).all()
    assert len({tuple(y.tolist()) for y in got}) > 1  # distinct outputs: a mix-up of the order shows


def test_finetune_task_reads_the_task_and_hands_finetune_its_subset_metric_and_labels(tmp_path, monkeypatch):
    """What ``finetune_task`` adds to ``finetune`` (which tests/test_finetune.py trains for real):
    the task's splits read from the data folder, the documented seed-0 subset of the train split
    in the split's order, the task's metric and label names, everything else passed through.
    ``finetune`` itself is replaced here: a real run costs ~10 s of compiling on 2 cores."""
    from jattn.io import glue, manifest
    from jattn.io.validate import BadArgument
    from jattn.training import finetune as ft
    from jattn.training.finetune import LABEL_NAMES, FinetuneConfig, finetune_task

    rng = np.random.default_rng(1)
    words = ["red", "green", "blue", "small", "large"]
    rows = lambda n: [(" ".join(rng.choice(words, 3)) + f" {i}", int(rng.integers(2))) for i in range(n)]  # noqa: E731
    train, dev = rows(12), rows(4)
    for task in ("cola", "sst2"):
        folder = tmp_path / "data" / task
        folder.mkdir(parents=True)
        files = glue.FILES[task]
        for split, data in (("train", train), ("dev", dev)):
            if task == "cola":  # columns source, label, original label, sentence; no header
                text = "".join(f"src\t{y}\t\t{t}\n" for t, y in data)
            else:
                text = "sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in data)
            (folder / files[split]).write_text(text)
    monkeypatch.setattr(manifest, "data_path", lambda name, folder=None: tmp_path / "data" / name)
    calls = []

    def fake_finetune(base, train_, dev_, out, **kwargs):
        calls.append((base, train_, dev_, out, kwargs))
        return {"dev_metric": 0.5, "complete": True}

    monkeypatch.setattr(ft, "finetune", fake_finetune)
    fc = FinetuneConfig(epochs=1, train_examples=5)
    for task in ("cola", "sst2"):
        calls.clear()
        record = finetune_task(task, tmp_path / task, base="some-base", fc=fc, progress=False)
        assert record == {"task": task, "dev_metric": 0.5, "complete": True}
        ((base, got_train, got_dev, out, kwargs),) = calls
        keep = np.sort(np.random.default_rng(0).choice(len(train), 5, replace=False))
        assert base == "some-base" and out == tmp_path / task and got_dev == dev
        assert got_train == [train[i] for i in keep]
        assert kwargs == {"metric_name": glue.METRICS[task], "label_names": LABEL_NAMES[task], "fc": fc,
                          "progress": False}
    calls.clear()
    finetune_task("sst2", tmp_path / "all", fc=FinetuneConfig())  # train_examples 0: the whole split
    assert calls[0][1] == train and calls[0][0] is None
    with pytest.raises(BadArgument, match="train_examples"):
        finetune_task("cola", tmp_path / "x", fc=FinetuneConfig(train_examples=13))


# ---------------------------------------------------------------- jattn.io

def test_formats_are_the_cli_choices_and_each_reads(tmp_path):
    from jattn.io.readers import FORMATS, read

    assert tuple(cli_choices("analyze", "--format")) == FORMATS == tuple(cli_choices("patterns", "--format"))
    (tmp_path / "a.txt").write_text("hello world\nsecond line\n")
    assert [ex.a for ex in read(tmp_path / "a.txt", "text")] == ["hello world", "second line"]
    (tmp_path / "a.conllu").write_text("1\tHello\thello\tINTJ\t_\t_\t0\troot\t_\t_\n2\tthere\tthere\tADV\t_\t_\t1\t"
                                       "advmod\t_\t_\n\n")
    assert [ex.a for ex in read(tmp_path / "a.conllu", "conllu")] == [["Hello", "there"]]
    (tmp_path / "src.txt").write_text("le chat\n")
    (tmp_path / "tgt.txt").write_text("the cat\n")
    assert [(ex.a, ex.b) for ex in read((tmp_path / "src.txt", tmp_path / "tgt.txt"), "parallel")] == [
        ("le chat", "the cat")]
    header = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"
    text = "Alice met Bob and she left ."
    (tmp_path / "gap.tsv").write_text(header + f"x-1\t{text}\tshe\t{text.index('she')}\tAlice\t0\tTRUE\tBob\t"
                                      f"{text.index('Bob')}\tFALSE\t-\n")
    assert len(list(read(tmp_path / "gap.tsv", "gap"))) == 1
    with pytest.raises(ValueError, match="unknown format 'csv'; choose one of text, conllu, gap, parallel"):
        read(tmp_path / "a.txt", "csv")


def test_metrics_name_each_task_metric():
    from jattn.io import glue
    from jattn.sweeps.disable import metric_function

    assert set(glue.METRICS) == set(glue.FILES) == set(cli_choices("disable", "--task")) == set(
        cli_choices("finetune", "--task"))
    pred, gold = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1])
    for task, name in glue.METRICS.items():
        assert glue.metric(task)(pred, gold) == metric_function(name)[1](pred, gold)
    assert glue.metric("sst2")(pred, gold) == pytest.approx(3 / 5)  # accuracy
    assert glue.metric("cola")(pred, gold) == pytest.approx((2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))  # MCC


def test_file_path_places_an_entry_in_its_data_set_folder(tmp_path, monkeypatch):
    from jattn.io.manifest import file_path, files, missing

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"datasets": {"toy": {}}, "files": [
        {"dataset": "toy", "path": "sub/x.txt", "size": 3, "sha256": "0" * 64, "source": "http://example/x"}]}))
    (entry,) = files(["toy"], manifest)
    data = tmp_path / "data"
    assert file_path(entry, data) == data / "toy" / "sub" / "x.txt"
    monkeypatch.setenv("JATTN_DATA", str(tmp_path / "env"))
    assert file_path(entry) == tmp_path / "env" / "toy" / "sub" / "x.txt"
    assert missing("toy", data, manifest) == [entry]
    file_path(entry, data).parent.mkdir(parents=True)
    file_path(entry, data).write_bytes(b"abc")  # the manifest's size
    assert missing("toy", data, manifest) == []


def test_made_elsewhere_lists_done_folders_no_recipe_names(tmp_path):
    from jattn.artefacts import RECIPES, made_elsewhere
    from jattn.io.artefacts import DONE, models_dir

    assert made_elsewhere(tmp_path) == []  # no models folder yet
    root = models_dir(tmp_path)
    assert root == tmp_path / "models"
    recipe_name = next(iter(RECIPES))
    for name, done in (("zeta-model", True), ("alpha.v2", True), (recipe_name, True), ("half-made", False),
                       ("Bad Name", True)):
        (root / name).mkdir(parents=True)
        if done:
            (root / name / DONE).write_text("done\n")
    (root / "plain-file").write_text("not a folder")
    assert made_elsewhere(tmp_path) == ["alpha.v2", "zeta-model"]


def test_run_meta_records_fields_and_the_utc_time():
    from jattn.io.results import run_meta

    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    meta = run_meta(model="m", examples=3, complete=True)
    after = datetime.datetime.now(datetime.timezone.utc)
    assert set(meta) == {"model", "examples", "complete", "time"}
    assert (meta["model"], meta["examples"], meta["complete"]) == ("m", 3, True)
    t = datetime.datetime.fromisoformat(meta["time"])
    assert t.utcoffset() == datetime.timedelta(0) and before <= t <= after and t.microsecond == 0
    json.dumps(meta)


def test_write_figures_draws_every_layer_head_statistic_and_the_methods_figures(tmp_path, monkeypatch):
    from jattn.viz.figures import FIGURES
    from jattn.viz.results import write_figures

    drawn = {}

    def figures(stats, num_layers, folder, labels=None):
        drawn["args"] = (sorted(stats), num_layers, Path(folder), labels)
        path = Path(folder) / "own.png"
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 200)
        return [path]

    monkeypatch.setitem(FIGURES, "zz_public_api_figures", figures)  # a method without figures: no entry
    stats = {"a": np.arange(6.0).reshape(2, 3), "b": np.ones((3, 3)), "c": np.ones(2), "d": np.zeros((2, 1))}
    folder = tmp_path / "figs"
    paths = write_figures(stats, 2, folder, methods=("zz_public_api_figures", "zz_public_api_nofig", "unknown"),
                          labels={"[CLS]": "<s>"})
    assert paths == [folder / "heatmap_a.png", folder / "heatmap_d.png", folder / "own.png"]
    assert all(is_png(p) for p in paths)
    assert drawn["args"] == (["a", "b", "c", "d"], 2, folder, {"[CLS]": "<s>"})


# ---------------------------------------------------------------- jattn.reproduce

def test_profile_picks_its_size_and_reaches_the_studies(monkeypatch):
    from jattn.reproduce import studies
    from jattn.reproduce.pipeline import PROFILES, Profile, Stage

    assert Profile("full").pick(100, 5) == 100 and Profile("quick").pick(100, 5) == 5
    assert set(PROFILES) == {"full", "quick"} and all(p.name == k for k, p in PROFILES.items())
    with pytest.raises(dataclasses.FrozenInstanceError):
        Profile("full").name = "quick"
    monkeypatch.setattr(studies, "_REGISTERED", dict(studies._REGISTERED))
    monkeypatch.setattr(studies, "_TITLES", dict(studies._TITLES))
    studies.register("zzprofile", lambda p: [Stage("zzprofile.one", lambda ctx: {}, params={"n": p.pick(1000, 10)})],
                     "a test study")
    for name, n in (("full", 1000), ("quick", 10)):
        (stage,) = studies.stages(PROFILES[name], ("zzprofile",))
        assert stage.params == {"n": n}


def test_default_folder_is_the_experiments_package_of_the_checkout(tmp_path, monkeypatch):
    import jattn
    from jattn.reproduce.pipeline import repository_root
    from jattn.reproduce.studies import default_folder

    checkout = tmp_path / "checkout"
    (checkout / "experiments").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (checkout / "experiments" / "__init__.py").write_text("")
    (checkout / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(checkout / "deep" / "er")
    assert default_folder() == checkout / "experiments"
    # a checkout without an experiments package: the one jattn is installed from, if any
    (checkout / "experiments" / "__init__.py").unlink()
    installed = repository_root(Path(jattn.__file__).resolve().parent)
    expected = (
        installed / "experiments" if installed and (installed / "experiments" / "__init__.py").is_file() else None
    )
    assert default_folder() == expected


def test_register_adds_studies_in_order_refuses_clashes_and_stages_close_over_needs(monkeypatch):
    from jattn.reproduce import studies
    from jattn.reproduce.pipeline import PROFILES, Stage

    monkeypatch.setattr(studies, "_REGISTERED", dict(studies._REGISTERED))
    monkeypatch.setattr(studies, "_TITLES", dict(studies._TITLES))
    run = lambda ctx: {}  # noqa: E731

    def first(profile):
        return [Stage("zzfirst.a", run), Stage("zzfirst.b", run)]

    def second(profile):
        return [Stage("zzsecond.x", run, needs=("zzfirst.b",)), Stage("zzsecond.y", run)]

    studies.register("zzfirst", first, "First study")
    studies.register("zzsecond", second, "Second study")
    studies.register("zzfirst", first, "First study")  # the same function again: an experiments package imported twice
    assert studies.names()[-2:] == ("zzfirst", "zzsecond")
    assert studies.titles()["zzfirst"] == "First study" and studies.titles()["zzsecond"] == "Second study"
    with pytest.raises(ValueError, match="study 'zzfirst' is registered already"):
        studies.register("zzfirst", second, "Clash")
    assert studies.titles()["zzfirst"] == "First study"  # a refused registration changes nothing
    for bad in ("zz.dotted", ""):
        with pytest.raises(ValueError, match="a non-empty name without '.'"):
            studies.register(bad, first, "Bad")
        assert bad not in studies.names()
    q = PROFILES["quick"]
    assert [s.name for s in studies.stages(q, ("zzfirst", "zzsecond"))] == ["zzfirst.a", "zzfirst.b", "zzsecond.x",
                                                                             "zzsecond.y"]
    assert [s.name for s in studies.stages(q, ("zzsecond",))] == ["zzfirst.b", "zzsecond.x", "zzsecond.y"]
    # a single stage and the stages it needs, in run order; a study and a stage of another together
    assert [s.name for s in studies.stages(q, ("zzsecond.x",))] == ["zzfirst.b", "zzsecond.x"]
    assert [s.name for s in studies.stages(q, ("zzsecond.y", "zzfirst"))] == ["zzfirst.a", "zzfirst.b", "zzsecond.y"]
    with pytest.raises(ValueError, match="unknown study 'zznone'"):
        studies.stages(q, ("zznone",))
    with pytest.raises(ValueError, match="unknown stage 'zzsecond.z'.*--list"):
        studies.stages(q, ("zzsecond.z",))


# ---------------------------------------------------------------- jattn.families

def test_family_spec_registry_and_its_default_side_vocab(tiny_bert):
    from jattn import families
    from jattn.families import FamilySpec
    from jattn.families.spec import SHAPES, register

    assert "bert" in families.names() and "marian" in families.names()
    for name in families.names():
        spec = families.get(name)
        assert isinstance(spec, FamilySpec) and spec.model_type == name and spec.shape in SHAPES
    assert tiny_bert.family is families.get("bert")
    with pytest.raises(dataclasses.FrozenInstanceError):
        families.get("bert").shape = "decoder"

    class Tok:
        def get_vocab(self):
            return {"a": 0, "b": 1}

    class SplitTok(Tok):
        separate_vocabs = True
        target_encoder = {"x": 5}

    spec = FamilySpec("zz", "encoder", dict, None, None, (("vocab.txt",),), ("pad",))
    assert spec.side_vocab(Tok(), "source") == spec.side_vocab(Tok(), "target") == {"a": 0, "b": 1}
    assert spec.side_vocab(SplitTok(), "target") == {"x": 5} and spec.side_vocab(SplitTok(), "source") == {"a": 0,
                                                                                                           "b": 1}
    with pytest.raises(ValueError, match="shape must be one of"):
        register(dataclasses.replace(spec, shape="sideways"))
    assert "zz" not in families.names()
    # the spec's config reader and its converter pair, on the tiny BERT
    config = families.get("bert").config_from_hf(json.loads((Path(tiny_bert.source) / "config.json").read_text()))
    assert (config.num_layers, config.num_heads) == (tiny_bert.config.num_layers, tiny_bert.config.num_heads)


# ---------------------------------------------------------------- jattn.viz.plots

def _capture(monkeypatch):
    from jattn.viz import plots

    figs = []
    real = plots.save

    def save(fig, path):
        figs.append(fig)
        fig.canvas.draw()
        return real(fig, path)

    monkeypatch.setattr(plots, "save", save)
    return figs


def test_heatmap(tmp_path, monkeypatch):
    from jattn.viz import plots

    figs = _capture(monkeypatch)
    values = np.array([[0.1, 0.5, 0.9], [0.3, 0.2, 0.7]])
    marks = np.array([[True, False, False], [False, False, True]])
    path = plots.heatmap(values, "a title", tmp_path / "h.png", vmin=0.0, vmax=1.0, label="mass", marks=marks)
    assert path == tmp_path / "h.png" and is_png(path)
    ax = figs[0].axes[0]
    (im,) = ax.get_images()
    np.testing.assert_array_equal(im.get_array(), values)
    assert im.get_clim() == (0.0, 1.0) and im.get_cmap().name == "viridis" and ax.get_title() == "a title"
    assert [t.get_text() for t in ax.texts] == [f"{v:.2g}" for v in values.ravel()]
    assert len(ax.patches) == marks.sum()
    assert figs[0].axes[1].get_ylabel() == "mass"  # the colour bar


def test_signed_heatmap_is_symmetric_about_zero(tmp_path, monkeypatch):
    from jattn.viz import plots

    figs = _capture(monkeypatch)
    values = np.array([[-0.4, 0.1], [0.25, np.nan]])
    path = plots.signed_heatmap(values, "Δ", tmp_path / "s.png", label="Δ accuracy",
                                marks=np.array([[True, False], [False, False]]))
    assert is_png(path)
    (im,) = figs[0].axes[0].get_images()
    assert im.get_clim() == (-0.4, 0.4) and im.get_cmap().name == "RdBu"
    assert len(figs[0].axes[0].patches) == 1
    plots.signed_heatmap(np.zeros((1, 2)), "none", tmp_path / "z.png", label="Δ")  # no change: limits ±1
    assert figs[1].axes[0].get_images()[0].get_clim() == (-1.0, 1.0)


def test_signed_bars(tmp_path, monkeypatch):
    from matplotlib.colors import to_rgba

    from jattn.viz import plots

    figs = _capture(monkeypatch)
    values, low, high = np.array([-0.2, 0.3, 0.1]), np.array([-0.3, 0.1, -0.1]), np.array([-0.1, 0.5, 0.2])
    path = plots.signed_bars(values, low, high, "per layer", "Δ", tmp_path / "b.png", marks=np.array([0, 1, 0], bool))
    assert is_png(path)
    ax = figs[0].axes[0]
    bars = ax.patches
    assert len(bars) == 3
    np.testing.assert_allclose([b.get_height() for b in bars], values)
    red, blue = (to_rgba(plots.plt.get_cmap("RdBu")(x)) for x in (0.15, 0.85))
    assert [to_rgba(b.get_facecolor()) for b in bars] == [red, blue, blue]  # a loss red, a gain blue
    assert [b.get_edgecolor()[3] > 0 for b in bars] == [False, True, False]  # the marked bar has an edge
    (segments,) = [c.get_segments() for c in ax.collections]  # the interval of each bar
    np.testing.assert_allclose([(s[0][1], s[1][1]) for s in segments], np.stack([low, high], 1))


def test_patch_sites_document_the_shapes_the_check_accepts():
    """Each ``PATCH_SITES`` row's documented value and ``where`` shapes, read with L=2, b=3, H=4,
    q=5, k=6, d_h=7, D=8, are what ``check_patch`` accepts; one axis fewer is refused."""
    from jattn.nn.interventions import PATCH_SITES, check_patch

    sizes = {"b": 3, "H": 4, "q": 5, "k": 6, "d_h": 7, "D": 8}
    L = 2

    def shape(text: str, broadcast: bool) -> tuple[int, ...]:
        axes = [a.strip() for a in text.strip("()").split(",")]
        return (L, *(1 if broadcast and a.startswith("1|") else sizes[a.split("|")[-1]] for a in axes))

    for site, (_, value_shape, where_shape) in PATCH_SITES.items():
        value = np.zeros(shape(value_shape, False), np.float32)
        for broadcast in (False, True):
            where = np.ones(shape(where_shape, broadcast), bool)
            assert set(check_patch({site: (value, where)}, L, sizes["H"], "x")) == {site}
        with pytest.raises(ValueError, match="needs value"):
            check_patch({site: (value[..., 0], where)}, L, sizes["H"], "x")
    with pytest.raises(ValueError, match="unknown site"):
        check_patch({"nowhere": (value, where)}, L, sizes["H"], "x")
