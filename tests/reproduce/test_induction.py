"""The induction study: its sequences and metric against plain numpy, its random-head baselines
never drawing the named head, and its stages end to end (two tiny models trained in the work
folder) with every claim recomputable from its predictions file."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.reproduce import claims, pipeline
from experiments.olsson2022 import lms
from experiments.olsson2022 import study as induction
from experiments.olsson2022 import claims as induction_claims


def test_sequences_repeat_break_and_control_as_named():
    s = lms.sequences(50, 0, 6, 4, seed=3)
    aa, ab, ba = s["repeated"], s["control"], s["broken"]
    assert aa.shape == ab.shape == ba.shape == (4, 13) and (aa[:, 0] == 0).all()
    assert (aa[:, 1:7] == aa[:, 7:]).all()  # A A
    assert (ab[:, :7] == aa[:, :7]).all() and (ab[:, 7:] != aa[:, 7:]).any(1).all()  # A B
    assert (ba[:, 7:] == aa[:, 7:]).all() and (ba[:, 1:7] == ab[:, 7:]).all()  # B A, the same fresh B


def test_metric_is_the_mean_log_probability_of_the_counted_next_tokens():
    import jax

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 7)).astype(np.float32)
    rows = {"target": rng.integers(0, 7, (2, 5)), "used": np.array([[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]], np.float32)}
    got = np.asarray(lms.second_copy_logprob({"lm_logits": logits}, rows))
    logp = np.asarray(jax.nn.log_softmax(logits.astype(np.float64), -1))
    want = [np.mean([logp[b, t, rows["target"][b, t]] for t in range(5) if rows["used"][b, t]]) for b in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_random_heads_never_draw_the_named_head():
    rng = np.random.default_rng(0)
    L, H, n = 2, 4, 200
    r = {"shape": [L, H], "induction_head": [1, 2], "previous_head": [0, 3], "seed": 0,
         **{k: rng.normal(size=(n, 1)).tolist() for k in ("first", "second", "control_first", "control_second")},
         **{k: rng.normal(size=(n, L * H)).tolist() for k in ("induction", "previous_token", "path_k", "path_q")}}
    rows = induction_claims._rows(r)
    ind = np.asarray(r["induction"])
    drawn = {int(np.nonzero(ind[i] == row["random"])[0][0]) for i, row in enumerate(rows["induction-head"])}
    assert 1 * H + 2 not in drawn and len(drawn) == L * H - 1
    prev = np.asarray(r["previous_token"])
    drawn = {int(np.nonzero(prev[i] == row["random"])[0][0]) for i, row in enumerate(rows["previous-token-head"])}
    assert drawn == {0, 1, 2}  # the layer below the induction head, without the named head 0-3
    assert all(row["named"] == r["path_k"][i][3] for i, row in enumerate(rows["path"]))


def test_full_profile_reads_the_committed_copy_before_making(tmp_path, monkeypatch):
    """A model committed in ``checkpoints/`` (seed 0 of the natural-text LMs) is read as it is; only a
    model committed nowhere is made (``jattn models make``), so a fresh clone retrains nothing it has."""
    from jattn.artefacts import making

    made = []
    monkeypatch.setattr(making, "make", lambda name, progress=True: made.append(name) or tmp_path / "cache" / name)
    monkeypatch.setattr(lms, "COMMITTED", tmp_path / "checkpoints")
    (tmp_path / "checkpoints" / "induction-natural-attn-only").mkdir(parents=True)
    (tmp_path / "checkpoints" / "induction-natural-attn-only" / "DONE").touch()
    ctx = pipeline.Context(pipeline.PROFILES["full"], tmp_path / "out", tmp_path / "work", tmp_path, progress=False)
    assert lms.model_folder(ctx, "induction-natural-attn-only", "attn-only", 0) == \
        tmp_path / "checkpoints" / "induction-natural-attn-only"
    assert lms.model_folder(ctx, "induction-natural-attn-only-s1", "attn-only", 1) == \
        tmp_path / "cache" / "induction-natural-attn-only-s1"
    assert made == ["induction-natural-attn-only-s1"]


@pytest.mark.slow  # the same code paths fast: tests/test_lm_recipe.py, tests/test_lm_path_patching.py
def test_stages_on_two_tiny_models(tmp_path, monkeypatch, data_set):
    from jattn.io.manifest import data_dir

    data_set("multi30k")
    sizes = {**induction.QUICK, "sequences": 6, "selection": 4, "batch": 6,
             "train": {**induction.QUICK["train"], "steps": 8, "warmup": 1}}
    monkeypatch.setattr(induction, "QUICK", sizes)
    ctx = pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", data_dir(), progress=False)
    records = pipeline.run(induction.stages(pipeline.PROFILES["quick"]), ctx, log=lambda *_: None)
    result = records["induction.attn-only"]["result"]
    what = ("icl", "induction-head", "previous-token-head", "path")
    assert [c["id"] for c in result["claims"]] == [f"induction-attn-only-{k}" for k in what]
    for claim in result["claims"]:
        again = claims.recompute(claim, ctx.out)
        assert again["value"]["value"] == pytest.approx(claim["value"], abs=1e-12)
        assert again["value"]["ci"] == pytest.approx(claim["ci"], abs=1e-12)
        assert again["baseline"]["value"] == pytest.approx(claim["baseline"]["value"], abs=1e-12)
        assert claim["seeds"] == 2 and "status" not in claim and claim["note"]
    measured = records["induction.attn-only-s0"]["result"]
    assert measured["induction_head"][0] >= 1 and measured["previous_head"][0] < measured["induction_head"][0]
    assert np.asarray(measured["path_k"]).shape == (6, 2 * 8)
    assert all((ctx.out / f).is_file() for f in result["figures"]) and "| seed |" in result["table"]
