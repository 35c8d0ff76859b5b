"""Named artefacts: made by name into the cache ($JATTN_CACHE), found there by ``jattn.load(name)``;
a known name not made yet names the command that makes it; a local folder wins over a name; a hub
id still goes to the Hugging Face cache; ``jattn models list|make|path``; one cache location.

The recipe made here is a tiny one (a random 2-layer BERT, a separable labelled set, 1 epoch)
registered beside the real ones, so making it takes seconds."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn import artefacts
from jattn.artefacts import making
from jattn.cli import main
from jattn.io import artefacts as folders, checkpoints, glue
from jattn.training import finetune

WORDS = ["red", "green", "blue", "small", "large", "old", "new", "warm"]


def separable(n: int, seed: int) -> list[tuple[str, int]]:
    """Label 1 iff the text contains 'cat' (else 'dog'), among random filler words."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=rng.integers(2, 6)))
        words.insert(int(rng.integers(0, len(words) + 1)), "cat" if i % 2 else "dog")
        rows.append((" ".join(words), i % 2))
    return rows


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no folder named like an artefact in the working directory
    return tmp_path / "cache"


@pytest.fixture
def tiny_recipe(tiny_bert_folder, monkeypatch):
    """A recipe "tiny-sst2": the tiny random BERT fine-tuned 1 epoch on 32 separable sentences
    (glue.read_task answers with them instead of the SST-2 files)."""
    data = {"train": separable(32, 0), "dev": separable(16, 1)}
    monkeypatch.setattr(glue, "read_task", lambda task, split, root=None: data[split])
    recipe = artefacts.Recipe("tiny-sst2", "a tiny random encoder fine-tuned on a separable set", "seconds",
                              base=str(tiny_bert_folder), task="sst2", epochs=1,
                              options=(("batch_size", 8), ("max_length", 16), ("learning_rate", 1e-3)))
    monkeypatch.setitem(artefacts.RECIPES, recipe.name, recipe)
    return recipe


def cli(argv, capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``jattn ARGV``."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def test_default_cache_is_jattn_cache_else_the_user_cache(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.delenv("JATTN_CACHE", raising=False)
    assert checkpoints.default_cache_dir() == Path(platformdirs.user_cache_dir("jattn"))
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "c"))
    assert checkpoints.default_cache_dir() == tmp_path / "c"
    assert folders.models_dir() == tmp_path / "c" / "models"
    assert folders.models_dir(tmp_path / "other") == tmp_path / "other" / "models"


def test_make_by_name_then_load_by_name(cache, tiny_recipe, capsys, monkeypatch):
    with pytest.raises(folders.ArtefactNotMade) as err:
        jattn.load("tiny-sst2")
    assert "jattn models make tiny-sst2" in str(err.value) and str(cache / "models" / "tiny-sst2") in str(err.value)

    code, out, err = cli(["models", "make", "tiny-sst2", "--no-progress"], capsys)
    assert code == 0, err
    folder = cache / "models" / "tiny-sst2"
    assert (folder / "DONE").is_file() and str(folder) in out
    assert not (cache / "models" / "tiny-sst2-work").exists()  # the resumable state is removed once made
    record = json.loads((folder / "finetune.json").read_text())
    assert record["complete"] and len(record["history"]) == 1 and record["config"]["batch_size"] == 8

    model = jattn.load("tiny-sst2")
    assert model.source == str(folder) and model.config.num_labels == 2
    batch = model.tokenize(["red cat", "old dog"], max_length=16)
    assert np.asarray(model.forward(batch).logits).shape == (2, 2)

    assert cli(["models", "path", "tiny-sst2"], capsys)[1].strip() == str(folder)
    assert cli(["models", "path"], capsys)[1].strip() == str(cache / "models")
    listed = {line.split()[0]: line for line in cli(["models", "list"], capsys)[1].splitlines()}
    assert listed["tiny-sst2"].split()[1] == "made" and listed["minilm-sst2"].split()[1:3] == ["not", "made"]

    def must_not_run(*a, **k):
        raise AssertionError("a made artefact was made again")

    monkeypatch.setitem(making.MAKERS, "finetune", must_not_run)
    assert making.make("tiny-sst2", log=None) == folder


def test_interrupted_make_resumes(cache, tiny_recipe, capsys, monkeypatch):
    """Ctrl-C during the recipe: exit 130 naming the command, the artefact is 'partly made' (not
    loadable, the load error says to resume), and the same command finishes it from the saved state."""
    real_fit = finetune.ClassifierTrainer.fit

    def fit_then_interrupt(self, max_steps=None, progress=True):
        real_fit(self, max_steps=2, progress=progress)
        self.save()
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune.ClassifierTrainer, "fit", fit_then_interrupt)
    code, _, err = cli(["models", "make", "tiny-sst2", "--no-progress"], capsys)
    assert code == 130 and "jattn models make tiny-sst2" in err, err
    assert folders.status("tiny-sst2") == "partly made"
    with pytest.raises(folders.ArtefactNotMade, match="resume it"):
        jattn.load("tiny-sst2")

    starts = []

    def fit_recording_start(self, max_steps=None, progress=True):
        starts.append(self.meta["micro_step"])
        return real_fit(self, max_steps=max_steps, progress=progress)

    monkeypatch.setattr(finetune.ClassifierTrainer, "fit", fit_recording_start)
    code, out, err = cli(["models", "make", "tiny-sst2", "--no-progress"], capsys)
    assert code == 0 and "resuming tiny-sst2" in out, err
    assert starts == [2]  # from the saved state, not from scratch
    assert folders.status("tiny-sst2") == "made"
    history = json.loads((cache / "models" / "tiny-sst2" / "finetune.json").read_text())["history"]
    assert history[-1]["micro_step"] == 4  # 32 sentences in batches of 8: one epoch, not more


