"""Dependency heads (Clark et al. 2019 §4.2): CoNLL-U trees, per-head accuracy against loops on a
tiny random model (HF PyTorch maps), the offset baseline and Voita's head roles by hand."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.io import labels
from jattn.analyses import syntax
from tolerance import assert_close, model_terms

CONLLU = """# sent_id = a
# text = I don't like the cats.
1	I	I	PRON	_	_	4	nsubj	_	_
2-3	don't	_	_	_	_	_	_	_	_
2	do	do	AUX	_	_	4	aux	_	_
3	n't	not	PART	_	_	4	advmod	_	_
4	like	like	VERB	_	_	0	root	_	_
5	the	the	DET	_	_	6	det	_	_
6	cats	cat	NOUN	_	_	4	obj	_	_
6.1	likes	like	VERB	_	_	_	_	4:conj	_
7	.	.	PUNCT	_	_	4	punct	_	_

# sent_id = b
1	Bob	Bob	PROPN	_	_	3	nmod:poss	_	_
2	's	's	PART	_	_	1	case	_	_
3	unbelievably	unbelievably	ADV	_	_	4	advmod	_	_
4	broke	break	VERB	_	_	0	root	_	_
5	down	down	ADP	_	_	4	compound:prt	_	_
6	hyphenated-words	word	NOUN	_	_	4	obj	_	_
7	.	.	PUNCT	_	_	4	punct	_	_

