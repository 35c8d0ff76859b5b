"""``jattn gates`` (L0 head gates, Voita et al. 2019) on tiny random models: the results folder
(metric named, gates and fractional gates counted per attention type), a SIGTERM leaves a
checkpoint and the same command run again ends where an uninterrupted run ends, and the exported
folder is the gated model with its closed heads removed."""

from __future__ import annotations

import json
import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.cli import main
from jattn.nn.interventions import Interventions
from tiny_encoders import random_batch, save_tiny
from tiny_seq2seq import padded_batch, sentences
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny 3-class BERT and 'text<TAB>label' train (32 lines) and dev (8 lines) files."""
    folder = tmp_path_factory.mktemp("gates")
    model = save_tiny(folder / "bert", "bert-2x4", head="cls")
    lines = [f"{s}\t{i % 3}\n" for i, s in enumerate(sentences(40, seed=1))]
    (folder / "train.tsv").write_text("".join(lines[:32]))
    (folder / "dev.tsv").write_text("".join(lines[32:]))
    return folder, model


def command(folder, model, out, *extra):
    return ["gates", "--model", str(model), "--input", str(folder / "train.tsv"), "--dev", str(folder / "dev.tsv"),
            "--out", str(out), "--lams", "0.05", "--steps", "12", "--lr", "0.1", "--batch-size", "8",
            "--save-every", "100", "--tolerance", "100", *extra]


def outcome(out) -> list[dict]:
    """The points of a results folder without wall-clock times."""
    doc = json.loads((out / "results.json").read_text())
    return [{k: v for k, v in p.items() if k not in ("curve", "train_seconds")} for p in doc["points"]]


@pytest.fixture(scope="module")
def whole(data, tmp_path_factory):
    folder, model = data
    out = tmp_path_factory.mktemp("whole") / "out"
    main(command(folder, model, out, "--export", str(out.parent / "pruned")))
    return out


def test_results_name_the_metric_and_count_gates(whole):
    doc = json.loads((whole / "results.json").read_text())
    assert doc["metric"] == "accuracy (%)" and doc["gated"] == ["encoder"]
    point = doc["points"][0]
    gates = np.asarray(point["gates"]["encoder"])
    assert gates.shape == (2, 4) and ((gates >= 0) & (gates <= 1)).all()
    c = point["counts"]["encoder"]
    assert c == {"heads": 8, "kept": int((gates > 0).sum()), "fractional": int(((gates > 0) & (gates < 1)).sum())}
    assert c["fractional"] > 0  # 12 updates of lr 0.1 from log α = 3 leave the gates short of 1
    assert 0 <= point["metric"] <= 100 and doc["export_lambda"] == 0.05
    report = (whole / "report.md").read_text()
    assert "accuracy (%)" in report and "fractional" in report and "encoder kept" in report
    figures = {p.name for p in (whole / "figures").iterdir()}
    assert {"metric_vs_heads.png", "heads_kept.png", "gates_encoder_lam_0.05.png"} <= figures
    assert not whole.with_name("out-work").exists()  # the checkpoints go when the run is done


def test_sigterm_checkpoints_and_a_rerun_ends_the_same(data, whole, tmp_path, monkeypatch):
    import jattn.cli.gates as G

    folder, model = data
    made = G.training_batches

    def interrupted(*args):
        batches = made(*args)

        def at(epoch):  # SIGTERM while the second epoch's batches are made (after update 4 of 12)
            if epoch == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return batches(epoch)
        return at

    monkeypatch.setattr(G, "training_batches", interrupted)
    with pytest.raises(SystemExit) as stopped:
        main(command(folder, model, tmp_path / "out"))
    assert stopped.value.code in (130, 143) and not (tmp_path / "out").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back
    assert (tmp_path / "out-work" / "lam_0.05" / "last").is_dir()  # the checkpoint
    monkeypatch.setattr(G, "training_batches", made)
    main(command(folder, model, tmp_path / "out"))
    assert outcome(tmp_path / "out") == outcome(whole)


def test_export_is_the_gated_model(data, whole):
    folder, model = data
    gates = np.asarray(json.loads((whole / "results.json").read_text())["points"][0]["gates"]["encoder"], np.float32)
    original = jattn.load(model, use_cache=False)
    pruned = jattn.load(whole.parent / "pruned", use_cache=False)
    batch = random_batch(original.config, [9, 4, 6], seed=5)
    want = original.forward(batch, Interventions(head_gates=jnp.asarray(gates)))
    assert_close(pruned.forward(batch).logits, want.logits, terms=model_terms(original.config, 9))


def test_export_removes_closed_heads_and_folds_fractional_ones(data, tmp_path, tiny_marian):
    """Gates 0, fractional and 1 in every attention type: the export keeps the open heads only and
    equals the model under those gates (an encoder, and a translation model per type)."""
    from jattn.cli.gates import counts, export

    folder, model = data
    bert = jattn.load(model, use_cache=False)
    mixed = np.array([[0.0, 0.4, 1.0, 0.0], [1.0, 0.0, 0.7, 1.0]], np.float32)
    assert counts({"encoder": mixed}) == {"encoder": {"heads": 8, "kept": 5, "fractional": 2}}
    pruned = jattn.load(export(bert, {"gates": {"encoder": mixed.tolist()}}, tmp_path / "bert"), use_cache=False)
    assert pruned.config.pruned.counts == (2, 3)
    batch = random_batch(bert.config, [9, 4, 6], seed=5)
    assert_close(pruned.forward(batch).logits,
                 bert.forward(batch, Interventions(head_gates=jnp.asarray(mixed))).logits,
                 terms=model_terms(bert.config, 9))
    c = tiny_marian.config
    rng = np.random.default_rng(0)
    gates = {
        k: np.where(rng.random((L, H)) < 0.3, 0.0, rng.choice([0.5, 1.0], (L, H))).astype(np.float32)
        for k, (L, H) in {
            "encoder": (c.encoder_layers, c.encoder_heads),
            "decoder": (c.decoder_layers, c.decoder_heads),
            "cross": (c.decoder_layers, c.decoder_heads),
        }.items()
    }
    pruned = jattn.load(export(tiny_marian, {"gates": {k: v.tolist() for k, v in gates.items()}}, tmp_path / "mt"),
                        use_cache=False)
    batch = padded_batch(c, seed=4)
    iv = {k: Interventions(head_gates=jnp.asarray(v)) for k, v in gates.items()}
    assert_close(pruned.forward(batch).logits, tiny_marian.forward(batch, iv).logits, terms=model_terms(c, 9, 7))


def test_refuses_another_run_in_the_work_folder(data, tmp_path):
    folder, model = data
    work = tmp_path / "out-work"
    (work / "lam_0.05").mkdir(parents=True)  # another run's saved state
    (work / "run.json").write_text(json.dumps({"model": "elsewhere"}))
    with pytest.raises(SystemExit, match=r"a run with other arguments: .*--model 'elsewhere'.*Fix"):
        main(command(folder, model, tmp_path / "out"))


def test_the_printed_summary_counts_the_gated_types_only():
    from jattn.cli.gates import counts, summary_line

    gates = {"encoder": np.array([[1.0, 0.0], [0.5, 1.0]]), "decoder": np.ones((2, 2)), "cross": np.ones((2, 2))}
    point = {"lambda": 0.01, "metric": 41.234, "counts": counts(gates)}
    assert summary_line([point], ("encoder",), "BLEU") == "λ 0.01: heads kept encoder 3/4 (1 fractional), BLEU 41.23"


def test_a_work_folder_without_state_takes_the_corrected_run(tmp_path):
    """A run that failed before saving state leaves only its record: the corrected rerun takes the
    folder; a folder with state of another run is refused."""
    from jattn.cli.common import check_work

    work = tmp_path / "w"
    check_work(work, {"lambda": 0.01, "steps": 5})
    check_work(work, {"lambda": 0.01, "steps": 10})  # nothing saved yet: the new arguments are recorded
    assert json.loads((work / "run.json").read_text())["steps"] == 10
    (work / "state").mkdir()
    with pytest.raises(ValueError, match=r"steps=10 \(now 20\)"):
        check_work(work, {"lambda": 0.01, "steps": 20})
