"""What more than one study reads: the fine-tuned classifiers, the translation model, GAP's
pages and random pruning orders.

- **The classifiers** (``models``, ``seeds``, ``artefact``, ``classifier``, ...): the SST-2 and
  CoLA classifiers that ``finetune`` makes and scores, and that ``kovaleva``, ``michel``,
  ``kobayashi`` and ``patching`` analyse. Full profile: the named artefacts
  ``<model>-<task>[-s1|-s2]`` (``jattn.artefacts``); quick profile: MiniLM trained on
  ``QUICK_TRAIN`` sentences into the run's work folder.
- **The translation model** (``MODEL``, ``translation_model``, ``read_multi30k``): the Multi30k
  fr→en model that ``voita`` prunes and ``patching`` patches (full profile: the committed or made
  artefact; quick: a tiny model trained into the work folder).
- **GAP's pages** (``gap_pages``): the Wikipedia page of each GAP row, the document the
  intervals of ``clark``'s and ``patching``'s GAP claims resample.
- **Random pruning orders** (``random_orders``): the band of Michel et al.'s pruning curves, in
  ``michel`` and in ``voita``'s Michel baseline.

A study imports this module, ``experiments.papers`` and its own folder, never another study's
folder (``tests/test_architecture.py``). A stage lists ``experiments.common`` in its ``code``
where its key should change with the code here (``jattn.reproduce.pipeline.Stage``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jattn.artefacts import CLASSIFIER_SEEDS
from jattn.reproduce.pipeline import Context, Profile

# ---------------------------------------------------------------- the fine-tuned classifiers

QUICK_TRAIN = 96  # training sentences per quick run


def models(profile: Profile) -> tuple[str, ...]:
    return profile.pick(("minilm", "mpnet"), ("minilm",))


def seeds(profile: Profile) -> tuple[int, ...]:
    return profile.pick(tuple(range(CLASSIFIER_SEEDS)), (0, 1))


def artefact(model: str, task: str, seed: int) -> str:
    """The artefact name of a classifier (seed 0 has the bare name)."""
    return f"{model}-{task}" + (f"-s{seed}" if seed else "")


def base_model(model: str) -> str | None:
    """The pretrained model each fine-tuned classifier of ``model`` starts from (None: the embedded one),
    as the fine-tuning recipes say."""
    from jattn import artefacts

    return artefacts.recipe(artefact(model, "sst2", 0)).base


def classifier(ctx: Context, model: str, task: str, seed: int) -> Path:
    """The folder of a fine-tuned classifier: made (or found made) by its recipe in the full
    profile, trained on ``QUICK_TRAIN`` sentences into the work folder in the quick profile."""
    if ctx.profile.name == "full":
        from jattn.artefacts.making import make

        return make(artefact(model, task, seed), progress=ctx.progress)
    from jattn.training.finetune import FinetuneConfig, finetune_task

    out = ctx.work_root / "models" / artefact(model, task, seed)
    finetune_task(task, out, fc=FinetuneConfig(epochs=1, seed=seed, train_examples=QUICK_TRAIN), progress=False)
    return out


def dev_examples(task: str) -> list[tuple[str, int]]:
    from jattn.io import glue

    return glue.read_task(task, "dev")


def train_majority(task: str) -> int:
    from jattn.io import glue

    labels = np.asarray([y for _, y in glue.read_task(task, "train")])
    return int(np.bincount(labels).argmax())


# ---------------------------------------------------------------- the translation model

MODEL = "multi30k-fr-en-6x8"
TEST = "test_2016_flickr"
COMMITTED = Path(__file__).resolve().parents[1] / "checkpoints"  # the checkout's committed models


def quick_model_config():
    """The quick profile's tiny fr→en model."""
    from jattn.artefacts.translation import TranslationConfig

    return TranslationConfig(limit_train=300, limit_eval=24, vocab_size=400, layers=1, heads=2, d_model=32, ffn=64,
                             epochs=2, patience=0, max_len=24, test_beams=2, val_pairs=24)


def translation_model(ctx: Context) -> Path:
    """The model's folder: the made artefact (full profile), or the quick profile's tiny model
    trained into the work folder."""
    return made_translation(ctx, MODEL, "tiny-fr-en", quick_model_config())


def made_translation(ctx: Context, artefact: str, tiny: str, config) -> Path:
    """Full profile: the copy of ``artefact`` committed in ``checkpoints/`` (made by its recipe), else
    the artefact made in jattn's cache (``jattn models make``); quick: ``config`` trained here."""
    from jattn.io.artefacts import DONE

    if ctx.profile.name == "full":
        from jattn.artefacts.making import make

        committed = COMMITTED / artefact
        return committed if (committed / DONE).is_file() else make(artefact, progress=ctx.progress)
    from jattn.artefacts.translation import train_translation

    out = ctx.work_root / "models" / tiny
    if not (out / DONE).is_file():
        train_translation(out, ctx.work_root / "models" / f"{tiny}-work", config, data_dir=ctx.data_dir,
                          progress=False)
    return out


def read_multi30k(ctx: Context, split: str, side: str, model) -> list[str]:
    """The lines of Multi30k's ``<split>.<side>`` file, prepared as ``model``'s folder says."""
    return model.prepare_texts(ctx.data(f"multi30k/{split}.{side}").read_text(encoding="utf-8").splitlines())


# ---------------------------------------------------------------- GAP's pages

def gap_pages(path: Path) -> dict[str, str]:
    """GAP row id -> its Wikipedia page (the URL column): GAP takes up to a few paragraphs from one
    page (the first 250 usable test rows come from 233 pages), so the page is the document an
    interval resamples (``STATISTICS.md`` §"Resampling unit")."""
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        return {r["ID"]: r["URL"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}


# ---------------------------------------------------------------- Michel et al.'s random pruning orders

def random_orders(n_heads: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` random pruning orders (scores uniform on [0, 1), one generator seeded ``seed``)."""
    rng = np.random.default_rng(seed)
    return [rng.random(n_heads) for _ in range(count)]
