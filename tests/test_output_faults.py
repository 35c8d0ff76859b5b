"""Faults around ``jattn analyze``'s output folder, in real processes (issue 11): SIGINT and
SIGKILL mid-run, two runs at once into one --out, a full disk, and a read-only conversion
cache. Whatever happens, --out holds either the previous complete results or the new complete
ones, never a mix of two runs or a partial file."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tiny_encoders import save_tiny

FIGURES = {  # figures each method set writes (heatmaps of its (L, H) statistics included)
    "weights": {"class_attention.png", "positional.png"} | {f"heatmap_{k}.png" for k in (
        "attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other", "sep_to_sep", "nonsep_to_sep",
        "attn_prev", "attn_self", "attn_next")},
    "entropy": {"entropy.png", "heatmap_entropy.png", "heatmap_entropy_cls.png"},
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny model, a long corpus (seconds of work), a tenth of it, a short one, and one complete
    'weights' run."""
    root = tmp_path_factory.mktemp("faults")
    model = save_tiny(root / "model", "bert-2x4", max_positions=64)
    rng = random.Random(0)
    words = "the cat sat on a mat dog ran far away , . and then it slept in sun".split()
    (root / "long.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 20)))
                                             for _ in range(20000)) + "\n")
    (root / "medium.txt").write_text("".join((root / "long.txt").read_text().splitlines(keepends=True)[:2000]))
    (root / "short.txt").write_text("The cat sat.\nA dog ran, far away.\n")
    previous = root / "previous"
    proc = analyze(root, model, "short.txt", "weights", previous)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return root, model, previous


