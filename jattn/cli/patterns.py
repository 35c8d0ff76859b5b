"""Attention-pattern types (Kovaleva et al. 2019): ``jattn patterns --input FILE --out DIR [--before MODEL]``.

Streams the corpus (``jattn analyze``'s formats) through the runner with the ``patterns`` and
``weights`` methods: the share of each type (vertical, diagonal, vertical+diagonal, block,
heterogeneous; rules in ``jattn.analyses.patterns``) per head and overall, and the attention to
[CLS] / [SEP] / punctuation. With ``--before MODEL`` (e.g. the pretrained model of a fine-tuned
``--model``) also ``finetune_cosine`` (L, H): the cosine between the two models' maps of each
head over real tokens, averaged over the corpus. Writes ``DIR/results.json``, ``results.npz``,
``report.md``, ``figures/``, replacing DIR as a whole when done.
"""

from __future__ import annotations

import numpy as np


def add_arguments(parser) -> None:
    from jattn.cli.common import add_output_arguments
    from jattn.io.readers import FORMATS

    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--input", required=True, help="corpus file")
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="text: a segment per line, 'A<TAB>B' for a pair; conllu; gap (GAP tsv)")
    parser.add_argument(
        "--before",
        default=None,
        help="a second model (e.g. the pretrained one) to compare each head's maps with (default: none, no comparison)",
    )
    add_output_arguments(parser)
    parser.add_argument("--truncate", action="store_true", help="cut over-long segments instead of failing")


def run(args) -> None:
    from jattn.models import load
    from jattn.cli.common import max_length_for
    from jattn.io import results, validate
    from jattn.viz.results import write_files
    from jattn.io.readers import Corpus
    from jattn.runner.protocol import Statistic
    from jattn.analyses.patterns import PatternTypes, finetune_change
    from jattn.analyses.weights import ClassAttention
    from jattn.runner.loop import run_corpus

    with results.Output(args.out, overwrite=args.overwrite) as output:
        corpus = Corpus(args.input, "text" if args.format == "text" else args.format)
        model = load(args.model)
        validate.model_kind(model, "encoder", "jattn patterns (Kovaleva's pattern types read [CLS]/[SEP] maps)")
        before = load(args.before) if args.before else None
        if before is not None:
            validate.model_kind(before, "encoder", "jattn patterns --before", "--before")
        result = run_corpus(model, corpus, [PatternTypes(), ClassAttention()], batch_size=args.batch_size,
                            max_length=max_length_for(args, model), truncate=args.truncate)
        if args.before:
            texts = [ex.a if ex.b is None else (ex.a, ex.b) for ex in corpus if not ex.is_empty]
            change = finetune_change(before, model, texts, batch_size=args.batch_size,
                                     max_length=max_length_for(args, model))
            result.statistics["finetune_cosine"] = Statistic(
                np.asarray(change["cosine"]), "(L, H) cosine between the --before and --model maps, corpus mean")
        meta = results.run_meta(input=args.input, format=args.format, methods=["patterns", "weights"],
                                before=args.before, complete=True)
        def fill(folder):
            from jattn.cli.reporting import statistics_lines, write_report

            paths = write_files(result, folder, model.config.num_layers, meta)
            lines = [f"Model: {model.source}" + (f", compared with --before {args.before}" if args.before else "")
                     + f". Corpus: {args.input}, {result.meta['segments']} segments. Pattern types of Kovaleva et "
                     "al. (2019) per head; heads are 0-based layer-head.", "", *statistics_lines(result.statistics)]
            write_report(folder, "Attention-pattern types", lines, paths)
            return paths

        output.write(fill)
    p = result.statistics["pattern_proportions"].value
    print(f"jattn patterns: {result.meta['segments']} segments; " +
          ", ".join(f"{t} {v:.2f}" for t, v in zip(("vertical", "diagonal", "vertical+diagonal", "block",
                                                     "heterogeneous"), p)) + f" -> {args.out}")