def test_known_but_unmade_name_names_the_command_and_its_time(cache, capsys):
    for name, recipe in artefacts.RECIPES.items():
        with pytest.raises(FileNotFoundError) as err:
            jattn.load(name)
        message = str(err.value)
        command = f"jattn models {'fetch' if recipe.fetched else 'make'} {name}"  # downloaded or computed
        assert command in message and recipe.takes in message, message
        code, _, err_text = cli(["models", "path", name], capsys)
        assert code == 1 and command in err_text


def test_a_local_folder_named_like_an_artefact_wins(cache, tiny_bert_folder, tmp_path, monkeypatch):
    shutil.copytree(tiny_bert_folder, cache / "models" / "minilm-sst2")  # a made artefact in the cache
    (cache / "models" / "minilm-sst2" / "DONE").write_text("made\n")
    assert jattn.load("minilm-sst2").source == str(cache / "models" / "minilm-sst2")

    local = tmp_path / "work"
    shutil.copytree(tiny_bert_folder, local / "minilm-sst2")
    monkeypatch.chdir(local)
    assert jattn.load("minilm-sst2").source == "minilm-sst2"  # the folder in the working directory


def test_a_hub_id_still_goes_to_the_hugging_face_cache(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("no-such-org/no-such-model", "no-such-model"):  # with and without an owner
        with pytest.raises(FileNotFoundError) as err:
            jattn.load(name)
        assert not isinstance(err.value, folders.ArtefactNotMade)
        assert "local Hugging Face cache" in str(err.value)


def test_make_rejects_unknown_names_before_running_any(cache, tiny_recipe, capsys):
    code, _, err = cli(["models", "make", "tiny-sst2", "no-such-artefact"], capsys)
    assert code == 1 and "unknown artefact 'no-such-artefact'" in err and "minilm-sst2" in err
    assert folders.status("tiny-sst2") == "not made"


def test_recipes_follow_the_glue_finetuning_protocol():
    """The two classifiers: the embedded MiniLM with FinetuneConfig's defaults but the epochs
    (CoLA 3, SST-2 1) and the seed (0-4: CLASSIFIER_SEEDS), each reading its own GLUE task and naming
    that data set; the induction models have 5 seeds too."""
    assert artefacts.CLASSIFIER_SEEDS == 5 and "mpnet-cola-s4" in artefacts.RECIPES
    assert "induction-gpt2-s4" in artefacts.RECIPES and "induction-gpt2-s5" not in artefacts.RECIPES
    for name, task in (("minilm-sst2", "sst2"), ("minilm-cola", "cola")):
        for seed, suffix in enumerate(("", "-s1", "-s2", "-s3", "-s4")):
            r = artefacts.RECIPES[name + suffix]
            assert r.kind == "finetune" and r.base is None and r.task == task and r.needs == (task,)
            assert dict(r.options) == {"seed": seed} and f"seed {seed}" in r.what
    assert (artefacts.RECIPES["minilm-cola"].epochs, artefacts.RECIPES["minilm-sst2"].epochs) == (3, 1)


def test_every_committed_checkpoint_is_a_made_artefact_as_recorded():
    """Each folder .gitignore lets into ``checkpoints/`` is what ``make`` leaves: ``DONE``, and a
    ``MANIFEST.json`` naming exactly its files with their sizes and sha256 (mtimes differ in a clone).
    A folder without ``DONE`` is ignored by the studies' committed-or-make lookups, which then remake it.
    The two Multi30k models were made before manifests ("made (unverified)"): the alignment stage's
    key digests that folder's .json files, so a manifest written now would re-key it."""
    root = Path(__file__).resolve().parents[1]
    lines = (root / ".gitignore").read_text().splitlines()
    names = [s[len("!checkpoints/"):].rstrip("/") for s in lines if s.startswith("!checkpoints/") and "." not in s]
    assert len(names) >= 19
    before_manifests = {"multi30k-fr-en-6x8", "multi30k-fr-en-6x8-no-encoder-attention"}
    for name in names:
        out = root / "checkpoints" / name
        assert (out / folders.DONE).is_file(), f"{out} has no DONE: copy it as `jattn models make` left it"
        files = folders.manifest(out)
        assert (files is None) == (name in before_manifests), f"{out}: MANIFEST.json"
        assert files is None or sorted(files) == [p.relative_to(out).as_posix() for p in folders._files(out)], name
        for path, rec in (files or {}).items():
            f = out / path
            assert f.stat().st_size == rec["size"] and folders.sha256(f) == rec["sha256"], f"{name}/{path}"
