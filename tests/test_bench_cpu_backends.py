"""benchmarks/bench_cpu_backends.py: its probe on the embedded MiniLM (one call each), and its flags."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))


def test_the_probe_times_every_product_and_the_lean_forward(monkeypatch):
    import bench_cpu_backends

    monkeypatch.setenv("JATTN_CHUNK_ROWS", "1024")
    r = bench_cpu_backends.probe(calls=1)
    assert len(r["gemm_gflops"]) == len(bench_cpu_backends.SHAPES)
    assert all(rate > 0 for rate in r["gemm_gflops"].values())
    assert 0 < r["lean_fastest_s"] <= r["lean_median_s"]


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--calls", "0"], ["--variants", "no such backend"]])
def test_bad_flags_are_refused_before_any_work(argv, capsys):
    import bench_cpu_backends

    with pytest.raises(SystemExit):
        bench_cpu_backends.main(argv)
    assert "error" in capsys.readouterr().err
