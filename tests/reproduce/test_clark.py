"""The Clark et al. 2019 study (experiments.clark2019.study*): each helper against a slow or
independent formulation on a tiny random model, the tests' notes, every stage of the quick
profile on the tiny model with every claim recomputed from its file, and (slow) the quick
profile on MiniLM."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from jattn.io.labels import GapExample, Tree
from jattn.reproduce import claims, pipeline
from experiments.clark2019 import study as clark
from experiments.clark2019 import common as clark_common
from experiments.clark2019 import coref as clark_coref
from experiments.clark2019 import probe as clark_probe
from experiments.clark2019 import shares as clark_shares
from experiments.clark2019 import syntax as clark_syntax
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def tiny(tiny_bert_folder):
    import jattn

    return jattn.load(str(tiny_bert_folder), use_cache=False)


# ---------------------------------------------------------------- shares

def test_shares_equal_a_per_segment_loop(tiny):
    """Batched, sorted and padded shares = each segment alone, by explicit sums over its rows."""
    from jattn.runner import token_classes

    pairs = [("A cat sat.", "It slept, then woke."), ("Dogs bark, cats meow.", "Birds sing."),
             ("One.", "Two, three, four, five, six."), ("Short text here.", "More.")]
    got = clark_shares.segment_shares(tiny, pairs, batch_size=3)
    for s, pair in enumerate(pairs):
        batch = tiny.tokenize([pair])
        alpha = np.asarray(tiny.forward(batch, internals=("weights",)).attentions, np.float64)[:, 0]  # (L, H, n, n)
        cls = token_classes(tiny.tokenizer, batch.input_ids, batch.attention_mask)[0]  # (n,)
        n = len(cls)
        for c in range(4):
            want = alpha[..., cls == c].sum(-1).mean(-1)  # (L, H): Σ over the class's keys, mean over rows
            assert_close(got["share"][s, ..., c], want, terms=model_terms(tiny.config, n) + n, scale=1.0)
            assert got["uniform"][s, c] == pytest.approx((cls == c).sum() / n)


@pytest.mark.parametrize("layers, first, last, want", [(12, 6, 10, [5, 6, 7, 8, 9]), (6, 6, 10, [2, 3, 4]),
                                                       (12, 1, 4, [0, 1, 2, 3]), (6, 11, 12, [5]),
                                                       (12, 11, 12, [10, 11])])
def test_region_keeps_the_relative_depth(layers, first, last, want):
    assert clark_shares.region(layers, first, last) == want


def test_a_share_claim_notes_its_test_and_peak_and_judges_nothing():
    rng = np.random.default_rng(0)
    uniform = np.full(50, 0.05)
    share = np.zeros((50, 4, 2))
    share[:, 2] = 0.7 + 0.01 * rng.normal(size=(50, 2))  # layer 3 (0-based 2) holds the most
    value = share[:, [1, 2]].mean((1, 2))
    got = clark_shares.share_tests(share, value, uniform)
    assert set(got) == {"note"} and "share − uniform Δ +0.3" in got["note"] and "peaks in layer 3" in got["note"]
    assert clark_common.note("x") == {"note": "Tests: x."}


# ---------------------------------------------------------------- syntax

TREES = [Tree("The old dog barked at the cat .".split(), np.array([3, 3, 4, 0, 7, 7, 4, 4]),
              ["det", "amod", "nsubj", "root", "case", "det", "obl", "punct"], ["DET", "ADJ", "NOUN", "VERB", "ADP",
                                                                                "DET", "NOUN", "PUNCT"]),
         Tree("She reads books .".split(), np.array([2, 0, 2, 2]), ["nsubj", "root", "obj", "punct"],
              ["PRON", "VERB", "NOUN", "PUNCT"]),
         Tree("A bird sang".split(), np.array([2, 3, 0]), ["det", "nsubj", "root"], ["DET", "NOUN", "VERB"])]


def test_split_pass_equals_the_runner_counts(tiny, tmp_path):
    """Per-word predictions of every head, summed per relation, = the runner's DependencyHeads
    counts (a separate jitted formulation); offsets too; one probe shard row per sentence."""
    from jattn.analyses import probe
    from jattn.analyses.syntax import OFFSETS, DependencyHeads
    from jattn.io.readers import Example
    from jattn.runner import run_corpus

    got = clark_syntax.split_pass(tiny, TREES, tmp_path / "shards", probe.word_embedding_table(tiny))
    relations = tuple(sorted({r for t in TREES for r in t.relations}))
    method = DependencyHeads(relations)
    result = run_corpus(tiny, [Example(t.words, None, f"tree {i}", {"heads": t.heads, "relations": t.relations,
                                                                       "upos": t.upos}) for i, t in enumerate(TREES)],
                        [method], batch_size=2)
    counts = method.counts(result.totals["syntax"])
    for k, r in enumerate(relations):
        words = clark_syntax.word_sets(got, [r])[r]
        right = (got["pred"][words] == got["gold"][words, None, None, None]).sum(0)  # (2, L, H)
        np.testing.assert_array_equal(right, counts.correct[..., k])
        assert len(words) == counts.total[k]
        for j, off in enumerate(OFFSETS):
            assert (got["gold"][words] == got["position"][words] + off).sum() == counts.offset_correct[j, k]
    assert sum(int(b["mask"].sum()) for b in probe.batches(tmp_path / "shards", 8)) == sum(len(t.words) for t in TREES)
    none = {k: np.zeros_like(v) for k, v in result.totals["syntax"].items()}  # no scored word at all
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN accuracies, without numpy's "All-NaN slice" warning
        accuracy = method.finalize(none, {})["dependency_accuracy"].value
    assert accuracy.shape == counts.correct.shape[1:3] and np.isnan(accuracy).all()


def test_select_and_rows_by_hand():
    """Two heads (one layer, direction 0); relation "a": head 1 right on both words, head 0 on
    one; the best offset +1 right on one."""
    pred = np.zeros((3, 2, 1, 2), np.int16)
    pred[:, 0, 0, 0] = [2, 1, 9]
    pred[:, 0, 0, 1] = [2, 3, 1]
    split = {"pred": pred, "gold": np.array([2, 3, 0]), "position": np.array([1, 2, 3]),
             "sentence": np.array([0, 0, 0]), "relation": np.array(["a", "a", "root"])}
    chosen = clark_syntax.select(split, ["a"])
    assert chosen["a"] == {"head": [0, 0, 1], "offset": 1}
    assert chosen[clark_syntax.ALL]["head"] == [0, 0, 1]  # ROOT words are not scored
    rows = clark_syntax.rows(split, "a", chosen, chosen)
    assert [(r["gold"], r["head"], r["offset"]) for r in rows] == [(2, 2, 2), (3, 3, 3)]
    assert clark_syntax.head_name([1, 3, 4]) == "3-4 (Aᵀ)"


def test_concat_numbers_the_second_split_after_the_first():
    a = {"sentence": np.array([0, 0, 1]), "relation": np.array(["x", "y", "z"])}
    b = {"sentence": np.array([0, 1]), "relation": np.array(["u", "v"])}
    both = clark_syntax.concat(a, b)
    assert both["sentence"].tolist() == [0, 0, 1, 2, 3] and both["relation"].tolist() == ["x", "y", "z", "u", "v"]


# ---------------------------------------------------------------- probe

def test_probe_predictions_score_as_probe_uas(tmp_path):
    """Right-branching predictions = probe.right_branching_uas; a probe's = probe.uas."""
    from jattn.analyses import probe

    rng = np.random.default_rng(0)
    sents = []
    for _ in range(12):
        w = int(rng.integers(2, 9))
        maps = rng.dirichlet(np.ones(w + 2), size=(1, 2, w + 2))  # (L, H, u, u)
        pair, root = probe.sentence_features(maps)
        sents.append({"pair": pair, "root": root, "emb": rng.normal(size=(w, 3)), "punct": rng.random(w) < 0.2,
                      "heads": rng.integers(0, w + 1, w)})
    probe.write_shards(sents, tmp_path, shard_size=5)
    rb = clark_probe.predictions(tmp_path)
    assert 100 * np.mean(rb["gold"] == rb["pred"]) == pytest.approx(probe.right_branching_uas(tmp_path))
    params = probe.init_params("attn+emb", 4, 8, 3, seed=1)
    got = clark_probe.predictions(tmp_path, params, "attn+emb")
    assert 100 * np.mean(got["gold"] == got["pred"]) == pytest.approx(probe.uas(params, "attn+emb", tmp_path))
    # each scored word names its sentence: as many sentences as were written, each with its non-punctuation words
    scored = sorted(int((~s["punct"]).sum()) for s in sents)
    assert sorted(np.bincount(got["sentence"], minlength=12).tolist()) == scored
    assert (got["sentence"] == rb["sentence"]).all()


