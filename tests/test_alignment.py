"""Gold readers, word-level aggregation, hard alignment and AER on hand-made cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jattn.methods import alignment as AL

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alignment"  # beside the repo


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


@pytest.mark.skipif(not DATA.is_dir(), reason="shared alignment data not present")
def test_real_gold_files_are_line_aligned_and_in_range():
    pairs = AL.read_parallel(DATA / "enfr.src-tgt")
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


def test_alignment_experiment_end_to_end(tmp_path):
    """experiments/kobayashi_alignment.py on a tiny random Marian model and the first Hansards
    pairs: it runs, and reports AER for every setting, map, decoder layer and head."""
    import json
    import sys

    from tiny_seq2seq import CONFIGS, save_tiny

    data = tmp_path / "data"  # 12 made-up pairs in the Hansards layout: "en ||| fr", 1-based "i-j" / "ipj"
    (data / "alignment").mkdir(parents=True)
    words = ["a", "dog", "runs", "on", "the", "grass", "today"]
    pairs = [(words[: 2 + k % 5], words[1: 4 + k % 4]) for k in range(12)]
    (data / "alignment" / "enfr.src-tgt").write_text("".join(f"{' '.join(e)} ||| {' '.join(f)}\n" for e, f in pairs))
    (data / "alignment" / "enfr.gold").write_text("".join(f"1-1 2p2\n" for _ in pairs))

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import kobayashi_alignment as KA

    folder = save_tiny(tmp_path / "marian", "marian")
    KA.main(["--model", str(folder), "--data-dir", str(data), "--limit", "12", "--out", str(tmp_path / "out")])
    doc = json.loads((tmp_path / "out" / "aer.json").read_text())
    assert doc["pairs"] + doc["pairs_skipped_too_long"] == 12 and doc["pairs"] > 0
    L, H = CONFIGS["marian"]["decoder_layers"], CONFIGS["marian"]["decoder_attention_heads"]
    for key in ("AWO/weights", "AWO/norms", "AWI/weights", "AWI/norms"):
        row = doc["aer_percent"][key]
        assert len(row["per_layer"]) == L and np.array(row["per_head"]).shape == (L, H)
        assert all(0 <= a <= 100 for a in row["per_layer"])
        assert row["best_layer_aer"] == min(row["per_layer"])
