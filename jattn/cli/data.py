"""Data sets: list, fetch (pinned sources, sha256-verified), verify, path of the data folder.

    jattn data list                       each data set: size, license, present or not
    jattn data fetch [NAME ...]           download (all when no name), verify, place atomically
    jattn data verify [NAME ...]          check every file's sha256; names each bad or missing one
    jattn data path [NAME]                the data folder (or a data set's folder; ``sample``: the bundled
                                          sample's, e.g. "$(jattn data path sample)/sentences.txt")

The data folder is --data-dir, else $JATTN_DATA, else the user cache (jattn/data). ``fetch
--mirror URL`` (or $JATTN_DATA_MIRROR) takes the final files from a server laid out like the data
folder (URL/<data set>/<file>), e.g. a lab's copy for machines without internet.
"""

from __future__ import annotations

import argparse

from jattn.cli.common import actions

USES_JAX = False  # files and hashes only: `jattn data path` answers at once (jattn.cli.main)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    helps = {"list": "each data set: size, license, present or not",
             "fetch": "download data sets (all when no name), verify their sha256, place them atomically",
             "verify": "check every file's sha256 against the manifest; names each bad or missing file",
             "path": "print the data folder, or the folder of data set NAME (sample: the bundled sample)"}
    parsers = actions(parser, __doc__, helps, "--data-dir",
                      "the data folder (default: $JATTN_DATA, else the user cache's jattn/data)")
    for action, p in parsers.items():
        if action in ("fetch", "verify"):
            p.add_argument("names", nargs="*", metavar="NAME", help="data sets (default: all; see jattn data list)")
        if action == "path":
            p.add_argument("name", nargs="?", metavar="NAME", help="a data set (must be present), or sample: the "
                           "bundled sample (default: none, the data folder itself)")
        if action == "fetch":
            p.add_argument("--mirror", default=None,
                           help="URL laid out like the data folder (URL/<data set>/<file>) to fetch the final "
                                "files from (default: $JATTN_DATA_MIRROR, else each file's pinned source)")
            p.add_argument("--timeout", type=float, default=30.0,
                           help="seconds to wait to connect and for each read before giving up")
            p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def run(args) -> None:
    from jattn.io import fetch as F
    from jattn.io import manifest as M

    if args.action == "path":
        print(M.data_path(args.name, args.data_dir) if args.name else M.data_dir(args.data_dir))
    elif args.action == "list":
        root = M.data_dir(args.data_dir)
        rows = [("data set", "size", "present", "license")]
        for name, meta in M.datasets().items():
            own = M.files([name])
            gone = len(M.missing(name, root))
            present = "yes" if not gone else ("no" if gone == len(own) else f"partly ({len(own) - gone}/{len(own)})")
            rows.append((name, _size(sum(e.size for e in own)), present, meta["license"]))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
        print(f"data folder: {root} (present: every file there with its size; `jattn data verify` checks hashes)")
    elif args.action == "fetch":
        done = F.fetch(args.names, args.data_dir, args.mirror, args.timeout, False if args.no_progress else None)
        print(f"{done['fetched']} file(s) fetched, {done['present']} already present and verified, in {done['folder']}")
    elif args.action == "verify":
        root = M.data_dir(args.data_dir)
        entries = M.files(args.names)
        bad = F.verify(args.names, root)
        for e, why in bad:
            print(f"{why}: {M.file_path(e, root)}")
        if bad:
            names = " ".join(sorted({e.dataset for e, _ in bad}, key=list(M.datasets()).index))
            command = f"`jattn data fetch {names}`" + (f" --data-dir {root}" if args.data_dir else "")
            blocked = [o for e, _ in bad if (o := M.obstacle(e, root))]
            if blocked:  # fetching cannot replace a folder or a FIFO: named, with what to do first
                others = f" (and the {len(blocked) - 1} other(s) listed above)" if len(blocked) > 1 else ""
                raise ValueError(f"{len(bad)} of {len(entries)} file(s) missing or wrong in {root}: {blocked[0]}. "
                                 f"Fix: move or delete it{others}, then run {command}")
            raise ValueError(f"{len(bad)} of {len(entries)} file(s) missing or wrong in {root}. Fix: {command}")
        print(f"all {len(entries)} file(s) verified in {root}")
