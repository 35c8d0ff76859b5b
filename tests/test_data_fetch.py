"""jattn data fetch / verify / list / path and jattn.data_path, against local HTTP servers.

The full fetch serves ``$JATTN_DATA`` (skipped when unset); the fault tests use a toy manifest of
three small files and a mirror built in a temporary folder. Every server is on 127.0.0.1, port 0.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

import jattn
from jattn.cli import main
from jattn.io import fetch as F
from jattn.io import manifest as M

TOY = {"toy/a.txt": b"alpha\nbeta\n", "toy/sub/b.txt": b"x" * 5000, "toy2/c.txt": b"gamma\n"}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(folder: Path, handler=Quiet):
    """An HTTP server over ``folder`` on 127.0.0.1 in a thread; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def write_manifest(path: Path, entries: list[dict]) -> Path:
    names = sorted({e["dataset"] for e in entries})
    path.write_text(json.dumps({"format": 1, "datasets": {n: {"description": n, "license": "test"} for n in names},
                                "files": entries}))
    return path


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A toy manifest (made jattn's own for the test), a mirror folder with its files, an empty data folder."""
    mirror = tmp_path / "mirror"
    for rel, data in TOY.items():
        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
        (mirror / rel).write_bytes(data)
    entries = [{"dataset": rel.split("/")[0], "path": rel.split("/", 1)[1], "size": len(data), "sha256": sha(data),
                "source": None, "transform": "verbatim", "license": "test", "checked": "test"}
               for rel, data in TOY.items()]
    monkeypatch.setattr(M, "MANIFEST", write_manifest(tmp_path / "manifest.json", entries))
    monkeypatch.delenv("JATTN_DATA", raising=False)
    monkeypatch.delenv("JATTN_DATA_MIRROR", raising=False)
    return mirror, tmp_path / "data"


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included, lock files excepted) -> its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and ".locks" not in p.parts}


def assert_nothing_bad_kept(data: Path, rel: str):
    """No final-named file for ``rel`` and no temporary left: only complete, verified files."""
    files = tree(data) if data.exists() else {}
    assert rel not in files
    assert all(TOY[k] == v for k, v in files.items()), sorted(files)


# --- the real data sets -------------------------------------------------------------------------


def test_full_fetch_through_a_mirror_is_byte_identical(tmp_path, monkeypatch, capsys):
    source = os.environ.get("JATTN_DATA")
    if not source:
        pytest.skip("JATTN_DATA is not set: point it at a data folder (`jattn data fetch` fills one) to test a "
                    "full fetch of every data set through a mirror")
    source = Path(source)
    monkeypatch.delenv("JATTN_DATA_MIRROR", raising=False)
    out = tmp_path / "data"
    with serve(source) as url:
        main(["data", "fetch", "--mirror", url, "--data-dir", str(out), "--no-progress"])
    main(["data", "verify", "--data-dir", str(out)])
    assert "verified" in capsys.readouterr().out
    entries = M.files()
    for e in entries:
        rel = f"{e.dataset}/{e.path}"
        assert (out / rel).read_bytes() == (source / rel).read_bytes(), rel
    # the manifest covers the whole data folder (its README and hidden bookkeeping aside)
    theirs = {k for k in tree(source) if k != "README.md" and not any(s.startswith(".") for s in k.split("/"))}
    assert theirs == {f"{e.dataset}/{e.path}" for e in entries}
    assert set(tree(out)) == theirs  # no temporary or staging file left


