"""Wall time and peak resident memory of one call, and the fastest of repeated calls, for the
benchmarks (peak memory: Linux /proc/self)."""

from __future__ import annotations

import time


def _status(field: str) -> float:
    """A /proc/self/status field in MB (VmRSS: resident now, VmHWM: peak since the last reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(fn):
    """(seconds, Δ peak RSS MB, fn's value) of one call of fn: the peak during the call minus the
    resident memory just before it (VmHWM reset through clear_refs)."""
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, _status("VmHWM") - base, value


def fastest(fn, repeats: int) -> float:
    """Shortest of ``repeats`` timed calls after a warm-up, in seconds: the best a product can do."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
