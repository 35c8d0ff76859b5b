"""The demo (the README's first command) end to end, on a tiny random model for speed."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

from jattn.cli import demo
from tiny_encoders import save_tiny


def test_demo_writes_report_results_and_figures(tmp_path):
    folder = save_tiny(tmp_path / "model", "bert-2x4", max_positions=128)
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    demo.run(parser.parse_args(["--model", str(folder), "--out", str(tmp_path / "out"), "--maps", "1", "--limit", "40"]))
    out = tmp_path / "out"
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


def test_demo_reads_input(tmp_path, tiny_bert_folder):
    """--input: a segment per line instead of the bundled sample; the report names the file."""
    corpus = tmp_path / "mine.txt"
    corpus.write_text("The cat sat.\n\nA dog ran, fast.\nIt rained.\n")
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    demo.run(parser.parse_args(["--model", str(tiny_bert_folder), "--input", str(corpus), "--out",
                                str(tmp_path / "out"), "--maps", "1"]))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["meta"]["segments"] == 3 and results["meta"]["input"] == str(corpus)
    assert f"3 sentences, {results['meta']['tokens']} tokens ({corpus})" in (tmp_path / "out" / "report.md").read_text()