def test_manifest_pins_every_source_at_a_commit():
    known, entries = M.load()
    assert set(known) == {e.dataset for e in entries} and entries
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256) and e.size >= 0 and e.license and e.checked
        for url in e.source:
            assert re.fullmatch(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/[0-9a-f]{40}/.+", url), url
            assert url.split("/")[5] in known[e.dataset]["commit"], (url, known[e.dataset]["commit"])
        assert (e.transform == "empty") == (not e.source)
    assert [e.transform for e in entries if e.transform == "empty"] == [
        e.transform for e in entries if e.size == 0 and e.sha256 == sha(b"")]


def test_data_path_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"`jattn data fetch ud-english-ewt`.*JATTN_DATA"):
        jattn.data_path("ud-english-ewt")
    with pytest.raises(FileNotFoundError, match=rf"`jattn data fetch gap --data-dir {re.escape(str(tmp_path))}`"):
        jattn.data_path("gap", tmp_path)
    with pytest.raises(ValueError, match="unknown data set 'nope'.*ud-english-ewt"):
        jattn.data_path("nope")


# --- a toy manifest over a local mirror ---------------------------------------------------------


def test_fetch_from_a_mirror_then_everything_is_present(toy, capsys):
    mirror, data = toy
    with serve(mirror) as url:
        assert F.fetch(folder=data, mirror=url, progress=False)["fetched"] == 3
        assert tree(data) == TOY
        assert F.fetch(folder=data, mirror=url, progress=False) == {"folder": str(data), "fetched": 0, "present": 3}
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.stat().st_mode & 0o777 for p in (data / "toy").rglob("*") if p.is_file()}
    assert modes == {0o666 & ~umask}  # the user's umask, not mkstemp's 0600: a shared folder stays readable
    assert jattn.data_path("toy", data) == data / "toy"
    main(["data", "list", "--data-dir", str(data)])
    assert re.search(r"toy\s.*\syes\s", capsys.readouterr().out)


def test_mirror_from_the_environment_and_one_data_set(toy, monkeypatch, capsys):
    mirror, data = toy
    with serve(mirror) as url:
        monkeypatch.setenv("JATTN_DATA_MIRROR", url)
        monkeypatch.setenv("JATTN_DATA", str(data))
        main(["data", "fetch", "toy2", "--no-progress"])
    assert tree(data) == {"toy2/c.txt": TOY["toy2/c.txt"]}
    main(["data", "list"])
    out = capsys.readouterr().out
    assert re.search(r"toy\s.*\sno\s", out) and re.search(r"toy2\s.*\syes\s", out)


@pytest.mark.parametrize("fault", ["flipped byte", "truncated"])
def test_wrong_bytes_on_the_mirror_are_refused(toy, fault):
    mirror, data = toy
    good = TOY["toy/a.txt"]
    (mirror / "toy/a.txt").write_bytes(good[:3] + bytes([good[3] ^ 1]) + good[4:] if fault == "flipped byte"
                                       else good[:-2])
    with serve(mirror) as url:
        with pytest.raises(ValueError, match=r"toy/a\.txt: the downloaded bytes do not match the manifest's sha256"
                                             r".*nothing was kept.*Fix: put the manifest's toy/a\.txt on the mirror"):
            F.fetch(folder=data, mirror=url, progress=False)
        assert_nothing_bad_kept(data, "toy/a.txt")
        (mirror / "toy/a.txt").write_bytes(good)
        F.fetch(folder=data, mirror=url, progress=False)
    assert tree(data) == TOY


class ShortBody(Quiet):
    """Announces the full length, sends half, closes the connection."""

    def do_GET(self):
        body = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True


def test_a_connection_cut_midway_is_an_error(toy):
    mirror, data = toy
    with serve(mirror, ShortBody) as url:
        with pytest.raises(OSError, match=r"toy/a\.txt: download failed"):
            F.fetch(["toy"], folder=data, mirror=url, progress=False)
    assert_nothing_bad_kept(data, "toy/a.txt")


