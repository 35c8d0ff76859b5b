"""``jattn`` command line: one sub-command per job (``jattn demo``, ...).

An expected error (bad argument, missing or malformed file, unusable model folder, output
folder in use) prints one message and exits with status 1; ``--debug`` (or ``JATTN_DEBUG=1``)
shows the traceback instead. Ctrl-C exits with status 130 and leaves ``--out`` as it was.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# sub-command -> module defining ``add_arguments(parser)`` and ``run(args)``
COMMANDS = {
    "demo": "jattn.cli.demo",
    "analyze": "jattn.cli.analyze",
    "view": "jattn.cli.view",
    "finetune": "jattn.cli.finetune",
    "importance": "jattn.cli.importance",
    "prune": "jattn.cli.prune",
    "disable": "jattn.cli.disable",
    "patterns": "jattn.cli.patterns",
    "data": "jattn.cli.data",
    "models": "jattn.cli.models",
    "reproduce": "jattn.cli.reproduce",
}

# what a user can cause by what they pass; anything else is a bug and keeps its traceback
USER_ERRORS = (ValueError, OSError, ImportError)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (status 2) instead of the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def debugging(args=None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("JATTN_DEBUG", "") not in ("", "0")


def main(argv=None) -> None:
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks (also JATTN_DEBUG=1)")
    parser = Parser(prog="jattn", description=__doc__.splitlines()[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module in COMMANDS.items():
        mod = importlib.import_module(module)
        modules[name] = mod
        doc = (mod.__doc__ or "").strip().splitlines()[0].replace("%", "%%")
        mod.add_arguments(sub.add_parser(name, help=doc, description=doc, parents=[common]))
    args = parser.parse_args(argv)
    try:
        modules[args.command].run(args)
    except KeyboardInterrupt:
        if debugging(args):
            raise
        print(f"jattn {args.command}: interrupted; --out was left as it was", file=sys.stderr)
        raise SystemExit(130) from None
    except USER_ERRORS as e:
        if debugging(args):
            raise
        raise SystemExit(f"jattn {args.command}: error: {e or e.__class__.__name__}") from None



def overview() -> str:
    """The README's table of commands, from the commands' own descriptions (a test keeps it equal)."""
    rows = ["| command | what it does |", "|---|---|"]
    for name, module in COMMANDS.items():
        doc = (importlib.import_module(module).__doc__ or "").strip().splitlines()[0].replace("|", r"\|")
        rows.append(f"| `jattn {name}` | {doc} |")
    return "\n".join(rows)
