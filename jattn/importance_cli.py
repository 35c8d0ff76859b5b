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

FORMATS = ("labelled", "text", "parallel")


def add_common(parser) -> None:
    """Arguments ``jattn importance`` and ``jattn prune`` share (``jattn analyze``'s conventions)."""
    from jattn.analyze import add_output_arguments
    from jattn.methods.importance import ESTIMATORS

    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--input", required=True, nargs="+",
                        help="examples importance is estimated on (for --format parallel: SRC_FILE TGT_FILE, or one "
                             "'src ||| tgt' file)")
    parser.add_argument("--format", default="labelled", choices=FORMATS,
                        help="labelled: 'text<TAB>label' per line (a classifier); text: a segment per line (masked-LM "
                             "loss); parallel: (source, target) pairs for a translation model")
    add_output_arguments(parser)
    parser.add_argument("--estimator", default="token", choices=ESTIMATORS,
                        help="|dL/dξ| per token (the authors' code), per example (the paper) or per batch "
                             "(HF's script)")


def read_examples(paths: list[str], fmt: str) -> list:
    """--input as importance examples: (text, label), text, or (source, target)."""
    from pathlib import Path

    from jattn.data.readers import read

    if fmt == "labelled":
        from jattn.finetune import read_labelled

        if len(paths) != 1:
            raise ValueError("--format labelled reads one 'text<TAB>label' file. Fix: pass one --input file")
        return read_labelled(paths[0])
    source = paths[0] if len(paths) == 1 else [Path(p) for p in paths]
    examples = [ex for ex in read(source, fmt) if not ex.is_empty]
    if not examples:
        raise ValueError(f"{' '.join(paths)} holds no examples")
    return [(ex.a, ex.b) if fmt == "parallel" else (ex.a if ex.b is None else (ex.a, ex.b)) for ex in examples]


def check_family(model, fmt: str) -> None:
    translation = hasattr(model.config, "decoder_layers")
    if translation != (fmt == "parallel"):
        raise ValueError("a translation model reads --format parallel, an encoder --format labelled or text. "
                         f"Fix: pass the format that fits {model.source or 'the model'}")


def add_arguments(parser) -> None:
    add_common(parser)
    parser.add_argument("--no-normalize", action="store_true",
                        help="the plain mean E|dL/dξ|, without the authors' per-layer L2 normalisation")


def run(args) -> None:
    import jattn
    from jattn import plots, results
    from jattn.methods.base import Statistic
    from jattn.run import RunResult

    with results.Output(args.out, overwrite=args.overwrite) as output:
        examples = read_examples(args.input, args.format)
        model = jattn.load(args.model)
        check_family(model, args.format)
        imp = jattn.importance(model, examples, estimator=args.estimator, normalize=not args.no_normalize,
                               batch_size=args.batch_size, max_length=min(args.max_length, model.config.max_length))
        what = f"(L, H) head importance E|dL/dξ|, {args.estimator} estimator (Michel et al. 2019)"
        per = imp if isinstance(imp, dict) else {"": imp}
        stats = {f"{k}_importance" if k else "importance": Statistic(np.asarray(v), what) for k, v in per.items()}
        meta = results.run_meta(model=model.source, input=" ".join(args.input), format=args.format,
                                estimator=args.estimator, normalize=not args.no_normalize, examples=len(examples))
        result = RunResult(stats, {}, {})

        def fill(folder):
            results.write_files(result, folder, 0, meta)
            figures = folder / "figures"
            figures.mkdir(exist_ok=True)
            return [plots.heatmap(s.value, name, figures / f"heatmap_{name}.png") for name, s in stats.items()]

        output.write(fill)
    print(f"jattn importance: {len(examples)} examples -> {args.out}")