def test_a_missing_file_on_the_mirror_is_an_http_error(toy, capsys):
    mirror, data = toy
    (mirror / "toy/sub/b.txt").rename(mirror / "elsewhere")
    with serve(mirror) as url:
        with pytest.raises(SystemExit) as stop:
            main(["data", "fetch", "--mirror", url, "--data-dir", str(data), "--no-progress"])
        assert stop.value.code == (f"jattn data: error: {url}/toy/sub/b.txt: HTTP 404. Fix: put the manifest's "
                                   f"toy/sub/b.txt on the mirror {url}, or fetch without --mirror (and without "
                                   "JATTN_DATA_MIRROR)")
        assert_nothing_bad_kept(data, "toy/sub/b.txt")
        (mirror / "elsewhere").rename(mirror / "toy/sub/b.txt")
        main(["data", "fetch", "--mirror", url, "--data-dir", str(data), "--no-progress"])
    assert tree(data) == TOY
    assert "2 file(s) fetched, 1 already present" in capsys.readouterr().out  # a.txt was kept from the failed run


def test_a_stalled_server_times_out(toy):
    mirror, data = toy
    release = threading.Event()

    class Stall(Quiet):
        def do_GET(self):
            release.wait(10)  # answers nothing until the test is over (or 10 s)

    try:
        with serve(mirror, Stall) as url:
            start = time.monotonic()
            with pytest.raises(TimeoutError, match=r"toy/a\.txt: no answer within 1 s.*--timeout"):
                F.fetch(folder=data, mirror=url, timeout=1, progress=False)
            assert time.monotonic() - start < 5
            release.set()
    finally:
        release.set()
    assert_nothing_bad_kept(data, "toy/a.txt")
    with serve(mirror) as url:
        F.fetch(folder=data, mirror=url, timeout=1, progress=False)
    assert tree(data) == TOY


def test_an_interrupted_fetch_is_redone_cleanly(toy):
    """What a killed fetch can leave: pooch's and our temporary files, a final name with wrong bytes
    (put there by hand: fetch never does)."""
    mirror, data = toy
    (data / "toy/sub").mkdir(parents=True)
    (data / "toy/tmpab12cd_9").write_bytes(b"alp")
    (data / "toy/sub/.b.txt.k2j4.part").write_bytes(b"xx")
    (data / "toy/a.txt").write_bytes(b"alpha\nbeta!\n")
    with serve(mirror) as url:
        assert F.fetch(folder=data, mirror=url, progress=False)["fetched"] == 3
    assert tree(data) == TOY


