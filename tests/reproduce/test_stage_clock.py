"""A stage's runtime across its runs (``jattn.reproduce.records.Clock``): a run killed without
warning (SIGKILL, a machine stopped) still reaches the record of the run that finishes, less at
most one ``BEAT``."""

from __future__ import annotations

import subprocess
import sys
import time

from jattn.reproduce import pipeline, records

# A stage that is killed by SIGKILL the first time it runs (after 1 s of work) and finishes the second:
# as a run ended by a machine stop, which no Python handler sees.
STAGES = '''
import os, signal, time
from pathlib import Path


def killed_once(ctx):
    mark = ctx.work() / "half"
    if not mark.exists():
        mark.write_text("first half done")
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    return {"resumed": True}
'''

RUN = '''
import sys
sys.path.insert(0, {folder!r})
from pathlib import Path
import toy_killed_stages
from jattn.reproduce import pipeline, records
records.BEAT = 0.1
ctx = pipeline.Context(pipeline.PROFILES["quick"], Path({folder!r}) / "out", Path({folder!r}) / "work",
                       Path({folder!r}) / "data", progress=False)
pipeline.run([pipeline.Stage("toy.killed", toy_killed_stages.killed_once)], ctx, log=lambda *_: None)
'''


def _ctx(tmp_path):
    return pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", tmp_path / "data",
                            progress=False)


def test_a_run_killed_without_warning_still_counts_in_the_record(tmp_path, monkeypatch):
    (tmp_path / "toy_killed_stages.py").write_text(STAGES)
    killed = subprocess.run([sys.executable, "-c", RUN.format(folder=str(tmp_path))], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr  # SIGKILL: no record, no handler ran
    assert records.read(tmp_path / "out", "toy.killed") is None
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_killed_stages

    record = pipeline.run([pipeline.Stage("toy.killed", toy_killed_stages.killed_once)], _ctx(tmp_path),
                          log=lambda *_: None)["toy.killed"]
    assert record["result"] == {"resumed": True}
    assert record["runtime_s"] >= 0.5  # the killed run's 1 s, less its last beat (0.1 s apart; more on a busy machine)
    assert list((tmp_path / "work").rglob(records.SPENT)) == []  # the record holds the time now


def test_the_clock_writes_its_sum_while_the_stage_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "BEAT", 0.05)
    file = tmp_path / "work" / records.SPENT
    clock = records.Clock(file)
    time.sleep(0.3)
    wall, cpu = (float(x) for x in file.read_text().split())  # written by the beat, before any stop
    assert wall > 0.0 and cpu >= 0.0
    assert clock.stop() == clock.stop()  # stopping twice is stopping once
    assert clock.stop()[0] >= max(wall, 0.3)


def test_a_finished_stage_leaves_no_clock_behind(tmp_path, monkeypatch):
    """Once the record holds the time, the clock's file and the folders it made go: a later run on
    the same key counts from zero."""
    monkeypatch.setattr(records, "BEAT", 0.05)

    def quick(ctx):
        time.sleep(0.2)  # long enough for the beat to write
        return {}

    record = pipeline.run([pipeline.Stage("toy.quick", quick)], _ctx(tmp_path), log=lambda *_: None)["toy.quick"]
    assert record["runtime_s"] >= 0.2
    assert not (tmp_path / "work" / "toy.quick").exists()
