"""What a joint L0 gate update costs against a training update of the translation model: the unit
of the Voita study's cost (``experiments.voita2019.study``).

    .venv/bin/python benchmarks/bench_gate_update.py [--rounds 4] [--updates 10]
        [--out benchmarks/results/gate_update.json]

Model: the shape of the recipe ``multi30k-fr-en-6x8`` (6 + 6 layers × 8 heads, d 256, FFN 1024,
dropout 0.3, DS-Init), random parameters (the cost does not depend on their values), a
SentencePiece vocabulary of 8,000 trained on the Multi30k training text, batches from its first
4,000 pairs (needs the data set: ``jattn data fetch multi30k``). Batches: 2,048 tokens per
side, sentences cut to 64 tokens, as both the recipe and the study make them. Timed in
alternated rounds of ``--updates`` updates each:

* a training update (``jattn.training.nmt.train_step``: label-smoothed loss, Adam, clipping);
* a joint gate update as the study runs it (``jattn.training.l0.train_step``: gates on all three
  attention types, the model trained beside them at ``model_lr`` 1e-4, dropout on).

Reports the seconds per update of each and their ratio per round.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "gate_update.json"))
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    from jattn.artefacts.vocabulary import train_sentencepiece
    from jattn.artefacts.translation import RECIPE, TranslationConfig, _read, model_config
    from jattn.io.manifest import data_path
    from jattn.io.parallel import encode
    from jattn.runner.batcher import token_batches
    from jattn.training import l0, nmt

    c = TranslationConfig(**dict(RECIPE.options))
    src_text, tgt_text = _read(data_path("multi30k"), "train", c)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_sentencepiece(src_text + tgt_text, Path(tmp) / "tokenizer", c.vocab_size, seed=0)
        src_text, tgt_text = src_text[:4000], tgt_text[:4000]
        config = model_config(c, tokenizer)
        src = encode(tokenizer, src_text, c.max_len, truncate=True)
        tgt = encode(tokenizer, tgt_text, c.max_len, target=True, truncate=True)
        batches = [nmt.device_batch(b) for b in token_batches(src, tgt, c.max_tokens, config.pad_token_id,
                                                              config.decoder_start_token_id, np.random.default_rng(0))]
        need = args.rounds * args.updates + 1
        if len(batches) < need:
            raise SystemExit(f"{len(batches)} batches, {need} needed: lower --rounds or --updates")
        tc = nmt.TrainConfig(peak_lr=c.peak_lr, warmup_steps=c.warmup, max_tokens=c.max_tokens, depth_scaled_init=True)
        optimizer = nmt.make_optimizer(tc)
        params = nmt.init_params(config, jax.random.key(0), depth_scaled=True)
        gc = l0.GateConfig(lam=0.01, kinds=("encoder", "decoder", "cross"), lr=0.05, model_lr=1e-4, dropout=True,
                           label_smoothing=0.1)
        gates = l0.GateTrainer(config, jax.tree.map(jnp.array, params), gc, Path(tmp) / "gates", lambda e: batches)
        state = {"train": (params, optimizer.init(params)), "gate": gates.state}
        key = jax.random.key(1)

        def train(i):
            p, o, out = nmt.train_step(*state["train"], batches[i], jax.random.fold_in(key, i), config=config, tc=tc,
                                       optimizer=optimizer)
            state["train"] = (p, o)
            return out["loss"]

        def gate(i):
            state["gate"], out = l0.train_step(
                state["gate"],
                batches[i],
                jax.random.fold_in(key, i),
                jnp.float32(gc.lam),
                config=config,
                gc=gates.static_gc,
                optimizer=gates.optimizer,
            )
            return out["loss"]

        runs = {"train": train, "gate": gate}
        for f in runs.values():
            jax.block_until_ready(f(need - 1))  # compiled and warm
        seconds: dict[str, list] = {k: [] for k in runs}
        for r in range(args.rounds):
            for name, f in runs.items():
                start = time.perf_counter()
                for i in range(r * args.updates, (r + 1) * args.updates):
                    jax.block_until_ready(f(i))
                seconds[name].append(round((time.perf_counter() - start) / args.updates, 3))
    record = {"model": "multi30k-fr-en-6x8 shape, random parameters", "max_tokens": c.max_tokens,
              "seconds_per_update": seconds,
              "gate_over_train_per_round": [round(g / t, 3) for g, t in zip(seconds["gate"], seconds["train"])],
              "machine": {"cores": os.cpu_count(), "load_average_at_end": os.getloadavg()},
              "versions": {"jax": jax.__version__}}
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
