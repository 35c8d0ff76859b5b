"""The patching study: its pairs align token by token, its metric and per-head tests against
plain numpy, the head_spearman statistic against ranks written out, and its stages end to end
with every claim recomputable from its predictions file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jattn import stats
from jattn.reproduce import claims, pipeline
from experiments.patching import study as patching
from experiments.patching import pairs as patching_pairs
from experiments.patching import gender, sentiment
from experiments.patching.resampling import resample_weights
from tolerance import assert_close, model_terms


def _ranks(v):
    """Average ranks (ties share their mean rank), 1-based, written out."""
    v = np.asarray(v, float)
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for value in np.unique(v):
        tie = v == value
        r[tie] = r[tie].mean()
    return r


def test_head_spearman_is_pearson_of_the_ranks_of_the_means():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 12))
    y = np.round(rng.random((30, 12)))  # 0/1 scores, as Clark's: the means tie
    rx, ry = _ranks(x.mean(0)), _ranks(y.mean(0))
    want = np.corrcoef(rx, ry)[0, 1]
    assert claims.STATISTICS["head_spearman"][1](x, y) == pytest.approx(want, abs=1e-12)


def test_head_spearman_bootstrap_resamples_whole_examples():
    """Every resample hands the statistic (n, K) arrays of whole rows: the interval is the
    percentile interval of ρ over resamples of example indices."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 8)) + np.arange(8)  # heads ordered in x ...
    y = x + rng.normal(scale=3.0, size=(20, 8))  # ... and, noisily, in y
    seen = []

    def statistic(a, b):
        seen.append((a.shape, b.shape))
        return claims.STATISTICS["head_spearman"][1](a, b)

    value, (lo, hi) = stats.bootstrap_ci(statistic, x, y, b=200)
    assert {s for s in seen} == {((20, 8), (20, 8))}
    assert lo <= value <= hi and lo < hi
    rows = [{"x": a.tolist(), "y": b.tolist()} for a, b in zip(x, y)]
    got = claims.evaluate(rows, {"statistic": "head_spearman", "columns": {"x": "x", "y": "y"},
                                 "ci_method": "bootstrap"})
    assert got["value"] == pytest.approx(value, abs=1e-12)


def test_holm_heads_p_values_are_the_paired_bootstrap_per_head():
    rng = np.random.default_rng(2)
    effects = rng.normal(size=(25, 2, 3)) + np.array([0.0, 0.2, 1.0, -1.0, 0.0, 0.05]).reshape(2, 3)
    p, rejected = patching._holm_heads(effects)
    flat = effects.reshape(25, 6)
    want = [stats.paired_bootstrap(lambda s: np.mean(s), flat[:, k], np.zeros(25))["p"] for k in range(6)]
    assert p.ravel() == pytest.approx(want, abs=1e-12)
    assert (rejected.ravel() == stats.holm(np.asarray(want))).all()


def test_holm_heads_resample_the_documents_as_the_claims_do():
    """With documents (GAP pages), each head's p is that of ``claims.evaluate``'s clustered paired
    bootstrap of its effects against 0, and a page's pairs enter or leave a resample together."""
    rng = np.random.default_rng(4)
    documents = [f"page-{i // 3}" for i in range(24)]  # 8 pages of 3 pairs
    effects = rng.normal(size=(24, 1, 3)) + np.array([0.0, 0.4, 1.0])
    p, _ = patching._holm_heads(effects, documents)
    spec = {"statistic": "mean", "columns": {"value": "v"}, "against": {"value": "zero"}, "ci_method": "paired",
            "cluster": "document"}
    for k in range(3):
        rows = [{"document": d, "v": float(e), "zero": 0.0} for d, e in zip(documents, effects[:, 0, k])]
        assert p[0, k] == pytest.approx(claims.evaluate(rows, spec)["p"], abs=1e-12)
    w = resample_weights(24, documents)
    assert (w.reshape(-1, 8, 3) == w.reshape(-1, 8, 3)[..., :1]).all() and (w.sum(1) == 24).all()
    rows_only = resample_weights(24)  # no documents: the row resamples of jattn.stats
    want = np.random.default_rng(stats.SEED).integers(0, 24, size=(stats.B, 24))
    assert (rows_only == np.stack([np.bincount(r, minlength=24) for r in want])).all()


