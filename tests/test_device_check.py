"""benchmarks/device_check.py --tiny: the device check's two parts (``--part core``, ``--part scale``; the
default runs both in turn) run on the CPU and write every documented field, its parity within the derived
tolerances and its ratios finite and positive (timings themselves are never asserted)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the scripts import each other

MODEL = {"model", "batch", "forward_gflop", "parity", "seconds", "ratios", "bound_seconds", "memory"}
SECONDS = {"jattn_forward", "jattn_lean", "hf_eager", "hf_eager_lean", "hf_sdpa"}
RATIOS = {"forward_vs_hf_eager", "lean_vs_hf_eager_lean", "lean_vs_hf_sdpa"}
PARITY = {"encoder": {"hidden", "logits", "encoder_weights", "gated", "disabled"},
          "seq2seq": {"logits", "encoder_weights", "decoder_weights", "cross_weights", "gated"},
          "lm": {"logits", "weights", "gated"}}


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def parity_ok(entries: dict) -> None:
    for name, p in entries.items():
        assert set(p) == {"max_abs_err", "tolerance", "terms", "scale", "ok"}, name
        assert p["ok"] and 0 <= p["max_abs_err"] <= p["tolerance"] and p["terms"] >= 1, (name, p)


def run_part(tmp_path, part: str) -> dict:
    """``--tiny --part part``: its JSON as written, the meta and GEMM fields every part has."""
    pytest.importorskip("torch")
    import device_check

    out = tmp_path / "device_check.json"
    r = device_check.main(["--tiny", "--part", part, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(r))
    m = r["meta"]
    assert m["tiny"] and m["part"] == part and m["matmul_precision"] == "highest"
    assert set(m["versions"]) == {"jax", "torch", "transformers"} and positive(m["seconds"])
    g = r["gemm"]
    assert all(positive(g[k]) for k in ("jax_fp32_tflops", "torch_fp32_tflops", "jax_fp32_default_precision_tflops"))
    assert {"jax_bf16_tflops", "torch_bf16_tflops"} <= set(g)
    return r


def test_tiny_device_check_core_writes_the_documented_json(tmp_path):
    r = run_part(tmp_path, "core")
    assert set(r) == {"meta", "gemm", "encoder", "seq2seq", "lm", "importance", "disable", "patching", "ok"}
    assert set(r["meta"]["section_seconds"]) == {"gemm", "encoder", "sweeps", "seq2seq", "lm"}
    for name, want in PARITY.items():
        x = r[name]
        assert MODEL <= set(x), name
        assert set(x["parity"]) == want, name
        parity_ok(x["parity"])
        assert set(x["seconds"]) == SECONDS and set(x["ratios"]) == RATIOS
        assert all(positive(v) for k, v in x["seconds"].items() if v is not None or k != "hf_sdpa")
        assert all(positive(v) for k, v in x["ratios"].items() if v is not None or k != "lean_vs_hf_sdpa")
        assert positive(x["forward_gflop"]) and positive(x["bound_seconds"])
        assert set(x["memory"]) == {"jax_peak_bytes", "torch_peak_bytes"}
    assert "hidden_default_precision" in r["encoder"]["parity_info"]
    imp = r["importance"]
    assert all(positive(imp[k]) for k in ("jattn_first_call_seconds", "jattn_seconds", "hf_seconds", "ratio"))
    parity_ok(imp["parity"])
    d = r["disable"]
    assert all(positive(d[k]) for k in ("jattn_batched_seconds", "jattn_loop_seconds", "hf_loop_seconds",
                                        "ratio_loop_over_batched", "ratio_hf_loop_over_batched"))
    assert d["batched_equals_loop"] and d["predictions_compared"] == 2 * 4 * d["sentences"]
    assert 0 <= d["hf_predictions_differing"] <= d["predictions_compared"]
    p = r["patching"]
    assert set(p["seconds"]) == {"jattn_exact", "jattn_attribution", "jattn_lean_forward", "hf_hooks"}
    assert all(positive(v) for v in p["seconds"].values())
    assert all(positive(p[k]) for k in ("ratio_exact_vs_hooks", "ratio_attribution_vs_hooks",
                                        "attribution_forward_equivalents"))
    parity_ok(p["parity"])
    assert r["ok"] is True


def test_tiny_device_check_scale_part(tmp_path):
    """``--part scale`` (the second call on a GPU): the GEMM rates and the scale entries, no parity to be ok."""
    r = run_part(tmp_path, "scale")
    assert set(r) == {"meta", "gemm", "scale", "ok"} and r["ok"] is None
    assert set(r["meta"]["section_seconds"]) == {"gemm", "scale"}
    scale_ok(r["scale"])


def scale_ok(entries: list) -> None:
    """The scale section at the tiny shape: every case ran (nothing is refused at 32 tokens), timed."""
    assert [e["shape"] for e in entries] == ["tiny"]
    runs = entries[0]["runs"]
    assert set(runs) == {"jattn", "hf"} and all(positive(run["load_seconds"]) for run in runs.values())
    cases = {(c["case"], c["who"], c["n"]) for run in runs.values() for c in run["cases"]}
    forward = {("forward", w, n) for w in ("jattn", "jattn-layerwise", "hf") for n in (16, 32)}
    lean = {("lean", w, n) for w in ("jattn", "hf") for n in (16, 32)}
    bf16 = {(c, "jattn-bf16", n) for c in ("forward", "lean") for n in (16, 32)}
    assert cases == forward | lean | bf16 | {("importance", "jattn", 16), ("importance", "hf", 16)}
    assert all(positive(c["seconds"]) and positive(c["first_call_seconds"]) for run in runs.values()
               for c in run["cases"])
