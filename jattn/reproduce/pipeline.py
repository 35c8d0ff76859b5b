"""The reproduction pipeline: studies as stages, each run once per change of its inputs.

A ``Stage`` is one resumable step of a study (fine-tune a classifier, disable every head, train
the probe, ...). Its *key* is a hash of everything its result depends on: its parameters (the
profile's sizes), the sha256 of the data files it reads (from the data manifest), the recipes of
the artefacts it uses, the code of the modules it names (their syntax trees without docstrings:
``code_text``), and the keys of the stages it reads. A model's key is its recipe, so a record also
keeps the sha256 of the weights it read (``models_read``): a model made again since (on another CPU
type fine-tuning is not bit-identical) reruns the stage. ``run`` executes stages in order and
skips one whose record ``<out>/stages/<name>.json`` holds the same key, so that a rerun after a
kill continues where it stopped and a stage whose inputs and code did not change is not rerun.
The claims' statistics (``jattn.reproduce.claims``) are not part of the key: each record names
the version of that module its claims were computed with, and after an edit of it the recorded
claims are recomputed from their predictions files — the record stands if every number comes out
the same (a new statistic, a refactoring), the stage reruns if one differs. A stage that takes
long checkpoints in its own work folder (``Context.work``) and continues from there; its record
is written last. A record holds the stage's runtime (its runs stopped before it finished
included, a kill without warning too: ``records.Clock``) and the training time of the models it
read that were made before it ran (``models_s``; a model the stage makes itself is in its
runtime): the report counts both.

Two profiles: ``full`` (the numbers of ``experiments/results/REPORT.md``) and ``quick`` (the same
stages on small subsets, minutes; CI runs it).
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import errno
import functools
import hashlib
import importlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Callable

from jattn.io import manifest
from jattn.reproduce import records
from jattn.reproduce.failures import describe_failure

__all__ = ["Context", "plan", "Profile", "PROFILES", "repository_root", "run", "Stage", "StageError", "stale"]


@dataclasses.dataclass(frozen=True)
class Profile:
    """Sizes of a run: ``pick(full, quick)`` returns the one of this profile."""

    name: str  # "full" | "quick"

    def pick(self, full, quick):
        return quick if self.name == "quick" else full


PROFILES = {"full": Profile("full"), "quick": Profile("quick")}


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of a study. ``run(ctx) -> dict`` returns its JSON-able result: ``"claims"`` (built
    with ``Context.claim``), ``"figures"`` (paths relative to the output folder), ``"table"`` (a
    Markdown block for the REPORT) and anything later stages read through ``Context.result``."""

    name: str  # "<study>.<step>", unique
    run: Callable[["Context"], dict]
    params: dict = dataclasses.field(default_factory=dict)  # sizes and settings; part of the key
    needs: tuple[str, ...] = ()  # earlier stages whose results ``run`` reads
    data: tuple[str, ...] = ()  # data files it reads, "<dataset>/<file>" as in the manifest
    models: tuple[str, ...] = ()  # named artefacts it uses (their recipes are part of the key)
    code: tuple[str, ...] = ()  # modules whose source the result depends on, beside ``run``'s own

    @property
    def study(self) -> str:
        return self.name.split(".", 1)[0]


