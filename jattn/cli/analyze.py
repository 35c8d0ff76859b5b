"""Corpus attention statistics (Clark et al. 2019): ``jattn analyze --input FILE --out DIR``.

A translation model (``--model`` a Marian/FSMT/BART folder) reads (source, target) pairs,
``--format parallel --input SRC_FILE TGT_FILE`` (or one ``source ||| target`` file), and every
statistic comes per attention type (``encoder_``, ``decoder_``, ``cross_``; figures in
``figures/<type>/``), in the model's terms: ``</s>`` where an encoder has [SEP], the start token
(the decoder input's first position, a source's leading ``<s>``) where it has [CLS]; statistics
about a class an attention type never sees (a source without a start token, a decoder input
without ``</s>``) are left out (listed in ``meta.left_out``).

Streams the corpus through ``jattn.runner.loop.run_corpus`` with the methods of the registry
(``jattn.analyses.registry``) and writes ``DIR/results.json``, ``DIR/results.npz``,
``DIR/report.md`` and ``DIR/figures/*.png`` (``jattn.viz.results``), replacing DIR as a whole once everything is
written. Several processes: start one per host with ``--coordinator HOST:PORT
--num-processes N --process-id I``; each reads its own shard, process 0 writes the outputs.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from pathlib import Path

import numpy as np

from jattn.cli.common import add_output_arguments, max_length_for, nonnegative_int, positive_int


def add_arguments(parser) -> None:
    from jattn.io.readers import FORMATS
    from jattn.analyses.registry import entries

    helps = "; ".join(f"{name}: {e.help}" for name, e in entries().items()).replace("%", "%%")
    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--input", required=True, nargs="+",
                        help="corpus file (for --format parallel: SRC_FILE TGT_FILE, or one 'src ||| tgt' file)")
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="text: a segment per line, 'A<TAB>B' for a pair; conllu; gap (GAP tsv); parallel: "
                             "(source, target) pairs for a translation model")
    parser.add_argument("--encoding", default="utf-8", help="text encoding of --input")
    parser.add_argument("--methods", default="weights,entropy,js", help="comma-separated: " + helps)
    add_output_arguments(parser)
    too_long = parser.add_mutually_exclusive_group()  # cutting and skipping an over-long segment exclude each other
    too_long.add_argument("--truncate", action="store_true", help="cut over-long segments instead of failing")
    too_long.add_argument("--skip-too-long", action="store_true",
                          help="skip (and count) over-long segments instead of failing; never cuts them")
    parser.add_argument("--rank-file", type=Path, default=None,
                        help="token frequency ranks, 'rank count vocab_id' per line, needed by norm-freq and "
                             "mixing (e.g. frequency/rank_count_ids.txt in the data folder: "
                             "jattn data fetch frequency; default: none, the other methods run without it)")
    parser.add_argument("--min-count", type=positive_int, default=100,
                        help="syntax: relations with fewer scored words stay out of Table 1 (words; 100 as Clark)")
    parser.add_argument(
        "--coordinator", help="HOST:PORT of process 0, for a multi-process run (default: none, one process)"
    )
    parser.add_argument("--num-processes", type=positive_int, default=None,
                        help="processes of a multi-process run, with --coordinator (default: none, one process)")
    parser.add_argument("--process-id", type=nonnegative_int, default=None,
                        help="this process's index (0 on the coordinator's host), with --coordinator (default: none)")
    parser.add_argument("--coordinator-timeout", type=positive_int, default=60,
                        help="seconds to wait for the coordinator and the other processes")


def _wait_for(address: str, timeout: float) -> None:
    """Return once a TCP connection to HOST:PORT succeeds; ValueError after ``timeout`` s."""
    from jattn.io import validate

    host, port = validate.address(address)
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return
        except OSError as e:
            last = e
            time.sleep(0.5)
    raise ValueError(f"cannot reach the coordinator {address} within {timeout} s ({last}). Fix: start process 0 "
                     "first with the same --coordinator, check the address and port, or raise --coordinator-timeout")


def init_distributed(args) -> None:
    """``jax.distributed.initialize`` from the command line, with a bounded wait."""
    if args.coordinator is None:
        given = [o for o, v in (("--num-processes", args.num_processes), ("--process-id", args.process_id))
                 if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} without --coordinator: a multi-process run needs all three. "
                             "Fix: add --coordinator HOST:PORT (of process 0), or drop them for one process")
        return
    if args.num_processes is None or args.process_id is None:
        raise ValueError("--coordinator needs --num-processes N and --process-id I (0 on the coordinator's host)")
    if args.process_id >= args.num_processes:
        raise ValueError(f"--process-id {args.process_id} must be below --num-processes {args.num_processes}")
    from jattn.io import validate

    validate.address(args.coordinator)  # parses and resolves, on every process, before anything starts
    import jax

    if args.process_id != 0:
        _wait_for(args.coordinator, args.coordinator_timeout)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                                   initialization_timeout=args.coordinator_timeout)
    except RuntimeError as e:  # XLA's errors: cannot bind (process 0), peers missing, timeouts
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ValueError(f"--coordinator {args.coordinator}: the processes could not connect ({first}). Fix: on "
                         "process 0 give an address of its own host and a free port; start every process within "
                         "--coordinator-timeout seconds with the same --coordinator and --num-processes") from None


def run(args) -> None:
    import contextlib

    init_distributed(args)
    import jax

    from jattn.models import load
    from jattn.io import results
    from jattn.io.readers import Corpus
    from jattn.analyses.registry import Options, make_methods
    from jattn.runner.loop import run_corpus

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    writer = jax.process_index() == 0
    output = results.Output(args.out, overwrite=args.overwrite) if writer else contextlib.nullcontext()
    inputs = args.input[0] if len(args.input) == 1 else args.input
    with output:
        corpus = Corpus(inputs, args.format, encoding=args.encoding)
        model = load(args.model)
        options = Options(rank_file=args.rank_file, min_count=args.min_count)
        methods = make_methods(model, names, options)
        if any(getattr(m, "level", "token") == "word" for m in methods):  # formats with labels read as words (gap)
            corpus = Corpus(inputs, args.format, encoding=args.encoding, words=True)
        if "syntax" in names:  # the relation list fixes the shape of the counts: one pass over the corpus
            relations = sorted({r for ex in corpus for r in (ex.labels or {}).get("relations", ())})
            methods = make_methods(model, names, dataclasses.replace(options, relations=tuple(relations)))
        result = own_terms(run_corpus(model, corpus, methods, batch_size=args.batch_size,
                                      max_length=max_length_for(args, model), truncate=args.truncate,
                                      skip_too_long=args.skip_too_long))
        if writer:
            meta = results.run_meta(input=" ".join(str(Path(p).absolute()) for p in args.input), format=args.format,
                                    methods=[m.name for m in methods])
            output.write(lambda folder: write(result, folder, model, meta, methods))
            skipped = result.meta["skipped_empty"]
            dropped = {k: v for k, v in result.meta.items() if k.startswith("skipped_") and v and k != "skipped_empty"}
            print(f"jattn analyze: {result.meta['segments']} segments, {result.meta['tokens']} tokens"
                  + (f" ({skipped} empty segments skipped)" if skipped else "")
                  + "".join(f" ({v} {k[8:].replace('_', ' ')} skipped)" for k, v in dropped.items())
                  + f" -> {args.out}")


def own_terms(result):
    """A translation model's result without the statistics about token classes its attention
    types never see (``jattn.runner.translation.absent``; an encoder's result as it is)."""
    from jattn.runner.loop import RunResult
    from jattn.runner.translation import absent

    if "source_classes" not in result.totals.get("_meta", {}):
        return result
    gone = set(absent(result.totals, result.statistics))
    return RunResult({k: s for k, s in result.statistics.items() if k not in gone}, result.totals,
                     dict(result.meta, left_out=sorted(gone)))


def write(result, folder: Path, model, meta: dict, methods=()) -> list[Path]:
    """``jattn.viz.results.write_files``, then each labelled method's report (``write_report``:
    tables, e.g. Clark's Table 1, and their figures, ``jattn.viz.figures.REPORTS``); for a
    translation model the figures per attention type, each in ``figures/<type>/`` (heatmaps, and
    the methods' own figures for self-attention)."""
    paths = _write(result, folder, model, meta, methods)
    report(result, folder, meta, paths, _names(model))
    return paths


def _names(model) -> dict:
    """[CLS] and [SEP] as an encoder's tokenizer names them (``jattn.viz.words.special_names``); a
    translation model's statistics are described in its terms already ({})."""
    from jattn.nn.config import Seq2SeqConfig
    from jattn.viz.words import special_names

    return {} if isinstance(model.config, Seq2SeqConfig) else special_names(model.tokenizer)


def report(result, folder: Path, meta: dict, paths: list[Path], labels: dict | None = None) -> Path:
    """report.md: the run (model, corpus, segments and tokens) and every statistic with its
    definition (``labels``: [CLS] and [SEP] in the model's terms), mean over heads and largest heads."""
    from jattn.cli.reporting import statistics_lines, write_report

    lines = [f"Model: {result.meta['model']}. Corpus: {meta['input']} ({meta['format']}), {result.meta['segments']} "
             f"segments, {result.meta['tokens']} tokens. Methods: {', '.join(meta['methods'])}. Heads are 0-based "
             "layer-head; every statistic is defined in its row.", "", *statistics_lines(result.statistics, labels)]
    return write_report(folder, "Corpus attention statistics", lines, [p for p in paths if p.suffix == ".png"])


def _write(result, folder: Path, model, meta: dict, methods=()) -> list[Path]:
    from jattn.nn.config import Seq2SeqConfig
    from jattn.runner.translation import LABELS
    from jattn.viz import results
    from jattn.viz.figures import REPORTS

    config = model.config
    if not isinstance(config, Seq2SeqConfig):
        paths = results.write_files(result, folder, config.num_layers, meta, _names(model))
        stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
        for m in methods:
            if hasattr(m, "write_report"):
                paths += m.write_report(stats, folder)
            if m.name in REPORTS:
                paths += REPORTS[m.name](m, stats, folder / "figures")
        return paths
    paths = results.write_files(result, folder, 0, meta)  # 0 layers: no generic figures, drawn per type below
    layers = {"encoder": config.encoder_layers, "decoder": config.decoder_layers, "cross": config.decoder_layers}
    names = [m for m in result.totals if m != "_meta"]
    for kind, L in layers.items():
        stats = {k[len(kind) + 1:]: np.asarray(s.value) for k, s in result.statistics.items()
                 if k.startswith(kind + "_")}
        own = [n[len(kind) + 1:] for n in names if n.startswith(kind + "-")] if kind != "cross" else []
        paths += results.write_figures(stats, L, folder / "figures" / kind, own, labels=LABELS)
    return paths
