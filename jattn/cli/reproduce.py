"""reproduce every study's headline claims beside the papers' (REPORT.md, reproduce.json)

Runs the studies' stages in order (jattn.reproduce): a stage whose inputs and code did not change
since its record was written is not rerun, and a killed run continues where it stopped. A run writes
REPORT.md, reproduce.json, stages/, predictions/ and figures/ into --out; --publish writes the
checkout's committed results instead (experiments/results/ and the README's results table: make
reproduce); --quick runs the same stages on small subsets into results/reproduce-quick/ in minutes.
--out is a new or empty folder, or one a run wrote before: a folder holding other files is refused.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

LOCK = ".jattn-reproduce.lock"  # in --out while a run writes it
COMMITTED = "checkpoints"  # the checkout's committed models (experiments/common.py reads them before making)
MARK = ".jattn-reproduce"  # in a folder a run began while it was empty: a later run knows it as its own
OWN = ("REPORT.md", "reproduce.json", "stages", "predictions", "figures", ".work")  # what a run writes in --out


def add_arguments(parser) -> None:
    parser.add_argument("studies", nargs="*", metavar="STUDY",
                        help="studies to run (default: all the experiments folder registers: finetune, clark, "
                             "kobayashi, kovaleva, michel, voita, patching, induction in the checkout), or single "
                             "stages by the names --list prints (e.g. finetune.minilm-sst2-s3); the stages they "
                             "need run too (those unchanged are not rerun)")
    parser.add_argument("--experiments", type=Path, default=None, metavar="FOLDER",
                        help="the experiments package whose __init__.py registers the studies (default: "
                             "experiments/ of the checkout holding the working directory or jattn itself)")
    parser.add_argument("--quick", action="store_true",
                        help="small subsets (minutes): checks the pipeline end to end, not the papers' numbers")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder: new, empty, or one a run wrote before (default: results/reproduce-quick "
                             "with --quick; the full profile needs --out or --publish, and --list reads the "
                             "checkout's experiments/results)")
    parser.add_argument("--publish", action="store_true",
                        help="write the full profile's results into the checkout's committed experiments/results "
                             "and update the README's results table (what make reproduce runs)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="the data folder as `jattn data fetch` fills it (default: $JATTN_DATA, else the user "
                             "cache)")
    parser.add_argument("--force", action="append", default=[], metavar="STAGE",
                        help="rerun this stage (or every stage of this study) even if unchanged, from the start "
                             "(its checkpoints discarded; the models it reads are kept); repeat the option for "
                             "more (--force A --force B). After a stop, run without --force to continue "
                             "(default: none)")
    parser.add_argument("--list", action="store_true", help="list the stages and whether each would run, then stop")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> None:
    from jattn.cli import debugging
    from jattn.io import artefacts, manifest, results
    from jattn.reproduce import pipeline, records, report, studies

    profile = pipeline.PROFILES["quick" if args.quick else "full"]
    studies.load(args.experiments)
    root = pipeline.repository_root(Path.cwd())
    out = _out(args, root)
    work = out / ".work" if args.quick else artefacts.models_dir().parent / "reproduce" / "full"
    stages = studies.stages(profile, tuple(args.studies))
    known = {s.name for s in stages} | {s.study for s in stages}
    if unknown := [f for f in args.force if f not in known]:
        raise ValueError(f"--force {unknown[0]}: no stage or study of this run has that name. Fix: one of the "
                         f"names `jattn reproduce {' '.join(args.studies)}{' --quick' if args.quick else ''} --list` "
                         "prints, or a study name")
    if not args.list:  # the checks first, then the first write
        empty = _check_out(out)
        for folder, what in ((out, "--out"), (work, "the work folder (in jattn's cache: JATTN_CACHE)")):
            _check_writable(folder, what, mark=empty and folder == out)
    data_dir = args.data_dir or manifest.data_dir()
    ctx = pipeline.Context(profile, out, work, Path(data_dir), progress=not args.no_progress)
    if args.list:
        for line in pipeline.plan(stages, ctx, force=tuple(args.force)):
            print(line)
        return
    lock = out / LOCK
    handle = results.acquire_lock(lock, f"--out {out}", "--out")  # one run writes a results folder at a time
    try:
        try:
            ran = pipeline.run(stages, ctx, force=tuple(args.force),
                               log=lambda m: print(m, file=sys.stderr, flush=True))
        except pipeline.StageError as e:  # names the stage, what is kept and the fix; --debug: its traceback
            if debugging(args):
                raise
            raise SystemExit(f"jattn reproduce: error: {e}") from None
        every_stage = studies.stages(profile)
        everything = {**records.load(out, [s.name for s in every_stage]), **ran}
        if root is not None and not args.quick:  # the full profile reads the checkout's committed models first
            everything = records.with_committed_training(everything, every_stage, root / COMMITTED)
        try:
            written = report.write(everything, out, profile.name, stale=pipeline.stale(every_stage, out),
                                   readme=root / "README.md" if args.publish else None)
        except OSError as e:
            raise OSError(f"writing the report into {out} failed ({e.strerror or e}: {e.filename}); no file of it is "
                          "half-written, and every stage's record is kept: running again writes the report without "
                          f"rerunning a stage. Fix: {_fix(e)}") from e
        for path in written:
            print(path)
    finally:
        results.release_lock(handle, lock)
    if ctx.not_run:  # a data set not fetched leaves its stages out (said); an artefact not made is an error
        said = f"jattn reproduce: {len(ctx.not_run)} stage(s) did not run; the report has the others:\n" + "\n".join(
            f"  {name}: {why}" for name, why in ctx.not_run.items())
        if set(ctx.not_run) - ctx.lacking_data:
            raise SystemExit(said)
        print(said, file=sys.stderr)


def _out(args, root: Path | None) -> Path:
    """The folder the run writes (or ``--list`` reads): ``--out``; the checkout's experiments/results
    with ``--publish`` (and for the full profile's ``--list``); results/reproduce-quick with ``--quick``."""
    committed = root / "experiments" / "results" if root is not None and (root / "experiments").is_dir() else None
    if args.publish and (args.quick or args.out is not None):
        raise ValueError(f"--publish writes the full profile's results into the checkout's experiments/results; it "
                         f"takes no {'--quick' if args.quick else '--out'}. Fix: drop one of the two")
    if args.publish and committed is None:
        raise ValueError("--publish writes experiments/results of a jattn checkout, and there is none here. Fix: run "
                         "from the checkout, or pass --out FOLDER instead")
    if args.out is not None:
        return args.out
    if args.quick:
        return Path("results/reproduce-quick")
    if committed is not None and (args.publish or args.list):
        return committed
    raise ValueError("the full profile writes where --out says, or the checkout's committed results (experiments/"
                     "results and the README's table) with --publish. Fix: pass --out FOLDER, or --publish")


def _holds_reproduce(out: Path) -> bool:
    """Whether ``out`` is a folder a run wrote: its ``MARK``, or (a folder from before the mark)
    reproduce.json or a stage record as a run writes them."""
    if (out / MARK).is_file():
        return True
    for file, fields in [(out / "reproduce.json", {"studies", "claims"}),
                         *((f, {"name", "key", "result"}) for f in sorted((out / "stages").glob("*.json")))]:
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and fields <= data.keys():
            return True
    return False


def _check_out(out: Path) -> bool:
    """Before any write: refuse an ``out`` that is a file, a non-empty folder no run wrote (the
    user's files would be replaced), or a folder where a path a run writes (``OWN``) is a link
    (written through, it would change what the link points to). Returns whether ``out`` is new or empty."""
    shown = f"--out {out}" + (f" (a link to {out.resolve()})" if out.is_symlink() else "")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{shown} is a file. Fix: choose a folder (another --out)")
    entries = sorted(p.name for p in out.iterdir() if p.name != LOCK) if out.is_dir() else []  # a run's lock: ours
    if entries and not _holds_reproduce(out):
        listed = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise ValueError(f"{shown} is a non-empty folder that holds no jattn reproduce results ({listed}); a run "
                         f"writes {', '.join(OWN[:5])} into it, replacing files of those names. Fix: choose another "
                         "--out, or remove that folder")
    if links := [name for name in OWN if (out / name).is_symlink()]:
        raise ValueError(f"{shown}: its {links[0]} is a link (to {(out / links[0]).resolve()}), which a run would "
                         "write through. Fix: remove the link, or choose another --out")
    return not entries


def _fix(e: OSError) -> str:
    full = e.errno in (errno.ENOSPC, errno.EDQUOT)
    return "free space on that disk, or choose another --out" if full else "make it writable, or choose another --out"


def _check_writable(folder: Path, what: str, mark: bool) -> None:
    """Before any stage runs: ``folder`` exists or can be made, and a file can be written in it
    (``mark``: the ``MARK`` that makes it a run's folder)."""
    import tempfile

    from jattn.reproduce import records

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        if mark:
            records.replace_text(folder / MARK, "a jattn reproduce output folder (REPORT.md, reproduce.json, "
                                                "stages/, predictions/, figures/)\n")
    except OSError as e:
        raise ValueError(f"{what} {folder} is not writable ({e.strerror or e}); no stage has run. Fix: "
                         + _fix(e).replace("--out", "folder (--out FOLDER; JATTN_CACHE for the work folder)")) from None
