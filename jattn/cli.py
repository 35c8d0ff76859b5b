"""``jattn`` command line: one sub-command per job (``jattn demo``, ...)."""

from __future__ import annotations

import argparse
import importlib

# sub-command -> module defining ``add_arguments(parser)`` and ``run(args)``
COMMANDS = {
    "demo": "jattn.demo",
    "analyze": "jattn.analyze",
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="jattn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module in COMMANDS.items():
        mod = importlib.import_module(module)
        modules[name] = mod
        mod.add_arguments(sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args(argv)
    modules[args.command].run(args)


if __name__ == "__main__":
    main()
