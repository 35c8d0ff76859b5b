"""reproduce every study's headline claims beside the papers' (REPORT.md, reproduce.json)

Runs the studies' stages in order (jattn.reproduce): a stage whose inputs and code did not change
since its record was written is not rerun, and a killed run continues where it stopped. The full
profile writes experiments/results/ of the checkout (REPORT.md, reproduce.json, stages/,
predictions/, figures/) and the README's results table; --quick runs the same stages on small
subsets into results/reproduce-quick/ in minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

LOCK = ".jattn-reproduce.lock"  # in --out while a run writes it


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
                        help="output folder (default: experiments/results of the checkout, or "
                             "results/reproduce-quick with --quick)")
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
    from jattn.io import artefacts, manifest, results
    from jattn.reproduce import pipeline, records, report, studies

    profile = pipeline.PROFILES["quick" if args.quick else "full"]
    studies.load(args.experiments)
    root = pipeline.repository_root(Path.cwd())
    if args.out is not None:
        out = args.out
    elif args.quick:
        out = Path("results/reproduce-quick")
    elif root is not None and (root / "experiments").is_dir():
        out = root / "experiments" / "results"
    else:
        raise ValueError("no checkout here to write experiments/results into. Fix: run from the jattn checkout, "
                         "or pass --out FOLDER")
    work = out / ".work" if args.quick else artefacts.models_dir().parent / "reproduce" / "full"
    if not args.list:
        for folder, what in ((out, "--out"), (work, "the work folder (in jattn's cache: JATTN_CACHE)")):
            _check_writable(folder, what)
    data_dir = args.data_dir or manifest.data_dir()
    ctx = pipeline.Context(profile, out, work, Path(data_dir), progress=not args.no_progress)
    stages = studies.stages(profile, tuple(args.studies))
    known = {s.name for s in stages} | {s.study for s in stages}
    if unknown := [f for f in args.force if f not in known]:
        raise ValueError(f"--force {unknown[0]}: no stage or study of this run has that name. Fix: one of the "
                         f"names `jattn reproduce {' '.join(args.studies)}{' --quick' if args.quick else ''} --list` "
                         "prints, or a study name")
    if args.list:
        for line in pipeline.plan(stages, ctx, force=tuple(args.force)):
            print(line)
        return
    lock = out / LOCK
    handle = results.acquire_lock(lock, f"--out {out}", "--out")  # one run writes a results folder at a time
    try:
        ran = pipeline.run(stages, ctx, force=tuple(args.force), log=lambda m: print(m, file=sys.stderr, flush=True))
        every_stage = studies.stages(profile)
        everything = records.load(out, [s.name for s in every_stage])
        readme = root / "README.md" if (root is not None and profile.name == "full" and args.out is None) else None
        for path in report.write({**everything, **ran}, out, profile.name, readme=readme,
                                 stale=pipeline.stale(every_stage, out)):
            print(path)
    finally:
        results.release_lock(handle, lock)
    if ctx.not_run:
        raise SystemExit(f"jattn reproduce: {len(ctx.not_run)} stage(s) did not run; the report has the others:\n"
                         + "\n".join(f"  {name}: {why}" for name, why in ctx.not_run.items()))


def _check_writable(folder: Path, what: str) -> None:
    """Before any stage runs: ``folder`` exists or can be made, and a file can be written in it."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ValueError(f"{what} {folder} is not writable ({e.strerror or e}); no stage has run. Fix: make it "
                         "writable, or choose another (--out FOLDER; JATTN_CACHE for the work folder)") from None
