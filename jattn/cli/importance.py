"""Head importance |dL/d gate| (Michel et al. 2019): ``jattn importance --input FILE --out DIR``.

The loss is the model's own: a classifier's cross-entropy (``--format labelled``: 'text<TAB>label'
lines), the masked-LM loss of an MLM checkpoint (``--format text``), or a translation model's
teacher-forced token cross-entropy (``--format parallel --input SRC_FILE TGT_FILE`` or one
'source ||| target' file). Writes ``DIR/results.json`` (``importance``, (L, H); per attention
type ``encoder_importance`` / ``decoder_importance`` / ``cross_importance`` for a translation
model), ``results.npz`` and ``figures/heatmap_*.png``, replacing DIR as a whole when done.
"""

from __future__ import annotations

import numpy as np

from jattn.cli.common import add_common, check_family, described, read_examples

def add_arguments(parser) -> None:
    add_common(parser)
    parser.add_argument("--no-normalize", action="store_true",
                        help="the plain mean E|dL/dξ|, without the authors' per-layer L2 normalisation")


def run(args) -> None:
    import jattn
    from jattn.viz import plots
    from jattn.io import results
    from jattn.analyses.base import Statistic
    from jattn.runner.loop import RunResult

    with results.Output(args.out, overwrite=args.overwrite) as output:
        examples = read_examples(args.input, args.format)
        model = jattn.load(args.model)
        check_family(model, args.format, "jattn importance")
        imp = jattn.importance(model, examples, estimator=args.estimator, normalize=not args.no_normalize,
                               batch_size=args.batch_size, max_length=min(args.max_length, model.config.max_length))
        what = f"(L, H) head importance E|dL/dξ|, {args.estimator} estimator (Michel et al. 2019)"
        per = imp if isinstance(imp, dict) else {"": imp}
        stats = {f"{k}_importance" if k else "importance": Statistic(np.asarray(v), what) for k, v in per.items()}
        meta = results.run_meta(model=model.source, input=" ".join(args.input), format=args.format,
                                estimator=args.estimator, normalize=not args.no_normalize, examples=len(examples),
                                complete=True)
        result = RunResult(stats, {}, {})

        def fill(folder):
            results.write_files(result, folder, 0, meta)
            figures = folder / "figures"
            figures.mkdir(exist_ok=True)
            return [plots.heatmap(s.value, name, figures / f"heatmap_{name}.png") for name, s in stats.items()]

        output.write(fill)
    print(f"jattn importance: {described(examples, args.input)} -> {args.out}")
