"""Coreference heads (Clark et al. 2019 §4.3): GAP and LitBank readers and scoring on hand-made
examples with known answers, and antecedent selection against a loop on random maps."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.io import labels
from jattn.analyses import coref

GAP = ("ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"
       "t-1\tMary Ann met Sue, and she smiled.\tshe\t22\tMary Ann\t0\tTRUE\tSue\t13\tFALSE\tu\n"
       "t-2\tMary Ann met Sue, and she smiled.\tshe\t22\tMary Ann\t0\tFALSE\tSue\t13\tFALSE\tu\n")


def test_read_gap(tmp_path):
    (tmp_path / "g.tsv").write_text(GAP)
    ex, neither = labels.read_gap(tmp_path / "g.tsv")
    assert ex.words == ["Mary", "Ann", "met", "Sue", ",", "and", "she", "smiled", "."]
    assert (ex.pronoun, ex.a, ex.b, ex.gold) == (6, (0, 1), (3,), "A")
    assert neither.gold is None
    (tmp_path / "bad.tsv").write_text(GAP.replace("\t22\t", "\t21\t", 1))
    with pytest.raises(ValueError, match="not at character 21"):
        labels.read_gap(tmp_path / "bad.tsv")


def gap_example(**kw):
    base = dict(id="x", words=["Mary", "Ann", "met", "Sue", ",", "and", "she", "smiled"], pronoun=6,
                a=(0, 1), b=(3,), gold="A")
    return labels.GapExample(**(base | kw))


def test_gap_scoring_known_answers():
    ex = gap_example()
    u = len(ex.words) + 2
    maps = np.zeros((1, 3, u, u))
    maps[0, 0, 7, [1, 2]] = 0.3  # 0.6 to "Mary Ann" (summed over the name's words) vs 0.5 to "Sue"
    maps[0, 0, 7, 4] = 0.5
    maps[0, 1, 7, 1] = maps[0, 1, 7, 4] = 0.4  # 0.4 vs 0.4: a tie is not right
    maps[0, 2, 7, 4] = 1.0  # all on Sue
    maps[0, 2, 1, 1] = 1.0  # rows other than the pronoun's do not matter
    assert coref.gap_correct(maps, ex).tolist() == [[True, False, False]]
    assert coref.gap_correct(maps, gap_example(gold="B")).tolist() == [[False, False, True]]
    # nearest: Sue (distance 3) beats Mary Ann (5); first: Mary Ann
    assert coref.gap_baselines(ex) == {"nearest": False, "first": True}
    assert coref.gap_baselines(gap_example(gold="B")) == {"nearest": True, "first": False}
    total = coref.gap_counts(maps, ex) + coref.gap_counts(maps, gap_example(gold="B"))
    s = total.summary()
    assert s["count"] == 2 and s["nearest"] == 50.0 and s["first"] == 50.0
    assert s["accuracy"] == 50.0 and s["best_head"] in ([0, 0], [0, 2])
    with pytest.raises(ValueError, match="gold"):
        coref.gap_correct(maps, gap_example(gold=None))


LITBANK = """#begin document (doc); part 0
doc\t0\t0\tThe\t_\t_\t_\t_\t_\t_\t_\t_\t(0
doc\t0\t1\told\t_\t_\t_\t_\t_\t_\t_\t_\t_
doc\t0\t2\tman\t_\t_\t_\t_\t_\t_\t_\t_\t0)
doc\t0\t3\tsaw\t_\t_\t_\t_\t_\t_\t_\t_\t_
doc\t0\t4\tMary\t_\t_\t_\t_\t_\t_\t_\t_\t(1)
doc\t0\t5\t.\t_\t_\t_\t_\t_\t_\t_\t_\t_

doc\t0\t0\tHe\t_\t_\t_\t_\t_\t_\t_\t_\t(0)
doc\t0\t1\tliked\t_\t_\t_\t_\t_\t_\t_\t_\t_
doc\t0\t2\ther\t_\t_\t_\t_\t_\t_\t_\t_\t(2|(1)
doc\t0\t3\tdog\t_\t_\t_\t_\t_\t_\t_\t_\t2)
doc\t0\t4\t.\t_\t_\t_\t_\t_\t_\t_\t_\t_