def test_metric_is_the_pronoun_vector_against_each_name():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(2, 7, 5)).astype(np.float32)
    masks = {"pronoun": np.zeros((2, 7), np.float32), "gold": np.zeros((2, 7), np.float32),
             "other": np.zeros((2, 7), np.float32)}
    masks["pronoun"][:, 4] = 1
    masks["gold"][0, 1:3], masks["gold"][1, 5] = 1, 1
    masks["other"][0, 5], masks["other"][1, 1:4] = 1, 1
    got = np.asarray(patching_pairs.metric({"last_hidden_state": h}, masks))
    for r in range(2):
        p = h[r, 4].astype(float)
        gold = h[r][masks["gold"][r] > 0].astype(float).mean(0)
        other = h[r][masks["other"][r] > 0].astype(float).mean(0)
        assert got[r] == pytest.approx(p @ gold - p @ other, rel=1e-5, abs=1e-5)


def test_pairs_align_token_by_token_and_flip_the_antecedents_gender(minilm, data_set):
    from jattn.io.labels import read_gap

    examples = read_gap(data_set("gap") / "gap-development.tsv")[:300]
    pairs, skipped = patching_pairs.make_pairs(examples, [minilm.tokenizer], limit=20, max_tokens=96)
    assert len(pairs) == 20 and sum(skipped.values()) > 0
    names = patching_pairs.inventory(examples)
    for p in pairs:
        gender = patching_pairs.gender(p["clean"][p["pronoun"]])
        assert tuple(p["inserted"].split()) in names["f" if gender == "m" else "m"]  # the other gender's name
        start, end = p["gold"][0], p["gold"][-1] + 1
        new = p["inserted"].split()
        assert p["corrupted"][:start] == p["clean"][:start]
        assert p["corrupted"][start:start + len(new)] == new
        assert p["corrupted"][start + len(new):] == p["clean"][end:]
    clean, corrupted, masks = patching_pairs.encode(minilm, pairs, 96)
    assert (clean["attention_mask"] == corrupted["attention_mask"]).all()
    differs = clean["input_ids"] != corrupted["input_ids"]  # only the coreferent name's pieces change
    assert (differs <= (masks["gold"] > 0)).all() and differs.any(1).all()
    assert (masks["pronoun"].sum(1) >= 1).all() and (masks["other"].sum(1) >= 1).all()


def test_sentiment_pairs_swap_one_word_for_its_antonym_of_equal_pieces(minilm, data_set):
    from experiments import common

    data_set("sst2")
    examples = common.dev_examples("sst2")
    pairs, skipped = sentiment.make_pairs(examples, [minilm.tokenizer], limit=30)
    assert len(pairs) == 30 and sum(skipped.values()) + len(pairs) == pairs[-1]["index"] + 1
    for p in pairs:
        clean, corrupted = p["clean"].split(), p["corrupted"].split()
        changed = [i for i, (a, b) in enumerate(zip(clean, corrupted)) if a != b]
        assert len(clean) == len(corrupted) and changed == [clean.index(p["word"])]
        assert sentiment.SWAP[p["word"]] == corrupted[changed[0]] and sentiment.SWAP[corrupted[changed[0]]] == p["word"]
        assert sum(w in sentiment.SWAP for w in clean) == 1 and p["label"] == examples[p["index"]][1]
        a, b = (minilm.tokenizer(t)["input_ids"] for t in (p["clean"], p["corrupted"]))
        assert len(a) == len(b)
    assert len(sentiment.SWAP) == 2 * len(sentiment.ANTONYMS)  # each word in one pair only


def test_sentiment_metrics_against_numpy():
    rng = np.random.default_rng(4)
    z, h, d = rng.normal(size=(5, 2)), rng.normal(size=(5, 7, 3)), rng.normal(size=(5, 3))
    y = np.array([0, 1, 1, 0, 1], np.int32)
    got = sentiment.logit_difference({"logits": z}, {"label": y})  # float32 in JAX
    assert_close(got, [z[i, y[i]] - z[i, 1 - y[i]] for i in range(5)], scale=np.abs(z).max())
    got = sentiment.hidden_projection({"last_hidden_state": h}, {"direction": d})
    assert_close(got, [h[i, 0] @ d[i] for i in range(5)], terms=3, scale=np.abs(h[:, 0] * d).sum(1))


