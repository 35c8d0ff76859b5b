"""Readers and the ``jattn analyze`` command end to end on a tiny random model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis_helpers import tiny_bert
from jattn.cli import main
from jattn.data.readers import Corpus, read, split_paragraph

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
