"""The studies ``jattn reproduce`` runs, in order; each module's ``stages(profile)`` lists its stages.

``finetune`` makes the classifiers (≥ 3 seeds per model and task) the Kovaleva and Michel stages
analyse; a study's stages may read an earlier study's results (``Stage.needs``).
"""

from __future__ import annotations

import importlib

from jattn.reproduce.pipeline import Profile, Stage

STUDIES = ("finetune", "clark", "kobayashi", "kovaleva", "michel", "voita", "patching", "induction")  # a study module registers here by adding its name


def stages(profile: Profile, only: tuple[str, ...] = ()) -> list[Stage]:
    """The stages of ``only`` (default: every study) and of the stages they need, in run order."""
    for name in only:
        if name not in STUDIES:
            raise ValueError(f"unknown study {name!r}. Fix: pass some of {', '.join(STUDIES)} (or none for all)")
    every = [s for study in STUDIES for s in importlib.import_module(f"{__name__}.{study}").stages(profile)]
    if not only:
        return every
    by_name = {s.name: s for s in every}
    wanted = {s.name for s in every if s.study in only}
    frontier = list(wanted)
    while frontier:  # close over needs
        for need in by_name[frontier.pop()].needs:
            if need not in wanted:
                wanted.add(need)
                frontier.append(need)
    return [s for s in every if s.name in wanted]
