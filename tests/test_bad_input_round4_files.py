"""Bad input, round 4 (issue #79), files: a link planted at a lock's path or at a temporary file's
name is never followed (``jattn.io.locks``; ``jattn view``'s page written through ``mkstemp``), a
full disk is one line naming the file and the fix with nothing half-written or locked left behind,
and a SIGTERM stopping ``jattn models make`` exits 143 as ``jattn --help`` promises.

A full disk is simulated at the lowest write call (``os.write`` / ``os.pwrite``, or the results
writer's ``Path.write_text``) for files under the test's folder: half the bytes, then ENOSPC.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from jattn.cli import main
from jattn.io.results import Output, OutputError
from test_data_fetch import toy  # noqa: F401  (a fixture: a toy manifest, its mirror, an empty data folder)
from tiny_encoders import save_tiny

NOWHERE = "http://127.0.0.1:9"  # a mirror never reached: the lock comes first
PRECIOUS = "a file of another user\n"
TEXT = "The cat sat on the mat."


def error(argv: list[str]) -> str:
    """The one-line error of ``jattn ARGV`` (exit status 1, no traceback)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    message = stop.value.code
    assert isinstance(message, str) and message.startswith(f"jattn {argv[0]}: error: "), message
    assert "\n" not in message and "[Errno" not in message, message
    return message


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("bert"), "bert-2x4", max_positions=64)


