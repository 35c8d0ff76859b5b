"""Readers and the ``jattn analyze`` command end to end on a tiny random model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
from analysis_helpers import tiny_bert
from jattn.cli import main
from jattn.io.readers import Corpus, read, split_paragraph

PNG = b"\x89PNG\r\n\x1a\n"


def test_text_reader_singles_pairs_and_bad_lines(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("one segment\n\nA part\tB part\n")
    ex = list(read(f, "text"))
    assert [(e.a, e.b) for e in ex] == [("one segment", None), ("A part", "B part")]
    assert ex[1].source.endswith("c.txt:3")
    f.write_text("a\tb\tc\n")
    with pytest.raises(ValueError, match="c.txt:1: 2 tabs"):
        list(read(f, "text"))


def test_conllu_reader_skips_multiword_and_empty_nodes(tmp_path):
    f = tmp_path / "c.conllu"
    rows = [("1-2", "don't"), ("1", "do"), ("2", "n't"), ("3", "go"), ("3.1", "went"), ("4", ".")]
    lines = ["# text = don't go."] + ["\t".join([i, w] + ["_"] * 8) for i, w in rows] + ["", "1\tHi" + "\t_" * 8, ""]
    f.write_text("\n".join(lines))
    assert [e.a for e in read(f, "conllu")] == [["do", "n't", "go", "."], ["Hi"]]
    assert len(Corpus(f, "conllu")) == 2


def test_gap_reader_splits_paragraphs_into_pairs(tmp_path):
    f = tmp_path / "g.tsv"
    f.write_text("ID\tText\tPronoun\nd-1\tFirst one. Second one here. Third.\this\nd-2\tNo boundary\tit\n")
    ex = list(read(f, "gap"))
    assert (ex[0].a, ex[0].b) == ("First one.", "Second one here. Third.")  # cut nearest the middle
    assert (ex[1].a, ex[1].b) == ("No boundary", None)
    assert split_paragraph("Dr. Smith went home. He slept.") == ("Dr. Smith went home.", "He slept.")
    with pytest.raises(ValueError, match="not a GAP tsv"):
        list(read(_write(tmp_path / "x.tsv", "a\tb\n"), "gap"))


def _write(path, text):
    path.write_text(text)
    return path


def _check_figures(folder):
    pngs = sorted(folder.glob("*.png"))
    assert pngs
    for p in pngs:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 2000, p
    return {p.name for p in pngs}


def test_analyze_cli_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    model = tiny_bert(tmp_path / "model", mlm=True, layers=2, heads=3)
    corpus = _write(tmp_path / "c.txt", "The cat sat on the mat.\nAlice met Bob, then left.\tHe stayed.\nShort.\n")
    out = tmp_path / "out"
    main(["analyze", "--model", str(model), "--input", str(corpus), "--methods", "weights,entropy,js,grad",
          "--out", str(out), "--batch-size", "2"])
    doc = json.loads((out / "results.json").read_text())
    for name in ("attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other", "attn_prev", "attn_self",
                 "attn_next", "entropy", "entropy_cls", "grad_to_sep"):
        assert doc[name]["shape"] == [2, 3] and np.array(doc[name]["value"]).shape == (2, 3), name
        assert doc[name]["description"]
    assert np.array(doc["js_distance"]["value"]).shape == (6, 6)
    assert doc["meta"]["segments"] == 3 and doc["meta"]["tokens"] > 3 and doc["meta"]["model"] == str(model)
    npz = np.load(out / "results.npz")
    np.testing.assert_allclose(npz["attn_to_sep"], doc["attn_to_sep"]["value"])
    names = _check_figures(out / "figures")
    assert {"class_attention.png", "positional.png", "entropy.png", "mds_heads.png", "grad_by_class.png",
            "heatmap_attn_to_sep.png"} <= names


def test_analyze_cli_word_level_on_conllu(tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    model = tiny_bert(tmp_path / "model", layers=1, heads=2)
    lines = ["\t".join([str(i + 1), w] + ["_"] * 8) for i, w in enumerate(["Unbelievable", "cats", "sat", "."])]
    corpus = _write(tmp_path / "c.conllu", "\n".join(lines) + "\n\n")
    out = tmp_path / "out"
    main(["analyze", "--model", str(model), "--input", str(corpus), "--format", "conllu",
          "--methods", "word-weights,word-entropy", "--out", str(out), "--batch-size", "1"])
    doc = json.loads((out / "results.json").read_text())
    assert doc["word_attn_to_cls"]["shape"] == [1, 2] and "word_entropy_uniform" in doc
    assert {"word_class_attention.png", "word_entropy.png"} <= _check_figures(out / "figures")


def test_analyze_cli_rejects_unknown_methods(tmp_path):
    corpus = _write(tmp_path / "c.txt", "x\n")
    with pytest.raises(SystemExit, match="unknown method"):
        main(["analyze", "--model", str(tiny_bert(tmp_path / "m", layers=1, heads=2)), "--input", str(corpus),
              "--methods", "weights,bogus", "--out", str(tmp_path / "o")])


def test_analyze_cli_syntax_gives_the_per_sentence_table(tmp_path, monkeypatch, tiny_bert_folder):
    """--format conllu --methods syntax: the runner's counts and Table 1 equal the per-sentence
    path (word_attention + syntax.sentence_counts)."""
    from jattn.io import labels
    from jattn.analyses import syntax
    from jattn.analyses.word_attention import word_attention
    from test_syntax import CONLLU

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = tiny_bert_folder
    corpus = _write(tmp_path / "t.conllu", (CONLLU + "\n") * 3)
    out = tmp_path / "out"
    main(["analyze", "--model", str(folder), "--input", str(corpus), "--format", "conllu", "--methods",
          "syntax,word-weights", "--out", str(out), "--batch-size", "2", "--min-count", "2"])
    trees = list(labels.read_conllu_trees(corpus))
    relations = tuple(sorted({r for t in trees for r in t.relations}))
    model = jattn.load(folder, use_cache=False)
    want = syntax.DependencyCounts.zeros(relations, 2, 3)
    for r in word_attention(model, [t.words for t in trees], batch_size=4):
        t = trees[r.index]
        want = want + syntax.sentence_counts(r.maps, t.heads, syntax.relation_ids(t.relations, relations), relations)
    doc = json.loads((out / "results.json").read_text())
    for f in ("correct", "total", "offset_correct", "prev_hits", "next_hits", "prev_rows"):
        np.testing.assert_array_equal(doc[f"dependency_{f}"]["value"], getattr(want, f), err_msg=f)
    assert json.loads((out / "dependency.json").read_text()) == syntax.table(want, 2)
    assert (out / "dependency.md").read_text().startswith("| relation | count |")
    assert {"head_roles.png", "dependency_all.png", "dependency_det.png"} <= _check_figures(out / "figures")
    assert doc["word_attn_to_cls"]["shape"] == [2, 3]


def test_analyze_cli_coref_gives_the_per_example_scores(tmp_path, monkeypatch, tiny_bert_folder):
    """--format gap --methods coref: the runner's GAP accuracy per head and baselines equal the
    per-example path (coref.gap_counts on word maps)."""
    from jattn.io import labels
    from jattn.analyses import coref
    from jattn.analyses.word_attention import word_attention

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = tiny_bert_folder
    header = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"
    rows = []
    for i, (a, b, gold) in enumerate([("Mary Ann", "Sue", "TRUE\tFALSE"), ("Sue", "Mary Ann", "FALSE\tTRUE"),
                                      ("Kim", "Jo", "TRUE\tFALSE"), ("Al", "Bo", "FALSE\tFALSE"),
                                      ("Lee", "Maxine Smith", "FALSE\tTRUE")]):
        text = f"{a} met {b} near the old river bank, and later she smiled at everyone there."
        ga, gb = gold.split("\t")
        rows.append(f"t-{i}\t{text}\tshe\t{text.index(' she ') + 1}\t{a}\t0\t{ga}\t{b}\t{len(a) + 5}\t{gb}\tu\n")
    gap = _write(tmp_path / "g.tsv", header + "".join(rows))
    out = tmp_path / "out"
    main(["analyze", "--model", str(folder), "--input", str(gap), "--format", "gap", "--methods", "coref",
          "--out", str(out), "--batch-size", "2"])
    exs = [x for x in labels.read_gap(gap) if x.gold]
    model = jattn.load(folder, use_cache=False)
    want = None
    for r in word_attention(model, [x.words for x in exs], batch_size=3):
        c = coref.gap_counts(r.maps, exs[r.index])
        want = c if want is None else want + c
    doc = json.loads((out / "results.json").read_text())
    np.testing.assert_allclose(doc["coref_gap_accuracy"]["value"], 100.0 * want.correct / want.total)
    got, expect = json.loads((out / "coref_gap.json").read_text()), want.summary()
    assert got.pop("best_head") == expect.pop("best_head") and got == pytest.approx(expect)
    assert doc["meta"]["segments"] == 5 and want.total == 4


def test_analyze_cli_on_a_translation_model(tmp_path, monkeypatch, tiny_marian_folder):
    """--format parallel: two line-aligned files, or one 'src ||| tgt' file; statistics per type."""
    from tiny_seq2seq import sentences

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = tiny_marian_folder
    src, tgt = sentences(5, 1), sentences(5, 2)
    files = [_write(tmp_path / "s.fr", "\n".join(src) + "\n"), _write(tmp_path / "t.en", "\n".join(tgt) + "\n")]
    out = tmp_path / "out"
    main(["analyze", "--model", str(folder), "--format", "parallel", "--input", *map(str, files), "--methods",
          "weights,entropy,norms", "--max-length", "32", "--batch-size", "2", "--out", str(out)])
    doc = json.loads((out / "results.json").read_text())
    assert doc["encoder_attn_to_sep"]["shape"] == [2, 4] and doc["decoder_attn_prev"]["shape"] == [3, 2]
    assert doc["cross_norm_to_sep"]["shape"] == [3, 2] and "cross_attn_prev" not in doc
    assert doc["meta"]["segments"] == 5
    decoder = _check_figures(out / "figures" / "decoder")
    assert {"class_attention.png", "entropy.png", "heatmap_attn_to_cls.png"} <= decoder
    assert "heatmap_attn_to_sep.png" not in decoder  # the decoder input holds no </s>: its share is left out
    assert "heatmap_norm_to_sep.png" in _check_figures(out / "figures" / "cross")
    one = _write(tmp_path / "p.txt", "".join(f"{a} ||| {b}\n" for a, b in zip(src, tgt)))
    # the one-file form: the command hands --input's files to Corpus either way, so the examples it reads
    # are the two files'
    assert [(e.a, e.b) for e in Corpus([one], "parallel")] == [(e.a, e.b) for e in Corpus(files, "parallel")] \
        == list(zip(src, tgt))
    with pytest.raises(SystemExit, match="word-level"):
        main(
            [
                "analyze",
                "--model",
                str(folder),
                "--format",
                "parallel",
                "--input",
                str(one),
                "--methods",
                "word-weights",
                "--max-length",
                "32",
                "--out",
                str(tmp_path / "o3"),
            ]
        )
    with pytest.raises(SystemExit, match="not line-aligned"):
        main(["analyze", "--model", str(folder), "--format", "parallel", "--input", str(files[0]),
              str(_write(tmp_path / "short.en", "a\n")), "--max-length", "32", "--out", str(tmp_path / "o4")])
