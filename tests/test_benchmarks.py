"""The benchmark scripts' measuring helpers on a tiny shape (their numbers are not checked: timings
are never asserted; the structure of what they report is)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts import each other


def test_the_gemm_bound_pairs_each_round_of_products_with_lean_calls():
    pytest.importorskip("torch")
    import bench_encoder

    calls = []
    config = types.SimpleNamespace(num_layers=2, num_heads=2, hidden_size=8, intermediate_size=16)
    r = bench_encoder.gemm_bound(config, batch_size=2, length=4, repeats=2, lean=lambda: calls.append(1), rounds=3)
    rounds = r["bound_rounds"]
    assert [len(v) for v in rounds.values()] == [3, 3, 3]
    assert len(calls) == 3 * (1 + 2)  # each round: alternate's warm-up call, then ``repeats`` timed calls
    assert all(f <= m for f, m in zip(rounds["lean_fastest_seconds"], rounds["lean_median_seconds"]))
    lo, hi = r["lean_fastest_of_xla_bound_ci95"]
    assert lo <= r["lean_fastest_of_xla_bound"] <= hi
    # per layer: 4 projections 2·8·8·8, the FFN 2·8·8·16 twice, 2 attention products 2·(4·4·4)·4
    assert r["gemm_gflop"] * 1e9 == pytest.approx(2 * (4 * 1024 + 2 * 2048 + 2 * 512))
    assert "(fastest calls)" in bench_encoder.bound_share(r) and "3 rounds" in bench_encoder.bound_share(r)


def test_the_lm_benchmark_times_both_rows_on_equal_results(tmp_path, monkeypatch):
    """bench_lm's tiny mode (2 layers × 4 heads): the JSON's structure, jattn's logits and α equal to
    HF's, the patching effects equal to the hook loop's (and nnsight's, where installed)."""
    pytest.importorskip("torch")
    import json

    import numpy as np

    import bench_lm

    monkeypatch.setattr(bench_lm.time, "sleep", lambda seconds: None)  # the bounds' pauses between libraries
    out = tmp_path / "lm.json"
    r = bench_lm.main(["--tiny", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(r))
    f, s = r["forward"], r["patching"]
    for key in ("jattn_forward_seconds", "hf_seconds", "ratio_forward", "bound_torch_gemms", "bound_xla_gemms",
                "forward_of_xla_bound", "lean_fastest_of_xla_bound", "head_xla_seconds"):
        assert f[key] > 0, key
    assert f["batch"] == [2, 8] and f["max_abs_diff_logits"] < 1e-5 and f["max_abs_diff_weights"] < 1e-6
    timed = {"jattn", "torch_hooks"} | ({"nnsight"} if s["nnsight_not_timed"] is None else set())
    assert set(s["seconds"]) == timed and all(len(v) == 2 for v in s["seconds_per_round"].values())
    assert s["baseline"] in timed - {"jattn"}
    assert s["speedup_vs_baseline"] == s["seconds"][s["baseline"]] / s["seconds"]["jattn"]
    assert s["layer_evaluations"] == {"loop": (2 * 4 + 2) * 2, "prefix_reuse": 2 * 2 + 4 * 3}
    assert np.shape(s["effects_jattn"]) == (2, 4) and s["largest_effect"] > 0
    assert s["max_abs_diff_jattn_vs_torch_hooks"] < 1e-5 * max(1.0, s["largest_effect"])
    if "nnsight" in timed:
        assert s["max_abs_diff_jattn_vs_nnsight"] < 1e-5 * max(1.0, s["largest_effect"])
    assert s["max_abs_diff_metric_direction_vs_lm_head"] < 1e-5
    assert set(r["machine"]) >= {"cpu", "cores", "load_average_at_start", "load_average_at_end"}
    assert set(r["versions"]) == {"jax", "torch", "transformers", "nnsight"}
