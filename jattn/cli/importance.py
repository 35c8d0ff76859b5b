"""Head importance |dL/d gate| (Michel et al. 2019): ``jattn importance --input FILE --out DIR``.

The loss is the model's own: a classifier's cross-entropy (``--format labelled``: 'text<TAB>label'
lines), the masked-LM loss of an MLM checkpoint (``--format text``), or a translation model's
teacher-forced token cross-entropy (``--format parallel --input SRC_FILE TGT_FILE`` or one
'source ||| target' file). Writes ``DIR/results.json`` (``importance``, (L, H); per attention
type ``encoder_importance`` / ``decoder_importance`` / ``cross_importance`` for a translation
model), ``results.npz``, ``report.md`` and ``figures/heatmap_*.png``, replacing DIR as a whole when done.
"""

from __future__ import annotations

import numpy as np

from jattn.cli.common import add_common, check_family, described, max_length_for, read_examples


def add_arguments(parser) -> None:
    add_common(parser)
    parser.add_argument("--no-normalize", action="store_true",
                        help="the plain mean E|dL/dξ|, without the authors' per-layer L2 normalisation")


LOSSES = {"labelled": "the classifier's cross-entropy", "text": "the masked-LM loss",
          "parallel": "the teacher-forced token cross-entropy"}


def report(folder, stats: dict, args, model, examples: int, paths) -> None:
    """report.md: the loss, the estimator, and the most and least important heads of each attention type."""
    from jattn.cli.reporting import write_report

    def ranked(v, order):
        return ", ".join(f"{l}-{h} ({v[l, h]:.3g})" for l, h in zip(*np.unravel_index(order[:5], v.shape)))

    lines = [f"Model: {model.source}. Head importance E|dL/dξ| (Michel et al. 2019) of {LOSSES[args.format]} on "
             f"{examples} examples ({' '.join(args.input)}), {args.estimator} estimator"
             + ("" if args.no_normalize else ", L2-normalised per layer") + ". Heads are 0-based layer-head.", ""]
    for name, s in stats.items():
        v = np.asarray(s.value)
        order = np.argsort(-v, axis=None, kind="stable")
        lines += [f"- {name}: most important {ranked(v, order)}; least important {ranked(v, order[::-1])}"]
    write_report(folder, "Head importance", lines, paths)


def run(args) -> None:
    from jattn.models import load
    from jattn.sweeps.importance import importance
    from jattn.viz import plots
    from jattn.io import results
    from jattn.viz.results import write_files
    from jattn.runner.protocol import Statistic
    from jattn.runner.loop import RunResult

    with results.Output(args.out, overwrite=args.overwrite) as output:
        examples = read_examples(args.input, args.format)
        model = load(args.model)
        check_family(model, args.format, "jattn importance")
        imp = importance(model, examples, estimator=args.estimator, normalize=not args.no_normalize,
                         batch_size=args.batch_size, max_length=max_length_for(args, model))
        what = f"(L, H) head importance E|dL/dξ|, {args.estimator} estimator (Michel et al. 2019)"
        single = len(imp) == 1  # an encoder's one attention type keeps the plain name
        stats = {"importance" if single else f"{k}_importance": Statistic(np.asarray(v), what) for k, v in imp.items()}
        meta = results.run_meta(model=model.source, input=" ".join(args.input), format=args.format,
                                estimator=args.estimator, normalize=not args.no_normalize, examples=len(examples),
                                complete=True)
        result = RunResult(stats, {}, {})

        def fill(folder):
            write_files(result, folder, 0, meta)
            figures = folder / "figures"
            figures.mkdir(exist_ok=True)
            paths = [plots.heatmap(s.value, f"Head importance ({name}, Michel et al. 2019 Eq. 2)",
                                   figures / f"heatmap_{name}.png", label="E|dL/dξ|")
                     for name, s in stats.items()]
            report(folder, stats, args, model, len(examples), paths)
            return paths

        output.write(fill)
    print(f"jattn importance: {described(examples, args.input)} -> {args.out}")
