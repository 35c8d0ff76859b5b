"""benchmarks/profile_forward.py on its tiny shape, and the trace reading it shares with
profile_attribution.py (times are never asserted: the structure of what the profile reports is)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts import each other


def test_trace_times_are_xla_instructions_without_control_flow(tmp_path):
    """Only events naming an HLO instruction of the module count (host spans and ``end:`` markers
    do not), per call; profile_attribution's kinds (every module) leave out a while, whose event spans
    its body's."""
    import profile_attribution
    import profile_hlo

    def op(name, dur, module="jit_f"):
        return {"ph": "X", "name": name, "dur": dur, "args": {"hlo_op": name, "hlo_module": module}}

    events = [op("while.1", 900.0), op("ynn_fusion.2", 400.0), op("ynn_fusion.2", 200.0), op("copy.3", 100.0),
              op("copy.9", 60.0, "jit_g"), {"ph": "X", "name": "end: copy.3", "dur": 1.0, "args": {}},
              {"ph": "X", "name": "$python span", "dur": 5000.0}, {"ph": "M", "name": "thread_name"}]
    (tmp_path / "host").mkdir()
    with gzip.open(tmp_path / "host" / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    times = profile_hlo.hlo_op_times(tmp_path, calls=2, module="jit_f")
    assert times == {"while.1": pytest.approx([0.45, 0.5]), "ynn_fusion.2": pytest.approx([0.3, 1.0]),
                     "copy.3": pytest.approx([0.05, 0.5])}
    assert profile_attribution.op_times(tmp_path, calls=2) == pytest.approx({"ynn_fusion": 0.3, "copy": 0.08})


def test_the_tiny_profile_groups_both_libraries_time(tmp_path, monkeypatch):
    """--tiny: every program has every group; GEMM time and FLOPs on both sides (the FLOPs equal:
    the same products), softmax, LayerNorm and GELU found in XLA's fusions, the internals written
    where the program returns them (α's bytes and more); the JSON is what main returns."""
    pytest.importorskip("torch")
    import bench_encoder
    import profile_forward

    monkeypatch.setattr(bench_encoder.time, "sleep", lambda seconds: None)  # the GEMM bound's pauses
    out = tmp_path / "profile.json"
    r = profile_forward.main(["--tiny", "--calls", "1", "--repeats", "1", "--threads", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(r))
    programs = r["programs"]
    assert set(programs) == {"jattn lean", "jattn all internals", "jattn importance", "jattn attribution",
                             "HF attentions", "HF lean"}
    for name, p in programs.items():
        assert tuple(p["groups"]) == profile_forward.GROUPS, name
        assert p["groups"]["GEMM"]["ms"] > 0 and p["groups"]["GEMM"]["gflop"] > 0, name
        assert p["library"] == ("torch" if name.startswith("HF") else "xla") and p["wall_ms"] > 0
    lean, every = programs["jattn lean"]["groups"], programs["jattn all internals"]["groups"]
    assert lean["GEMM"]["gflop"] == pytest.approx(programs["HF lean"]["groups"]["GEMM"]["gflop"])
    for g in ("softmax", "normalisation", "activation"):
        assert lean[g]["ms"] > 0 and lean[g]["mb"] > 0 and programs["HF lean"]["groups"][g]["ms"] > 0, g
    assert every["internals written"]["ms"] > 0  # the lean forward writes only the last hidden state
    alpha_mb = 2 * 2 * 4 * 16 * 16 * 4 / 1e6  # α (L, b, H, n, n) float32 alone
    assert every["internals written"]["mb"] > lean["internals written"]["mb"] + alpha_mb
    assert set(r["machine"]) >= {"cpu", "cores", "load_average_at_start", "load_average_at_end", "shared"}
    assert set(r["versions"]) == {"jax", "jaxlib", "torch", "numpy", "transformers"}
    assert r["rates"]["xla_gemm_gflops"] > 0 and r["rates"]["torch_bandwidth_gb_s"] > 0


def test_bad_flags_are_refused_before_any_work(tmp_path, capsys):
    import profile_forward

    for argv, words in ((["--calls", "0"], "--calls must be at least 1"),
                        (["--out", str(tmp_path)], "is a folder")):
        with pytest.raises(SystemExit):
            profile_forward.parse(argv)
        assert words in capsys.readouterr().err
