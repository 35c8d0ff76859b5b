"""Classifier fine-tuning: a tiny model fits a separable task; a stopped run resumes bit for bit;
the exported folder is what jattn and HF PyTorch read; data readers and metrics."""

from __future__ import annotations

import dataclasses

import json

import jax
import numpy as np
import pytest

import jattn
from jattn.io import glue
from jattn.training.finetune import (
    ClassifierTrainer,
    FinetuneConfig,
    finetune,
    length_batches,
    pad_batch,
    with_classifier,
)
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms

WORDS = ["red", "green", "blue", "small", "large", "old", "new", "warm"]


def separable(n: int, seed: int) -> list[tuple[str, int]]:
    """Label 1 iff the text contains 'cat' (else 'dog'), among random filler words."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=rng.integers(2, 7)))
        label = i % 2
        words.insert(int(rng.integers(0, len(words) + 1)), "cat" if label else "dog")
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return jattn.load(save_tiny(tmp_path_factory.mktemp("ft"), "bert-2x4"), use_cache=False)


def test_tiny_model_fits_separable_task(tiny, tmp_path):
    fc = FinetuneConfig(epochs=12, batch_size=16, learning_rate=3e-3, warmup_fraction=0.1, max_length=16)
    record = finetune(tiny, separable(64, 0), separable(32, 1), tmp_path / "out", fc=fc, progress=False)
    assert record["complete"] and record["dev_metric"] == 1.0, record["history"]
    assert (tmp_path / "out" / "DONE").is_file()
    model = jattn.load(tmp_path / "out", use_cache=False)
    assert model.config.num_labels == 2
    batch = model.tokenize([t for t, _ in separable(8, 2)], max_length=16)
    assert np.array_equal(np.asarray(model.forward(batch).logits).argmax(-1), np.arange(8) % 2)
    assert json.loads((tmp_path / "out" / "finetune.json").read_text())["dev_metric"] == 1.0


def test_stop_and_resume_is_bit_for_bit(tiny, tmp_path):
    model = with_classifier(tiny, 2, seed=1)
    data = separable(40, 3)
    fc = FinetuneConfig(epochs=2, batch_size=8, accumulation=2, learning_rate=1e-3, max_length=16, save_every=3)
    whole = ClassifierTrainer(model, fc, tmp_path / "whole", data)
    whole.fit(progress=False)
    first = ClassifierTrainer(model, fc, tmp_path / "parts", data)
    first.fit(max_steps=7, progress=False)  # stops mid-epoch, between the two micro-batches of an update
    assert first.meta["micro_step"] == 7
    resumed = ClassifierTrainer(model, fc, tmp_path / "parts", data)
    assert resumed.meta["micro_step"] == 7
    resumed.fit(progress=False)
    for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert resumed.meta["micro_step"] == whole.meta["micro_step"] == 10
    # the work folder remembers the run's arguments: another learning rate is not trained on silently
    with pytest.raises(ValueError, match=r"learning_rate=0\.001 \(now 0\.002\)"):
        ClassifierTrainer(model, dataclasses.replace(fc, learning_rate=2e-3), tmp_path / "parts", data)


@pytest.mark.parametrize("seconds, saved", [(1e9, [5, 10]), (1e-9, list(range(1, 11)))])
def test_checkpoints_follow_training_time(tiny, tmp_path, monkeypatch, seconds, saved):
    """Besides every ``save_every`` micro-batches and each epoch end, a checkpoint once
    ``save_every_s`` of training time has passed since the last (a long epoch is not lost)."""
    model = with_classifier(tiny, 2, seed=1)
    fc = FinetuneConfig(epochs=2, batch_size=8, learning_rate=1e-3, max_length=16, save_every=1000,
                        save_every_s=seconds)
    trainer = ClassifierTrainer(model, fc, tmp_path / "run", separable(40, 3))
    steps = []
    monkeypatch.setattr(trainer.run, "save", lambda step: steps.append(step))
    trainer.fit(progress=False)
    assert sorted(set(steps)) == saved  # 5 micro-batches an epoch


def test_length_batches_cover_each_example_once():
    lengths = np.random.default_rng(0).integers(3, 40, size=203)
    batches = length_batches(lengths, 16, seed=0, epoch=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(203))
    assert [b.tolist() for b in batches] == [b.tolist() for b in length_batches(lengths, 16, seed=0, epoch=1)]
    assert [b.tolist() for b in batches] != [b.tolist() for b in length_batches(lengths, 16, seed=0, epoch=2)]


def test_padded_rows_weigh_nothing(tiny):
    """A last, short batch padded with empty rows gives the loss of the real rows alone."""
    from jattn.training.finetune import _model_inputs
    from jattn.nn.losses import classification_loss
    from jattn.nn import encoder

    model = with_classifier(tiny, 2)
    ids = [np.asarray(x) for x in model.tokenizer(["a cat", "red dog here", "old"])["input_ids"]]
    labels = np.array([1, 0, 1])
    full = pad_batch(ids, labels, np.arange(3), 3, 0, 16)
    padded = pad_batch(ids, labels, np.arange(3), 8, 0, 16)
    assert padded["weights"].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]

    def loss(batch):
        logits = encoder.forward(model.params, model.config, _model_inputs(batch), internals=None)[0]["logits"]
        return float(classification_loss(logits, batch["labels"], batch["weights"])), float(np.abs(logits).max())

    (a, scale), (b, _) = loss(full), loss(padded)  # a loss's rounding is that of its logits: their scale
    assert_close(b, a, terms=model_terms(model.config, 16) + 8, scale=scale)  # 8 rows: other float32 orders


def test_too_long_text_is_an_error_not_a_cut(tiny, tmp_path):
    model = with_classifier(tiny, 2)
    with pytest.raises(ValueError, match="exceed max_length=8"):
        ClassifierTrainer(model, FinetuneConfig(max_length=8), tmp_path, [("a " * 20, 0), ("b", 1)])


def test_glue_readers_and_metrics(data_set):
    data_set("sst2"), data_set("cola")  # read_task's default folder; skips when absent
    sst2, cola = glue.read_task("sst2", "dev"), glue.read_task("cola", "train")
    assert len(sst2) == 872 and len(cola) == 8551 and len(glue.read_task("sst2", "train")) == 67349
    assert {y for _, y in sst2} == {0, 1} and all(t for t, _ in cola)
    rng = np.random.default_rng(0)
    p, g = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    from sklearn.metrics import matthews_corrcoef

    assert abs(glue.matthews_corr(p, g) - matthews_corrcoef(g, p)) < 1e-12
    assert glue.matthews_corr(np.ones(5), np.array([0, 1, 1, 0, 1])) == 0.0  # empty margin
    with pytest.raises(ValueError, match="splits"):
        glue.read_task("cola", "test")


def test_cli_finetune_on_files(tiny, tmp_path, capsys):
    from jattn.cli import main

    for name, rows in (("train.tsv", separable(32, 4)), ("dev.tsv", separable(16, 5))):
        (tmp_path / name).write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    main(["finetune", "--model", str(tiny.source), "--train", str(tmp_path / "train.tsv"), "--dev",
          str(tmp_path / "dev.tsv"), "--out", str(tmp_path / "m"), "--epochs", "1", "--batch-size", "8",
          "--max-length", "16"])
    assert "dev accuracy (%)" in capsys.readouterr().out and (tmp_path / "m" / "DONE").is_file()
    doc = json.loads((tmp_path / "m" / "results.json").read_text())
    record = json.loads((tmp_path / "m" / "finetune.json").read_text())
    assert doc["metric"] == "accuracy (%)" and doc["dev_metric"] == pytest.approx(100 * record["dev_metric"])
    assert "dev accuracy (%)" in (tmp_path / "m" / "report.md").read_text()
    assert (tmp_path / "m" / "figures" / "training.png").is_file() and jattn.load(tmp_path / "m").config.num_labels
    with pytest.raises(SystemExit, match="either --task or --train"):
        main(["finetune", "--out", str(tmp_path / "x")])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's\n")
    with pytest.raises(SystemExit) as refused:  # finetune has no --overwrite: the fix must not name one
        main(["finetune", "--model", str(tiny.source), "--train", str(tmp_path / "train.tsv"), "--dev",
              str(tmp_path / "dev.tsv"), "--out", str(mine), "--epochs", "1"])
    assert "holds no jattn results" in str(refused.value) and "overwrite" not in str(refused.value)
    assert (mine / "notes.txt").read_text() == "the user's\n"


def test_sigint_checkpoints_and_a_rerun_ends_with_the_same_weights(tiny, tmp_path, monkeypatch):
    """Ctrl-C during a micro-batch: the trainer finishes it, saves, raises KeyboardInterrupt; a new
    trainer on the same work folder resumes there and ends bit for bit where an uninterrupted run
    ends."""
    import os
    import signal

    from jattn.training import finetune as ft

    model = with_classifier(tiny, 2, seed=1)
    data = separable(40, 3)
    fc = FinetuneConfig(epochs=2, batch_size=8, learning_rate=1e-3, max_length=16, save_every=100)
    whole = ClassifierTrainer(model, fc, tmp_path / "whole", data)
    whole.fit(progress=False)

    calls = []
    step = ft.train_step

    def interrupted_step(*args, **kwargs):  # the signal arrives while the third micro-batch runs
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return step(*args, **kwargs)

    monkeypatch.setattr(ft, "train_step", interrupted_step)
    part = ClassifierTrainer(model, fc, tmp_path / "part", data)
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a pytest-xdist worker
    with pytest.raises(KeyboardInterrupt):
        part.fit(progress=False)
    assert part.meta["micro_step"] == 3 and signal.getsignal(signal.SIGINT) is before  # the handler is put back
    monkeypatch.setattr(ft, "train_step", step)
    resumed = ClassifierTrainer(model, fc, tmp_path / "part", data)
    assert resumed.meta["micro_step"] == 3
    resumed.fit(progress=False)
    for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


KILLED_RUN = """
import sys, numpy as np, jax, jattn
sys.path.insert(0, {tests!r})
from test_finetune import separable
from jattn.training.finetune import ClassifierTrainer, FinetuneConfig, with_classifier
model = with_classifier(jattn.load({folder!r}, use_cache=False), 2, seed=1)
fc = FinetuneConfig(epochs=3, batch_size=8, learning_rate=1e-3, max_length=16, save_every=1)
for work, out in {runs!r}:  # (work folder, weights file) after each other
    trainer = ClassifierTrainer(model, fc, work, separable(40, 3))
    trainer.fit(progress=False)
    np.savez(out, *[np.asarray(a) for a in jax.tree.leaves(trainer.state)])
