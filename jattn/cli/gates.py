"""L0 head gates (Voita et al. 2019, §5): trained over a λ sweep, the heads kept per attention type, the pruned model.

For each λ of --lams, a hard-concrete gate per head (Louizos et al. 2018) is trained on --input
with the model frozen: task cross-entropy + λ · L0 penalty (jattn.training.l0.GateTrainer; the
penalty Σ_heads P(g ≠ 0), the paper's Eq. 5, or --normalisation mean_layers). The deterministic
evaluation gates are then applied and the task metric taken on --dev: accuracy (%) or MCC ×100 of
a classifier (--format labelled, 'text<TAB>label' lines), BLEU of greedy translations of a
translation model (--format parallel: SRC_FILE TGT_FILE or one 'source ||| target' file). An
evaluation gate is 0 (the head is closed), 1 (open) or strictly between (fractional: the head is
kept, its output scaled); heads kept and fractional gates are counted per attention type.

Writes DIR/results.json, DIR/report.md and DIR/figures/ (metric against heads kept, each λ's
gates per attention type, heads kept during training). --export FOLDER writes the model of the
λ that keeps the fewest heads within --tolerance points of the ungated model, its closed heads
physically removed and its fractional gates folded into W_O (jattn.sweeps.pruning.export_pruned);
jattn.load reads it. Training checkpoints every --save-every updates and on Ctrl-C or SIGTERM
in DIR-work/; the same command run again resumes there (DIR-work is removed when done).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import numpy as np

from jattn.cli.common import (add_output_arguments, cached, check_family, check_work, described, finite, max_length_for,
                              positive_int, read_examples, work_folder)

RESUME = "; run the same command again to resume from its checkpoint"


def add_arguments(parser) -> None:
    from jattn.nn.gates import NORMALISATIONS

    parser.add_argument("--model", default=None,
                        help="a classifier or translation model: HF folder or hub id (default: embedded "
                             "all-MiniLM-L6-v2, which has no classifier head: give one)")
    parser.add_argument("--input", required=True, nargs="+",
                        help="training data for the gates (--format parallel: SRC_FILE TGT_FILE, or one "
                             "'src ||| tgt' file)")
    parser.add_argument("--format", default="labelled", choices=("labelled", "parallel"),
                        help="labelled: 'text<TAB>label' per line (a classifier); parallel: (source, target) "
                             "pairs (a translation model)")
    parser.add_argument("--dev", required=True, nargs="+", help="evaluation data, in --format's layout")
    add_output_arguments(parser)
    parser.add_argument("--lams", nargs="+", type=finite(low=0), default=[0.01, 0.03, 0.1],
                        help="penalty weights λ, one gate training each")
    parser.add_argument("--kinds", nargs="+", choices=("encoder", "decoder", "cross"), default=None,
                        help="attention types to gate (default: every type of the model; an encoder has one, "
                             "encoder)")
    parser.add_argument("--steps", type=positive_int, default=300, help="gate updates per λ")
    parser.add_argument("--lr", type=finite(low=0, low_open=True), default=0.05, help="Adam learning rate on log α")
    parser.add_argument("--normalisation", default="sum_heads", choices=NORMALISATIONS,
                        help="the penalty: sum over heads (the paper's Eq. 5) or mean over layers (the authors' code)")
    parser.add_argument("--metric", default="accuracy", choices=("accuracy", "matthews_corr"),
                        help="a classifier's dev metric, reported ×100 (a translation model: BLEU)")
    parser.add_argument("--tolerance", type=finite(low=0), default=1.0,
                        help="metric points the exported λ may lose against the ungated model")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the gate samples")
    parser.add_argument("--save-every", type=positive_int, default=50, help="gate updates between checkpoints")
    parser.add_argument("--export", default=None,
                        help="write the pruned model of the chosen λ to this folder (default: none, no export)")


def training_batches(model, examples, fmt: str, rows: int, max_length: int):
    """epoch -> the gate trainer's batches: shuffled, ``rows`` examples each (full batches only:
    the gate loss has no filler-row weights), deterministic in the epoch."""
    if len(examples) < rows:
        raise ValueError(f"--input has {len(examples)} examples, fewer than --batch-size {rows}. Fix: pass "
                         f"--batch-size {len(examples)} or more training data")
    c = model.config
    if fmt == "labelled":
        from jattn.training.finetune import encode, length_batches, pad_batch

        if not all(isinstance(x, str) for x, _ in examples):
            raise ValueError("jattn gates trains on single texts ('text<TAB>label'); sentence pairs are not supported")
        ids = encode(model.tokenizer, [x for x, _ in examples], max_length)
        labels = np.asarray([y for _, y in examples], np.int32)
        lengths = np.asarray([len(x) for x in ids])

        def batches(epoch: int) -> list:
            keys = ("input_ids", "attention_mask", "labels")
            return [{k: b[k] for k in keys} for b in (pad_batch(ids, labels, idx, rows, c.pad_token_id, max_length)
                                                       for idx in length_batches(lengths, rows, 0, epoch)
                                                       if len(idx) == rows)]
        return batches
    from jattn.io.parallel import encode
    from jattn.runner.batcher import make_batch, round_up
    from jattn.training.nmt import device_batch

    prepare = getattr(model, "prepare_texts", list)
    src = encode(model.tokenizer, prepare([s for s, _ in examples]), max_length)
    tgt = encode(model.tokenizer, prepare([t for _, t in examples]), max_length, target=True)

    def batches(epoch: int) -> list:
        order = np.random.default_rng([0, epoch]).permutation(len(src))
        chunks = [order[k:k + rows] for k in range(0, len(order) - rows + 1, rows)]
        return [device_batch(make_batch([src[i] for i in ch], [tgt[i] for i in ch], c.pad_token_id,
                                        c.decoder_start_token_id, rows,
                                        round_up(max(max(len(src[i]), len(tgt[i])) for i in ch), 16)))
                for ch in chunks]
    return batches


def counts(gates: dict[str, np.ndarray]) -> dict:
    """Per attention type: heads, heads kept (gate > 0) and fractional gates (0 < g < 1)."""
    return {k: {"heads": int(g.size), "kept": int((g > 0).sum()), "fractional": int(((g > 0) & (g < 1)).sum())}
            for k, g in gates.items()}


def summary_line(points: list[dict], kinds, metric: str) -> str:
    """Each λ's heads kept of the gated attention types (an ungated type keeps all its heads and is
    not counted), fractional gates and metric, as the command prints them."""
    return "; ".join(
        f"λ {p['lambda']:g}: heads kept "
        + ", ".join(f"{k} {p['counts'][k]['kept']}/{p['counts'][k]['heads']}" for k in kinds)
        + f" ({sum(p['counts'][k]['fractional'] for k in kinds)} fractional), {metric} {p['metric']:.2f}"
        for p in points
    )


def train_point(model, params, batches, gc, folder: Path, metric_fn, progress: bool) -> dict:
    """Train one λ's gates (resumable in ``folder``), then evaluate the gated model."""
    from jattn.training import l0

    trainer = l0.GateTrainer(model.config, params, gc, folder, batches)
    curve = trainer.fit(progress=progress)
    gates = trainer.evaluation_gates()  # {kind: (L, H)}, 1 on ungated types
    return {"lambda": gc.lam, "metric": float(metric_fn(gates)), "counts": counts(gates),
            "gates": {k: np.asarray(v, np.float64).tolist() for k, v in gates.items()},
            "log_alpha": {k: np.asarray(v, np.float64).tolist() for k, v in trainer.log_alpha.items()},
            "curve": curve, "train_seconds": round(trainer.meta["train_time_s"], 1)}


