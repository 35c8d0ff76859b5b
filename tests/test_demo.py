"""The demo (the README's first command) end to end, on a tiny random model for speed.

One demo run serves both tests (a demo run costs 15-20 s, nearly all of it fixed): --input, a text
file of 40 segments with a blank line among them. The demo's default input (the bundled conllu
sample) and --limit run in tests/test_figures_readable.py::test_demo_figures_and_captions."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pytest

from jattn.cli import demo
from tiny_encoders import save_tiny

FIRST = "The cat sat.\n\nA dog ran, fast.\nIt rained.\n"  # three segments; the blank line is none


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """(out, corpus): the demo on a 2-layer random BERT over FIRST and 37 sentences of the sample."""
    root = tmp_path_factory.mktemp("demo")
    folder = save_tiny(root / "model", "bert-2x4", max_positions=128)
    corpus = root / "mine.txt"
    corpus.write_text(FIRST + "\n".join(demo.sample_sentences()[:37]) + "\n")
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    demo.run(parser.parse_args(["--model", str(folder), "--input", str(corpus), "--out", str(root / "out"),
                                "--maps", "1"]))
    return root / "out", corpus


def test_demo_writes_report_results_and_figures(demo_run):
    out, _ = demo_run
    results = json.loads((out / "results.json").read_text())
    assert results["meta"]["segments"] == 40
    assert len(results["attn_to_cls"]["value"]) == 2  # (L, H) with L = 2
    report = (out / "report.md").read_text()
    meta = results["meta"]
    assert f"{meta['segments']} sentences, {meta['tokens']} tokens" in report
    keys = ("attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other")
    rows = [line for line in report.splitlines() if re.fullmatch(r"\| \d+ \|( [0-9.]+ \|){4}", line)]
    assert len(rows) == 2  # one per layer: the head-mean of each class share, as results.json holds it
    for l, line in enumerate(rows):
        cells = [float(c) for c in line.strip("| ").split(" | ")[1:]]
        want = [np.mean(results[k]["value"][l]) for k in keys]
        assert np.allclose(cells, want, atol=5e-4), (line, want)
        assert abs(sum(cells) - 1) < 3e-3  # the four classes partition the keys
    for figure in ["attention_maps_0.png", "figures/mds_heads.png", "figures/class_attention.png"]:
        assert (out / figure).stat().st_size > 1000
        assert f"({figure})" in report


def test_demo_reads_input(demo_run):
    """--input: a segment per line instead of the bundled sample (the blank line is none); the
    report names the file."""
    out, corpus = demo_run
    results = json.loads((out / "results.json").read_text())
    assert results["meta"]["segments"] == 40 and results["meta"]["input"] == str(corpus)
    assert f"40 sentences, {results['meta']['tokens']} tokens ({corpus})" in (out / "report.md").read_text()
