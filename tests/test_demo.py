"""The demo (the README's first command) end to end, on a tiny random model for speed."""

from __future__ import annotations

import argparse
import json

from jattn import demo
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
    for figure in ["attention_maps_0.png", "figures/mds_heads.png", "figures/class_attention.png"]:
        assert (out / figure).stat().st_size > 1000
        assert f"({figure})" in report