def chosen(points: list[dict], baseline: float, tolerance: float) -> dict | None:
    """The point with the fewest heads kept whose metric is within ``tolerance`` of ``baseline``."""
    fine = [p for p in points if baseline - p["metric"] <= tolerance]
    return min(fine, key=lambda p: (sum(c["kept"] for c in p["counts"].values()), -p["lambda"])) if fine else None


def gated_model(model, gates: dict):
    """``model`` with the gates folded into W_O (a gate on a head's context scales its rows of W_O)."""
    import jax.numpy as jnp
    from flax import nnx

    from jattn.training import l0

    folded = l0.fold_gates(nnx.to_pure_dict(model.params), model.config,
                           {k: jnp.asarray(v, jnp.float32) for k, v in gates.items()})
    return type(model)(model.config, folded, model.tokenizer, model.source)


def export(model, point: dict, folder: Path) -> Path:
    """The gated model of ``point`` with its closed heads removed, as a folder ``jattn.load`` reads."""
    from jattn.sweeps.pruning import export_pruned

    gates = {k: np.asarray(v, np.float32) for k, v in point["gates"].items()}
    keep = {k: g > 0 for k, g in gates.items()}
    return export_pruned(gated_model(model, gates), keep, folder)


def run(args) -> None:
    from jattn.models import load
    from flax import nnx

    from jattn.cli.gates_report import write
    from jattn.cli.reporting import metric_name
    from jattn.io import results
    from jattn.sweeps.pruning_curve import bleu_metric, classification_metric
    from jattn.training import l0

    exporting = results.Output(args.export, overwrite=args.overwrite, option="--export") if args.export \
        else contextlib.nullcontext()
    with results.Output(args.out, overwrite=args.overwrite) as output, exporting as exported:
        if exported is not None and exported.out == output.out:
            raise ValueError("--export and --out are one folder. Fix: give the pruned model a folder of its own")
        train, dev = read_examples(args.input, args.format), read_examples(args.dev, args.format)
        model = load(args.model)
        check_family(model, args.format, "jattn gates")
        max_length = max_length_for(args, model)
        shapes = l0.gate_shapes(model.config)
        kinds = tuple(dict.fromkeys(args.kinds or shapes))
        if unknown := [k for k in kinds if k not in shapes]:
            raise ValueError(f"--kinds {' '.join(unknown)}: this model has the attention types {', '.join(shapes)}. "
                             f"Fix: --kinds {' '.join(shapes)}")
        if args.format == "parallel":  # metric_fn: {type: (L, H) gates} -> the metric
            name, metric_fn = metric_name("bleu"), bleu_metric(model, dev, batch_size=args.batch_size,
                                                               max_length=max_length)
        else:
            name = metric_name(args.metric)
            metric_fn = classification_metric(model, dev, args.metric, args.batch_size, max_length)
        work = work_folder(output)
        identity = {"model": str(model.source), "input": list(args.input), "dev": list(args.dev),
                    "format": args.format, "metric": name, "examples": len(train), "dev_examples": len(dev),
                    "batch_size": args.batch_size, "max_length": max_length}
        check_work(work, identity)
        baseline = cached(work / "baseline.json",
                           lambda: {"metric": float(metric_fn({k: np.ones(s, np.float32) for k, s in shapes.items()}))})
        baseline = baseline["metric"]
        batches = training_batches(model, train, args.format, args.batch_size, max_length)
        params = nnx.to_pure_dict(model.params)
        points = []
        for lam in args.lams:
            gc = l0.GateConfig(lam=lam, normalisation=args.normalisation, kinds=kinds, steps=args.steps, lr=args.lr,
                               seed=args.seed, save_every=args.save_every)
            folder = work / f"lam_{lam:g}"
            print(f"jattn gates: λ = {lam:g} ({args.steps} updates)")
            point = cached(folder / "point.json",
                            lambda: train_point(model, params, batches, gc, folder, metric_fn, True))
            points.append(point)
        pick = chosen(points, baseline, args.tolerance)
        meta = results.run_meta(model=model.source, input=" ".join(args.input), dev=" ".join(args.dev),
                                format=args.format, kinds=list(kinds), lams=list(args.lams), steps=args.steps,
                                lr=args.lr, normalisation=args.normalisation, seed=args.seed, examples=len(train),
                                dev_examples=len(dev), tolerance=args.tolerance, export=args.export, complete=True)
        doc = {"metric": name, "baseline_metric": baseline, "gated": list(kinds), "points": points,
               "export_lambda": None if pick is None else pick["lambda"], "meta": meta}
        output.write(lambda out: write(out, doc, model))
        if exported is not None and pick is not None:
            exported.write(lambda out: export(model, pick, out))
    shutil.rmtree(work, ignore_errors=True)
    summary = summary_line(points, kinds, name)
    print(f"jattn gates: {described(train, args.input)}; dev: {described(dev, args.dev)}; ungated {name} "
          f"{baseline:.2f}; {summary} -> {args.out}")
    if args.export:
        print(f"jattn gates: pruned model of λ {pick['lambda']:g} in {args.export}" if pick is not None else
              f"jattn gates: no λ stays within {args.tolerance:g} points of the ungated model; nothing exported "
              "(Fix: smaller --lams or a larger --tolerance)")
