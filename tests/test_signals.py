"""SIGINT and SIGTERM stop a command at any point (issue #56): exit status 130 / 143, one line on
stderr (no traceback, no "Exception ignored"), no crash, no hang, no result under the final
--out name and no lock or temporary folder left beside it (``jattn.cli``'s stop handling).

The fast tests deliver the signal where Python drops the exception (inside a garbage-collection
callback, as XLA's ``_xla_gc_callback``, and inside a finalizer), and stop a few real runs of
``jattn analyze`` and ``jattn reproduce``. The soak (``--runslow``) spreads 30 signals of each
command over a whole run, SIGTERM and SIGINT in turn.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "jattn" / "io" / "sample" / "sentences.txt"

# a command registered for the test: its results are published through Output after work during
# which a garbage-collection callback (or a finalizer) receives the signal
TOY_COMMAND = '''
import gc, os, signal, time

from jattn.io.results import Output


def add_arguments(parser):
    parser.add_argument("--out", required=True)
    parser.add_argument("--signal", type=int, required=True)
    parser.add_argument("--where", choices=("gc", "finalizer"), required=True)


class Finalizer:
    def __init__(self, signum):
        self.signum = signum

    def __del__(self):
        os.kill(os.getpid(), self.signum)
        time.sleep(0.05)  # the handler runs here, inside the finalizer


def run(args):
    sent = []

    def callback(phase, info):  # as XLA's _xla_gc_callback: Python code that gc calls
        if phase == "start" and not sent:
            sent.append(1)
            os.kill(os.getpid(), args.signal)
            time.sleep(0.05)  # the handler runs here, inside the callback

    with Output(args.out) as output:
        if args.where == "gc":
            gc.callbacks.insert(0, callback)
            gc.collect()
            gc.callbacks.remove(callback)
        else:
            Finalizer(args.signal)
        for _ in range(50):  # the rest of the run: a second of work
            time.sleep(0.02)
        output.write(lambda folder: (folder / "results.json").write_text('{"meta": {"complete": true}}'))
    print("published")
'''

LAUNCH = ("import sys; sys.path.insert(0, {folder!r}); from jattn import cli; cli.COMMANDS['toy'] = 'toy_command'; "
          "sys.argv = ['jattn', *sys.argv[1:]]; cli.main()")

# a toy experiments package: three stages of a few seconds of XLA work each, garbage collected often
EXPERIMENTS = '''
import gc

from jattn.reproduce import studies
from jattn.reproduce.pipeline import Stage


def _work(ctx):
    import jax.numpy as jnp

    x, total = jnp.ones((256, 256)), 0.0
    for i in range(ctx.params["steps"]):
        total += float((x @ x * (i + 1)).mean())
        gc.collect()
    return {"total": total}


studies.register("toy", lambda profile: [Stage(f"toy.s{i}", _work, params={"steps": 300 + i}) for i in range(3)],
                 "Toy study")
'''


def env() -> dict:
    from conftest import without_shared_cache

    return {**without_shared_cache(os.environ), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONFAULTHANDLER": "1"}


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    # a child inherits an ignored SIGINT (see tests/test_output_faults.py): hold a handler while starting it
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def handling(pid: int) -> bool:
    """Whether the process catches SIGTERM: ``jattn.cli.main`` has installed its handler."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def stop(proc: subprocess.Popen, sig: int, delay: float, timeout: float) -> tuple[int, str]:
    """Send ``sig`` ``delay`` seconds after the command's handler is in place; its exit status and stderr."""
    deadline = time.monotonic() + timeout
    while not handling(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if delay is None:  # no signal: the run finishes
        sig = None
    else:
        time.sleep(delay)
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"no exit {timeout} s after the signal (a hang); stderr: {err[-1500:]}")
    return proc.returncode, err


def check_stopped(code: int, err: str, sig: int, out: Path, finished) -> None:
    """One trial: stopped cleanly (128 + signal, one line) or finished before the signal (0,
    ``finished(out)`` checks its results); never a traceback, a dropped exception or a crash;
    nothing under --out's name after a stop, and no lock or temporary folder beside it."""
    assert code in (0, 128 + sig), f"exit status {code} (139: segmentation fault); stderr: {err[-1500:]}"
    for bad in ("Traceback", "Exception ignored", "Segmentation fault", "Fatal Python error"):
        assert bad not in err, f"{bad!r} in stderr: {err[-1500:]}"
    if code == 0:
        finished(out)
    else:
        what = "terminated" if sig == signal.SIGTERM else "interrupted"
        assert f": {what}; --out was left as it was" in err.splitlines()[-1], err[-800:]
    left = sorted(p.name for p in out.parent.glob(f".{out.name}*"))
    assert left == [], left


def analyze_finished(out: Path) -> None:
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["complete"] is True and (out / ".jattn-files").is_file()


def analyze_trial(tmp_path: Path, name: str, sig: int, delay: float, lines: int = 24):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:lines]))
    out = tmp_path / name
    proc = start(["-m", "jattn.cli", "analyze", "--input", str(corpus), "--out", str(out), "--batch-size", "4"],
                 tmp_path)
    return proc, out, sig, delay


