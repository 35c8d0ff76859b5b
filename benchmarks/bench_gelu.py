"""Exact GELU as ``jax.nn.gelu(approximate=False)`` computes it (through erfc) against jattn's
``jattn.nn.layers.gelu`` (½·x·(1 + erf(x/√2)), PyTorch's formula), in the lean encoder forward:
both compiled in one process, timed in alternated rounds (median), MiniLM at 32 × 128 and
all-mpnet-base-v2 at 8 × 128 (read from jattn's cache: ``jattn models fetch all-mpnet-base-v2``).

    .venv/bin/python benchmarks/bench_gelu.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    import jax

    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn.nn import encoder, layers

    variants = {"erfc": lambda x: jax.nn.gelu(x, approximate=False), "erf": layers.gelu}
    for name, (b, n) in (("minilm", (32, 128)), ("all-mpnet-base-v2", (8, 128))):
        model = jattn.load() if name == "minilm" else jattn.load(name)
        c, p = model.config, model.params
        ids = np.random.default_rng(0).integers(5, c.vocab_size, size=(b, n))  # (b, n)
        batch = model.check_batch({"input_ids": ids, "attention_mask": np.ones_like(ids)})
        programs = {}
        for key, act in variants.items():  # the activation is read when the forward is traced
            layers.ACT["gelu"] = act
            programs[key] = jax.jit(lambda p, x: encoder.forward(p, c, x, None, internals=None)[0]["last_hidden_state"])
            jax.block_until_ready(programs[key](p, batch))
        layers.ACT["gelu"] = layers.gelu
        times = {k: [] for k in programs}
        for _ in range(args.rounds):
            for key, fn in programs.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(p, batch))
                times[key].append(time.perf_counter() - start)
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(
            f"{name} {b}x{n}: erfc {ms['erfc']:.1f} ms, erf {ms['erf']:.1f} ms, erfc/erf {ms['erfc'] / ms['erf']:.3f}"
        )


if __name__ == "__main__":
    main()