def _run(tmp_path, monkeypatch, sizes, which: str = "gap"):
    """Run the quick profile's stages of one kind of pairs: "gap", "sst2" or "gender"."""
    monkeypatch.setattr(patching, "QUICK", sizes)
    from jattn.io.manifest import data_dir

    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", data_dir(),
                           progress=False)
    kind = lambda name: next((k for k in ("sst2", "gender") if k in name), "gap")  # noqa: E731
    stages = [s for s in patching.stages(pipeline.PROFILES["quick"]) if kind(s.name) == which]
    records = pipeline.run(stages, ctx, log=lambda *_: None)
    return ctx, records


def _recomputes(ctx, claim: dict):
    again = claims.recompute(claim, ctx.out)  # the predictions path is relative to ctx.out (no repository)
    assert again["value"]["value"] == pytest.approx(claim["value"], abs=1e-12)
    assert again["value"]["ci"] == pytest.approx(claim["ci"], abs=1e-12)
    assert again["baseline"]["value"] == pytest.approx(claim["baseline"]["value"], abs=1e-12)
    assert "status" not in claim and claim["note"]


def _check_claims(ctx, records):
    result = records["patching.minilm"]["result"]
    ids = [c["id"] for c in result["claims"]]
    assert ids == [f"patching-minilm-{k}" for k in ("behaviour", "corruption", "clark", "attribution")]
    for claim in result["claims"]:
        _recomputes(ctx, claim)
        assert claim["measure"]["cluster"] == claim["baseline_measure"]["cluster"] == "document"  # GAP's pages
        assert all(r["document"].startswith("http") for r in claims.read_rows(ctx.out / claim["predictions"]))
    for claim in result["claims"][2:]:  # the permutation interval over heads, from the same rows
        rows = claims.read_rows(ctx.out / claim["predictions"])
        x, y = (np.asarray([r[claim["measure"]["columns"][k]] for r in rows]) for k in ("x", "y"))
        _, band = stats.permutation_interval(patching._spearman, x.mean(0), y.mean(0))
        assert claim["permutation_interval"] == pytest.approx(list(band), abs=1e-12)
    assert all((ctx.out / f).is_file() for f in result["figures"])
    sweep = records["patching.minilm-sweep"]["result"]
    assert np.asarray(sweep["exact"]).shape == (len(sweep["ids"]), 6, 12)


def test_stages_on_four_pairs(tmp_path, monkeypatch, minilm, data_set):
    data_set("gap")
    ctx, records = _run(tmp_path, monkeypatch, {**patching.QUICK, "max_tokens": 48, "batch": 4, "pairs": {"small": 4}})
    _check_claims(ctx, records)


@pytest.mark.slow
def test_quick_profile(tmp_path, monkeypatch, data_set):
    data_set("gap")
    ctx, records = _run(tmp_path, monkeypatch, dict(patching.QUICK))
    _check_claims(ctx, records)


def test_sentiment_stages_on_four_pairs(tmp_path, monkeypatch, data_set):
    """The output-head stages with a tiny random classifier (MiniLM's tokenizer) in place of the
    quick profile's: every claim recomputes from its rows; the sweep's maps are (pairs, L, H) under
    both metrics, and the clean metric is the classifier's own logit difference."""
    import jattn
    from experiments import common
    from tiny_encoders import save_tiny

    data_set("sst2")
    folder = save_tiny(tmp_path / "classifier", "bert-2x4", head="cls")
    monkeypatch.setattr(common, "classifier", lambda ctx, model, task, seed: folder)
    ctx, records = _run(tmp_path, monkeypatch, {**patching.QUICK, "sst2_pairs": 4}, which="sst2")
    result = records["patching.minilm-sst2"]["result"]
    assert [c["id"] for c in result["claims"]] == [f"patching-minilm-sst2-{k}" for k in
                                                   ("behaviour", "corruption", "attribution", "hidden")]
    for claim in result["claims"]:
        _recomputes(ctx, claim)
    sweep = records["patching.minilm-sst2-sweep"]["result"]
    for key in ("exact", "hidden", "attribution"):
        assert np.asarray(sweep[key]).shape == (4, 2, 4)
    pairs = records["patching.sst2-pairs"]["result"]["pairs"]
    net = jattn.load(folder)
    z = np.asarray(net.forward(net.batch([p["clean"] for p in pairs]), internals=None).logits, np.float64)  # (4, 2)
    want = [z[i, p["label"]] - z[i, 1 - p["label"]] for i, p in enumerate(pairs)]  # another batch: other padding
    assert_close(np.asarray(sweep["clean"]), want, terms=model_terms(net.config, 64), scale=np.abs(z).max())
    # ⟨a, a − b⟩ − ⟨b, a − b⟩ = |a − b|² ≥ 0: the clean run sits further along the direction than the corrupted one
    assert (np.asarray(sweep["hidden_clean"]) >= np.asarray(sweep["hidden_corrupted"])).all()