def analyze_stopped(trial, timeout: float = 180) -> None:
    proc, out, sig, delay = trial
    code, err = stop(proc, sig, delay, timeout)
    check_stopped(code, err, sig, out, analyze_finished)
    if code:
        assert not out.exists()  # no result under the final name


def reproduce_trial(tmp_path: Path, name: str, sig: int, delay: float):
    package = tmp_path / "toy_experiments"
    if not package.exists():
        package.mkdir()
        (package / "__init__.py").write_text(EXPERIMENTS)
    out = tmp_path / name
    proc = start(["-m", "jattn.cli", "reproduce", "toy", "--experiments", str(package), "--quick", "--out", str(out),
                  "--no-progress"], tmp_path)
    return proc, out, sig, delay


def reproduce_finished(out: Path) -> None:
    assert (out / "REPORT.md").is_file() and len(list((out / "stages").glob("toy.s*.json"))) == 3


def reproduce_stopped(trial, timeout: float = 180) -> None:
    proc, out, sig, delay = trial
    code, err = stop(proc, sig, delay, timeout)
    check_stopped(code, err, sig, out, reproduce_finished)
    if code:
        assert not (out / "REPORT.md").exists()
        for record in (out / "stages").glob("*"):  # each stage's record written whole, or not at all
            assert record.suffix == ".json" and json.loads(record.read_text())["result"]["total"] > 0, record


# one trial per place Python drops the exception: SIGTERM in a gc callback, SIGINT in a finalizer; the
# other two pairs run the same handler and Output code with the other signal number
DROPS = [(signal.SIGTERM, "gc"), (signal.SIGINT, "finalizer"),
         pytest.param(signal.SIGINT, "gc", id="SIGINT-gc", marks=pytest.mark.slow(
             twin="tests/test_signals.py::test_a_stop_python_drops_in_a_callback_still_stops_the_command[SIGTERM-gc]")),
         pytest.param(signal.SIGTERM, "finalizer", id="SIGTERM-finalizer", marks=pytest.mark.slow(
             twin="tests/test_signals.py::test_a_stop_python_drops_in_a_callback_still_stops_the_command"
                  "[SIGINT-finalizer]"))]


@pytest.mark.parametrize("sig, where", DROPS, ids=lambda v: v.name if isinstance(v, signal.Signals) else v)
def test_a_stop_python_drops_in_a_callback_still_stops_the_command(tmp_path, sig, where):
    """The signal's exception raised inside a gc callback (as XLA's) or a finalizer, where Python
    drops it: the command still stops (before the fix, SIGTERM's run went on and published)."""
    (tmp_path / "toy_command.py").write_text(TOY_COMMAND)
    out = tmp_path / "out"
    proc = start(["-c", LAUNCH.format(folder=str(tmp_path)), "toy", "--out", str(out), "--signal", str(int(sig)),
                  "--where", where], tmp_path)
    stdout, err = proc.communicate(timeout=120)
    check_stopped(proc.returncode, err, sig, out, lambda out: pytest.fail(f"published: {stdout} {err[-1500:]}"))
    assert proc.returncode == 128 + sig and not out.exists() and "published" not in stdout


def test_analyze_and_reproduce_stop_cleanly(tmp_path):
    """A handful of real runs stopped early and late, side by side (the fast twin of the soak)."""
    trials = [analyze_trial(tmp_path, "early", signal.SIGTERM, 0.3, lines=8),
              analyze_trial(tmp_path, "late", signal.SIGINT, 4.0, lines=8),
              reproduce_trial(tmp_path, "reproduce", signal.SIGTERM, 3.0)]
    for trial, stopped in zip(trials, (analyze_stopped, analyze_stopped, reproduce_stopped)):
        stopped(trial)


def test_the_handler_is_in_place_before_any_library_loads(tmp_path):
    """``import jattn.cli`` (what the ``jattn`` program runs first) loads no numpy, JAX, Flax or
    transformers: ``main`` installs the stop handler a few tens of milliseconds after Python starts,
    not after the seconds their imports take (a Ctrl-C there was a KeyboardInterrupt traceback).
    A stop at the handler's first moment (the command's own imports) is clean."""
    probe = "import sys, jattn.cli; print([m for m in ('numpy', 'jax', 'flax', 'transformers') if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    analyze_stopped(analyze_trial(tmp_path, "first-moment", signal.SIGINT, 0.0, lines=8))


def soak(tmp_path, trial, stopped, trials: int = 30) -> None:
    """A run uninterrupted (its length), then ``trials`` runs stopped at delays spread over it."""
    began = time.monotonic()
    stopped(trial(tmp_path, "whole", signal.SIGTERM, None), timeout=900)  # finishes: status 0
    length = time.monotonic() - began
    for i in range(0, trials, 2):  # two at a time
        batch = [trial(tmp_path, f"t{j}", (signal.SIGTERM, signal.SIGINT)[j % 2], length * (j + 0.5) / trials)
                 for j in (i, i + 1)]
        for t in batch:
            stopped(t, timeout=length + 120)


@pytest.mark.slow
def test_soak_analyze(tmp_path):
    soak(tmp_path, analyze_trial, analyze_stopped)


@pytest.mark.slow
def test_soak_reproduce(tmp_path):
    soak(tmp_path, reproduce_trial, reproduce_stopped)
