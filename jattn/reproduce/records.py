"""The stage records on disk (``<out>/stages/<name>.json``): read, written atomically as JSON, with
the machine a stage ran on, the time it took (``Clock``), the training time and the weights of the
models it read; whether a record's claims stand under an edited ``jattn.reproduce.claims``
(``claims_stand``); whether what a record read was made again since (``remade_needs``,
``remade_models``), and whether a stage's checkpoints were computed from what it reads now
(``discard_old_checkpoints``)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import threading
import time
from pathlib import Path

from jattn.io import atomic

__all__ = ["load", "read", "write"]


def path(out: Path, name: str) -> Path:
    return out / "stages" / f"{name}.json"


def read(out: Path, name: str) -> dict | None:
    """Stage ``name``'s record, or None when it has none."""
    file = path(out, name)
    return json.loads(file.read_text()) if file.is_file() else None


def replace_text(file: Path, text: str) -> None:
    """Put ``text`` at ``file`` whole or not at all (``jattn.io.atomic.replace``): a link at ``file``
    is replaced, not written through; on any failure (a full disk, a stop) ``file`` is as it was, no
    temporary file is left and the ``OSError`` names ``file`` and the fix."""
    atomic.replace(file, text)


def write(out: Path, record: dict) -> dict:
    """Write ``record`` atomically; returns it as read back (JSON types)."""
    file = path(out, record["name"])
    file.parent.mkdir(parents=True, exist_ok=True)
    replace_text(file, json.dumps(record, indent=1, default=json_default) + "\n")
    return json.loads(file.read_text())


def load(out: Path, names: list[str]) -> dict[str, dict]:
    """The records of the stages ``names`` (those that have one), in that order."""
    return {n: r for n in names if (r := read(out, n)) is not None}


def _same_numbers(a, b) -> bool:
    """Equal structure, numbers equal to 1e-9 relative (a JSON round trip), NaN equal to NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_numbers(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_numbers(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return (a != a and b != b) or abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)
    return a == b


def claims_stand(record: dict, root: Path, code: str) -> bool:
    """Whether ``record``'s claims hold with the current ``jattn.reproduce.claims`` (whose version
    is ``code``): computed with it, or recomputed from their predictions files (paths relative to
    ``root``) to the same value, interval and baseline."""
    from jattn.reproduce import claims

    if record.get("claims_code") == code:
        return True
    for claim in record["result"].get("claims", []):
        try:
            again = claims.recompute(claim, root)
        except (OSError, KeyError, ValueError):
            return False
        recorded = {"value": claim["value"], "ci": claim["ci"]}
        baseline = {"value": claim["baseline"]["value"], "ci": claim["baseline"]["ci"]}
        fresh = {k: again["value"][k] for k in recorded}
        fresh_baseline = {k: again["baseline"][k] for k in baseline}
        if not (_same_numbers(recorded, json.loads(json.dumps(fresh, default=json_default)))
                and _same_numbers(baseline, json.loads(json.dumps(fresh_baseline, default=json_default)))):
            return False
    return True


SPENT = "seconds_spent"  # in a stage's work folder: "wall cpu" seconds of its runs that have no record yet
BEAT = 30.0  # seconds between two writes of SPENT while a stage runs


class Clock:
    """The wall and CPU seconds a stage has spent on its current key: those of its earlier runs that
    were stopped before their record (read from ``file``) plus this run's. A daemon thread writes the
    sum to ``file`` every ``BEAT`` seconds, so that a run killed without warning (SIGKILL, a machine
    stopped) loses at most that much of its time; ``stop`` writes it at once (a stop Python sees).
    CPU time is the process's, every thread (up to the cores × the wall time: a job sharing the cores
    slows the wall clock, not it); left out when an earlier run recorded none (an older file holds
    the wall time only)."""

    def __init__(self, file: Path):
        self.file = file
        self.earlier = [float(x) for x in file.read_text().split()] if file.is_file() else [0.0, 0.0]
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self._final: list[float] | None = None
        self._stopped = threading.Event()
        self._beat = threading.Thread(target=self._write_every_beat, daemon=True, name=f"clock {file}")
        self._beat.start()

    def spent(self) -> list[float]:
        """[wall, CPU] seconds so far, or [wall] when an earlier run recorded no CPU time."""
        now = [time.perf_counter() - self.start, time.process_time() - self.cpu_start]
        return [e + n for e, n in zip(self.earlier, now)] if len(self.earlier) == 2 else [self.earlier[0] + now[0]]

    def _write(self, spent: list[float]) -> None:
        """The sum to ``file``, whole (a kill mid-write leaves the last whole sum). A write that
        fails (a full disk) is skipped: the file keeps the last sum, so that a resumed run counts
        this one's time up to its last beat, and the run's next write (the record) reports it."""
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            replace_text(self.file, " ".join(f"{t:.1f}" for t in spent) + "\n")
        except OSError:
            pass

    def _write_every_beat(self) -> None:
        while not self._stopped.wait(BEAT):
            self._write(self.spent())

    def stop(self) -> list[float]:
        """Stop counting, write the sum to ``file`` for a run that resumes, and return it."""
        if self._final is None:
            self._stopped.set()
            self._beat.join()
            self._final = self.spent()
            self._write(self._final)
        return self._final

    def clear(self) -> None:
        """The stage's record holds its time: remove ``file`` (a later run on this key counts from
        zero), and its folder and the one above (``<work>/<stage>/<key>``) where that leaves them empty
        (of all but ``BASIS``: a stage that kept no checkpoints)."""
        self.file.unlink(missing_ok=True)
        if self.file.parent.is_dir() and [p.name for p in self.file.parent.iterdir()] == [BASIS]:
            (self.file.parent / BASIS).unlink()
        for folder in (self.file.parent, self.file.parent.parent):
            try:
                folder.rmdir()
            except OSError:  # the stage's checkpoints are in it
                return


def machine() -> str:
    """``platform`` facts of the machine a stage ran on (for its runtime)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def remade_needs(record: dict, needs: dict[str, dict | None]) -> list[str]:
    """The stages among ``needs`` (name -> record) whose record was written after ``record``: made
    again since (forced, or in an earlier process of a run that was stopped), so that what the
    stage read is gone even though every key is the same. (``finished`` is local time to the
    microsecond; a record of seconds only sorts before any later one of the same second.)"""
    return [n for n, need in needs.items() if need is not None and need["finished"] > record["finished"]]