def test_gender_swap_takes_the_words_that_agree_with_the_noun():
    assert gender.swap_gender("Un petit garçon joue.") == ("Une petite fille joue.", "garçon")
    assert gender.swap_gender("Des femmes marchent.") == ("Des hommes marchent.", "femmes")
    assert gender.swap_gender("Une jeune fille et un chien.") == ("Un jeune garçon et un chien.", "fille")
    assert gender.swap_gender("Un homme et une femme.") is None  # two nouns of the list: the cue is not one word
    assert gender.swap_gender("Un chien court.") is None


def test_gender_pairs_and_metric_on_the_committed_translation_model(data_set):
    """Pairs from the test captions: the sources differ in the noun (and its agreeing words) only,
    tokenize to equal lengths; the metric's position is the reference piece that starts the English
    word, and m is the difference of the model's two logits there."""
    import jattn

    root = data_set("multi30k")
    model = jattn.load(Path(__file__).parents[2] / "checkpoints" / "multi30k-fr-en-6x8", use_cache=False)
    src, ref = (model.prepare_texts((root / f"test_2016_flickr.{s}").read_text(encoding="utf-8").splitlines()[:60])
                for s in ("fr", "en"))
    pairs, skipped = gender.make_pairs(src, ref, model.tokenizer, limit=8)
    assert len(pairs) == 8 and sum(skipped.values()) + 8 == pairs[-1]["index"] + 1
    pieces = model.tokenizer.convert_ids_to_tokens
    for p in pairs:
        a, b = (model.tokenizer(t)["input_ids"] for t in (p["clean"], p["corrupted"]))
        assert len(a) == len(b) and a != b
        target = model.tokenizer(text_target=p["target"])["input_ids"]
        assert pieces([target[p["position"]]])[0] == "▁" + p["word"] and p["right"] == target[p["position"]]
        other = gender.OTHER[p["word"].lower()]  # man -> woman, Men -> Women
        assert pieces([p["wrong"]])[0] == "▁" + (other.capitalize() if p["word"][0].isupper() else other)
    batch = model.tokenize_examples([(p["clean"], p["target"]) for p in pairs])
    z = np.asarray(model.forward(batch, internals=None).logits, np.float64)  # (8, t, V)
    rows = {k: np.asarray([p[k] for p in pairs], np.int32) for k in ("position", "right", "wrong")}
    want = [z[i, p["position"], p["right"]] - z[i, p["position"], p["wrong"]] for i, p in enumerate(pairs)]
    assert_close(gender.logit_difference({"logits": z.astype(np.float32)}, rows), want, scale=np.abs(z).max())


def test_gender_stages_on_the_quick_model(tmp_path, monkeypatch, data_set):
    data_set("multi30k")
    ctx, records = _run(tmp_path, monkeypatch, {**patching.QUICK, "gender_pairs": 4}, which="gender")
    result = records["patching.gender"]["result"]
    assert [c["id"] for c in result["claims"]] == [f"patching-translation-gender-{k}" for k in
                                                   ("behaviour", "corruption", "attribution")]
    for claim in result["claims"]:
        _recomputes(ctx, claim)
    sweep = records["patching.gender-sweep"]["result"]
    for kind in gender.KINDS:
        assert np.asarray(sweep[f"exact_{kind}"]).shape == (4, *sweep["shapes"][kind])
    assert sum(records["patching.gender-pairs"]["result"]["train_counts"].values()) > 0
