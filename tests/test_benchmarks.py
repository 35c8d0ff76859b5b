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
