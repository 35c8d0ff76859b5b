"""jattn data fetch / verify / path: file-system errors as one line naming the path, the problem and the fix.

Offline: the toy manifest of test_data_fetch, a mirror URL never reached (every error comes first)
or a faked download; everything in tmp_path.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from jattn.cli import main
from test_data_fetch import TOY, assert_nothing_bad_kept, serve, toy as toy, tree  # noqa: F401  (toy: a fixture)

NOWHERE = "http://127.0.0.1:9"  # the discard port: never answers; every test here fails before a download


def error(argv: list[str]) -> str:
    """The one-line error of ``jattn data ARGV`` (exit status 1, no traceback)."""
    with pytest.raises(SystemExit) as stop:
        main(["data", *argv])
    message = stop.value.code
    assert isinstance(message, str) and message.startswith("jattn data: error: "), message  # status 1
    assert "\n" not in message and "[Errno" not in message and "Traceback" not in message, message
    return message


def fetch(data: Path, *names: str, mirror: str = NOWHERE) -> list[str]:
    return ["fetch", *names, "--mirror", mirror, "--data-dir", str(data), "--no-progress"]


def test_a_read_only_data_folder_names_the_fix(toy, monkeypatch):
    _, data = toy
    data.mkdir()
    data.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: make mkdir honour the mode as for anyone else
        real = os.mkdir

        def mkdir(path, mode=0o777, *args, **kwargs):
            p = Path(path)
            if not p.exists() and not p.parent.stat().st_mode & 0o200:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)
    try:
        message = error(fetch(data))
    finally:
        data.chmod(0o755)
    assert re.fullmatch(rf"jattn data: error: cannot write {re.escape(str(data))}/\S+: permission denied\. Fix: "
                        r"choose a writable data folder \(pass --data-dir \(or set JATTN_DATA\)\), or fix the "
                        rf"folder's permissions \(e\.g\. `chmod -R u\+w {re.escape(str(data))}`\)", message), message


def test_a_full_disk_names_the_fix(toy, monkeypatch):
    import pooch

    _, data = toy

    def full(self, url, output, pooch_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a write to a full disk raises

    monkeypatch.setattr(pooch.HTTPDownloader, "__call__", full)
    message = error(fetch(data, "toy"))
    assert re.fullmatch(rf"jattn data: error: cannot write {re.escape(str(data / 'toy'))}/\S+: no space left on the "
                        rf"disk of {re.escape(str(data))} \([\d.]+ MB free; this data set needs 0\.0 MB\)\. Fix: free "
                        r"space on that disk, or pass --data-dir \(or set JATTN_DATA\) to a folder on another disk",
                        message), message
    assert_nothing_bad_kept(data, "toy/a.txt")


@pytest.mark.parametrize("where, make, what", [
    ("toy/a.txt", Path.mkdir, "toy/a.txt is a folder, not a file"),
    ("toy/sub", Path.touch, "toy/sub is a file, not a folder"),
    ("toy2", Path.touch, "toy2 is a file, not a folder"),
    ("toy2/c.txt", os.mkfifo, "toy2/c.txt is a FIFO, not a regular file"),
])
def test_something_else_at_a_data_path_is_named(toy, where, make, what):
    mirror, data = toy
    (data / where).parent.mkdir(parents=True, exist_ok=True)
    make(data / where)
    name = where.split("/")[0]
    what = re.escape(f"{data}/{what}")
    with serve(mirror) as url:  # the data set's other files are fetched: the error is at the obstacle
        assert re.fullmatch(rf"jattn data: error: {what}, where {name}'s file \S+ must go\. Fix: move or delete "
                            r"it, then fetch again \(or pass --data-dir elsewhere\)",
                            error(fetch(data, name, mirror=url)))
        assert re.fullmatch(rf"jattn data: error: \d of 3 file\(s\) missing or wrong in {re.escape(str(data))}: "
                            rf"{what}\. Fix: move or delete it, then run `jattn data fetch [a-z0-9 ]+` --data-dir \S+",
                            error(["verify", "--data-dir", str(data)]))
        assert re.fullmatch(rf"jattn data: error: data set '{name}' cannot be read: {what}\. Fix: move or delete it, "
                            rf"then run `jattn data fetch {name} --data-dir \S+`",
                            error(["path", name, "--data-dir", str(data)]))
        # once moved away, fetching puts the data set in place
        (data / where).rmdir() if make is Path.mkdir else (data / where).rename(data.parent / "moved")
        main(["data", *fetch(data, mirror=url)])
    assert tree(data) == TOY


def test_a_fifo_is_not_called_missing(toy, capsys):
    _, data = toy
    (data / "toy2").mkdir(parents=True)
    os.mkfifo(data / "toy2/c.txt")
    error(["verify", "toy2", "--data-dir", str(data)])
    assert capsys.readouterr().out == f"a FIFO, not a regular file: {data / 'toy2/c.txt'}\n"


@pytest.mark.parametrize("action", ["verify", "fetch", "list", "path"])
def test_a_data_dir_that_is_a_file_says_what_to_pass(toy, action):
    _, data = toy
    data.write_text("x")
    argv = fetch(data) if action == "fetch" else [action, "--data-dir", str(data)]
    assert error(argv) == (f"jattn data: error: the data folder (--data-dir) {data} is a file, not a folder. Fix: "
                           "pass --data-dir a folder (the data folder, or a new path: `jattn data fetch` creates it)")


def test_a_jattn_data_that_is_a_fifo_says_what_to_set(toy, monkeypatch):
    _, data = toy
    os.mkfifo(data)
    monkeypatch.setenv("JATTN_DATA", str(data))
    assert error(["verify"]) == (f"jattn data: error: JATTN_DATA {data} is a FIFO, not a folder. Fix: set JATTN_DATA "
                                 "to a folder (the data folder, or a new path), or pass --data-dir FOLDER")
