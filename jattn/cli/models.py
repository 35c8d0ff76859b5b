"""Named models the experiments depend on: list, make (into the cache, resumable), fetch, path.

    jattn models list                     each named artefact: what, how long it takes, made, corrupted or not
    jattn models make NAME [NAME ...]     run its recipe into the cache (Ctrl-C, then again: resumes); a made
                                          one is verified (sha256 of each file) and remade if corrupted
    jattn models fetch NAME [NAME ...]    download a pretrained model into the cache (hash verified); prints
                                          its folder (--index-url / --find-links: where pip looks); a made
                                          one is verified and fetched again if corrupted
    jattn models path [NAME]              the models folder (or a made artefact's folder)

The cache is --cache-dir, else $JATTN_CACHE, else the user cache (jattn/); artefacts live in its
models/ folder and ``jattn.load(NAME)`` finds them there by name. ``list`` compares each made
artefact's files with the sizes and mtimes recorded when it was made (hashing only a changed
file: hashing every file on each list would take seconds per model); ``make`` and ``fetch`` hash
every file. "made (unverified)": made before jattn recorded files; ``make``/``fetch`` records it.
"""

from __future__ import annotations

import argparse
import sys

from jattn.cli.common import actions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    helps = {"list": "each named artefact: what, how long making it takes, made, corrupted or not, where",
             "make": "make artefacts into the cache by their recipes (resumable: Ctrl-C, then the same command); "
                     "verify made ones and remake corrupted ones",
             "fetch": "download pretrained models into the cache (sha256 verified) and print their folders; "
                      "verify fetched ones and fetch corrupted ones again",
             "path": "print the models folder, or the folder of made artefact NAME"}
    parsers = actions(parser, __doc__, helps, "--cache-dir",
                      "jattn's cache (default: $JATTN_CACHE, else the user cache's jattn/)")
    for action, p in parsers.items():
        if action in ("make", "fetch"):
            p.add_argument("names", nargs="+", metavar="NAME", help="artefacts (see jattn models list)")
            p.add_argument("--no-progress", action="store_true", help="no progress output")
        if action == "fetch":
            p.add_argument(
                "--index-url",
                default=None,
                help="the package index pip downloads from (default: $PIP_INDEX_URL, else pip's own)",
            )
            p.add_argument("--find-links", default=None, help="a folder or page of wheels pip looks in first "
                           "(default: $PIP_FIND_LINKS, else none)")
        if action == "path":
            p.add_argument(
                "name",
                nargs="?",
                metavar="NAME",
                help="an artefact (must be made; default: none, the models folder itself)",
            )


def _list(cache_dir) -> None:
    from jattn import artefacts as A
    from jattn.io.artefacts import models_dir, status

    rows = [("name", "made", "takes", "what")]
    rows += [(n, status(n, cache_dir), r.takes, r.what) for n, r in A.RECIPES.items()]
    rows += [(n, status(n, cache_dir), "-", "(no recipe: placed there by hand)") for n in A.made_elsewhere(cache_dir)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
    print(f"models folder: {models_dir(cache_dir)}, each artefact in its NAME/ (`jattn models make NAME` makes "
          "one; jattn.load(NAME) loads a made one)")
    for n, state, *_ in rows[1:]:
        if state.startswith("corrupted"):
            fix = f"`{A.make_command(n, cache_dir)}` repairs it" if n in A.RECIPES else "replace it with a good copy"
            print(f"{n} is corrupted (its files differ from those recorded when it was made): {fix}")
    if any(state == "made (unverified)" and n in A.RECIPES for n, state, *_ in rows[1:]):
        print("made (unverified): made before jattn recorded artefacts' files; `jattn models make|fetch NAME` "
              "verifies and records it without making it again")


def _stderr(*lines) -> None:
    print(*lines, file=sys.stderr)


def USES_JAX(args) -> bool:  # noqa: N802  (jattn.cli.main reads it): list and path read files only
    return args.action in ("make", "fetch")


def run(args) -> None:
    import os

    from jattn import artefacts as A
    from jattn.io.artefacts import models_dir, work_folder

    if args.action == "list":
        _list(args.cache_dir)
    elif args.action == "path":
        print(A.path(args.name, args.cache_dir) if args.name else models_dir(args.cache_dir))
    elif args.action in ("make", "fetch"):
        from jattn.artefacts.making import make

        for name in args.names:
            r = A.recipe(name)  # every name known before anything runs
            if args.action == "fetch" and not r.fetched:
                raise ValueError(f"{name} is not downloaded but made ({r.what}). Fix: `{A.make_command(name)}`")
        for option, variable in (("index_url", "PIP_INDEX_URL"), ("find_links", "PIP_FIND_LINKS")):
            if getattr(args, option, None):
                os.environ[variable] = getattr(args, option)  # read by the pip processes the maker runs
        for name in args.names:
            try:
                folder = make(name, cache_dir=args.cache_dir, progress=not args.no_progress,
                              log=print if args.action == "make" else _stderr)  # fetch: stdout is the folder
            except KeyboardInterrupt as e:  # jattn.cli ends the command: 130 (SIGINT) or 143 (SIGTERM)
                e.resume = (f"; `{A.make_command(name, args.cache_dir)}` resumes {name} from "
                            f"{work_folder(name, args.cache_dir)}")
                raise
            print(folder if args.action == "fetch" else f"{name}: {folder}")