def analyze(root: Path, model: Path, corpus: str, methods: str, out: Path, killed: bool = False,
            **popen) -> subprocess.Popen:
    """``jattn analyze`` started; ``killed``: a run the test stops or kills (conftest.without_shared_cache)."""
    from conftest import without_shared_cache

    env = dict(without_shared_cache(os.environ) if killed else os.environ, JATTN_CACHE=str(root / "cache"),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, "-m", "jattn.cli", "analyze", "--model", str(model), "--input",
                             str(root / corpus), "--methods", methods, "--out", str(out), "--batch-size", "16",
                             "--max-length", "64"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


class Stderr:
    """Collects a process's stderr in a thread, so a test can wait for the progress bar."""

    def __init__(self, proc):
        self.text = ""
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc):
        while chunk := proc.stderr.read(1):
            self.text += chunk

    def wait_for_progress(self, proc, timeout=240):
        """Until the progress bar shows examples done (the corpus is being computed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if any(int(done) > 0 for done in re.findall(r"\| *(\d+)/\d+ \[", self.text)):
                return
            time.sleep(0.05)
        pytest.fail(f"no progress before the deadline: {self.text[-500:]}")


def snapshot(out: Path) -> dict | None:
    """{relative path: bytes} of the folder, read through one directory handle (one version)."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        files = {}
        for name in os.listdir(fd):
            if name == "figures":
                sub = os.open("figures", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                try:
                    for f in os.listdir(sub):
                        files["figures/" + f] = _read(f, sub)
                finally:
                    os.close(sub)
            else:
                files[name] = _read(name, fd)
        return files
    finally:
        os.close(fd)


def _read(name, dir_fd) -> bytes:
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def assert_complete(files: dict, methods: str) -> None:
    """One run's complete results: results.json/npz, report.md and exactly that method set's figures."""
    doc = json.loads(files["results.json"])
    assert doc["meta"]["complete"] is True and doc["meta"]["methods"] == methods.split(",")
    figures = {k.removeprefix("figures/") for k in files if k.startswith("figures/")}
    assert figures == set().union(*(FIGURES[m] for m in methods.split(","))), figures
    assert set(files) == {"results.json", "results.npz", "report.md", ".jattn-files"} | {
        "figures/" + f for f in figures
    }
    assert set(files[".jattn-files"].decode().splitlines()) == set(files) - {".jattn-files"}  # what jattn wrote
    assert all(files[f"figures/{f}"].startswith(b"\x89PNG") for f in figures)
    import io

    import numpy as np

    assert set(np.load(io.BytesIO(files["results.npz"]))) == set(doc) - {"meta"}


def signal_masks(pid: int) -> str:
    """The signal masks of a process's main thread (blocked, ignored, caught), for failure messages."""
    with contextlib.suppress(OSError):
        return " ".join(line.replace("\t", "") for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    return "signal masks unreadable"


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.glob(f".{out.name}.tmp-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_run_leaves_the_previous_results(sig, setup, tmp_path):
    root, model, previous = setup
    out = shutil.copytree(previous, tmp_path / "out")
    before = snapshot(out)
    # A child inherits an *ignored* SIGINT (a shell without job control starts background commands
    # so, e.g. `make test &`), and Python then never raises KeyboardInterrupt; a handler is reset to
    # the default at exec. So the test process holds a handler while it starts the run.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = analyze(root, model, "long.txt", "entropy", out, killed=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    err = Stderr(proc)
    err.wait_for_progress(proc)
    masks = signal_masks(proc.pid)
    proc.send_signal(sig)
    code = proc.wait(timeout=120)
    err.thread.join(timeout=10)
    assert code != 0, f"the run ended normally after the signal; child's {masks}; stderr: {err.text[-800:]}"
    assert snapshot(out) == before
    assert_complete(before, "weights")
    if sig == signal.SIGINT:
        assert code == 130 and "interrupted; --out was left as it was" in err.text
        assert "Traceback" not in err.text and leftovers(out) == []
        return  # nothing left behind; the next run after a stop is the SIGKILL case's (one run less here)
    assert code == -signal.SIGKILL
    again = analyze(root, model, "short.txt", "entropy", out)  # and the next run replaces them whole
    assert again.wait(timeout=300) == 0, again.stderr.read()
    assert_complete(snapshot(out), "entropy")  # no stale 'weights' figure left
    assert leftovers(out) == []  # a killed run's temporary folder was removed


def test_two_runs_into_one_out(setup, tmp_path):
    """Two runs at once: the second stops at once ('in use') or waits its turn; a reader
    polling --out all along sees only complete results of one run."""
    root, model, previous = setup
    out = shutil.copytree(previous, tmp_path / "out")
    # a tenth of the long corpus: a run that waits its turn waits for the whole other run; the two
    # still start together and overlap in their imports, compiles and locking
    procs = [analyze(root, model, "medium.txt", "entropy", out),
             analyze(root, model, "medium.txt", "weights,entropy", out)]
    seen = set()
    while any(p.poll() is None for p in procs):
        files = snapshot(out)
        if files is not None:
            try:
                doc = json.loads(files["results.json"])
            except KeyError:  # the old folder deleted under the reader after the swap: read again
                continue
            methods = ",".join(doc["meta"]["methods"])
            try:
                assert_complete(files, methods)
            except FileNotFoundError:
                continue
            seen.add(methods)
        time.sleep(0.05)
    results = [(p.returncode, p.stderr.read()) for p in procs]
    assert all(code == 0 or (code == 1 and "in use by another jattn run" in err) for code, err in results), results
    assert any(code == 0 for code, _ in results)
    final = snapshot(out)
    methods = ",".join(json.loads(final["results.json"])["meta"]["methods"])
    assert_complete(final, methods)
    winners = [m for m, (code, _) in zip(("entropy", "weights,entropy"), results) if code == 0]
    assert methods in winners and seen <= {"weights", *winners}


class Finalizer:
    """An object whose finalizer receives a SIGINT: its KeyboardInterrupt is raised inside
    ``__del__``, where Python reports it as 'Exception ignored' and drops it (or, given an
    exception type, raises that there instead)."""

    def __init__(self, error: type | None = None):
        self.error = error

    def __del__(self):
        if self.error is not None:
            raise self.error("raised in a finalizer")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs here


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_swallowed_interrupt_still_leaves_the_previous_results(tmp_path):
    """Python drops a KeyboardInterrupt raised inside a finalizer ('Exception ignored in ...'):
    the run would go on and publish. Output remembers the SIGINT and refuses to replace --out."""
    from jattn.io.results import Output

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"meta": {"complete": true}}')

    def fill(folder):
        (folder / "results.json").write_text('{"meta": {"new": true}}')
        Finalizer()  # collected at once, so __del__ runs and swallows the interrupt
        return "filled"

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    dropped, hook = [], sys.unraisablehook
    record = sys.unraisablehook = lambda u: dropped.append(type(u.exc_value).__name__)  # what Python would print
    try:
        with Output(out) as output, pytest.raises(KeyboardInterrupt):
            output.write(fill)
        assert dropped == []  # the remembered interrupt's traceback is not printed
        with Output(out):
            Finalizer(ValueError)  # any other dropped exception still is
        assert dropped == ["ValueError"] and sys.unraisablehook is record  # restored on close
        assert (out / "results.json").read_text() == '{"meta": {"complete": true}}'  # not replaced
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored on close
        with Output(out) as output:  # without a signal, a write publishes
            assert output.write(lambda folder: (folder / "results.json").write_text("{}")) == 2
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
    assert (out / "results.json").read_text() == "{}" and leftovers(out) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_swallowed_interrupt_is_dropped_without_the_guard():
    """The premise of the test above: without Output's handler the interrupt really is lost."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        Finalizer()
        reached = True
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached


@contextlib.contextmanager
def tmpfs(path: Path, options: str):
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or a user namespace): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_full_disk_leaves_the_previous_results(setup, tmp_path):
    root, model, previous = setup
    with tmpfs(tmp_path / "disk", "size=2m") as disk:
        out = shutil.copytree(previous, disk / "out")
        before = snapshot(out)
        free = shutil.disk_usage(disk).free
        with open(disk / "filler", "wb") as f:  # leave ~16 kB: less than the new results need
            f.write(b"\0" * max(0, free - 16 * 1024))
        proc = analyze(root, model, "short.txt", "weights,entropy", out)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, err
        last = err.strip().splitlines()[-1]
        assert "No space left on device" in last and "was left as it was" in last and "Fix" in last, err
        assert "Traceback" not in err
        assert snapshot(out) == before and leftovers(out) == []


def test_read_only_cache_is_skipped_before_any_write(tmp_path):
    """A pickle checkpoint is cached by default; a read-only cache folder is reported once and
    skipped before the save starts: orbax's checkpointer, whose failed background writes the process
    would wait on at exit, saves nothing."""
    model = save_tiny(tmp_path / "model", "bert-2x4", safe=False, max_positions=64)
    code = ("import jattn, orbax.checkpoint as ocp\n"
            "saves, save = [], ocp.Checkpointer.save\n"
            "ocp.Checkpointer.save = lambda self, *a, **k: (saves.append(a), save(self, *a, **k))[1]\n"
            f"jattn.load({str(model)!r})\nprint(len(saves))")
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        env = dict(os.environ, JATTN_CACHE=str(ro), HF_HUB_OFFLINE="1")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0"], proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and "not caching" in warnings[0] and "Read-only file system" in warnings[0], proc.stderr


def test_unwritable_out_fails_before_any_work(tmp_path):
    from jattn.cli import main

    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        with pytest.raises(SystemExit, match=r"ro is not writable\. Fix: choose a writable --out"):
            main(["analyze", "--input", str(tmp_path), "--out", str(ro / "out"), "--model", str(tmp_path / "none")])


def test_the_lock_file_goes_with_the_run(tmp_path):
    """No `.<out>.lock` is left beside --out once the run has ended, refused or not; while one run
    holds the lock a second is refused, and a lock whose file its holder removed is taken anew."""
    from jattn.io.results import Output, OutputError

    out = tmp_path / "out"
    with Output(out) as first:
        assert (tmp_path / ".out.lock").is_file()
        with pytest.raises(OutputError, match="in use by another jattn run"):
            Output(out)
        first.write(lambda folder: (folder / "results.json").write_text("{}"))
    assert not (tmp_path / ".out.lock").exists()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="holds no jattn results"):
        Output(tmp_path / "user")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".lock")] == []
