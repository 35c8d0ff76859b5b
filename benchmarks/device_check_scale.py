"""The device check's scale section (``benchmarks/device_check.py``, key ``scale``): random Llama-shaped
checkpoints in bfloat16 (``bench_scale.SHAPES["llama"]``: ``1b`` and ``8b`` on an accelerator, ``tiny``
with ``--tiny``), each loaded by jattn and by HF on the accelerator, then the forward with attention
weights at each n (jattn keeping every layer's α, jattn's layerwise ``lm-attention``, HF eager
``output_attentions``), the lean forward (no internals kept: jattn ``internals=None``, HF eager without
``output_attentions``) at the shorter lengths, and head importance over all heads, with bfloat16 parameters.
jattn's arithmetic is float32 by default (``compute_dtype``; TF32 products at JAX's default GPU precision),
HF's bfloat16: the ``jattn-bf16`` cases run jattn's forward and lean forward with
``compute_dtype=bfloat16``, the like-with-like comparison (the layerwise forward and importance have
no such option: float32 arithmetic).

One fresh process per checkpoint and library (``child``), its cases in order; each case reports its
seconds (the second call; the first, compiling included, beside it) and the peak device memory so
far (JAX ``memory_stats()["peak_bytes_in_use"]``, a process-long peak; torch ``max_memory_allocated``,
reset before each case; both null on a CPU). A case whose kept α cannot fit is not run: HF's is
recorded as the bytes it needs against the device's free memory; jattn refuses by itself before
computing (``refused``: its message). Nothing is estimated: a case not run says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import bench_scale_analyses as A

# (shape, the forward's lengths, importance's tokens): the accelerator's, and --tiny's
PLAN = {"full": [("1b", (512, 2048, 8192), 1024), ("8b", (512, 2048, 8192), 1024)],
        "tiny": [("tiny", (16, 32), 16)]}


def device_peak(who: str):
    if who == "hf":
        import torch

        return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def free_bytes(who: str):
    if who == "hf":
        import torch

        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else A.available_bytes()
    from jattn.nn.engine import available_bytes

    return available_bytes()


def one_case(spec: dict, model, case: str, who: str, n: int) -> dict:
    """Time one case twice (the first call compiles) and read the device peak; or record why it did not run."""
    import torch

    row = {"case": case, "who": who, "n": n}
    kept = A.kept_weights_bytes("llama", spec["config"], n) // (2 if spec["dtype"] == "bfloat16" else 1)
    if who == "hf" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    if who == "hf" and case == "forward" and 1.5 * kept > free_bytes(who):
        return {**row, "not_run": f"needs {1.5 * kept / 2**30:.1f} GiB (every layer's α and one layer's scores), "
                                  f"{free_bytes(who) / 2**30:.1f} GiB free"}
    arithmetic = {"compute_dtype": "bfloat16"} if who == "jattn-bf16" else {}
    call, lean = A.case_calls({**spec, **arithmetic, "who": who, "case": "forward" if case == "lean" else case,
                               "n": n, "b": 1}, model, spec["config"])
    call = lean if case == "lean" else call
    times = []
    try:
        for _ in range(2):
            t0 = time.perf_counter()
            call()
            A.sync(spec["torch_device"])
            times.append(time.perf_counter() - t0)
    except ValueError as e:
        if not any(why in str(e) for why in A.REFUSALS):
            raise
        return {**row, "refused": str(e)}
    return {**row, "first_call_seconds": times[0], "seconds": times[1], "device_peak_bytes": device_peak(who)}


def child(spec: dict) -> dict:
    """In a fresh process: load the checkpoint (timed), then every case of ``spec["cases"]``."""
    sys.path[:0] = [str(A.ROOT / "tests"), str(A.ROOT / "benchmarks")]
    import torch  # noqa: F401  (before JAX, as device_check imports them)

    t0 = time.perf_counter()
    model = A.load(spec)
    if spec["who"] != "hf":
        import jax

        jax.block_until_ready(jax.tree.leaves(model.params))
    out = {"who": spec["who"], "load_seconds": time.perf_counter() - t0, "load_device_peak_bytes": device_peak(
        spec["who"]), "cases": []}
    for case, who, n in spec["cases"]:
        out["cases"].append(one_case(spec, model, case, who, n))
    return out


def measure(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(A.ROOT)}
    code = (f"import sys; sys.path.insert(0, {str(A.ROOT / 'benchmarks')!r}); import device_check_scale as S; "
            "import json; print(json.dumps(S.child(json.loads(sys.argv[1]))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"scale {spec['who']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def entries(cache: Path, tiny: bool, torch_device: str):
    """The ``scale`` entries, one per checkpoint as it finishes: its shape, parameters, bytes, and jattn's and HF's
    runs."""
    from bench_scale import SHAPES, checkpoint_bytes, make_checkpoint

    for shape, lengths, importance_n in PLAN["tiny" if tiny else "full"]:
        folder = make_checkpoint(shape, cache, "llama")
        config = {k: v for k, v in SHAPES["llama"][shape].items() if k != "shard"}
        base = dict(folder=str(folder), family="llama", config=config, devices=1, dtype="bfloat16",
                    torch_device=torch_device)
        runs = {}
        for who in ("jattn", "hf"):
            cases = [("forward", who, n) for n in lengths]
            cases += [("forward", "jattn-layerwise", n) for n in lengths] if who == "jattn" else []
            cases += [("lean", who, n) for n in lengths[:2]]
            if who == "jattn":
                cases += [(case, "jattn-bf16", n) for case in ("forward", "lean") for n in lengths[:2]]
            runs[who] = measure({**base, "who": who, "cases": cases + [("importance", who, importance_n)]})
        yield {"shape": shape, "parameters": A.parameters("llama", config),
               "checkpoint_bytes": checkpoint_bytes(folder), "dtype": "bfloat16", "runs": runs}
