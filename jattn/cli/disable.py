"""Head and layer disabling sweeps (Kovaleva et al. 2019; Michel et al. 2019): ``jattn disable --model
CLASSIFIER --input FILE --out DIR``.

``--input`` holds 'text<TAB>label' lines (or ``--task sst2|cola`` reads that GLUE dev set). For each
``--mode`` (uniform: Kovaleva's uniform attention; zero: Michel's zeroed head output) and each
``--unit`` (head, layer), the metric with that unit disabled, on one scale: accuracy in %, MCC
×100. Every change Δ = disabled − intact comes with its 95 % paired-bootstrap interval over
examples and p-value (``--bootstrap`` resamples), and Holm–Bonferroni over the units of a sweep
decides which changes are significant at α = 0.05. Writes ``DIR/report.md`` (which units improve
or hurt the metric, each with its interval), ``DIR/results.json`` (``baseline_metric``,
``disable_<unit>_<mode>``, ``delta_<unit>_<mode>``, ``ci_low_*``, ``ci_high_*``, ``p_*``,
``significant_*``; the improving and hurting units under ``meta``), ``results.npz`` and
``figures/`` (signed Δ on a diverging map centred at 0, per-layer bars with intervals),
replacing DIR as a whole when done. Each finished sweep is kept in ``DIR-work/``: a run stopped
by Ctrl-C or SIGTERM resumes there when the same command runs again.
"""

from __future__ import annotations

import numpy as np

RESUME = "; run the same command again to resume from its checkpoint"