def planted(lock: Path, target: Path) -> None:
    """A link at the lock's path to ``target``, as anyone sharing the folder can plant."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, lock)


def commands(tmp_path: Path, data: Path) -> dict:
    """command -> (its argv, the lock it takes), each stopped at the lock before any work."""
    from jattn.io import artefacts

    (tmp_path / "corpus.txt").write_text(TEXT + "\n")
    (tmp_path / "rep").mkdir()
    cache = tmp_path / "cache"
    return {
        "analyze": (["analyze", "--input", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "res"), "--model",
                     str(tmp_path / "no-model")], tmp_path / ".res.lock"),
        "reproduce": (["reproduce", "induction", "--quick", "--out", str(tmp_path / "rep"), "--no-progress"],
                      tmp_path / "rep" / ".jattn-reproduce.lock"),
        "models": (["models", "make", "minilm-sst2", "--cache-dir", str(cache), "--no-progress"],
                   artefacts.models_dir(cache) / ".locks" / "minilm-sst2.lock"),
        "data": (["data", "fetch", "toy", "--data-dir", str(data), "--mirror", NOWHERE, "--no-progress"],
                 data / ".locks" / "toy.lock"),
    }


@pytest.mark.parametrize("command", ["analyze", "reproduce", "models", "data"])
def test_a_link_at_a_lock_path_is_refused_and_its_target_untouched(command, tmp_path, request):
    """Before the fix the lock was opened through the link and truncated: the victim held ``pid N``."""
    data = request.getfixturevalue("toy")[1] if command == "data" else tmp_path / "data"  # the toy manifest
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    argv, lock = commands(tmp_path, data)[command]
    planted(lock, victim)
    message = error(argv)
    assert f"{lock} is a symbolic link (to {victim})" in message and f"Fix: remove the link ({lock})" in message
    assert victim.read_text() == PRECIOUS and lock.is_symlink()


def test_a_dangling_link_at_the_lock_creates_nothing(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    planted(tmp_path / ".res.lock", elsewhere)
    with pytest.raises(OutputError, match="is a symbolic link"):
        Output(tmp_path / "res")
    assert not elsewhere.exists() and not (tmp_path / "res").exists()


@pytest.mark.parametrize("what", ["a user's file", "a hard link"])
def test_only_a_lock_file_is_written(what, tmp_path):
    """A file at the lock's path that is not a lock (other data, or another name of a file) is left
    as it is; an old lock (empty, or ``pid N`` of a holder gone) is taken and goes with the run."""
    lock, victim = tmp_path / ".res.lock", tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    if what == "a hard link":
        os.link(victim, lock)
    else:
        lock.write_text(PRECIOUS)
    with pytest.raises(OutputError, match="a hard link" if what == "a hard link" else "not a jattn lock"):
        Output(tmp_path / "res")
    assert victim.read_text() == PRECIOUS and lock.read_text() == PRECIOUS
    for old in ("", "pid 1\n"):
        lock.unlink(missing_ok=True)
        lock.write_text(old)
        with Output(tmp_path / "res"):
            assert lock.read_text() == f"pid {os.getpid()}\n"
        assert not lock.exists()


def test_a_held_lock_names_its_holder_and_waits(tmp_path):
    from jattn.io import locks

    path = tmp_path / "x.lock"
    handle = locks.acquire(path)
    try:
        with pytest.raises(locks.Busy, match=f"held by another process \\(pid {os.getpid()}\\)"):
            locks.acquire(path, timeout=2 * locks.POLL_S)
    finally:
        locks.release(handle, path)
    handle = locks.acquire(path, timeout=None)
    assert path.read_text() == f"pid {os.getpid()}\n"
    locks.release(handle, path)
    assert not path.exists()


def full_disk(monkeypatch, folder: Path, call: str = "write") -> None:
    """``os.<call>`` as on a full disk for the files under ``folder``: half the bytes, then ENOSPC."""
    real, folder, started = getattr(os, call), str(folder.resolve()), []

    def write(fd, data, *offset):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(folder):
            return real(fd, data, *offset)
        if not started:
            started.append(1)
            return real(fd, data[:max(1, len(data) // 2)], *offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, call, write)


def test_a_full_disk_taking_the_lock_leaves_no_lock(tmp_path, monkeypatch):
    """Before the fix: a bare [Errno 28] and an empty ``.res.lock`` left behind."""
    (tmp_path / "corpus.txt").write_text(TEXT + "\n")
    full_disk(monkeypatch, tmp_path, "pwrite")
    out, lock = tmp_path / "res", tmp_path / ".res.lock"
    message = error(["analyze", "--input", str(tmp_path / "corpus.txt"), "--out", str(out), "--model",
                     str(tmp_path / "no-model")])
    assert message == (f"jattn analyze: error: --out {out}: cannot write the lock file {lock} (No space left on "
                       "device). Fix: free space on that disk, or choose another --out"), message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("where", ["results.json", ".jattn-files"])
def test_a_full_disk_publishing_results_is_one_line(where, tmp_path, monkeypatch):
    """The disk fills at a result file or at the folder's manifest (before the fix: a bare
    [Errno 28]): one error naming the file and the fix; the previous results, no lock, no
    temporary folder."""
    out = tmp_path / "res"
    with Output(out) as output:
        output.write(lambda folder: (folder / "results.json").write_text('{"meta": {"run": 1}}'))
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if self.name != where:
            return real(self, data, *args, **kwargs)
        real(self, data[:len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(OutputError) as info, Output(out) as output:
        output.write(lambda folder: (folder / "results.json").write_text('{"meta": {"run": 2}}'))
    assert str(info.value) == (f"No space left on device writing {out / where}; {out} was left as it was. Fix: "
                               "free space on that disk, or choose another --out")
    assert (out / "results.json").read_text() == '{"meta": {"run": 1}}' and leftovers(tmp_path) == []


def test_a_link_at_the_view_pages_temporary_name_is_not_followed(bert, tmp_path):
    """``jattn view`` wrote ``PAGE.tmp`` then renamed it: a link planted there had its target overwritten."""
    out, victim = tmp_path / "page.html", tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    os.symlink(victim, tmp_path / "page.html.tmp")
    main(["view", "--model", str(bert), "--text", TEXT, "--out", str(out)])
    assert victim.read_text() == PRECIOUS and "jattn-data" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "page.html.tmp", "victim.txt"]


def test_a_full_disk_writing_the_view_page_is_one_line(bert, tmp_path, monkeypatch):
    """Before the fix: a bare [Errno 28] and a half-written ``page.html.tmp`` left behind."""
    out = tmp_path / "page.html"
    main(["view", "--model", str(bert), "--text", TEXT, "--out", str(out)])
    before = out.read_bytes()
    full_disk(monkeypatch, tmp_path)
    message = error(["view", "--model", str(bert), "--text", "A dog ran.", "--out", str(out)])
    assert message == (f"jattn view: error: No space left on device writing {out}; page.html was left as it was. Fix: "
                       "free space on that disk, or choose another --out"), message
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]


# jattn models make with its recipe's maker replaced: a trainer (its stop a request seen between two
# steps, jattn.training.trainer.stop_requests) or plain work, each announcing itself on stderr
MAKE = '''
import sys, time

from jattn.artefacts import making
from jattn.cli import main
from jattn.training.trainer import stop_requests


def trainer(recipe, out, work, progress):
    with stop_requests() as stop:
        print("making", file=sys.stderr, flush=True)
        while not stop.requested:
            time.sleep(0.01)
        raise KeyboardInterrupt  # as the trainers do, after their checkpoint


def plain(recipe, out, work, progress):
    print("making", file=sys.stderr, flush=True)
    time.sleep(120)


making.MAKERS["finetune"] = {"trainer": trainer, "plain": plain}[sys.argv[1]]
sys.argv = ["jattn", "models", "make", "minilm-sst2", "--cache-dir", sys.argv[2], "--no-progress"]
main()
'''


@pytest.mark.parametrize("maker", ["trainer", "plain"])
def test_sigterm_stops_models_make_with_143(maker, tmp_path):
    """Before the fix ``jattn models make`` exited 130 "interrupted" on a SIGTERM."""
    from test_signals import start

    cache = tmp_path / "cache"
    proc = start(["-c", MAKE, maker, str(cache)], tmp_path)
    try:
        seen = []
        while not seen or seen[-1] not in ("making", ""):  # the maker runs (or the process ended)
            seen.append(proc.stderr.readline().strip())
        assert seen[-1] == "making", "\n".join(seen) + proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        f"jattn models: terminated; `jattn models make minilm-sst2 --cache-dir "
        f"{cache}` resumes minilm-sst2 from {cache / 'models' / 'minilm-sst2-work'}"
    )
    assert "Traceback" not in err and not (cache / "models" / ".locks" / "minilm-sst2.lock").exists()