"""


# the resume path of test_sigint_checkpoints_and_a_rerun_ends_with_the_same_weights, after a kill in which no handler
# runs and a save may be cut short (two processes: 33 s)
@pytest.mark.slow(twin="tests/test_finetune.py::test_sigint_checkpoints_and_a_rerun_ends_with_the_same_weights")
def test_sigkill_then_rerun_ends_with_the_same_weights(tiny_bert_folder, tmp_path):
    """SIGKILL (no handler runs) while a run saves a checkpoint after every micro-batch: the rerun
    resumes from the last complete checkpoint and ends bit for bit where an uninterrupted run
    (the same script, another work folder: the killed process runs it first) ends."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    def script(*runs):
        return KILLED_RUN.format(tests=str(Path(__file__).parent), folder=str(tiny_bert_folder),
                                 runs=[(str(work), str(out)) for work, out in runs])

    # the two processes share compiled programs through JAX's cache (the same executables: bit for bit);
    # the first runs the uninterrupted reference, then the run that is killed (one start-up fewer)
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    run = subprocess.Popen([sys.executable, "-c", script((tmp_path / "whole", tmp_path / "whole.npz"),
                                                         (tmp_path / "part", tmp_path / "part.npz"))], env=env)
    last = tmp_path / "part" / "last"
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None and max(
            [int(p.name) for p in last.glob("*") if p.name.isdigit()], default=0) < 3:  # killed after step 3's save
        time.sleep(0.02)
    assert run.poll() is None, "the run ended before it could be killed: make it longer"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert (tmp_path / "whole.npz").is_file() and not (tmp_path / "part.npz").exists()
    subprocess.run([sys.executable, "-c", script((tmp_path / "part", tmp_path / "part.npz"))], check=True, env=env)
    whole, part = np.load(tmp_path / "whole.npz"), np.load(tmp_path / "part.npz")
    assert len(whole.files) == len(part.files) > 0
    for k in whole.files:
        assert np.array_equal(whole[k], part[k]), k