# sent_id = c
1	Tokenization	tokenization	NOUN	_	_	4	nsubj	_	_
2	of	of	ADP	_	_	3	case	_	_
3	words	word	NOUN	_	_	1	nmod	_	_
4	works	work	VERB	_	_	0	root	_	_
"""


@pytest.fixture()
def trees(tmp_path):
    path = tmp_path / "t.conllu"
    path.write_text(CONLLU)
    return list(labels.read_conllu_trees(path))


def test_read_conllu_skips_multiword_tokens_and_empty_nodes(trees):
    assert [t.words for t in trees][0] == ["I", "do", "n't", "like", "the", "cats", "."]
    assert trees[0].heads.tolist() == [4, 4, 4, 0, 6, 4, 4]
    assert trees[0].relations == ["nsubj", "aux", "advmod", "root", "det", "obj", "punct"]
    assert trees[1].relations[0] == "nmod:poss" and trees[1].relations[4] == "compound:prt"
    assert trees[1].upos[1] == "PART" and trees[1].source.endswith(":14")
    assert len(trees) == 3


def test_conllu_errors(tmp_path):
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tI\tI\tPRON\t_\t_\t_\tnsubj\t_\t_\n\n")
    with pytest.raises(ValueError, match="no numeric head"):
        list(labels.read_conllu_trees(bad))
    bad.write_text("1\tI\tI\n")
    with pytest.raises(ValueError, match="10 tab-separated"):
        list(labels.read_conllu_trees(bad))


def test_fit_words_reports_and_never_cuts(minilm):
    lists = [["a", "cat"], ["word"] * 200, ["a", "\u00ad", "cat"]]  # too long; a word with no subword
    kept, counts = labels.fit_words(minilm.tokenizer, lists, 128)
    assert kept == [0] and counts == {"too_long": 1, "word_without_subwords": 1}


def test_offset_baseline_known_answer():
    """Words 1..5, heads 2 3 ROOT 3 4: relation a (words 1, 2) is +1 every time, b (4, 5) is -1."""
    heads = np.array([2, 3, 0, 3, 4])
    rels = ("a", "b", "root")
    ids = syntax.relation_ids(["a", "a", "root", "b", "b"], rels)
    c = syntax.sentence_counts(np.full((1, 1, 7, 7), 1 / 7), heads, ids, rels)
    assert c.total.tolist() == [2, 2, 0]
    tab = syntax.table(c, min_count=1)
    assert (tab["a"]["best_offset"], tab["a"]["offset_accuracy"]) == (1, 100.0)
    assert (tab["b"]["best_offset"], tab["b"]["offset_accuracy"]) == (-1, 100.0)
    assert tab["all"]["offset_accuracy"] == 50.0 and tab["all"]["count"] == 4
    # uniform attention, diagonal zeroed: every argmax is the first other word
    assert syntax.predicted_heads(np.full((7, 7), 1 / 7)).tolist() == [[2, 1, 1, 1, 1]] * 2


def test_heads_that_are_the_tree():
    """Head (0, 0): each word attends to its head; head (0, 1): each head attends to its
    dependents (so only the transposed direction finds them); head (0, 2): previous word."""
    heads = np.array([2, 0, 2, 3])  # words 1..4
    w, u = 4, 6
    maps = np.zeros((1, 3, u, u))
    for i, h in enumerate(heads, 1):
        maps[0, 0, i, h if h else u - 1] = 1.0  # the root word attends to [SEP]
        if h:
            maps[0, 1, h, i] = 1.0
        maps[0, 2, i, i - 1] = 1.0
    rels = ("x",)
    c = syntax.sentence_counts(maps, heads, np.zeros(w, np.int64), rels)
    acc, _, _ = c.accuracy()
    assert acc[0, 0, 0, 0] == 100.0  # dep->head of head 0
    assert acc[1, 0, 1, 0] == 100.0  # head->dep of head 1
    assert acc[0, 0, 1, 0] < 100.0
    roles = syntax.head_roles(c, min_count=1)
    assert roles["prev"][0, 2] == 1.0 and roles["positional"][0, 2] == "previous"
    assert roles["role"][0, 0] == "syntactic" and roles["relation"][0, 0] == "x"
    tab = syntax.table(c, min_count=1)
    assert tab["x"]["best_head"] in ([0, 0, "dep->head"], [0, 1, "head->dep"])


def test_table_selects_on_another_split():
    rels = ("x",)
    heads = np.array([2, 0])
    right, wrong = np.zeros((1, 2, 4, 4)), np.zeros((1, 2, 4, 4))
    right[0, 0, 1, 2] = right[0, 1, 1, 3] = 1.0  # head 0 right, head 1 wrong
    wrong[0, 1, 1, 2] = wrong[0, 0, 1, 3] = 1.0  # the other way round
    ids = np.zeros(2, np.int64)
    sel, ev = (syntax.sentence_counts(m, heads, ids, rels) for m in (right, wrong))
    assert syntax.table(ev, 1, select=sel)["x"]["best_head"][:2] == [0, 0]
    assert syntax.table(ev, 1, select=sel)["x"]["head_accuracy"] == 0.0
    assert syntax.table(ev, 1)["x"]["head_accuracy"] == 100.0


def brute_counts(ref_maps: np.ndarray, heads, rel_names, relations):
    """Accuracy counts by loops over a word-level map (L, H, u, u)."""
    L, H, u, _ = ref_maps.shape
    w = u - 2
    correct = np.zeros((2, L, H, len(relations)), np.int64)
    for l in range(L):
        for h in range(H):
            for d in range(2):
                for i in range(1, w + 1):
                    if heads[i - 1] == 0:
                        continue
                    best, arg = -1.0, None
                    for j in range(1, w + 1):
                        if j == i:
                            continue
                        a = ref_maps[l, h, i, j] if d == 0 else ref_maps[l, h, j, i]
                        if a > best:
                            best, arg = a, j
                    correct[d, l, h, relations.index(rel_names[i - 1])] += arg == heads[i - 1]
    return correct


def test_accuracy_per_head_matches_loops_on_a_tiny_model(tiny_bert_folder, trees):
    pytest.importorskip("torch")
    import jattn
    from analysis_helpers import reference_maps, torch_model, word_maps
    from jattn.analyses.word_attention import word_attention

    folder = tiny_bert_folder
    model, tmodel = jattn.load(folder, use_cache=False), torch_model(folder)
    rng = np.random.default_rng(0)
    extra = [["The", "unbelievable", "cat", "sat", "on", "a", "mat", "."], ["Hi", "there", "!"]]
    sentences = [(t.words, t.heads, t.relations) for t in trees]
    for words in extra:  # random trees over the extra sentences
        heads = np.array([0] + [int(rng.integers(1, k + 1)) for k in range(1, len(words))])
        sentences.append((words, heads, [["nsubj", "det", "obj"][k % 3] for k in range(len(words))]))
    relations = tuple(sorted({r for _, _, rs in sentences for r in rs}))
    got = syntax.DependencyCounts.zeros(relations, 2, 3)
    for r in word_attention(model, [s[0] for s in sentences], batch_size=2):
        words, heads, rels = sentences[r.index]
        got = got + syntax.sentence_counts(r.maps, heads, syntax.relation_ids(rels, relations), relations)
        ref, _ = word_maps(reference_maps(model, tmodel, [words])[0])
        assert_close(r.maps, ref, terms=model_terms(model.config, 64))  # batches of 2 vs HF one sentence alone
        assert (syntax.sentence_counts(r.maps, heads, syntax.relation_ids(rels, relations), relations).correct
                == brute_counts(ref, heads, rels, relations)).all()
    assert got.total.sum() == sum(int((h > 0).sum()) for _, h, _ in sentences)
