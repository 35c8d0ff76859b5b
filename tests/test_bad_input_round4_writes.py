"""Bad input, round 4 (issue #79): every single file jattn replaces is written through
``jattn.io.atomic.replace``, never through a link and never half.

Each call site family: the cache of a resumable command (``jattn.cli.common.cached``, ``.json`` and
``.npz``), a pruning curve's state (``state_file``), a made artefact's ``MANIFEST.json`` and the
reproduce records (``jattn.reproduce.records``). Before: each wrote ``<file>.tmp`` by name, so a
link planted there had its target overwritten; a full disk left the half-written ``.tmp`` behind
and surfaced as a bare ``[Errno 28]``; the reproduce records (through ``mkstemp``) came out 0600.
A full disk is simulated at ``os.write`` for the files under the test's folder.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from jattn.cli.common import cached
from jattn.io import artefacts, atomic
from jattn.reproduce import records
from jattn.sweeps import pruning_curve

PRECIOUS = "the user's own file\n"


def full_disk(monkeypatch, folder: Path) -> None:
    """``os.write`` as on a full disk for the files under ``folder``: half the bytes, then ENOSPC."""
    real, folder, started = os.write, str(folder.resolve()), []

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(folder):
            return real(fd, data)
        if not started:
            started.append(1)
            return real(fd, data[:max(1, len(data) // 2)])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)


def plant(link: Path, folder: Path) -> Path:
    """A symbolic link at ``link`` to a user's file in ``folder``; returns that file."""
    victim = folder / "victim.txt"
    victim.write_text(PRECIOUS)
    link.symlink_to(victim)
    return victim


# Each family: (its target in a folder and a call that writes it, what the error's fix adds)
def _cache_json(folder: Path):
    return folder / "work" / "point.json", lambda: cached(folder / "work" / "point.json", lambda: {"x": 1})


def _cache_npz(folder: Path):
    return folder / "work" / "sweep.npz", lambda: cached(folder / "work" / "sweep.npz", lambda: {"a": np.arange(3)})


def _curve_state(folder: Path):
    state = folder / "work" / "pruning_curve.json"
    return state, lambda: pruning_curve._save(state, {"step": 1}, [[0.0, 1.0]], np.ones((2, 2), bool), None, [], [])


def _manifest(folder: Path):
    made = artefacts.folder("toy", folder)
    made.mkdir(parents=True)
    (made / "weights.bin").write_bytes(b"\0" * 8)
    return made / artefacts.MANIFEST, lambda: artefacts.record("toy", folder)


def _record(folder: Path):
    return records.path(folder, "toy.step"), lambda: records.write(folder, {"name": "toy.step", "result": {"n": 1}})


FAMILIES = {"cache-json": (_cache_json, "choose another --out"), "cache-npz": (_cache_npz, "choose another --out"),
            "pruning-state": (_curve_state, "pass another state_file (jattn prune: another --out)"),
            "artefact-manifest": (_manifest, "move the model cache to another disk (JATTN_CACHE)"),
            "reproduce-record": (_record, None)}


def _setup(family: str, tmp_path: Path):
    target, write = FAMILIES[family][0](tmp_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target, write


OLD_TEMPORARY = {"cache-json": "{}.tmp", "cache-npz": "{}.tmp", "pruning-state": "{}.tmp",
                 "artefact-manifest": ".{}.tmp"}  # the reproduce records used mkstemp already


@pytest.mark.parametrize("family", list(OLD_TEMPORARY))
def test_a_link_at_the_old_temporary_name_is_not_followed(family, tmp_path):
    target, write = _setup(family, tmp_path)
    old = target.with_name(OLD_TEMPORARY[family].format(target.name))
    victim = plant(old, tmp_path)
    write()
    assert victim.read_text() == PRECIOUS and target.is_file() and not target.is_symlink()
    assert old.is_symlink()  # left as it was


@pytest.mark.parametrize("family", [f for f in FAMILIES if not f.startswith("cache")])  # a cache reads a link's file
def test_a_link_at_the_target_is_replaced_not_written_through(family, tmp_path):
    target, write = _setup(family, tmp_path)
    victim = plant(target, tmp_path)
    write()
    assert victim.read_text() == PRECIOUS and target.is_file() and not target.is_symlink()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_full_disk_is_one_line_and_leaves_nothing_behind(family, tmp_path, monkeypatch):
    target, write = _setup(family, tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    full_disk(monkeypatch, tmp_path)
    with pytest.raises(OSError) as info:
        write()
    instead = FAMILIES[family][1]
    assert str(info.value) == (f"No space left on device writing {target}; {target.name} was left as it was. "
                               f"Fix: free space on that disk{f', or {instead}' if instead else ''}")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(target))  # for a caller's own words
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_written_file_has_the_mode_the_umask_gives(family, tmp_path):
    """``mkstemp`` makes 0600 files: a report or a manifest others could not read."""
    target, write = _setup(family, tmp_path)
    old = os.umask(0o022)
    try:
        write()
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_replace_writes_text_and_bytes_whole(tmp_path):
    atomic.replace(tmp_path / "a.txt", "ünïcode\n")
    atomic.replace(tmp_path / "b.bin", bytes(range(256)) * 64)
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "ünïcode\n"
    assert (tmp_path / "b.bin").read_bytes() == bytes(range(256)) * 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]


def test_a_folder_at_the_target_is_named_with_its_fix(tmp_path):
    (tmp_path / "page.html").mkdir()
    with pytest.raises(OSError) as info:
        atomic.replace(tmp_path / "page.html", "x", instead="choose another --out")
    assert str(info.value).startswith(f"Is a directory writing {tmp_path / 'page.html'}; page.html was left as it was")
    assert str(info.value).endswith(f"Fix: make {tmp_path} writable, or choose another --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]


def test_a_stop_while_writing_leaves_nothing_behind(tmp_path, monkeypatch):
    def stopped(fd, data):
        raise KeyboardInterrupt

    (tmp_path / "state.json").write_text(json.dumps({"old": 1}))
    monkeypatch.setattr(os, "write", stopped)
    with pytest.raises(KeyboardInterrupt):
        atomic.replace(tmp_path / "state.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert json.loads((tmp_path / "state.json").read_text()) == {"old": 1}
