"""Subprocess for tests/test_sharding.py (not a test module).

    python sharding_worker.py MODEL OUT devices       # 1 device vs all (faked) devices -> OUT.npz
    python sharding_worker.py MODEL OUT process ADDR N I   # process I of N, gloo collectives
"""

from __future__ import annotations

import sys

import jax
import numpy as np


SHORT = ["The cat sat.", ("Alice met Bob,", "then left."), "Short.", "One, two, three.", "Hi there.",
         ("Yes.", "No, never."), "Dogs bark.", "A b c d e f, g.", "Paris is big.", "Stop."]  # ≤ 16 tokens: one bucket


def statistics(model, devices, batch_size):
    from jattn.methods.distance import JSDistance
    from jattn.methods.grad import AttentionGradient
    from jattn.methods.weights import ClassAttention, Entropy
    from jattn.run import run_corpus

    methods = [ClassAttention(), Entropy(), JSDistance(), AttentionGradient(model)]
    res = run_corpus(model, SHORT, methods, batch_size=batch_size, devices=devices, progress=False)
    return {k: np.asarray(s.value) for k, s in res.statistics.items()} | {
        "meta_" + k: np.asarray(res.meta[k]) for k in ("segments", "tokens", "devices", "processes")}


def main(folder, out, mode, *rest):
    if mode == "process":
        address, n, i = rest[0], int(rest[1]), int(rest[2])
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(address, num_processes=n, process_id=i)
    import jattn

    model = jattn.load(folder, use_cache=False)
    if mode == "devices":
        one = statistics(model, jax.devices()[:1], 8)
        many = statistics(model, jax.devices(), 8)
        np.savez(out, **{"one_" + k: v for k, v in one.items()}, **{"many_" + k: v for k, v in many.items()})
    else:
        stats = statistics(model, jax.local_devices(), 4)
        if jax.process_index() == 0:
            np.savez(out, **stats)
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
