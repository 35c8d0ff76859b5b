"""The studies ``jattn reproduce`` runs. The library knows none of them: experiment scripts
register theirs (``register``), and the command imports a folder of experiments (``load``: the
checkout's ``experiments/`` unless told otherwise) whose ``__init__.py`` registers them in run
order. A study is a name, ``stages(profile) -> list[Stage]`` (its stages may read an earlier
study's results: ``Stage.needs``) and its ``Rules``: how each claim is judged and what it quotes
(``jattn.reproduce.verdicts``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from jattn.reproduce.failures import describe_failure
from jattn.reproduce.pipeline import Profile, Stage, repository_root
from jattn.reproduce.verdicts import Evidence, Verdict

__all__ = ["default_folder", "load", "names", "register", "register_rules", "Rules", "rules", "stages", "titles"]

_REGISTERED: dict[str, Callable[[Profile], list[Stage]]] = {}  # name -> stages(profile), in run order
_TITLES: dict[str, str] = {}  # name -> the REPORT's section title
_RULES: dict[str, "Rules"] = {}  # name -> how its claims are judged and described


@runtime_checkable
class Rules(Protocol):
    """A study's decision rules and declarations: a module with these two functions, typically
    ``experiments/<study>/verdicts.py``, and a ``PROVENANCE`` line saying when its rules were
    written relative to the records they judge (the REPORT quotes it in the study's section and
    marks each verdict of a post hoc rule: docs/STATISTICS.md's Provenance table); rules written at
    different times may say it per claim with an optional ``provenance(claim) -> str``."""

    def judge(self, claim: dict, evidence: Evidence) -> Verdict:
        """The claim's verdict by the rule of its type (``jattn.reproduce.verdicts``)."""

    def describe(self, claim: dict) -> dict[str, str]:
        """``{"paper": the paper's number with its table or figure, "differs": what differs from
        the paper's protocol (model, data, size, selection), "finding": the paper's finding the
        claim tests, in a few words shared by the claims that test it, "on": the model or setting
        it is tested on}`` (the REPORT's headline groups the verdicts by finding and setting)."""


def register(name: str, stages_of: Callable[[Profile], list[Stage]], title: str) -> None:
    """Add the study ``name``, whose stages are ``stages_of(profile)`` (each named "<name>.<step>"),
    after those registered so far; ``title`` heads its section of the REPORT (the paper, or what
    the study is). Registering a name again is refused unless it is the same function (an
    experiments package imported twice). Its claims are judged by the rules ``register_rules``
    gives it."""
    if name in _REGISTERED and _REGISTERED[name] is not stages_of:
        raise ValueError(f"study {name!r} is registered already (by {_REGISTERED[name].__module__}). "
                         "Fix: give the new study another name")
    if "." in name or not name:
        raise ValueError(f"study name {name!r}: a non-empty name without '.' (stages are named '<study>.<step>')")
    _REGISTERED[name] = stages_of
    _TITLES[name] = title


def register_rules(name: str, rules: Rules) -> None:
    """Judge and describe the claims of the study ``name`` by ``rules`` (a module apart from the
    stages', so that editing a rule re-judges the claims without rerunning a stage)."""
    if name not in _REGISTERED:
        raise ValueError(f"no study {name!r} is registered. Fix: register its stages first (studies.register)")
    if not isinstance(rules, Rules):
        raise TypeError(f"the rules of {name!r} need judge(claim, evidence) and describe(claim) (studies.Rules)")
    _RULES[name] = rules


def names() -> tuple[str, ...]:
    return tuple(_REGISTERED)


def rules() -> dict[str, Rules]:
    """Every registered study's ``Rules``, in run order."""
    return dict(_RULES)


def titles() -> dict[str, str]:
    """Every registered study's REPORT title, in run order."""
    return dict(_TITLES)


def default_folder() -> Path | None:
    """``experiments/`` of the checkout holding the working directory, else of the checkout the
    jattn package is installed from (an editable install), else None."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        root = repository_root(start)
        if root is not None and (root / "experiments" / "__init__.py").is_file():
            return root / "experiments"
    return None


def load(folder: Path | None = None) -> tuple[str, ...]:
    """Import the experiments package ``folder`` (default: ``default_folder()``), which registers
    its studies; returns every registered name. Its import failing, or registering no study, is an
    ``ImportError`` naming the package, the file and line, and what went wrong."""
    folder = default_folder() if folder is None else Path(folder).resolve()
    if folder is None:
        raise FileNotFoundError("no experiments folder found: jattn reproduce runs the studies of a jattn checkout. "
                                "Fix: run it inside the checkout, or pass --experiments FOLDER (a package whose "
                                "__init__.py registers studies with jattn.reproduce.studies.register)")
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"the experiments folder {folder} {what}. Fix: pass the folder whose __init__.py "
                                "registers the studies (--experiments)")
    if not (folder / "__init__.py").is_file():
        raise FileNotFoundError(f"{folder} is no experiments package (it has no __init__.py). Fix: pass the folder "
                                "whose __init__.py registers the studies")
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    try:
        module = importlib.import_module(folder.name)
    except (Exception, SystemExit) as e:  # a stop (KeyboardInterrupt) is no failure of the package
        raise ImportError(f"the experiments package {folder} failed to import: {describe_failure(e)}. Fix: correct "
                          "it (`jattn --debug` shows the traceback)") from e
    if Path(module.__file__).resolve().parent != folder:
        raise ImportError(f"`import {folder.name}` finds {module.__file__}, not {folder}. Fix: rename one of them, "
                          "or run from the folder above the experiments")
    if not _REGISTERED:
        raise ImportError(f"the experiments package {folder} registers no study. Fix: call "
                          "jattn.reproduce.studies.register(name, stages, title) in its __init__.py (or a module "
                          "it imports)")
    return names()


def stages(profile: Profile, only: tuple[str, ...] = ()) -> list[Stage]:
    """The stages of ``only`` (study names, or single stages' names such as ``finetune.minilm-sst2-s3``;
    default: every registered study) and of the stages they need, in run order."""
    for name in only:
        if name not in _REGISTERED and name.split(".")[0] not in _REGISTERED:
            raise ValueError(f"unknown study {name!r}. Fix: pass some of {', '.join(_REGISTERED)} (or none for all), "
                             "or a stage name that `jattn reproduce --list` prints")
    every = [s for study in _REGISTERED for s in _stages_of(study, profile)]
    if not only:
        return every
    by_name = {s.name: s for s in every}
    if unknown := [n for n in only if n not in _REGISTERED and n not in by_name]:
        raise ValueError(f"unknown stage {unknown[0]!r} (this profile's {unknown[0].split('.')[0]} study has no such "
                         "stage). Fix: a name that `jattn reproduce --list` prints")
    wanted = {s.name for s in every if s.study in only or s.name in only}
    frontier = list(wanted)
    while frontier:  # close over needs
        for need in by_name[frontier.pop()].needs:
            if need not in wanted:
                wanted.add(need)
                frontier.append(need)
    return [s for s in every if s.name in wanted]


def _stages_of(study: str, profile: Profile) -> list[Stage]:
    """``study``'s stages under ``profile``, checked: a non-empty list of ``Stage``s named
    "<study>.<step>", none twice; else a ``ValueError`` naming the study and what is wrong."""
    where = (f"study {study!r} ({getattr(_REGISTERED[study], '__module__', '?')}): its stages(profile) for the "
             f"{profile.name} profile")
    try:
        stages = _REGISTERED[study](profile)
    except (Exception, SystemExit) as e:
        raise ValueError(f"{where} raised {describe_failure(e)}. Fix: correct it (`jattn --debug` shows the "
                         "traceback)") from e
    if not isinstance(stages, (list, tuple)) or not stages:
        raise ValueError(f"{where} returned {stages!r:.60}, not a list of at least one Stage. Fix: return the "
                         "study's stages, each a jattn.reproduce.pipeline.Stage")
    if bad := [s for s in stages if not isinstance(s, Stage)]:
        raise ValueError(f"{where} holds {bad[0]!r:.60}, not a Stage. Fix: return "
                         "jattn.reproduce.pipeline.Stage objects")
    named = [s.name for s in stages]
    if other := [n for n in named if not (n.startswith(f"{study}.") and n != f"{study}.")]:
        raise ValueError(f"{where} names a stage {other[0]!r}, not '{study}.<step>'. Fix: name each stage of a "
                         f"study after it ('{study}.{other[0].rsplit('.', 1)[-1] or 'step'}')")
    if twice := sorted({n for n in named if named.count(n) > 1}):
        raise ValueError(f"{where} names two stages {twice[0]}: the second would replace the first's record. "
                         "Fix: give each stage a name of its own")
    return list(stages)
