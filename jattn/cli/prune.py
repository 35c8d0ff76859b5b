"""Pruning curve by head importance (Michel et al. 2019): ``jattn prune --input FILE --dev FILE --out DIR``.

Importance is estimated on ``--input`` (as ``jattn importance``); heads are masked globally in
cumulative steps of ``--step`` of all heads (a translation model ranks its encoder self-, decoder
self- and cross-attention heads together), and the metric is taken on ``--dev`` after each step:
accuracy (%) or Matthews correlation ×100 of a classifier (``--dev`` 'text<TAB>label' lines), or BLEU
of greedy translations (``--dev SRC_FILE REF_FILE`` or one 'source ||| reference' file). Writes
``DIR/results.json`` (curve, the fraction prunable within ``--tolerance`` points, the head mask of
every step, by each head's index before any pruning), ``DIR/report.md``,
``DIR/figures/curve.png``; ``--export FOLDER`` writes the model pruned at that fraction with the
heads physically removed (``jattn.sweeps.pruning.export_pruned``). The curve is saved after every
point in ``DIR-work/`` (removed when done): a stopped run (Ctrl-C, a kill) started again with the
same arguments resumes there.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np

from jattn.cli.common import add_common, check_family, described, finite, max_length_for, read_examples

RESUME = "; run the same command again to resume from its checkpoint"


def add_arguments(parser) -> None:
    from jattn.sweeps.pruning_curve import SCHEDULES

    add_common(parser)
    parser.add_argument("--dev", required=True, nargs="+", help="evaluation data, in --format's layout")
    parser.add_argument("--schedule", default="once", choices=SCHEDULES,
                        help="importance once, or re-estimated under the current mask before every step")
    parser.add_argument(
        "--step",
        type=finite(low=0, high=1, low_open=True),
        default=0.1,
        help="share of all heads masked per step, a fraction in (0, 1]",
    )
    parser.add_argument("--keep-one-per-layer", action="store_true", help="never mask a layer's last head")
    parser.add_argument("--metric", default="accuracy", choices=("accuracy", "matthews_corr"),
                        help="a classifier's metric (a translation model: BLEU)")
    parser.add_argument(
        "--tolerance",
        type=finite(low=0),
        default=1.0,
        help="metric points a prunable step may lose (accuracy/MCC points ×100, or BLEU points)",
    )
    parser.add_argument(
        "--export",
        default=None,
        help="write the model pruned at the prunable fraction, heads removed, to this folder "
             "(default: none, no export)",
    )


def curve_figure(curve: list, baseline: float, tolerance: float, ylabel: str, path):
    from jattn.viz.plots import plt, save

    c = np.asarray(curve)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(100 * c[:, 0], c[:, 1], marker="o")
    ax.axhline(baseline - tolerance, color="k", lw=0.6, ls=":", label=f"unpruned − {tolerance:g}")
    ax.set_xlabel("% of heads masked (global importance ranking)")
    ax.set_ylabel(ylabel)
    ax.legend()
    return save(fig, path)


def run(args) -> None:
    from jattn.models import load
    from jattn.cli.reporting import metric_name, table, write_report
    from jattn.io import results
    from jattn.sweeps.pruning import by_original_head
    from jattn.sweeps.pruning_curve import (as_lists, bleu_metric, classification_metric, heads_per_step, held,
                                           prunable_fraction, prune)

    exporting = (results.Output(args.export, overwrite=args.overwrite, option="--export") if args.export
                 else contextlib.nullcontext())  # checked and locked before any work, as --out
    with results.Output(args.out, overwrite=args.overwrite) as output, exporting as exported:
        examples = read_examples(args.input, args.format)
        dev = read_examples(args.dev, args.format)
        model = load(args.model)
        check_family(model, args.format, "jattn prune")
        heads = int(held(model).sum())  # a model pruned before: its heads, not its padding slots
        pruned_before = getattr(model.config, "pruned", None) is not None
        per_step = heads_per_step(args.step, heads, "--step")  # before any work
        max_length = max_length_for(args, model)
        if args.format == "parallel":
            metric, name = (
                bleu_metric(model, dev, batch_size=args.batch_size, max_length=max_length),
                metric_name("bleu"),
            )
        elif args.format == "labelled":
            metric = classification_metric(model, dev, args.metric, args.batch_size, max_length)
            name = metric_name(args.metric)
        else:
            raise ValueError("jattn prune needs a task metric: --format labelled (a classifier) or parallel")
        masks = []
        state = output.out.with_name(output.out.name + "-work") / "pruning_curve.json"  # resumable: removed when done
        identity = {"model": str(model.source), "input": list(args.input), "dev": list(args.dev), "format": args.format,
                    "metric": name, "examples": len(examples), "dev_examples": len(dev), "batch_size": args.batch_size,
                    "max_length": max_length}
        curve = prune(model, examples, metric, estimator=args.estimator, schedule=args.schedule, step=args.step,
                      keep_one_per_layer=args.keep_one_per_layer, batch_size=args.batch_size, max_length=max_length,
                      progress=True, masks_out=masks, state_file=state, identity=identity)
        prunable = prunable_fraction(curve, curve[0][1], args.tolerance)
        keep = masks[[f for f, _ in curve].index(prunable)]
        doc = {"curve": curve, "baseline_metric": curve[0][1], "metric": name,
               "prunable_fraction": prunable, "tolerance": args.tolerance,
               # per head by its index before any pruning (null: a head removed from the model before this run)
               "masks": [by_original_head(model.config, m) if pruned_before else as_lists(m) for m in masks],
               "meta": results.run_meta(model=model.source, input=" ".join(args.input), dev=" ".join(args.dev),
                                        estimator=args.estimator, schedule=args.schedule, step=args.step,
                                        keep_one_per_layer=args.keep_one_per_layer, format=args.format,
                                        metric=args.metric, tolerance=args.tolerance, examples=len(examples),
                                        dev_examples=len(dev), export=args.export, complete=True)}

        def fill(folder):
            (folder / "results.json").write_text(json.dumps(doc, indent=1))
            (folder / "figures").mkdir()
            path = curve_figure(curve, curve[0][1], args.tolerance, name, folder / "figures" / "curve.png")
            lines = [
                f"Model: {model.source}. Importance |dL/dξ| ({args.estimator} estimator, schedule "
                f"{args.schedule}) on {len(examples)} examples ({' '.join(args.input)}); heads masked globally, "
                f"{per_step} of the {heads} heads ({per_step / heads:.1%}) per step (Michel et al. 2019). "
                f"Metric: {name} on {len(dev)} dev "
                f"examples ({' '.join(args.dev)}).",
                "",
                *table(
                    ["% of heads masked", name, f"Δ {name}"],
                    [[f"{100 * f:.0f}", float(v), float(v - curve[0][1])] for f, v in curve],
                ),
                "",
                f"Prunable within {args.tolerance:g} points of the unpruned model: {prunable:.0%} of the heads"
                + (f" (exported to {args.export})." if args.export else "."),
            ]
            write_report(folder, "Pruning curve by head importance", lines, [path])
            return path

        output.write(fill)
        state.unlink(missing_ok=True)  # the run's own file; its folder goes only if nothing else is in it
        with contextlib.suppress(OSError):
            state.parent.rmdir()
        if args.export:
            from jattn.sweeps.pruning import export_pruned

            keep = {k: np.asarray(v) > 0.5 for k, v in keep.items()}  # {type: (L, H) bool}
            exported.write(lambda folder: export_pruned(model, keep, folder))
    print(
        f"jattn prune: {described(examples, args.input)}; dev: {described(dev, args.dev)}; "
        f"{prunable:.1%} of heads prunable within {args.tolerance:g} points -> {args.out}"
        + (f"; pruned model in {args.export}" if args.export else "")
    )
