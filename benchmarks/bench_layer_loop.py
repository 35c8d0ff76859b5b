"""The layer loop against the layers unrolled over per-layer views of their weights, one process.

    .venv/bin/python benchmarks/bench_layer_loop.py [--repeats 15] [--out benchmarks/results/layer_loop.json]

``jattn.nn.encoder.forward`` jitted two ways on the same parameters and inputs: as ``lax.scan``
over the stacked layers (``unroll=False``), and unrolled over ``jattn.nn.engine.layer_views``
(each layer's weights an argument of its own: what ``Model.forward`` takes on one CPU device,
``Model.forward_params``); likewise ``jattn.nn.seq2seq.forward`` for a translation model. For
MiniLM (the embedded model, 32 × 128), all-mpnet-base-v2 when it is fetched (8 × 128) and the
6 + 6 × 8 translation model when it is made (32 pairs of 32 random source and target tokens,
teacher-forced), lean (hidden states only) and with every internal fetched to the host;
the two programs are called alternately (``bench_encoder.alternate``): median and fastest call of
each, their ratio (> 1: unrolled faster) and each program's compile time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path

import numpy as np

from bench_encoder import alternate, cpu_model  # benchmarks/ (the scripts run from their folder)


def models():
    """(name, model, batch size, length): MiniLM, all-mpnet-base-v2 when fetched, the translation model
    when made."""
    import jattn
    jattn.host_memory.keep_freed_memory()  # as the recorded numbers were measured
    from jattn import artefacts
    from jattn.io.artefacts import is_made

    yield "all-MiniLM-L6-v2", jattn.load(), 32, 128
    if is_made("all-mpnet-base-v2"):
        yield "all-mpnet-base-v2", jattn.load(artefacts.path("all-mpnet-base-v2"), tokenizer=False), 8, 128
    if is_made("multi30k-fr-en-6x8"):
        yield "multi30k-fr-en-6x8", jattn.load(artefacts.path("multi30k-fr-en-6x8")), 32, 32


def inputs(cfg, batch_size: int, length: int) -> tuple[dict, object]:
    """Random token ids of every input the model reads, and its pure forward."""
    import jax.numpy as jnp

    from jattn.nn import encoder, seq2seq

    ids = jnp.asarray(np.random.default_rng(0).integers(10, 1000, (batch_size, length)), jnp.int32)  # (b, n)
    ones = jnp.ones_like(ids)
    if hasattr(cfg, "d_model"):  # a translation model: source and target
        return {"input_ids": ids, "attention_mask": ones, "decoder_input_ids": ids[:, ::-1],
                "decoder_attention_mask": ones}, seq2seq.forward
    return {"input_ids": ids, "attention_mask": ones, **({"token_type_ids": 0 * ids} if cfg.type_vocab_size else {})}, \
        encoder.forward


def bench(model, batch_size: int, length: int, repeats: int) -> dict:
    import jax

    from jattn.nn.engine import layer_views, stacked_layers

    cfg = model.config
    batch, forward = inputs(cfg, batch_size, length)

    @partial(jax.jit, static_argnames="internals")
    def loop(params, batch, internals):
        return forward(params, cfg, batch, internals=internals)

    @partial(jax.jit, static_argnames="internals")
    def unrolled(views, batch, internals):
        return forward(stacked_layers(views), cfg, batch, internals=internals, unroll=True)

    params, views = model.params, layer_views(model.params)
    result = {}
    for internals, label in ((None, "lean"), ("all", "all_internals")):
        for name, fn, p in (("loop", loop, params), ("unrolled", unrolled, views)):
            t0 = time.perf_counter()
            fn.lower(p, batch, internals).compile()
            result[f"{label}_{name}_compile_seconds"] = time.perf_counter() - t0

        def host(fn, p):  # the hidden states and every internal on the host, as a user reads them
            return lambda: [np.asarray(a) for a in jax.tree.leaves(fn(p, batch, internals))]

        fastest = {}
        secs = alternate({"loop": host(loop, params), "unrolled": host(unrolled, views)}, repeats, fastest=fastest)
        result.update({f"{label}_{k}_seconds": v for k, v in secs.items()},
                      **{f"{label}_{k}_fastest_seconds": v for k, v in fastest.items()})
        result[f"{label}_loop_over_unrolled"] = secs["loop"] / secs["unrolled"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/results/layer_loop.json")
    args = parser.parse_args()
    results = []
    for name, model, b, n in models():
        r = {"name": name, "batch": [b, n], **bench(model, b, n, args.repeats)}
        print(f"{name}: loop ÷ unrolled lean {r['lean_loop_over_unrolled']:.3f}, all internals "
              f"{r['all_internals_loop_over_unrolled']:.3f}; compile lean {r['lean_loop_compile_seconds']:.1f} s → "
              f"{r['lean_unrolled_compile_seconds']:.1f} s, all internals {r['all_internals_loop_compile_seconds']:.1f}"
              f" s → {r['all_internals_unrolled_compile_seconds']:.1f} s", flush=True)
        results.append(r)
    meta = {"threads": os.cpu_count(), "cpu": cpu_model(), "repeats": args.repeats,
            "load_average_at_end": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