def test_two_concurrent_fetches_end_with_correct_files(toy):
    mirror, data = toy

    class Slow(Quiet):
        def do_GET(self):
            time.sleep(0.2)
            super().do_GET()

    results, errors = [], []

    def run(url):
        try:
            results.append(F.fetch(folder=data, mirror=url, progress=False))
        except Exception as e:  # reported below
            errors.append(e)

    with serve(mirror, Slow) as url:
        threads = [threading.Thread(target=run, args=(url,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert not errors and len(results) == 2
    # the data set lock: each data set's files are fetched by one of the two and found by the other (which
    # fetch takes which set depends on the threads' timing: "toy" by one, "toy2" by either)
    assert sum(r["fetched"] for r in results) == len(TOY) and sum(r["present"] for r in results) == len(TOY)
    assert tree(data) == TOY


def test_verify_names_a_corrupted_and_a_missing_file(toy, capsys):
    mirror, data = toy
    with serve(mirror) as url:
        F.fetch(folder=data, mirror=url, progress=False)
    (data / "toy/sub/b.txt").write_bytes(b"x" * 4999 + b"y")
    (data / "toy2/c.txt").unlink()
    with pytest.raises(SystemExit) as stop:
        main(["data", "verify", "--data-dir", str(data)])
    assert stop.value.code == (f"jattn data: error: 2 of 3 file(s) missing or wrong in {data}. "
                               f"Fix: `jattn data fetch toy toy2` --data-dir {data}")
    out = capsys.readouterr().out
    assert f"sha256 differs from the manifest: {data / 'toy/sub/b.txt'}" in out
    assert f"missing: {data / 'toy2/c.txt'}" in out and "a.txt" not in out
    with pytest.raises(FileNotFoundError, match="`jattn data fetch toy2 --data-dir"):
        jattn.data_path("toy2", data)


def test_canonical_sources_and_their_transforms(tmp_path, monkeypatch):
    """No mirror: each file from its source(s), transformed, verified."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    plain, gz = b"one\ntwo\n", gzip.compress(b"zipped\n" * 100)
    first, second = b"sentence\tlabel\na\t1\n", b"sentence\tlabel\nb\t0\n"
    for name, data in (("plain", plain), ("x.gz", gz), ("first.tsv", first), ("second.tsv", second)):
        (upstream / name).write_bytes(data)
    with serve(upstream) as url:
        entries = [
            {"dataset": "t", "path": "plain", "size": len(plain), "sha256": sha(plain), "source": f"{url}/plain",
             "transform": "verbatim"},
            {"dataset": "t", "path": "x", "size": 700, "sha256": sha(b"zipped\n" * 100), "source": f"{url}/x.gz",
             "source_sha256": sha(gz), "transform": "gunzip"},
            {"dataset": "t", "path": "both.tsv", "size": 21, "sha256": sha(first + b"b\t0\n"),
             "source": [f"{url}/first.tsv", f"{url}/second.tsv"], "source_sha256": [sha(first), sha(second)],
             "transform": "concat-drop-header"},
            {"dataset": "t", "path": "LICENSE", "size": 0, "sha256": sha(b""), "source": None, "transform": "empty"}]
        monkeypatch.setattr(M, "MANIFEST", write_manifest(tmp_path / "m.json", entries))
        monkeypatch.delenv("JATTN_DATA_MIRROR", raising=False)
        data = tmp_path / "data"
        assert F.fetch(folder=data, progress=False)["fetched"] == 4
        assert tree(data) == {"t/plain": plain, "t/x": b"zipped\n" * 100, "t/both.tsv": first + b"b\t0\n",
                              "t/LICENSE": b""}
        # a source whose bytes changed upstream is refused before anything is built
        (upstream / "x.gz").write_bytes(gzip.compress(b"changed\n"))
        (data / "t/x").unlink()
        with pytest.raises(ValueError, match=r"x\.gz: the downloaded bytes do not match.*--mirror"):
            F.fetch(["t"], folder=data, progress=False)
        assert set(tree(data)) == {"t/plain", "t/both.tsv", "t/LICENSE"}  # nothing of x, staged or not


def test_bad_arguments_are_named(toy):
    _, data = toy
    with pytest.raises(ValueError, match="unknown data set 'nope'; known: toy, toy2"):
        F.fetch(["nope"], folder=data)
    with pytest.raises(ValueError, match="not an http"):
        F.fetch(folder=data, mirror="/some/folder")
    with pytest.raises(ValueError, match="timeout must be positive"):
        F.fetch(folder=data, mirror="http://127.0.0.1:9", timeout=0)


def test_readme_table_matches_the_manifest():
    from jattn.cli.data import _size

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|.*$", text, re.M)}
    known = M.datasets()
    assert set(rows) == set(known)
    for name, meta in known.items():
        size = _size(sum(e.size for e in M.files([name])))
        assert rows[name].startswith(f"| `{name}` | {size} | {meta['license']} | "), rows[name]
    total = sum(e.size for e in M.files()) / 1e6
    assert re.search(rf"public data sets \(≈ {round(total)} MB\)", text)


def test_a_data_folder_that_is_a_file_is_named(tmp_path, monkeypatch, capsys):
    from jattn.cli import main

    f = tmp_path / "data.txt"
    f.write_text("x")
    for argv in (["data", "verify", "--data-dir", str(f)], ["data", "list", "--data-dir", str(f)]):
        with pytest.raises(SystemExit, match=r"the data folder .*data\.txt is a file, not a folder"):
            main(argv)
    monkeypatch.setenv("JATTN_DATA", str(f))
    with pytest.raises(NotADirectoryError, match="JATTN_DATA .* is a file"):
        jattn.data_path("sst2")