# ---------------------------------------------------------------- coreference

def test_mention_types():
    assert [clark_coref.mention_type(w) for w in ("He", "her", "London", "dog", "I")] == \
        ["pronoun", "pronoun", "proper", "nominal", "pronoun"]


CONLL = """#begin document (tiny); part 0
tiny\t0\t0\tHe\t_\t(1)
tiny\t0\t1\tsaw\t_\t_
tiny\t0\t2\tthe\t_\t(2
tiny\t0\t3\tdog\t_\t2)
tiny\t0\t4\t.\t_\t_

tiny\t0\t0\tIt\t_\t(2)
tiny\t0\t1\tbit\t_\t_
tiny\t0\t2\thim\t_\t(1)
tiny\t0\t3\t.\t_\t_

tiny\t0\t0\tThe\t_\t(2
tiny\t0\t1\tdog\t_\t2)
tiny\t0\t2\tran\t_\t_
tiny\t0\t3\t.\t_\t_
#end document
"""


def test_litbank_queries_equal_litbank_counts(tiny, tmp_path):
    """Per-query head correctness summed = coref.litbank_counts on the same maps; the baselines
    by hand: queries It (antecedent dog), him (He), dog (dog, It)."""
    from jattn.analyses.coref import litbank_counts
    from jattn.analyses.word_attention import word_attention
    from jattn.io import labels

    path = tmp_path / "tiny.conll"
    path.write_text(CONLL)
    got = clark_coref.litbank_queries(tiny, [path], budget=64)
    seg = labels.segments(labels.read_litbank(path)[0], tiny.tokenizer, 64)[0][0]
    maps = next(word_attention(tiny, [seg.words], max_length=64)).maps
    want = litbank_counts(maps, seg.mentions, seg.words)
    np.testing.assert_array_equal(got["correct"].sum(0), want.correct)
    assert got["type"].tolist() == ["pronoun", "pronoun", "nominal"]
    assert got["nearest"].tolist() == [True, False, False]  # It: dog | him: It, not He | dog: him
    assert got["same_head_word"].tolist() == [True, False, True]  # no earlier "it": dog | no "him": It | "dog"
    assert got["same_type"].tolist() == [False, False, True]  # pronoun He | pronoun It | nominal dog
    assert int(got["nearest"].sum()) == want.baselines["nearest"]
    assert int(got["same_head_word"].sum()) == want.baselines["same_head_word"]