def code_text(source: str) -> str:
    """``source``'s syntax tree without docstrings, written out: the part of a module a result
    depends on, so that editing prose (docstrings, comments) or the layout (line breaks, quotes,
    brackets: a formatter's work) reruns nothing. Empty fields are left out, so the text is the
    same under every Python version whose trees differ only by new, empty fields."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                node.body = node.body[1:]
    return _tree_text(tree)


def _tree_text(node) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(map(_tree_text, node)) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = [f"{k}={_tree_text(v)}" for k, v in ast.iter_fields(node) if v is not None and v != [] and k != "ctx"]
    return f"{type(node).__name__}({', '.join(fields)})"


def _source_hash(module_name: str) -> str:
    return _text_hash(Path(inspect.getfile(importlib.import_module(module_name))).read_text())


@functools.lru_cache(maxsize=512)  # by the source itself: a study's stages hash the same modules many times
def _text_hash(source: str) -> str:
    return hashlib.sha256(code_text(source).encode()).hexdigest()


def stage_key(stage: Stage, needed_keys: dict[str, str]) -> str:
    """sha256 of what the stage's result depends on (module docstring)."""
    from jattn import artefacts

    data = {f: _data_sha256(f) for f in stage.data}
    recipes = {m: artefacts.recipe(m).key() for m in stage.models}
    modules = sorted({stage.run.__module__, "jattn.stats", *stage.code})
    blob = json.dumps({"name": stage.name, "params": stage.params, "data": data, "models": recipes,
                       "code": {m: _source_hash(m) for m in modules}, "needs": needed_keys},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _data_sha256(relative: str) -> str:
    name, _, inside = relative.partition("/")
    for entry in manifest.files():
        if (entry.dataset, entry.path) == (name, inside):
            return entry.sha256
    raise ValueError(f"stage data {relative!r} is no file of the data manifest (jattn data list)")


def repository_root(start: Path) -> Path | None:
    """The checkout ``start`` lies in (the folder with ``pyproject.toml``), or None."""
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return None


@dataclasses.dataclass
class Context:
    """What a running stage sees: its profile, where data, models and outputs are, earlier results."""

    profile: Profile
    out: Path  # REPORT.md, reproduce.json, stages/, predictions/, figures/
    work_root: Path  # resumable checkpoints of long stages
    data_dir: Path
    stage: Stage | None = None
    key: str | None = None  # the running stage's key (``stage_key``)
    results: dict = dataclasses.field(default_factory=dict)  # stage name -> result
    progress: bool = True
    not_run: dict = dataclasses.field(default_factory=dict)  # stage name -> why (an artefact or data not there)
    lacking_data: set = dataclasses.field(default_factory=set)  # of not_run: for want of data (or of a stage)

    @property
    def params(self) -> dict:
        return self.stage.params

    def result(self, name: str) -> dict:
        if name not in self.stage.needs:
            raise KeyError(f"stage {self.stage.name} reads {name} without naming it in needs=")
        return self.results[name]

    def data(self, relative: str) -> Path:
        """A data file the stage declared (``Stage.data``), or an error naming the fetch command."""
        if relative not in self.stage.data:
            raise KeyError(f"stage {self.stage.name} reads {relative} without naming it in data=")
        path = self.data_dir / relative
        if not path.is_file():
            name = relative.split("/", 1)[0]
            raise FileNotFoundError(f"{path} not found. Fix: run `jattn data fetch {name} --data-dir {self.data_dir}` "
                                    "or set JATTN_DATA to a folder that has it")
        return path

    def work(self) -> Path:
        """This stage's checkpoint folder for its current key: a stage whose inputs or code changed
        (or what it reads: ``records.discard_old_checkpoints``) starts afresh. Kept after the
        record is written: a later stage may read it (the Clark probe reads the syntax stage's
        feature shards)."""
        folder = self.work_root / self.stage.name / self.key[:16]
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def figure(self, name: str) -> Path:
        """Where to save a figure: ``<out>/figures/<study>/<name>``."""
        path = self.out / "figures" / self.stage.study / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def save_figure(self, fig, name: str, dpi: int = 110) -> str:
        """Save a matplotlib figure as ``figure(name)`` (cropped to its contents), close it, and
        return its path relative to the output folder, as a stage lists it under "figures"."""
        import matplotlib.pyplot as plt

        path = self.figure(name)
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        return str(path.relative_to(self.out))

    def relative(self, path: Path) -> str:
        """``path`` as claims record it: relative to the repository holding ``out``, else to ``out``."""
        root = repository_root(self.out.resolve()) or self.out.resolve()
        return os.path.relpath(Path(path).resolve(), root)

    @property
    def command(self) -> str:
        quick = " --quick" if self.profile.name == "quick" else ""
        return f"jattn reproduce {self.stage.study}{quick}  (stage {self.stage.name})"

    def claim(self, *, id: str, **fields) -> dict:
        """``jattn.reproduce.claims.make`` with the predictions written to
        ``<out>/predictions/<id>.jsonl`` and the study and command filled in."""
        from jattn.reproduce import claims

        path = self.out / "predictions" / f"{id}.jsonl"
        return claims.make(id=id, study=self.stage.study, path=path, relative=self.relative(path),
                           command=self.command, **fields)


def keys(stages: list[Stage]) -> dict[str, str]:
    """Every stage's key, in order (a stage's ``needs`` must come before it; names "<study>.<step>", unique)."""
    out: dict[str, str] = {}
    for stage in stages:
        if not all(stage.name.partition(".")[::2]):
            raise ValueError(f"stage name {stage.name!r} is not '<study>.<step>'. Fix: name it after its study")
        if stage.name in out:
            raise ValueError(f"two stages are named {stage.name}: the second would replace the first's record. "
                             "Fix: give each stage a name of its own")
        missing = [n for n in stage.needs if n not in out]
        if missing:
            raise ValueError(f"stage {stage.name} needs {missing}, which do not run before it")
        out[stage.name] = stage_key(stage, {n: out[n] for n in stage.needs})
    return out


def _forced(stage: Stage, force: tuple[str, ...]) -> bool:
    return stage.name in force or stage.study in force


def _why_run(stage: Stage, record: dict | None, key: str, force: tuple[str, ...], needs: dict[str, dict | None],
             running: set[str]) -> str | None:
    """Why ``stage`` must run, or None when its ``record`` stands: no record, another key, forced,
    a stage it reads (``needs``: name -> record) remade after it (``records.remade_needs``), a model
    it read made again since (``records.remade_models``), or one of ``running`` (those that run
    before it in this pass) among what it reads."""
    if record is None:
        return "no record"
    if record.get("key") != key:
        return "inputs or code changed (or a stage it needs)"
    if _forced(stage, force):
        return "forced"
    if remade := records.remade_needs(record, needs):
        return f"{remade[0]}, which it reads, was run again"
    if remade := records.remade_models(record):
        return f"{remade[0]}, which it reads, was made again since (other weights)"
    if before := [n for n in stage.needs if n in running]:
        return f"{before[0]}, which it reads, runs first"
    return None


def _claims_code() -> str:  # the code a record's claims are computed by: the claims and their statistics
    return _source_hash("jattn.reproduce.claims") + _source_hash("jattn.reproduce.statistics")


def plan(stages: list[Stage], ctx: Context, *, force: tuple[str, ...] = ()) -> list[str]:
    """One line per stage: whether ``run`` would run it, and why."""
    lines, running = [], set()
    for stage, (name, key) in zip(stages, keys(stages).items()):
        record = records.read(ctx.out, name)
        why = _why_run(stage, record, key, force, {n: records.read(ctx.out, n) for n in stage.needs}, running)
        if why is None:
            lines.append(f"{name}: up to date" + ("" if record.get("claims_code") == _claims_code() else
                                                  " (claims to be recomputed: jattn.reproduce.claims changed)"))
        else:
            running.add(name)
            lines.append(f"{name}: would run: {why}")
    return lines


def stale(stages: list[Stage], out: Path) -> list[str]:
    """The stages whose record holds another key than today's or read a model made again since: computed
    from other inputs or code (e.g. a stage that did not run because its model is not made keeps its old record)."""
    return [name for name, key in keys(stages).items() if (record := records.read(out, name)) is not None
            and (record.get("key") != key or records.remade_models(record))]


DEBUG = "correct the stage (`jattn --debug` shows the traceback)"  # the fix of a stage that raised


class StageError(RuntimeError):
    """A stage failed (it raised, called ``sys.exit``, returned no dict) or its record could not be written:
    the stage, why, and what is kept (the records before it: a rerun resumes at it). ``__cause__``: its error."""


def _failed(stage: Stage, e: BaseException | None, why: str, fix: str, done: dict, ctx: Context) -> StageError:
    """The ``StageError`` of ``stage``, which failed ``why`` (by ``e``); ``done``: the records of the
    stages before it. ``fix`` unless a full disk is why, or ``e``'s message names its own fix."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on that disk, or choose another out folder (--out)"
    elif "Fix:" in why:
        fix = "as it says"
    return StageError(f"stage {stage.name} failed: {why}. Kept: the records of the {len(done)} stage(s) before it "
                      f"({ctx.out / 'stages'}); running again resumes at {stage.name}. Fix: {fix}")


def release_compiled() -> None:
    """Drop every compiled XLA program (``jax.clear_caches``). XLA:CPU maps each program's machine
    code into memory regions of its own (about 16 for a small program, hundreds for a model's
    forward); a process that runs every stage compiles thousands of programs and reaches the
    kernel's limit on a process's mappings (``vm.max_map_count``, 65,530 by default), where LLVM
    stops with "Unable to allocate section memory". Called after each stage: the next compiles
    what it needs again (seconds)."""
    if "jax" in sys.modules:
        import jax

        jax.clear_caches()


def run(stages: list[Stage], ctx: Context, *, force: tuple[str, ...] = (), log=print) -> dict[str, dict]:
    """Run ``stages`` in order, skipping those whose record holds their current key; ``force``:
    stage names (or study names) to rerun anyway, from the start: a forced stage's checkpoints
    (its work folder) are discarded first, so that it computes everything again and its record
    times all of it. The models it reads are artefacts of the cache, kept (``jattn models``).
    Returns every stage's record. A stage that needs a named artefact not made
    (``ArtefactNotMade``: the message names the command) or a data file not in ``ctx.data_dir``
    does not run, nor do the stages that need it; the others go on, and ``ctx.not_run`` says why
    each did not (``ctx.lacking_data``: those for want of data, named with the fetch command)."""
    from jattn.artefacts import making
    from jattn.io import artefacts, stops
    from jattn.io.artefacts import ArtefactNotMade

    done: dict[str, dict] = {}
    for i, (stage, key) in enumerate(zip(stages, keys(stages).values())):
        stops.check_stop()  # a SIGINT/SIGTERM whose exception was dropped (jattn.cli)
        if missing := [n for n in stage.needs if n in ctx.not_run]:
            ctx.not_run[stage.name] = f"it needs {missing[0]}, which did not run"
            if set(missing) <= ctx.lacking_data:
                ctx.lacking_data.add(stage.name)
            log(f"[{i + 1}/{len(stages)}] {stage.name}: not run: {ctx.not_run[stage.name]}")
            continue
        old = records.read(ctx.out, stage.name)
        # what it reads is in ``done``: a stage run in this pass has a newer record than this one
        why = _why_run(stage, old, key, force, {n: done[n] for n in stage.needs}, set())
        if why is None and not records.claims_stand(old, repository_root(ctx.out.resolve()) or ctx.out.resolve(),
                                                    _claims_code()):
            why = "its claims recompute differently with the edited jattn.reproduce.claims"
        if why is None:
            log(f"[{i + 1}/{len(stages)}] {stage.name}: unchanged since {old['finished'][:19]}, not rerun")
            if old.get("claims_code") != _claims_code():
                old = records.write(ctx.out, {**old, "claims_code": _claims_code()})
            done[stage.name] = old
            ctx.results[stage.name] = old["result"]
            continue
        if absent := sorted({f.split("/", 1)[0] for f in stage.data if not (ctx.data_dir / f).is_file()}):
            ctx.not_run[stage.name] = (f"data set(s) {', '.join(absent)} not in {ctx.data_dir}. Fix: run `jattn data "
                                       f"fetch {' '.join(absent)} --data-dir {ctx.data_dir}`")
            ctx.lacking_data.add(stage.name)
            log(f"[{i + 1}/{len(stages)}] {stage.name}: not run: {ctx.not_run[stage.name]}")
            continue
        log(f"[{i + 1}/{len(stages)}] {stage.name}: running ({why})")
        ctx.stage, ctx.key, work = stage, key, ctx.work_root / stage.name / key[:16]
        if afresh := records.discard_old_checkpoints(work, {n: done[n] for n in stage.needs}, _forced(stage, force)):
            log(f"    {afresh}")
        made_before = [m for m in stage.models if artefacts.is_made(m)]  # their training is not in the runtime
        # also for a stage that checkpoints elsewhere (a trainer): its killed runs' time counts when it resumes
        clock = records.Clock(work / records.SPENT)
        try:
            with making.reading() as read:
                result = stage.run(ctx)
        except ArtefactNotMade as e:
            ctx.not_run[stage.name] = str(e)
            log(f"    not run: {e}")
            continue
        except (Exception, SystemExit) as e:  # sys.exit in a stage ends the stage, as a failure, not the run
            raise _failed(stage, e, describe_failure(e), DEBUG, done, ctx) from e
        finally:  # a stage stopped here resumes from its checkpoints, and this run's time counts then
            spent = clock.stop()
            records.note_models(work, read)
            release_compiled()
        if not isinstance(result, dict):
            raise _failed(stage, None, f"its run returned {result!r:.40}, not a dict", "return a dict", done, ctx)
        wall, *cpu = spent
        record = {"name": stage.name, "key": key, "needs": list(stage.needs), "profile": ctx.profile.name,
                  "params": stage.params, "runtime_s": round(wall, 1), **({"cpu_s": round(cpu[0], 1)} if cpu else {}),
                  "models_s": records.models_seconds(made_before), **({"models_read": read} if read else {}),
                  "machine": records.machine(),
                  "finished": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f"),
                  "python": sys.version.split()[0], "claims_code": _claims_code(), "result": result}
        # the record last: a killed stage has none and reruns from its work folder
        try:
            done[stage.name] = records.write(ctx.out, record)
        except (OSError, TypeError, ValueError) as e:  # a full disk; a result JSON cannot store
            fix = "make the folder writable, or choose another (--out)" if isinstance(e, OSError) else DEBUG
            raise _failed(stage, e, f"its record could not be written ({describe_failure(e)})", fix, done, ctx) from e
        clock.clear()
        ctx.results[stage.name] = done[stage.name]["result"]
        log(f"    done in {record['runtime_s']:.0f} s")
    return done
