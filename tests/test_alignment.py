"""Gold readers, word-level aggregation, hard alignment and AER on hand-made cases."""

from __future__ import annotations

import random

import numpy as np
import pytest

from jattn.analyses import alignment as AL


def test_parse_talp_one_based():
    sure, possible = AL.parse_links("1-1 2p3 3-2", one_based=True)
    assert sure == {(0, 0), (2, 1)}
    assert possible == {(0, 0), (1, 2), (2, 1)}


def test_parse_zero_based_and_errors():
    sure, possible = AL.parse_links("0-0 19p25", one_based=False)
    assert sure == {(0, 0)} and possible == {(0, 0), (19, 25)}
    with pytest.raises(ValueError, match="bad alignment link"):
        AL.parse_links("1-1 2x3", one_based=True)
    with pytest.raises(ValueError, match="index 0"):
        AL.parse_links("0-1", one_based=True)


def test_read_gold_formats(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("0\t0-0 1p1\n1\t2-0\n")
    assert AL.read_gold(f, one_based=False) == [({(0, 0)}, {(0, 0), (1, 1)}), ({(2, 0)}, {(2, 0)})]
    f.write_text("2-2 1-1\n1p2\n")
    assert AL.read_gold(f, one_based=True) == [({(1, 1), (0, 0)}, {(1, 1), (0, 0)}), (set(), {(0, 1)})]


def test_real_gold_files_are_line_aligned_and_in_range(data_set):
    DATA = data_set("alignment")  # skips, naming JATTN_DATA and jattn data fetch, when absent
    pairs = AL.read_tokenized_pairs(DATA / "enfr.src-tgt")
    gold = AL.read_gold(DATA / "enfr.gold", one_based=True)
    assert len(pairs) == len(gold)
    for (src, tgt), (sure, possible) in zip(pairs, gold):
        assert sure <= possible
        assert all(i < len(src) and j < len(tgt) for i, j in possible)
    sample = AL.read_gold(DATA / "sample_eng_deu.gold", one_based=False)
    eng = (DATA / "sample_eng.txt").read_text().splitlines()
    assert len(sample) == len(eng)


def test_word_map_sums_source_and_averages_target_subwords():
    # decoder rows: start, t0a, t0b, t1, EOS   (AWI-style input rows; row 0 and 4 are no word)
    # source cols:  s0, s1a, s1b, EOS, pad
    att = np.array([
        [.2, .2, .2, .4, 0],
        [.5, .1, .1, .3, 0],
        [.1, .3, .3, .3, 0],
        [.0, .1, .1, .8, 0],
        [.25, .25, .25, .25, 0],
    ])
    rows = np.array([-1, 0, 0, 1, -1])
    cols = np.array([0, 1, 1, -1, -2])
    got = AL.word_map(att, rows, cols)
    want = np.array([
        [(.5 + .1) / 2, (.2 + .6) / 2, (.3 + .3) / 2],  # word 0: mean of rows 1, 2
        [.0, .2, .8],  # word 1
    ])
    np.testing.assert_allclose(got, want)
    assert AL.hard_alignment(got) == {(1, 0)}  # word 1's argmax is EOS: no link
    with pytest.raises(ValueError, match="does not match"):
        AL.word_map(att[:, :3], rows, cols)


def test_decoder_rows_awo_awi():
    words = [0, 0, 1, -1]  # target tokens y0..y3 (y3 = EOS)
    np.testing.assert_array_equal(AL.decoder_rows(words, "AWO", 4), [0, 0, 1, -1])
    np.testing.assert_array_equal(AL.decoder_rows(words, "AWI", 4), [-1, 0, 0, 1])
    with pytest.raises(ValueError, match="AWO"):
        AL.decoder_rows(words, "both", 4)


def test_aer_known_answers():
    s, p = {(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 2)}
    assert AL.aer([{(0, 0), (1, 1), (2, 2)}], [(s, p)]) == pytest.approx(0.0)  # possible link is free
    assert AL.aer([{(0, 1)}], [({(0, 0)}, {(0, 0)})]) == pytest.approx(1.0)
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2  ->  1 − 3/5
    assert AL.aer([{(0, 0), (1, 2), (2, 1)}], [({(0, 0), (1, 1)}, {(0, 0), (1, 1), (1, 2)})]) == pytest.approx(0.4)


def test_aer_is_pooled_not_averaged():
    gold = [({(0, 0)}, {(0, 0)}), ({(0, 0), (1, 1), (2, 2), (3, 3)}, {(0, 0), (1, 1), (2, 2), (3, 3)})]
    pred = [set(), {(0, 0), (1, 1), (2, 2), (3, 3)}]
    # pooled: 1 − (4 + 4) / (4 + 5) = 1/9; the mean of per-sentence AERs would be (1 + 0)/2
    assert AL.aer(pred, gold) == pytest.approx(1 / 9)
    with pytest.raises(ValueError, match="predicted alignments"):
        AL.aer(pred[:1], gold)


def test_end_to_end_with_swap_and_eos():
    """Gold given English→French, model French→English: swap the gold, align, score."""
    gold_en_fr = [({(0, 1), (1, 0)}, {(0, 1), (1, 0), (2, 0)})]
    gold = [(AL.swap(s), AL.swap(p)) for s, p in gold_en_fr]  # (fr, en)
    # 2 French source words + EOS column; 3 English target words
    wmap = np.array([[.1, .7, .2], [.6, .3, .1], [.1, .1, .8]])
    links = AL.hard_alignment(wmap)  # en0 -> fr1, en1 -> fr0, en2 -> EOS (dropped)
    assert links == {(1, 0), (0, 1)}
    assert AL.aer([links], gold) == pytest.approx(0.0)


def test_subword_words():
    enc = {"le": [5], "chat": [7, 8]}.__getitem__
    assert AL.subword_words(enc, ["le", "chat"]) == ([5, 7, 8], [0, 1, 1])
    with pytest.raises(ValueError, match="tokenizes to nothing"):
        AL.subword_words(lambda w: [], ["x"])


def test_diagonal_alignment_and_its_aer_known_answers():
    # 4 target words over 2 source words: centres 1/8, 3/8, 5/8, 7/8 of the sentence -> 0, 0, 1, 1
    assert AL.diagonal_alignment(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    # 3 target words over 6 source words: centres at source positions 1, 3, 5
    assert AL.diagonal_alignment(6, 3) == {(1, 0), (3, 1), (5, 2)}
    assert AL.diagonal_alignment(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert AL.diagonal_alignment(1, 2) == {(0, 0), (0, 1)}
    with pytest.raises(ValueError, match="words on both sides"):
        AL.diagonal_alignment(0, 3)
    # gold (source, target): sure {0-0, 1-2}, possible also {0-1}; pair 2: sure {1-0, 0-1, 2-2}
    gold = [({(0, 0), (1, 2)}, {(0, 0), (1, 2), (0, 1)}), ({(1, 0), (0, 1), (2, 2)}, {(1, 0), (0, 1), (2, 2)})]
    diagonal = [AL.diagonal_alignment(2, 4), AL.diagonal_alignment(3, 3)]
    # |A| = 4 + 3, |S| = 2 + 3; A∩S = {0-0, 1-2} + {2-2} = 3; A∩P = {0-0, 0-1, 1-2} + {2-2} = 4 -> 1 − 7/12
    assert AL.aer(diagonal, gold) == pytest.approx(5 / 12)
    # a hand-made alignment: pair 1 {0-0, 0-1, 1-3} (A∩S 1, A∩P 2), pair 2 {1-0, 0-1} (2, 2) -> 1 − 7/10
    assert AL.aer([{(0, 0), (0, 1), (1, 3)}, {(1, 0), (0, 1)}], gold) == pytest.approx(0.3)


def test_grow_diag_final_and_known_answers():
    # intersection {0-0, 1-1}; 2-1 and 1-2 are diagonal/adjacent union links touching an unaligned word
    assert AL.grow_diag_final_and({(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (1, 2)}) == \
        {(0, 0), (1, 1), (2, 1), (1, 2)}
    # 3-3 is nobody's neighbour but both its words are unaligned: added by final-and
    assert AL.grow_diag_final_and({(0, 0), (3, 3)}, {(0, 0)}) == {(0, 0), (3, 3)}
    # 0-3: not a neighbour and source word 0 is aligned: left out; 2-1 grows from 1-1 only after
    # 1-1 itself was grown from 0-0 (the loop repeats until nothing changes)
    assert AL.grow_diag_final_and({(0, 0), (0, 3), (1, 1), (2, 1)}, {(0, 0)}) == {(0, 0), (1, 1), (2, 1)}
    # final-and takes the forward links first: 4-4 (forward) blocks 4-5 (reverse)
    assert AL.grow_diag_final_and({(4, 4)}, {(4, 5)}) == {(4, 4)}
    assert AL.grow_diag_final_and(set(), set()) == set()
    assert AL.parse_links(AL.format_links({(2, 1), (0, 0)}), one_based=False)[0] == {(0, 0), (2, 1)}
    assert AL.format_links({(2, 1), (0, 0)}) == "0-0 2-1"


def _toy_parallel_text(n: int, seed: int = 0):
    """n random French/English phrase pairs from a small grammar (determiner, noun, optional
    adjective, optional verb; the adjective follows the noun in French and precedes it in
    English) with their gold links by construction. -> (source words, target words, gold)."""
    rng = random.Random(seed)
    det = [("le", "the"), ("un", "a")]
    noun = [("chat", "cat"), ("chien", "dog"), ("oiseau", "bird"), ("cheval", "horse")]
    adj = [("noir", "black"), ("blanc", "white"), ("rouge", "red")]
    verb = [("dort", "sleeps"), ("mange", "eats"), ("court", "runs")]
    src, tgt, gold = [], [], []
    for _ in range(n):
        d, w, a, v = rng.choice(det), rng.choice(noun), rng.choice(adj + [None]), rng.choice(verb + [None])
        words = [d, w] + ([a] if a else []) + ([v] if v else [])  # (French, English), French order
        english = [d[1]] + ([a[1]] if a else []) + [w[1]] + ([v[1]] if v else [])
        links = {(i, english.index(e)) for i, (_, e) in enumerate(words)}  # no word repeats in a pair
        src.append([f for f, _ in words])
        tgt.append(english)
        gold.append((links, links))
    return src, tgt, gold


def test_eflomal_wrapper_gives_symmetrised_links():
    """eflomal on a small generated parallel text: one (fwd, rev, sym) link set per pair, in range,
    sym = grow-diag-final-and(fwd, rev), and close to the gold links (far better than diagonal)."""
    pytest.importorskip("eflomal", reason="eflomal is not installed (pip install eflomal; it is in the "
                                          "test extra, which CI installs)")
    from jattn.analyses.eflomal_align import eflomal_align

    src, tgt, gold = _toy_parallel_text(200)
    fwd, rev, sym = eflomal_align(src, tgt)
    assert len(fwd) == len(rev) == len(sym) == len(src)
    for k in range(len(src)):
        assert sym[k] == AL.grow_diag_final_and(fwd[k], rev[k])
        assert fwd[k] & rev[k] <= sym[k] <= fwd[k] | rev[k]
        assert all(0 <= i < len(src[k]) and 0 <= j < len(tgt[k]) for i, j in sym[k])
        assert all(isinstance(i, int) and isinstance(j, int) for i, j in sym[k])
    # it aligns: the sampler seeds itself from /dev/urandom, so a bound, not fixed links (AER
    # 0.000-0.086 in 600 runs on this text; diagonal 0.437)
    diagonal = AL.aer([AL.diagonal_alignment(len(a), len(b)) for a, b in zip(src, tgt)], gold)
    assert AL.aer(sym, gold) < 0.2 < diagonal
    with pytest.raises(ValueError, match="empty"):
        eflomal_align([["a"], []], [["b"], ["c"]])
    with pytest.raises(ValueError, match="2 source sentences for 1"):
        eflomal_align([["a"], ["b"]], [["c"]])