def test_gap_queries_keep_the_row_order(tiny):
    """Batched (sorted by length) = each row alone through coref.gap_correct."""
    from jattn.analyses.coref import gap_correct
    from jattn.analyses.word_attention import word_attention

    words = ["Anna met Maria in Rome and she smiled .".split(), "Tom called Bob , and later he left .".split(),
             "Kim saw Lee .  She waved at her friend there today .".split()]
    exs = [GapExample("a", words[0], 6, (0,), (2,), "A"), GapExample("b", words[1], 7, (0,), (2,), "B"),
           GapExample("c", words[2], 4, (0,), (2,), "A")]
    got = clark_coref.gap_queries(tiny, exs, max_length=64, batch_size=2)
    for i, ex in enumerate(exs):
        maps = next(word_attention(tiny, [ex.words], max_length=64)).maps
        np.testing.assert_array_equal(got["correct"][i], gap_correct(maps, ex))
    assert got["nearest"].tolist() == [False, True, False] and got["id"].tolist() == ["a", "b", "c"]


def test_litbank_split_is_disjoint_and_fixed():
    names = [f"litbank/coref/{i}.conll" for i in range(10)]
    a, b = clark_coref.litbank_split(names, 3)
    assert len(a) == len(b) == 3 and not set(a) & set(b) and (a, b) == clark_coref.litbank_split(names[::-1], 3)
    with pytest.raises(ValueError, match="ask for fewer"):
        clark_coref.litbank_split(names, 6)


def test_best_head_takes_the_first_on_ties():
    correct = np.zeros((4, 2, 3), bool)
    correct[:2, 0, 2] = correct[:2, 1, 0] = True
    assert clark_coref.best_head(correct) == (0, 2)


# ---------------------------------------------------------------- the stages, end to end