def remade_models(record: dict) -> list[str]:
    """The models among the record's ``models_read`` ({name: {weights file: sha256}}, the
    artefacts its stage got from ``jattn.artefacts.making.make``) whose copy in the cache now holds
    other weights: made again since the stage ran (e.g. on another CPU type, where fine-tuning is
    not bit-identical), so that the stage's key, which names the model's recipe, is the same but
    what it read is gone. A model not in the cache cannot tell: the record stands."""
    from jattn.io import artefacts

    return [name for name, files in record.get("models_read", {}).items()
            if artefacts.is_made(name) and (now := artefacts.weights(artefacts.folder(name))) and now != files]


BASIS = "basis.json"  # in a stage's work folder: what its checkpoints were computed from


def discard_old_checkpoints(work: Path, needs: dict[str, dict], forced: bool) -> str | None:
    """Remove the stage's work folder ``work`` (``<work>/<stage>/<key>``) when it is ``forced`` (it
    computes everything again, and its record times all of it) or when its checkpoints were computed
    from other inputs than it reads now; then note what it reads now (``BASIS``). Returns why, for
    the log, in the second case. The folder is named by the stage's key, which names the stages it
    reads (``needs``: name -> record) by their keys and its models by their recipes: both stay the
    same when a need runs again (forced; its model made again on another CPU type, where training is
    not bit-identical) or a model is made again, and the checkpoints of the old result would then be
    resumed from. ``BASIS`` holds each need's record's ``finished`` stamp and the sha256 of the
    weights the stage read (``note_models``); checkpoints without it (a write that failed, a folder
    of an older jattn) cannot tell, and are discarded too. Only the time of its runs (``SPENT``) is
    no checkpoint."""
    stamps = {name: record["finished"] for name, record in needs.items()}
    basis = _basis(work)
    why = None if forced else _stale(work, basis, stamps)  # forced: the reason it runs, named already
    if forced or why:
        shutil.rmtree(work, ignore_errors=True)
    _write_basis(work, {"needs": stamps, "models": {} if forced or why else (basis or {}).get("models", {})})
    return f"its checkpoints in {work} were computed from {why}: discarded, it starts afresh" if why else None


def _stale(work: Path, basis: dict | None, stamps: dict[str, str]) -> str | None:
    if basis is None:
        return "inputs it did not note" if work.is_dir() and any(p.name != SPENT for p in work.iterdir()) else None
    if changed := [n for n in stamps if basis.get("needs", {}).get(n) != stamps[n]]:
        return f"an earlier result of {changed[0]}"
    if remade := remade_models({"models_read": basis.get("models", {})}):
        return f"other weights of {remade[0]} (made again since)"
    return None


def note_models(work: Path, read: dict[str, dict[str, str]]) -> None:
    """Add the models a stage ``read`` ({name: {weights file: sha256}}) to the ``BASIS`` of its work
    folder, at the end of each run (a run killed without warning notes none: its needs' stamps stand)."""
    if read and (basis := _basis(work)) is not None:
        _write_basis(work, {**basis, "models": {**basis.get("models", {}), **read}})


def _basis(work: Path) -> dict | None:
    try:
        return json.loads((work / BASIS).read_text())
    except (OSError, ValueError):  # none, or half a file from a machine stopped mid-write
        return None


def _write_basis(work: Path, basis: dict) -> None:
    """A write that fails (a full disk) is skipped, as ``Clock`` skips one: checkpoints written
    without it are discarded by the next run, and the stage's own writes name the disk."""
    try:
        work.mkdir(parents=True, exist_ok=True)
        replace_text(work / BASIS, json.dumps(basis, indent=1) + "\n")
    except OSError:
        pass


def models_seconds(names) -> dict[str, float]:
    """{model: its training seconds} for the trained models among ``names`` (downloads left out):
    what a record adds to its stage's runtime for the models made before the stage ran."""
    from jattn.artefacts.making import training_seconds

    return {m: s for m in names if (s := training_seconds(m)) is not None}


def with_committed_training(records: dict[str, dict], stages, committed: Path) -> dict[str, dict]:
    """``records`` with the training time of the models their stages read from ``committed`` (the
    checkout's folder of committed copies, which the studies read before making a model) added to
    each record's ``models_s``: such a model is never in the cache, so ``models_seconds`` cannot see
    it when the record is written. The copy's own trainer record gives the time."""
    from jattn.artefacts.making import training_seconds

    models = {s.name: s.models for s in stages}
    out = {}
    for name, record in records.items():
        extra = {m: s for m in models.get(name, ())
                 if (committed / m).is_dir() and (s := training_seconds(m, folder=committed / m)) is not None}
        out[name] = {**record, "models_s": {**extra, **record.get("models_s", {})}} if extra else record
    return out


def json_default(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"a stage result holds {type(value).__name__}, which JSON cannot store. Fix: return numbers, "
                    "strings, lists and dicts (numpy values and paths are converted)")