doc\t0\t0\tThe\t_\t_\t_\t_\t_\t_\t_\t_\t(2
doc\t0\t1\tdog\t_\t_\t_\t_\t_\t_\t_\t_\t2)
doc\t0\t2\tbarked\t_\t_\t_\t_\t_\t_\t_\t_\t_
#end document
"""


@pytest.fixture()
def doc(tmp_path):
    (tmp_path / "d.conll").write_text(LITBANK)
    (d,) = labels.read_litbank(tmp_path / "d.conll")
    return d


def test_read_litbank_nested_and_joined_tags(doc):
    assert doc.sentences[1] == ["He", "liked", "her", "dog", "."]
    assert [(m.start, m.end, m.cluster) for m in doc.mentions] == [
        (0, 2, 0), (4, 4, 1), (6, 6, 0), (8, 8, 1), (8, 9, 2), (11, 12, 2)]
    assert doc.mentions[0].head == 2  # last word: "man"


def test_litbank_errors(tmp_path):
    (tmp_path / "x.conll").write_text("d\t0\t0\tA\t_\t_\t_\t_\t_\t_\t_\t_\t3)\n")
    with pytest.raises(ValueError, match="never opened"):
        labels.read_litbank(tmp_path / "x.conll")
    (tmp_path / "x.conll").write_text("d\t0\t0\tA\t_\t_\t_\t_\t_\t_\t_\t_\t(3\n")
    with pytest.raises(ValueError, match="never closed"):
        labels.read_litbank(tmp_path / "x.conll")
    (tmp_path / "x.conll").write_text("d\t0\t0\tA\t_\t_\t_\t_\t_\t_\t_\t_\t[3]\n")
    with pytest.raises(ValueError, match="coreference tag"):
        labels.read_litbank(tmp_path / "x.conll")


def test_segments_by_budget(doc, minilm):
    tok = minilm.tokenizer
    whole, dropped = labels.segments(doc, tok, 64)
    assert len(whole) == 1 and len(whole[0].mentions) == 6 and dropped["mentions_dropped"] == 0
    # 8 tokens: each sentence alone ([CLS] + 6 or 5 or 3 words + [SEP] fits), none together
    parts, dropped = labels.segments(doc, tok, 8)
    assert [p.words for p in parts] == doc.sentences
    assert [[(m.start, m.end) for m in p.mentions] for p in parts] == [[(0, 2), (4, 4)], [(0, 0), (2, 2), (2, 3)],
                                                                     [(0, 1)]]
    assert dropped == {"sentences_over_budget": 0, "mentions_dropped": 0}
    parts, dropped = labels.segments(doc, tok, 7)  # the first sentence (6 words) no longer fits
    assert [p.words for p in parts] == doc.sentences[1:]
    assert dropped == {"sentences_over_budget": 1, "mentions_dropped": 2}


def test_litbank_scoring_known_answers(doc):
    words = [w for s in doc.sentences for w in s]
    # queries (head words): "He"(6) -> gold {2}; "her"(8) -> gold {4}; "dog"(12) -> gold {9}
    queries = list(coref.antecedent_queries(doc.mentions, words))
    assert [(q, sorted(g)) for q, _, g, _, _ in queries] == [(6, [2]), (8, [4]), (12, [9])]
    assert [c for _, c, _, _, _ in queries][1] == [2, 4, 6]
    # nearest: 4 (wrong: gold 2), 6 (wrong), 9 (right); same head word: "dog" -> 9, others nearest
    assert [(n, s) for *_, n, s in queries] == [(4, 4), (6, 6), (9, 9)]
    u = len(words) + 2
    maps = np.zeros((1, 2, u, u))
    maps[0, 0, 7, 3] = maps[0, 0, 9, 5] = maps[0, 0, 13, 10] = 1.0  # head 0 always right
    maps[0, 1, 7, 3] = maps[0, 1, 9, 3] = maps[0, 1, 13, 3] = 1.0  # head 1 always "man"
    maps[0, 1, 13, 14] = 5.0  # a later word is never a candidate
    c = coref.litbank_counts(maps, doc.mentions, words)
    assert c.correct.tolist() == [[3, 1]] and c.total == 3
    assert c.baselines == {"nearest": 1, "same_head_word": 1}


def test_litbank_query_profile_known_answers(doc):
    """Queries "He"(6), "her"(8), "dog"(12): two pronouns; only "dog" has an earlier candidate
    with its head word ("dog" at 9), and that candidate is its antecedent."""
    words = [w for s in doc.sentences for w in s]
    assert coref.litbank_query_profile(doc.mentions, words) == {
        "queries": 3, "pronoun": 2, "same_word_candidate": 1, "same_word_right": 1}
    words[9] = "cat"  # no same-word candidate left
    assert coref.litbank_query_profile(doc.mentions, words)["same_word_candidate"] == 0


def test_litbank_counts_match_loop():
    rng = np.random.default_rng(0)
    words = [f"w{k % 7}" for k in range(30)]
    mentions = []
    for _ in range(14):
        s = int(rng.integers(0, 29))
        mentions.append(labels.Mention(s, s + int(rng.integers(0, 2)), int(rng.integers(0, 4))))
    maps = rng.random((2, 2, 32, 32))
    got = coref.litbank_counts(maps, mentions, words)
    want, total = np.zeros((2, 2), int), 0
    for m in mentions:
        earlier = [x for x in mentions if x.end < m.end]
        if not any(x.cluster == m.cluster for x in earlier):
            continue
        total += 1
        for l in range(2):
            for h in range(2):
                best = max(earlier, key=lambda x: maps[l, h, m.end + 1, x.end + 1])
                want[l, h] += any(x.cluster == m.cluster for x in earlier if x.end == best.end)
    assert got.total == total and (got.correct == want).all()
