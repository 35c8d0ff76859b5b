"""Head and layer disabling sweeps (Kovaleva et al. 2019; Michel et al. 2019): ``jattn disable --model
CLASSIFIER --input FILE --out DIR``.

``--input`` holds 'text<TAB>label' lines (or ``--task sst2|cola`` reads that GLUE dev set). For each
``--mode`` (uniform: Kovaleva's uniform attention; zero: Michel's zeroed head output) and each
``--unit`` (head, layer), the metric with that unit disabled. Writes ``DIR/results.json``
(``baseline_metric``, ``disable_<unit>_<mode>`` metric, ``delta_<unit>_<mode>`` Δmetric, and the
list of units whose removal improves the metric under ``meta.improving``), ``results.npz`` and
``figures/`` (Δ heatmaps, per-layer bars), replacing DIR as a whole when done.
"""

from __future__ import annotations

import numpy as np


def add_arguments(parser) -> None:
    from jattn.cli.common import add_output_arguments
    from jattn.sweeps.disable import MODES, UNITS

    parser.add_argument("--model", required=True, help="a fine-tuned sequence classifier (HF folder)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="labelled examples, 'text<TAB>label' per line (this or --task is required)")
    source.add_argument("--task", choices=("sst2", "cola"),
                        help="a GLUE dev set from the data folder (jattn data fetch) instead of --input (this or --input is required)")
    parser.add_argument("--metric", default=None, choices=("accuracy", "matthews_corr"),
                        help="default: the task's (CoLA: matthews_corr), else accuracy")
    parser.add_argument("--mode", default="uniform,zero", help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--unit", default="head,layer", help=f"comma-separated, from {', '.join(UNITS)}")
    parser.add_argument("--heads", default=None,
                        help="also the metric with these heads disabled together: 0-based LAYER:HEAD pairs, "
                             "comma-separated (e.g. 0:1,3:2; default: none)")
    add_output_arguments(parser)


def _choices(text: str, known: tuple, option: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or any(n not in known for n in names):
        raise ValueError(f"{option} {text!r}: choose from {', '.join(known)} (comma-separated). Fix: e.g. "
                         f"{option} {','.join(known)}")
    return names


def run(args) -> None:
    import jattn
    from jattn.viz import plots
    from jattn.io import results
    from jattn.analyses.base import Statistic
    from jattn.io import validate
    from jattn.sweeps.disable import MODES, UNITS, disable_sweep, heads_metric
    from jattn.runner.loop import RunResult

    modes, units = _choices(args.mode, MODES, "--mode"), _choices(args.unit, UNITS, "--unit")
    with results.Output(args.out, overwrite=args.overwrite) as output:
        if args.task:
            from jattn.io import glue

            examples, metric = glue.read_task(args.task, "dev"), args.metric or glue.METRICS[args.task]
        else:
            from jattn.io.readers import read_labelled

            examples, metric = read_labelled(args.input), args.metric or "accuracy"
        model = jattn.load(args.model)
        validate.model_kind(model, "classifier", "jattn disable")
        heads = validate.heads(args.heads, model.config.num_layers, model.config.num_heads) if args.heads else None
        stats = {}
        sweeps = {(u, m): disable_sweep(model, examples, metric, mode=m, unit=u, batch_size=args.batch_size,
                                        max_length=min(args.max_length, model.config.max_length))
                  for m in modes for u in units}
        if heads:
            for m in modes:
                value = heads_metric(model, examples, heads, metric, mode=m, batch_size=args.batch_size,
                                     max_length=min(args.max_length, model.config.max_length))
                stats[f"metric_heads_{m}"] = Statistic(np.asarray(value), f"() {metric} with heads {args.heads} "
                                                                         f"disabled together ({m})")
        first = next(iter(sweeps.values()))
        stats.update(baseline_metric=Statistic(np.asarray(first.baseline), f"() {metric} of the intact model"))
        for (u, m), r in sweeps.items():
            shape = "(L, H)" if u == "head" else "(L,)"
            stats[f"disable_{u}_{m}"] = Statistic(r.metric, f"{shape} {metric} with one {u} disabled ({m})")
            stats[f"delta_{u}_{m}"] = Statistic(r.delta, f"{shape} {metric} change with one {u} disabled ({m})")
        meta = results.run_meta(model=model.source, input=args.input or f"{args.task} dev", metric=metric,
                                examples=len(examples), heads=args.heads, complete=True,
                                improving={f"{u}_{m}": r.improving() for (u, m), r in sweeps.items()})
        result = RunResult(stats, {}, {})

        def fill(folder):
            results.write_files(result, folder, 0, meta)
            figures = folder / "figures"
            figures.mkdir(exist_ok=True)
            paths = []
            for (u, m), r in sweeps.items():
                title = f"Δ{metric}, one {u} disabled ({m}); baseline {r.baseline:.4f}"
                if u == "head":
                    paths.append(plots.heatmap(r.delta, title, figures / f"delta_head_{m}.png"))
                else:
                    paths.append(plots.per_layer({"d": r.delta[:, None]}, {"d": m}, title, f"Δ{metric}",
                                                 figures / f"delta_layer_{m}.png"))
            return paths

        output.write(fill)
    read = examples.describe() if hasattr(examples, "describe") else f"{len(examples)} examples"
    print(f"jattn disable: {read}, baseline {metric} {first.baseline:.4f} -> {args.out}")
