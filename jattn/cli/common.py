"""Argument types and conventions the commands share."""

from __future__ import annotations

import argparse

FORMATS = ("labelled", "text", "parallel")  # what ``importance`` and ``prune`` read


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """--out, --overwrite, --batch-size, --max-length: the conventions every corpus command shares."""
    parser.add_argument("--out", required=True, help="output folder, replaced as a whole when the run completes")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out even if it is a non-empty folder without jattn results")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="examples per batch")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="longest segment, in tokens (specials included; default: 128, or the model's "
                             "positions where it has fewer)")


def max_length_for(args, model) -> int:
    """--max-length for ``model``: as given (at most the model's positions: else an error naming
    it), or by default 128, or the model's positions where it has fewer."""
    from jattn.io import validate

    positions = model.config.max_length
    if args.max_length is None:
        return min(128, positions)
    if args.max_length > positions:
        raise validate.BadArgument("--max-length", args.max_length, f"at most {model.source or 'the model'}'s "
                                   f"{positions} positions", f"--max-length {positions} or less, or leave it out")
    return args.max_length


def nonnegative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_common(parser) -> None:
    """Arguments ``jattn importance`` and ``jattn prune`` share (``jattn analyze``'s conventions)."""
    from jattn.sweeps.importance import ESTIMATORS

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

    from jattn.io import validate
    from jattn.io.readers import read, read_labelled

    if fmt == "labelled":
        if len(paths) != 1:
            raise ValueError("--format labelled reads one 'text<TAB>label' file. Fix: pass one --input file")
        return read_labelled(paths[0])
    source = paths[0] if len(paths) == 1 else [Path(p) for p in paths]
    examples = [ex for ex in read(source, fmt) if not ex.is_empty]
    for ex in examples:
        for text in (ex.a, ex.b):
            if isinstance(text, str):
                validate.visible(text, ex.source)
    if not examples:
        raise ValueError(f"{' '.join(paths)} holds no examples")
    return [(ex.a, ex.b) if fmt == "parallel" else (ex.a if ex.b is None else (ex.a, ex.b)) for ex in examples]


def check_family(model, fmt: str, command: str) -> None:
    """The model's shape against --format: parallel needs a translation model, labelled a classifier."""
    from jattn.io import validate

    translation = hasattr(model.config, "decoder_layers")
    if translation != (fmt == "parallel"):
        raise ValueError("a translation model reads --format parallel, an encoder --format labelled or text. "
                         f"Fix: pass the format that fits {model.source or 'the model'}")
    if fmt == "labelled":
        validate.model_kind(model, "classifier", f"{command} --format labelled")


def described(examples, paths) -> str:
    """'N labelled examples read from FILE (header line skipped)' or 'N examples'."""
    return examples.describe() if hasattr(examples, "describe") else f"{len(examples)} examples read from " + \
        " ".join(map(str, paths))


def finite(**bounds):
    """argparse type: a finite number within ``bounds`` (``jattn.io.validate.cli_number``)."""
    from jattn.io.validate import cli_number

    return cli_number(**bounds)


def actions(parser: argparse.ArgumentParser, doc: str, helps: dict[str, str], folder: str,
            folder_help: str) -> dict[str, argparse.ArgumentParser]:
    """A command made of actions (``jattn data list|fetch|...``): one subparser per entry of
    ``helps`` (action -> help), each with the ``folder`` option and ``--debug``."""
    parser.description = doc
    sub = parser.add_subparsers(dest="action", required=True, metavar="{" + ",".join(helps) + "}")
    out = {}
    for action, text in helps.items():
        p = out[action] = sub.add_parser(action, help=text, description=text)
        p.add_argument(folder, default=None, help=folder_help)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return out



def work_folder(output):
    """The resumable state of a run into ``output.out`` (a ``jattn.io.results.Output``): OUT-work
    beside it, removed when the run completes."""
    return output.out.with_name(output.out.name + "-work")


def check_work(work, identity: dict) -> None:
    """A work folder's recorded run (``run.json``) against this one's ``identity`` (model, data,
    settings): another run's state is refused, never mixed in; a new folder records it, and so
    does one that holds nothing but another run's record (a run that failed before saving any
    state: there is nothing to resume)."""
    import json
    from pathlib import Path

    work, path = Path(work), Path(work) / "run.json"
    identity = json.loads(json.dumps(identity))
    if path.is_file() and any(p.name != "run.json" for p in work.iterdir()):
        recorded = json.loads(path.read_text())
        if recorded != identity:
            differ = sorted(k for k in set(recorded) | set(identity) if recorded.get(k) != identity.get(k))
            raise ValueError(f"{work} holds the state of a run with other arguments: " + ", ".join(
                f"{k}={recorded.get(k)!r} (now {identity.get(k)!r})" for k in differ) + ". Fix: rerun with the "
                f"recorded arguments to resume it, or delete {work} to start anew")
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(identity, indent=1))


def cached(path, compute):
    """``compute()`` once: a JSON-able value (``.json``) or a dict of arrays (``.npz``) kept at
    ``path``, replaced whole (``jattn.io.atomic``: never through a link); a rerun reads it back
    instead of computing again."""
    import io
    import json
    from pathlib import Path

    import numpy as np

    from jattn.io import atomic

    path = Path(path)
    npz = path.suffix == ".npz"
    if path.is_file():
        if npz:
            with np.load(path) as f:
                return {k: f[k] for k in f.files}
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    if npz:
        data = io.BytesIO()
        np.savez(data, **value)
        atomic.replace(path, data.getvalue(), instead="choose another --out")
    else:
        atomic.replace(path, json.dumps(value, indent=1), instead="choose another --out")
    return value