def add_arguments(parser) -> None:
    from jattn.cli.common import add_output_arguments, positive_int
    from jattn.sweeps.disable import MODES, UNITS

    parser.add_argument("--model", required=True, help="a fine-tuned sequence classifier (HF folder)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="labelled examples, 'text<TAB>label' per line (this or --task is required)")
    source.add_argument(
        "--task",
        choices=("sst2", "cola"),
        help="a GLUE dev set from the data folder (jattn data fetch) instead of --input (this or --input is required)",
    )
    parser.add_argument("--metric", default=None, choices=("accuracy", "matthews_corr"),
                        help="default: the task's (CoLA: matthews_corr), else accuracy")
    parser.add_argument("--mode", default="uniform,zero", help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--unit", default="head,layer", help=f"comma-separated, from {', '.join(UNITS)}")
    parser.add_argument("--heads", default=None,
                        help="also the metric with these heads disabled together: 0-based LAYER:HEAD pairs, "
                             "comma-separated (e.g. 0:1,3:2; default: none)")
    add_output_arguments(parser)
    parser.add_argument("--bootstrap", type=positive_int, default=1000,
                        help="paired-bootstrap resamples over examples behind every interval and p-value")


def _choices(text: str, known: tuple, option: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or any(n not in known for n in names):
        raise ValueError(f"{option} {text!r}: choose from {', '.join(known)} (comma-separated). Fix: e.g. "
                         f"{option} {','.join(known)}")
    return names


def sweep(model, examples, metric, m, u, args, work):
    """One (unit, mode) sweep, kept in ``work`` once done (a rerun skips it)."""
    from jattn.cli.common import cached, max_length_for
    from jattn.sweeps.disable import SweepResult, disable

    def compute():
        r = disable(model, examples, metric, mode=m, unit=u, batch_size=args.batch_size,
                          max_length=max_length_for(args, model))
        return {"baseline": np.asarray(r.baseline), "metric": r.metric, "predictions": r.predictions,
                "baseline_predictions": r.baseline_predictions}

    a = cached(work / f"sweep_{u}_{m}.npz", compute)
    return SweepResult(m, u, metric, float(a["baseline"]), a["metric"], a["predictions"], a["baseline_predictions"])


def run(args) -> None:
    import shutil

    from jattn.models import load
    from jattn.runner.protocol import Statistic
    from jattn.cli.common import cached, check_work, max_length_for, work_folder
    from jattn.cli.disable_report import figures, noise, report, units
    from jattn.cli.reporting import SCALE, metric_name
    from jattn.io import results, validate
    from jattn.viz.results import write_files
    from jattn.runner.loop import RunResult
    from jattn.sweeps.disable import MODES, UNITS, heads_metric, metric_function

    modes, units_ = _choices(args.mode, MODES, "--mode"), _choices(args.unit, UNITS, "--unit")
    with results.Output(args.out, overwrite=args.overwrite) as output:
        if args.task:
            from jattn.io import glue

            examples, metric = glue.read_task(args.task, "dev"), args.metric or glue.METRICS[args.task]
        else:
            from jattn.io.readers import read_labelled

            examples, metric = read_labelled(args.input), args.metric or "accuracy"
        name, fn = metric_name(metric), metric_function(metric)[1]
        model = load(args.model)
        validate.model_kind(model, "classifier", "jattn disable")
        heads = validate.heads(args.heads, model.config.num_layers, model.config.num_heads) if args.heads else None
        work = work_folder(output)
        check_work(work, {"model": str(model.source), "input": args.input or f"{args.task} dev", "metric": metric,
                          "examples": len(examples), "batch_size": args.batch_size, "max_length": args.max_length})
        sweeps = {(u, m): sweep(model, examples, metric, m, u, args, work) for m in modes for u in units_}
        labels = np.asarray([y for _, y in examples])
        noises = {k: noise(r, fn, labels, args.bootstrap) for k, r in sweeps.items()}
        first = next(iter(sweeps.values()))
        stats = {"baseline_metric": Statistic(np.asarray(first.baseline * SCALE), f"() {name} of the intact model")}
        extra = []
        for m in modes if heads else ():
            value = cached(work / f"heads_{m}.json", lambda: heads_metric(
                model, examples, heads, metric, mode=m, batch_size=args.batch_size,
                max_length=max_length_for(args, model)))
            stats[f"metric_heads_{m}"] = Statistic(np.asarray(value * SCALE), f"() {name} with heads {args.heads} "
                                                                               f"disabled together ({m})")
            extra.append(f"With heads {args.heads} disabled together ({m}): {name} {value * SCALE:.2f} "
                         f"(Δ {(value - first.baseline) * SCALE:+.2f}).")
        for (u, m), r in sweeps.items():
            shape, nz = "(L, H)" if u == "head" else "(L,)", noises[u, m]
            stats[f"disable_{u}_{m}"] = Statistic(r.metric * SCALE, f"{shape} {name} with one {u} disabled ({m})")
            stats[f"delta_{u}_{m}"] = Statistic(r.delta * SCALE, f"{shape} {name} change with one {u} disabled ({m})")
            for k, what in (("ci_low", "lower end of the 95 % paired-bootstrap interval of"),
                            ("ci_high", "upper end of the 95 % paired-bootstrap interval of"),
                            ("p", "two-sided paired-bootstrap p-value of"),
                            ("significant", f"1 where Holm-Bonferroni over the {u}s rejects Δ = 0 for")):
                stats[f"{k}_{u}_{m}"] = Statistic(np.asarray(nz[k], np.float64), f"{shape} {what} the {name} change "
                                                                                  f"with one {u} disabled ({m})")
        meta = results.run_meta(model=model.source, input=args.input or f"{args.task} dev", metric=name,
                                examples=len(examples), heads=args.heads, bootstrap=args.bootstrap, complete=True,
                                improving={f"{u}_{m}": units(r, noises[u, m], +1) for (u, m), r in sweeps.items()},
                                hurting={f"{u}_{m}": units(r, noises[u, m], -1) for (u, m), r in sweeps.items()})

        def fill(folder):
            write_files(RunResult(stats, {}, {}), folder, 0, meta)
            paths = figures(sweeps, noises, name, folder / "figures")
            report(folder, sweeps, noises, name, meta, extra, paths)
            return paths

        output.write(fill)
    shutil.rmtree(work, ignore_errors=True)
    read = examples.describe() if hasattr(examples, "describe") else f"{len(examples)} examples"
    print(f"jattn disable: {read}, intact {name} {first.baseline * SCALE:.2f} -> {args.out}")