def _head(src: Path, dst: Path, lines: int | None = None, sentences: int | None = None) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    text = src.read_text(encoding="utf-8")
    if sentences is not None:
        text = "\n\n".join(text.split("\n\n")[:sentences]) + "\n\n"
    elif lines is not None:
        text = "\n".join(text.splitlines()[:lines]) + "\n"
    dst.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The quick profile's data files, cut short (GAP rows, EWT sentences) or whole (LitBank)."""
    from jattn.io.manifest import data_dir

    src, dst = data_dir(), tmp_path_factory.mktemp("data")
    stages = clark.stages(pipeline.PROFILES["quick"])
    needed = sorted({f for s in stages for f in s.data})
    if not all((src / f).is_file() for f in needed):
        pytest.skip(f"the Clark study's data are not in {src}: set JATTN_DATA or run `jattn data fetch gap "
                    "ud-english-ewt litbank`")
    for f in needed:
        if f.startswith("gap/"):
            _head(src / f, dst / f, lines=160)
        elif f.startswith("ud-english-ewt/"):
            _head(src / f, dst / f, sentences=140)
        else:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / f, dst / f)
    return dst


def _check_claims(records: dict, out: Path) -> list[dict]:
    every = [c for r in records.values() for c in r["result"].get("claims", [])]
    for c in every:
        again = claims.recompute(c, out)  # predictions paths are relative to out (no checkout there)
        assert again["value"]["value"] == c["value"] and again["value"]["ci"] == c["ci"], c["id"]
        assert again["baseline"]["value"] == c["baseline"]["value"] and again["baseline"]["ci"] == c["baseline"]["ci"]
        assert "status" not in c and c["note"].startswith("Tests: ")  # the study's rules judge it
        assert c["ci"][0] <= c["value"] <= c["ci"][1]
    return every


def test_every_stage_on_the_tiny_model(tiny, small_data, tmp_path, monkeypatch):
    """The quick profile's five stages with the tiny random model for MiniLM: they run, write
    their figures and tables, and every claim recomputes from its predictions file."""
    monkeypatch.setattr(clark_common, "load", lambda model: tiny)
    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", small_data, progress=False)
    records = pipeline.run(clark.stages(ctx.profile), ctx, log=lambda m: None)
    assert list(records) == [f"clark.minilm-{s}" for s in ("shares", "syntax", "probe", "litbank", "gap")]
    every = _check_claims(records, ctx.out)
    ids = {c["id"] for c in every}
    assert {"clark-minilm-sep-middle", "clark-minilm-cls-early", "clark-minilm-punct-deep", "clark-minilm-syntax-all",
            "clark-minilm-probe-attn-emb", "clark-minilm-probe-attn", "clark-minilm-coref-litbank",
            "clark-minilm-coref-gap"} <= ids
    for r in records.values():
        for fig in r["result"].get("figures", []):
            assert (ctx.out / fig).is_file()
    assert all(r["result"].get("table") for n, r in records.items() if not n.endswith("-gap"))
    _check_syntax_family(records["clark.minilm-syntax"]["result"], every, ctx.out)


def _check_syntax_family(result: dict, every: list[dict], out: Path) -> None:
    """The syntax stage's per-relation tests (its table, the pooled claim's count) are the study's
    verdicts' own (sentences resampled, Holm over the relations), so the report cannot show two."""
    from jattn.reproduce.verdicts import Evidence
    from experiments.clark2019 import verdicts as clark_verdicts

    evidence = Evidence({c["id"]: c for c in every}, {}, out)
    family = clark_verdicts.relation_family(evidence, "minilm")
    assert len(family) >= 2  # the Holm family has members to disagree on
    table = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in result["table"].splitlines()[2:]}
    for relation, t in family.items():
        cells = table[relation]
        assert cells[6].startswith(f"{t['value']:+.3f} (p ") and cells[7] == ("yes" if t["holm"] else "–"), relation
    wins = sum(t["holm"] and t["value"] > 0 for t in family.values())
    pooled = evidence.claims["clark-minilm-syntax-pooled"]
    assert pooled["claim"].endswith(f"the head wins after Holm in {wins} of them")
    assert "sentences resampled" in result["table"].splitlines()[0]


@pytest.mark.slow
def test_quick_profile_on_minilm(tmp_path):
    """``jattn reproduce clark --quick`` as CI runs it (MiniLM, real data): every claim recomputes."""
    from jattn.io.manifest import data_dir

    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", data_dir(), progress=False)
    records = pipeline.run(clark.stages(ctx.profile), ctx, log=lambda m: None)
    every = _check_claims(records, ctx.out)
    assert len(every) >= 10
    assert sum(r["runtime_s"] for r in records.values()) < 180  # the quick profile's budget (90 s) with slack for load
