"""The method registry: every method the command line offers, declared in its own module.

A method module registers each method at its bottom::

    register("weights", "attention to [CLS]/[SEP]/...", lambda model, options: ClassAttention())

``name`` is the CLI name and equals the method object's ``name`` (the key of its totals).
``factory(model, options)`` builds the method for a loaded model (``options``: ``Options``,
what the command line passes to every factory). A method's own figures are drawn by
``jattn.viz.figures``, under the same name. Adding a method is one module in
``jattn/analyses/`` that calls ``register``: every module of the package is imported before the
registry is read.

Library errors are exceptions (``ValueError``); the command line turns them into messages.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Options:
    """What the command line hands to every factory."""

    rank_file: Path | None = None  # token frequency ranks, 'rank count vocab_id' per line
    relations: tuple[str, ...] = ()  # dependency relations of a labelled corpus (jattn analyze collects them)
    min_count: int = 100  # 'syntax': relations with fewer scored words stay out of the table (Clark et al. 2019)


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str  # CLI name == method.name
    help: str  # one line for ``jattn analyze --help``
    factory: Callable  # (model, Options) -> Method


_ENTRIES: dict[str, Entry] = {}


def register(name: str, help: str, factory: Callable) -> Entry:
    """Declare a method under its CLI name (called at import of the method's module)."""
    entry = Entry(name, help, factory)
    if name in _ENTRIES and _ENTRIES[name].factory.__module__ != factory.__module__:
        raise ValueError(f"two modules register a method named {name!r}: "
                         f"{_ENTRIES[name].factory.__module__} and {factory.__module__}")
    _ENTRIES[name] = entry
    return entry


def entries() -> dict[str, Entry]:
    """Every registered method, by CLI name (importing every module of ``jattn.analyses``)."""
    package = __name__.rpartition(".")[0]  # jattn.analyses, this module's folder
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{package}.{info.name}")
    return dict(_ENTRIES)


def make_methods(model, names, options: Options = Options()) -> list:
    """The methods ``names`` (CLI names, duplicates dropped) built for ``model``.
    Raises ``ValueError`` naming unknown methods and the known ones."""
    known = entries()
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {', '.join(map(repr, unknown)) or '(none given)'}. "
                         f"Fix: choose from {', '.join(known)}")
    methods = [known[n].factory(model, options) for n in names]
    for n, m in zip(names, methods):
        if m.name != n:
            raise ValueError(f"method registered as {n!r} is named {m.name!r}: the names must agree")
    return methods


def require_rank_file(options: Options, method: str) -> Path:
    """``options.rank_file``, or a ValueError saying how to give one."""
    if options.rank_file is None:
        raise ValueError(f"method {method!r} needs a token frequency rank file ('rank count vocab_id' per "
                         "line, e.g. frequency/rank_count_ids.txt in the data folder: jattn data fetch frequency). "
                         "Fix: pass rank_file=FILE")
    return Path(options.rank_file)
