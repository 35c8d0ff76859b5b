"""The reproduction pipeline: claims against independent formulations of their statistics, stages
rerun only on change and resumed after a kill, the REPORT and README block generated from claims,
and every committed claim recomputable from its committed predictions."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from jattn import stats
from jattn.reproduce import claims, pipeline, records, report

ROOT = Path(__file__).resolve().parents[2]


def _rows(n=200, seed=0):
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, 2, n)
    pred = np.where(rng.random(n) < 0.8, gold, 1 - gold)  # ~80 % right
    other = np.where(rng.random(n) < 0.7, gold, 1 - gold)
    return [{"index": i, "seed": i % 3, "gold": int(g), "pred": int(p), "other": int(o), "x": float(rng.normal()),
             "y": float(rng.normal())} for i, (g, p, o) in enumerate(zip(gold, pred, other))]


def test_bootstrap_claim_equals_the_stats_module():
    rows = _rows()
    got = claims.evaluate(rows, {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "pred"},
                                 "ci_method": "bootstrap"})
    gold = np.array([r["gold"] for r in rows])
    pred = np.array([r["pred"] for r in rows])
    value, ci = stats.bootstrap_ci(lambda g, p: np.mean(g == p), gold, pred)
    assert got["value"] == value == np.mean(gold == pred)
    assert got["ci"] == list(ci)


def test_paired_claim_is_the_koehn_bootstrap_written_out():
    """Δ accuracy of ``pred`` over ``other`` with one index resample for both, by a plain loop."""
    rows = _rows()
    got = claims.evaluate(rows, {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "pred"},
                                 "against": {"pred": "other"}, "ci_method": "paired"})
    gold, pred, other = (np.array([r[k] for r in rows]) for k in ("gold", "pred", "other"))
    idx = np.random.default_rng(stats.SEED).integers(0, len(rows), size=(stats.B, len(rows)))
    deltas = np.array([np.mean(gold[i] == pred[i]) - np.mean(gold[i] == other[i]) for i in idx])
    assert got["value"] == pytest.approx(np.mean(gold == pred) - np.mean(gold == other), abs=1e-12)
    assert got["ci"] == pytest.approx(list(np.quantile(deltas, [0.025, 0.975])), abs=1e-12)
    assert got["p"] == pytest.approx(min(1.0, 2 * min((deltas <= 0).mean(), (deltas >= 0).mean())))


def test_seed_claim_is_a_t_interval_over_per_seed_metrics():
    from scipy.stats import t

    rows = _rows()
    got = claims.evaluate(rows, {"statistic": "mcc", "columns": {"gold": "gold", "pred": "pred"},
                                 "ci_method": "seeds"})
    per_seed = []
    for s in range(3):
        g = np.array([r["gold"] for r in rows if r["seed"] == s])
        p = np.array([r["pred"] for r in rows if r["seed"] == s])
        tp, tn = np.sum((g == 1) & (p == 1)), np.sum((g == 0) & (p == 0))
        fp, fn = np.sum((g == 0) & (p == 1)), np.sum((g == 1) & (p == 0))
        per_seed.append((tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))))
    half = t.ppf(0.975, 2) * np.std(per_seed, ddof=1) / np.sqrt(3)
    assert got["value"] == pytest.approx(np.mean(per_seed), abs=1e-12)
    assert got["ci"] == pytest.approx([np.mean(per_seed) - half, np.mean(per_seed) + half], abs=1e-12)
    assert list(got["per_seed"].values()) == pytest.approx(per_seed, abs=1e-12)


def test_aer_statistic_is_och_and_ney_on_pooled_counts():
    # two sentences: A = predicted links, S ⊆ P gold
    sure = [{(0, 0), (1, 1)}, {(0, 1)}]
    possible = [{(0, 0), (1, 1), (1, 2)}, {(0, 1), (1, 0)}]
    predicted = [{(0, 0), (1, 2), (2, 2)}, {(1, 0)}]
    rows = [{"sure": len(s), "possible": len(p), "predicted": len(a), "sure_hits": len(a & s),
             "possible_hits": len(a & p)} for s, p, a in zip(sure, possible, predicted)]
    a = set().union(*[{(k,) + x for x in s} for k, s in enumerate(predicted)])
    s = set().union(*[{(k,) + x for x in v} for k, v in enumerate(sure)])
    p = set().union(*[{(k,) + x for x in v} for k, v in enumerate(possible)])
    columns = {c: c for c in ("sure", "possible", "predicted", "sure_hits", "possible_hits")}
    assert claims.STATISTICS["aer"][1](*claims._columns(rows, columns, "aer")) == pytest.approx(
        1 - (len(a & s) + len(a & p)) / (len(a) + len(s)))


def test_a_claim_recomputes_from_its_file(tmp_path):
    rows = _rows()
    claim = claims.make(id="x", study="s", claim="c", paper="p", unit="accuracy", rows=rows,
                        path=tmp_path / "predictions" / "x.jsonl", relative="predictions/x.jsonl",
                        measure={"statistic": "accuracy", "columns": {"gold": "gold", "pred": "pred"},
                                 "ci_method": "bootstrap"},
                        baseline={"name": "other", "columns": {"gold": "gold", "pred": "other"}})
    again = claims.recompute(claim, tmp_path)
    assert (again["value"]["value"], again["value"]["ci"]) == (claim["value"], claim["ci"])
    assert (again["baseline"]["value"], again["baseline"]["ci"]) == (claim["baseline"]["value"],
                                                                     claim["baseline"]["ci"])
    with pytest.raises(ValueError, match="reads columns"):
        claims.evaluate(rows, {"statistic": "accuracy", "columns": {"gold": "gold"}, "ci_method": "bootstrap"})


# --- stages ------------------------------------------------------------------------------------

CALLS: list[str] = []


def _count(ctx):
    CALLS.append(ctx.stage.name)
    return {"n": ctx.params["n"]}


def _double(ctx):
    CALLS.append(ctx.stage.name)
    return {"n": 2 * ctx.result("toy.count")["n"]}


def _flaky(ctx):
    """Dies after its first checkpoint unless the checkpoint is there: a killed, resumed stage."""
    CALLS.append(ctx.stage.name)
    mark = ctx.work() / "half"
    if not mark.exists():
        mark.write_text("first half done")
        time.sleep(0.3)  # the killed run's time, counted in the record of the run that finishes
        raise KeyboardInterrupt
    return {"resumed": mark.read_text()}


def _toy(n=3):
    return [pipeline.Stage("toy.count", _count, params={"n": n}),
            pipeline.Stage("toy.double", _double, needs=("toy.count",))]


def _ctx(tmp_path):
    return pipeline.Context(pipeline.PROFILES["quick"], tmp_path / "out", tmp_path / "work", tmp_path / "data",
                            progress=False)


def test_stages_run_once_and_again_only_when_their_inputs_change(tmp_path):
    CALLS.clear()
    quiet = lambda *_: None  # noqa: E731
    first = pipeline.run(_toy(), _ctx(tmp_path), log=quiet)
    assert CALLS == ["toy.count", "toy.double"] and first["toy.double"]["result"] == {"n": 6}
    pipeline.run(_toy(), _ctx(tmp_path), log=quiet)
    assert CALLS == ["toy.count", "toy.double"]  # nothing changed: nothing reran
    pipeline.run(_toy(n=4), _ctx(tmp_path), log=quiet)  # a parameter changed: it and what needs it rerun
    assert CALLS[2:] == ["toy.count", "toy.double"]
    pipeline.run(_toy(n=4), _ctx(tmp_path), force=("toy.double",), log=quiet)
    assert CALLS[4:] == ["toy.double"]
    assert pipeline.plan(_toy(n=5), _ctx(tmp_path))[0].startswith("toy.count: would run")


def _made(cache: Path, name: str, seconds: float) -> None:
    """A classifier folder as ``jattn models make`` leaves it, with its trainer's record."""
    from jattn.io import artefacts

    folder = cache / "models" / name
    folder.mkdir(parents=True)
    (folder / "finetune.json").write_text(json.dumps({"train_seconds": seconds}))
    (folder / artefacts.DONE).write_text("made\n")


def _makes_sst2(ctx):
    _made(ctx.work_root / "cache", "minilm-sst2", 900.0)  # made by the stage: in its runtime
    return {"n": 1}


def test_the_training_of_models_made_before_a_stage_counts_once_in_the_runtime(tmp_path, monkeypatch):
    cache = tmp_path / "work" / "cache"
    monkeypatch.setenv("JATTN_CACHE", str(cache))
    _made(cache, "minilm-cola", 600.0)
    stages = [pipeline.Stage("toy.a", _count, params={"n": 1}, models=("minilm-cola",)),
              pipeline.Stage("toy.b", _count, params={"n": 2}, models=("minilm-cola",), needs=("toy.a",)),
              pipeline.Stage("toy.c", _makes_sst2, models=("minilm-sst2", "all-mpnet-base-v2"), needs=("toy.b",))]
    ctx = _ctx(tmp_path)
    ran = pipeline.run(stages, ctx, log=lambda *_: None)
    assert [ran[n]["models_s"] for n in ("toy.a", "toy.b", "toy.c")] == [{"minilm-cola": 600.0}] * 2 + [{}]
    own = sum(r["runtime_s"] for r in ran.values())
    assert report.claims_of({"toy.c": {**ran["toy.c"], "result": {"claims": [{"id": "x"}]}},
                             "toy.a": ran["toy.a"], "toy.b": ran["toy.b"]})[0]["runtime_s"] == \
        pytest.approx(own + 600.0, abs=0.2)  # the model read by two stages counts once
    assert "h training the 1 model they read" in report.report_markdown(ran, [], "quick")
    assert "minilm-cola 10 min" in report.report_markdown(ran, [], "quick")
    line = report.study_runtime(list(ran.values()))
    assert line.startswith(f"Runtime: {own / 3600:.2f} h of stages + {600 / 3600:.2f} h training minilm-cola = "
                           f"{(own + 600) / 3600:.2f} h. Stages: toy.a ")



def test_the_training_of_a_committed_model_counts_though_it_is_not_in_the_cache(tmp_path, monkeypatch):
    """A stage reads a model's committed copy before making it, so the cache never holds it and the
    record's ``models_s`` is empty; the report counts the copy's own training time once, from its
    trainer record, beside the cache's (which the record keeps when both exist)."""
    from jattn.reproduce import records

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "work" / "cache"))
    committed = tmp_path / "checkpoints"
    _made(committed.parent, "minilm-cola", 600.0)  # <tmp>/models/minilm-cola: a copy outside the cache
    (committed.parent / "models").rename(committed)
    stages = [pipeline.Stage("toy.a", _count, params={"n": 1}, models=("minilm-cola",)),
              pipeline.Stage("toy.b", _count, params={"n": 2}, models=("minilm-sst2",))]
    ran = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    assert [ran[n]["models_s"] for n in ("toy.a", "toy.b")] == [{}, {}]  # the pipeline sees the cache only
    counted = records.with_committed_training(ran, stages, committed)
    assert [counted[n]["models_s"] for n in ("toy.a", "toy.b")] == [{"minilm-cola": 600.0}, {}]
    assert "minilm-cola 10 min" in report.report_markdown(counted, [], "full")
    kept = records.with_committed_training({"toy.a": {**ran["toy.a"], "models_s": {"minilm-cola": 5.0}}},
                                           stages, committed)
    assert kept["toy.a"]["models_s"] == {"minilm-cola": 5.0}  # what the record measured stays


def _made_weights(cache: Path, name: str, value: float) -> None:
    """A made artefact whose weights are one array of ``value``, recorded as ``make`` records it."""
    from safetensors.numpy import save_file

    from jattn.io import artefacts

    folder = cache / "models" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    save_file({"w": np.full(4, value, np.float32)}, str(folder / "model.safetensors"))
    (folder / "finetune.json").write_text(json.dumps({"train_seconds": 60.0}))
    (folder / artefacts.DONE).write_text("made\n")
    artefacts.record(name, cache)


def _reads_cola(ctx):
    from jattn.artefacts import making

    CALLS.append(ctx.stage.name)
    making.make("minilm-cola", log=None)
    return {"n": 1}


def test_a_stage_whose_model_was_made_again_with_other_weights_runs_again(tmp_path, monkeypatch):
    """A stage's key names a model by its recipe; fine-tuning again (on another CPU type training is
    not bit-identical) gives other weights under the same recipe. The record keeps the sha256 of
    the weights it read, and only other weights rerun it."""
    from jattn.io import artefacts

    CALLS.clear()
    cache, quiet = tmp_path / "cache", (lambda *_: None)
    monkeypatch.setenv("JATTN_CACHE", str(cache))
    stages = [pipeline.Stage("toy.reads", _reads_cola, models=("minilm-cola",))]
    _made_weights(cache, "minilm-cola", 1.0)
    ran = pipeline.run(stages, _ctx(tmp_path), log=quiet)
    first = artefacts.weights(cache / "models" / "minilm-cola")
    assert list(first) == ["model.safetensors"] and ran["toy.reads"]["models_read"] == {"minilm-cola": first}
    _made_weights(cache, "minilm-cola", 1.0)  # made again, the same weights: nothing to rerun
    assert pipeline.plan(stages, _ctx(tmp_path)) == ["toy.reads: up to date"]
    _made_weights(cache, "minilm-cola", 2.0)
    assert pipeline.plan(stages, _ctx(tmp_path)) == [
        "toy.reads: would run: minilm-cola, which it reads, was made again since (other weights)"]
    assert pipeline.stale(stages, tmp_path / "out") == ["toy.reads"]  # the report marks its claims stale
    ran = pipeline.run(stages, _ctx(tmp_path), log=quiet)
    assert CALLS == ["toy.reads"] * 2 and ran["toy.reads"]["models_read"]["minilm-cola"] != first
    assert pipeline.stale(stages, tmp_path / "out") == []
    shutil.rmtree(cache / "models" / "minilm-cola")  # not in the cache: nothing to compare, the record stands
    assert pipeline.plan(stages, _ctx(tmp_path)) == ["toy.reads: up to date"]


MODULE = '''"""Module docstring, ≥ one line."""
import os  # a comment

X = "# not a comment"


def f(a):
    """Doc of f: α ≤ β."""  # trailing comment
    return a + 1  # one more


class C:
    """Doc of C."""

    def g(self):
        """Only a docstring."""
'''


def test_code_text_drops_docstrings_comments_and_layout_only():
    text = pipeline.code_text(MODULE)
    assert "Doc of" not in text and "one more" not in text and "'# not a comment'" in text  # the string is code
    prose = MODULE.replace("Doc of f: α ≤ β.", "Other words, ≠").replace("# one more", "# changed")
    assert pipeline.code_text(prose) == text  # an edit of prose keeps the key
    layout = MODULE.replace('"# not a comment"', "'# not a comment'").replace(
        "return a + 1", "return (\n        a\n        + 1\n    )"
    )
    assert layout != MODULE and pipeline.code_text(layout) == text  # so does a formatter's (quotes, line breaks)
    assert pipeline.code_text(MODULE.replace("a + 1", "a + 2")) != text  # an edit of code changes it
    assert pipeline.code_text(MODULE.replace('"""Only a docstring."""', "pass")) != text  # a body of code is code


class _ToyRules:
    """The toy study's decision rule: the claim's interval above its baseline's value."""

    @staticmethod
    def judge(claim, evidence):
        from jattn.reproduce import verdicts

        return verdicts.directional(claim["value"] - claim["baseline"]["value"],
                                    [b - claim["baseline"]["value"] for b in claim["ci"]])

    @staticmethod
    def describe(claim):
        return {"paper": "p (Table 1)", "differs": "a toy", "finding": "a toy finding", "on": "a toy model"}


@pytest.fixture(autouse=True)
def _toy_rules(monkeypatch):
    from jattn.reproduce import studies

    monkeypatch.setitem(studies._RULES, "toy", _ToyRules)


def _claiming(ctx):
    CALLS.append(ctx.stage.name)
    return {"claims": [ctx.claim(id="toy-acc", claim="c", paper="p", unit="accuracy", rows=_rows(),
                                 measure={"statistic": "accuracy", "columns": {"gold": "gold", "pred": "pred"},
                                          "ci_method": "bootstrap"},
                                 baseline={"name": "other", "columns": {"gold": "gold", "pred": "other"}})]}


def test_an_edit_of_the_claims_module_reruns_only_stages_whose_numbers_it_changes(tmp_path, monkeypatch):
    CALLS.clear()
    quiet = lambda *_: None  # noqa: E731
    stages = [pipeline.Stage("toy.claim", _claiming), pipeline.Stage("toy.after", _count, params={"n": 1},
                                                                      needs=("toy.claim",))]
    pipeline.run(stages, _ctx(tmp_path), log=quiet)
    record = tmp_path / "out" / "stages" / "toy.claim.json"
    # an edit that changes no number (e.g. a new statistic): the records stand, marked with the new version
    monkeypatch.setattr(pipeline, "_claims_code", lambda: "edited")
    assert "claims to be recomputed" in pipeline.plan(stages, _ctx(tmp_path))[0]
    pipeline.run(stages, _ctx(tmp_path), log=quiet)
    assert CALLS == ["toy.claim", "toy.after"] and json.loads(record.read_text())["claims_code"] == "edited"
    # an edit that changes a number (here: the predictions it reads differ): the stage and what needs it rerun
    monkeypatch.setattr(pipeline, "_claims_code", lambda: "edited again")
    predictions = tmp_path / "out" / "predictions" / "toy-acc.jsonl"
    rows = claims.read_rows(predictions)
    claims.write_rows(predictions, [{**r, "pred": 1 - r["pred"]} for r in rows])
    pipeline.run(stages, _ctx(tmp_path), log=quiet)
    assert CALLS[2:] == ["toy.claim", "toy.after"] and json.loads(record.read_text())["claims_code"] == "edited again"


def _unmade(ctx):
    from jattn import artefacts

    CALLS.append(ctx.stage.name)
    raise artefacts.not_made("minilm-sst2", ctx.work_root / "cache")


def test_a_stage_whose_artefact_is_not_made_is_skipped_with_its_dependents_and_the_rest_runs(tmp_path):
    CALLS.clear()
    stages = [pipeline.Stage("toy.unmade", _unmade), pipeline.Stage("toy.after", _count, params={"n": 1},
                                                                     needs=("toy.unmade",)), *_toy()]
    ctx = _ctx(tmp_path)
    records = pipeline.run(stages, ctx, log=lambda *_: None)
    assert CALLS == ["toy.unmade", "toy.count", "toy.double"] and set(records) == {"toy.count", "toy.double"}
    assert "jattn models make minilm-sst2" in ctx.not_run["toy.unmade"]
    assert ctx.not_run["toy.after"] == "it needs toy.unmade, which did not run"
    assert not (tmp_path / "out" / "stages" / "toy.unmade.json").exists()


def test_the_command_writes_the_report_then_exits_1_naming_what_did_not_run(tmp_path, monkeypatch, capsys):
    from jattn.cli import main
    from jattn.reproduce import studies

    monkeypatch.setattr(studies, "stages", lambda profile, only=(): [pipeline.Stage("toy.unmade", _unmade), *_toy()])
    with pytest.raises(SystemExit) as stop:
        main(["reproduce", "--quick", "--out", str(tmp_path / "out"), "--no-progress"])
    assert "1 stage(s) did not run" in str(stop.value) and "toy.unmade: artefact minilm-sst2" in str(stop.value)
    assert (tmp_path / "out" / "REPORT.md").is_file() and (tmp_path / "out" / "stages" / "toy.double.json").is_file()


def _reads_ud(ctx):
    CALLS.append(ctx.stage.name)
    return {"lines": len(ctx.data("ud-english-ewt/en_ewt-ud-dev.conllu").read_text().splitlines())}


def _lacking_data_stages():
    return [pipeline.Stage("toy.ud", _reads_ud, data=("ud-english-ewt/en_ewt-ud-dev.conllu",)),
            pipeline.Stage("toy.after", _count, params={"n": 1}, needs=("toy.ud",)), *_toy()]


def test_a_stage_whose_data_is_absent_is_skipped_naming_the_fetch_command_and_the_rest_runs(tmp_path):
    CALLS.clear()
    ctx = _ctx(tmp_path)
    records = pipeline.run(_lacking_data_stages(), ctx, log=lambda *_: None)
    assert CALLS == ["toy.count", "toy.double"] and set(records) == {"toy.count", "toy.double"}
    assert f"jattn data fetch ud-english-ewt --data-dir {tmp_path / 'data'}" in ctx.not_run["toy.ud"]
    assert ctx.not_run["toy.after"] == "it needs toy.ud, which did not run"
    assert ctx.lacking_data == {"toy.ud", "toy.after"}
    (tmp_path / "data" / "ud-english-ewt").mkdir(parents=True)  # fetched: it runs
    (tmp_path / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu").write_text("# sent_id = 1\n")
    ctx = _ctx(tmp_path)
    pipeline.run(_lacking_data_stages(), ctx, log=lambda *_: None)
    assert CALLS[2:] == ["toy.ud", "toy.after"] and not ctx.not_run


def test_the_command_passes_when_only_data_is_absent_and_names_the_fetch(tmp_path, monkeypatch, capsys):
    from jattn.cli import main
    from jattn.reproduce import studies

    monkeypatch.setattr(studies, "stages", lambda profile, only=(): _lacking_data_stages())
    main(["reproduce", "--quick", "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "data"),
          "--no-progress"])  # no SystemExit: what has its data ran
    err = capsys.readouterr().err
    assert "2 stage(s) did not run" in err and "jattn data fetch ud-english-ewt" in err
    assert (tmp_path / "out" / "REPORT.md").is_file() and (tmp_path / "out" / "stages" / "toy.double.json").is_file()


def test_an_old_record_of_a_stage_that_did_not_run_is_reported_stale(tmp_path, monkeypatch):
    from jattn.cli import main
    from jattn.reproduce import studies

    out = tmp_path / "out"
    command = ["reproduce", "--quick", "--out", str(out), "--no-progress"]
    monkeypatch.setattr(studies, "stages", lambda profile, only=(): [pipeline.Stage("toy.claim", _claiming)])
    main(command)
    assert "stale" not in (out / "REPORT.md").read_text().lower()
    assert "stale" not in json.loads((out / "reproduce.json").read_text())["claims"][0]
    # its parameters change, but its model is gone: it does not run, and its old record is marked
    monkeypatch.setattr(studies, "stages", lambda profile, only=(): [pipeline.Stage("toy.claim", _unmade,
                                                                                    params={"n": 2})])
    with pytest.raises(SystemExit):
        main(command)
    assert pipeline.stale(studies.stages(None), out) == ["toy.claim"]
    claim = json.loads((out / "reproduce.json").read_text())["claims"][0]
    assert claim["stale"] is True and "(stale: inputs or code changed since) |" in report.claims_table([claim])
    assert claim["rule"] == "directional" and claim["differs"] == "a toy"  # judged by the study's rules
    assert "Stale records" in (out / "REPORT.md").read_text()


def test_a_killed_stage_leaves_no_record_and_resumes_from_its_work_folder(tmp_path):
    CALLS.clear()
    stages = [pipeline.Stage("toy.flaky", _flaky)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    assert not (tmp_path / "out" / "stages" / "toy.flaky.json").exists()
    record = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)["toy.flaky"]
    assert record["result"] == {"resumed": "first half done"} and CALLS == ["toy.flaky", "toy.flaky"]
    assert record["runtime_s"] >= 0.3


def test_a_changed_stage_does_not_resume_from_old_checkpoints(tmp_path):
    """Checkpoints belong to a stage's key: killed, then changed (other params), it starts afresh."""
    CALLS.clear()
    with pytest.raises(KeyboardInterrupt):
        pipeline.run([pipeline.Stage("toy.flaky", _flaky, params={"v": 1})], _ctx(tmp_path), log=lambda *_: None)
    with pytest.raises(KeyboardInterrupt):  # the first half again: the v=1 checkpoint is not v=2's
        pipeline.run([pipeline.Stage("toy.flaky", _flaky, params={"v": 2})], _ctx(tmp_path), log=lambda *_: None)
    record = pipeline.run([pipeline.Stage("toy.flaky", _flaky, params={"v": 2})], _ctx(tmp_path),
                          log=lambda *_: None)["toy.flaky"]
    assert record["result"] == {"resumed": "first half done"} and len(CALLS) == 3


def test_a_stage_reads_only_what_it_declares(tmp_path):
    bad = [pipeline.Stage("toy.double", _double)]
    with pytest.raises(pipeline.StageError, match="without naming it in needs"):
        pipeline.run([*_toy()[:1], *bad], _ctx(tmp_path), log=lambda *_: None)
    with pytest.raises(ValueError, match="which do not run before it"):
        pipeline.keys(_toy()[::-1])
    with pytest.raises(ValueError, match="no file of the data manifest"):
        pipeline.keys([pipeline.Stage("toy.data", _count, data=("sst2/nope.tsv",))])


def test_the_readme_block_is_replaced_and_nothing_else(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.README_BEGIN}\nold\n{report.README_END}\nafter\n")
    # judged claims, as reproduce.json holds them: each with the finding and setting its study's
    # describe(claim) gives (verdicts.judge_claims); A's two claims count once, E's disagree (mixed),
    # D holds on two settings (two findings)
    judged = [("A", "x", "reproduced"), ("A", "x", "reproduced"), ("B", "x", "inconclusive"), ("C", "x", "context"),
              ("D", "x", "not reproduced"), ("D", "y", "reproduced"), ("E", "x", "reproduced"),
              ("E", "x", "not reproduced")]
    claims = [{"study": "toy", "finding": f, "on": on, "status": s, **({"stale": True} if i == 3 else {})}
              for i, (f, on, s) in enumerate(judged)]
    data = {"studies": {"toy": "Toy et al. 2024: a study"}, "claims": claims}
    assert report.update_readme(readme, data)
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    # findings (claims), then per finding: reproduced, not reproduced, inconclusive, underpowered,
    # not applicable, context, mixed; then the stale claims
    assert ("| [Toy et al. 2024: a study](experiments/results/REPORT.md#toy-et-al-2024-a-study) | 6 (8) | 2 | 1 | 1 "
            "| 0 | 0 | 1 | 1 | 1 |") in text


COMMITTED = ROOT / "experiments" / "results" / "reproduce.json"


COMMITTED_CLAIMS = json.loads(COMMITTED.read_text())["claims"] if COMMITTED.is_file() else []


# one test per claim: the bootstraps of the large ones (ρ over ~50,000 token occurrences) spread
# over the suite's workers
@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
@pytest.mark.parametrize("claim", COMMITTED_CLAIMS, ids=[c["id"] for c in COMMITTED_CLAIMS])
def test_every_committed_claim_recomputes_from_its_committed_predictions(claim):
    again = claims.recompute(claim, ROOT)
    assert again["value"]["value"] == pytest.approx(claim["value"], abs=1e-12)
    assert again["value"]["ci"] == pytest.approx(claim["ci"], abs=1e-12)
    assert again["baseline"]["value"] == pytest.approx(claim["baseline"]["value"], abs=1e-12)


def _paths(value, root: str = "experiments/results/") -> set[str]:
    """Every string in a record (dicts and lists walked) that names a file under experiments/results/:
    from the checkout's root (claims), or from the output folder (``root`` "": a stage's own files)."""
    if isinstance(value, dict):
        return set().union(set(), *(_paths(v, root) for v in value.values()))
    if isinstance(value, list):
        return set().union(set(), *(_paths(v, root) for v in value))
    if not isinstance(value, str):
        return set()
    if root:
        return {value} if value.startswith(root) else set()
    return {f"experiments/results/{value}"} if value.startswith(("predictions/", "figures/")) else set()


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
def test_every_committed_result_file_is_read_by_a_record():
    """Every predictions file and figure is named by a claim or a stage record (a stage's files
    relative to the output folder, as ``Context.save_figure`` and the translation files name them, so
    that the records of a run not yet through its claims stage are committed with their files) and
    every named file is committed: a file left behind by a rerun that wrote others (e.g. other head counts) would sit
    beside the results as if it were one of them, and the REPORT's figure links resolve."""
    results = ROOT / "experiments" / "results"
    named = _paths(COMMITTED_CLAIMS)
    for record in (results / "stages").glob("*.json"):
        result = json.loads(record.read_text())["result"]
        named |= _paths(result) | _paths(result, root="")  # figures: "figures/<study>/..." in the output folder
    files = {str(f.relative_to(ROOT)) for d in ("predictions", "figures") for f in (results / d).rglob("*")
             if f.is_file()}
    assert not sorted(files - named), "files no record names: delete them (or name them in the stage's result)"
    assert not sorted(n for n in named if not (ROOT / n).is_file()), "named by a record, not committed"


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
def test_committed_records_that_read_one_model_read_the_same_weights():
    """Records published together describe one copy of each model: two records whose ``models_read``
    name a model with other weights (one re-made on another CPU type) are a mix the report would
    present as one model. (Records written before the field existed name none.)"""
    seen: dict[str, dict[str, dict]] = {}  # model -> {stage: its weights}
    for record in sorted((ROOT / "experiments" / "results" / "stages").glob("*.json")):
        for model, files in json.loads(record.read_text()).get("models_read", {}).items():
            seen.setdefault(model, {})[record.stem] = files
    mixed = {m: sorted(by) for m, by in seen.items() if len({json.dumps(f, sort_keys=True) for f in by.values()}) > 1}
    assert not mixed, f"stages that read other weights of one model: {mixed}. Fix: rerun them on one copy"


# Every claim's value, interval and baseline as the studies gave them when they moved to
# experiments/ on the public API: a rerun of `make reproduce` must give them again up to float
# rounding. A change of a claim is a change of this file, with its reason in the commit.
VALUES = Path(__file__).with_name("claim_values.json")


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
def test_the_committed_claims_keep_their_recorded_values():
    recorded = json.loads(VALUES.read_text())
    now = {c["id"]: c for c in COMMITTED_CLAIMS}
    assert sorted(now) == sorted(recorded), "claims added or lost: update claim_values.json, saying why"
    for id, old in recorded.items():
        c = now[id]
        assert c["value"] == pytest.approx(old["value"], rel=1e-9, abs=1e-12), id
        assert c["ci"] == pytest.approx(old["ci"], rel=1e-9, abs=1e-12), id
        assert (c["baseline"] or {}).get("value") == pytest.approx(old["baseline"], rel=1e-9, abs=1e-12), id


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
def test_the_readme_results_are_generated_from_reproduce_json():
    data = json.loads(COMMITTED.read_text())
    assert report.readme_section(data) in (ROOT / "README.md").read_text()


def _busy(ctx):
    start = time.process_time()
    while time.process_time() - start < 0.3:  # 0.3 s of CPU
        pass
    return {}


def _idle(ctx):
    time.sleep(0.3)  # 0.3 s of wall time, next to no CPU
    return {}


def test_cpu_time_is_recorded_beside_the_wall_time(tmp_path):
    done = pipeline.run([pipeline.Stage("toy.busy", _busy), pipeline.Stage("toy.idle", _idle)], _ctx(tmp_path),
                        log=lambda *_: None)
    assert done["toy.busy"]["cpu_s"] >= 0.3 and done["toy.idle"]["runtime_s"] >= 0.3
    assert done["toy.idle"]["cpu_s"] < 0.2
    cpu = done["toy.busy"]["cpu_s"] + done["toy.idle"]["cpu_s"]
    assert report.cpu_time(done.values()) == f" ({cpu / 3600:.2f} h of CPU time)"
    assert report.cpu_time([*done.values(), {"runtime_s": 1.0}]) == ""  # a record from before CPU time was kept


def test_a_resumed_stage_adds_its_killed_runs_cpu_time(tmp_path):
    CALLS.clear()
    stages = [pipeline.Stage("toy.flaky", _flaky)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    spent = next((tmp_path / "work").rglob(records.SPENT))
    assert len(spent.read_text().split()) == 2  # wall and CPU seconds
    spent.write_text("5.0\n")  # as a run before CPU time was kept wrote it
    record = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)["toy.flaky"]
    assert record["runtime_s"] >= 5.0 and "cpu_s" not in record  # unknown, so not reported


def test_a_forced_stage_starts_afresh_rather_than_from_its_finished_checkpoints(tmp_path):
    """Forcing a resumable stage computes it again (and times it): its work folder is discarded."""
    CALLS.clear()
    stages = [pipeline.Stage("toy.flaky", _flaky)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)  # resumed from its checkpoint, finished
    said = []
    with pytest.raises(KeyboardInterrupt):  # forced: the checkpoint is gone, so it dies at the first half again
        pipeline.run(stages, _ctx(tmp_path), force=("toy.flaky",), log=said.append)
    assert CALLS == ["toy.flaky"] * 3
    assert not any("discarded" in line for line in said)  # "forced" says why


def test_a_stage_that_checkpoints_outside_its_work_folder_counts_its_killed_runs_time(tmp_path):
    """A fine-tuning stage resumes from its trainer's checkpoint in the model cache, not from
    ``ctx.work()``: its killed run's time still reaches the record of the run that finishes."""
    elsewhere = tmp_path / "trainer-checkpoint"

    def trains(ctx):
        if not elsewhere.exists():
            elsewhere.write_text("half")
            time.sleep(0.3)
            raise KeyboardInterrupt
        return {}

    stages = [pipeline.Stage("toy.trains", trains)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    record = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)["toy.trains"]
    assert record["runtime_s"] >= 0.3


def _mappings() -> int:
    return len(Path("/proc/self/maps").read_text().splitlines())


def _compiles(ctx):  # 40 programs of distinct shapes, each mapping its machine code
    import jax
    import jax.numpy as jnp

    kept = [jax.jit(lambda x: jnp.tanh(x) @ x.T) for _ in range(40)]
    for i, f in enumerate(kept):
        f(jnp.ones((8 + i, 16))).block_until_ready()
    ctx.results["mappings_in_stage"] = _mappings()
    return {}


def _counts(ctx):
    ctx.results["mappings_after"] = _mappings()
    return {}


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads /proc/self/maps (Linux)")
def test_compiled_programs_are_released_between_stages(tmp_path):
    """A process running every stage must not keep every program it compiled: each maps memory
    regions, and the kernel's limit on them (vm.max_map_count) ends a long run."""
    import jax.numpy as jnp

    jnp.ones(1).block_until_ready()  # the runtime's own mappings exist before counting
    ctx, before = _ctx(tmp_path), _mappings()
    pipeline.run([pipeline.Stage("toy.compiles", _compiles), pipeline.Stage("toy.counts", _counts)], ctx,
                 log=lambda *_: None)
    assert ctx.results["mappings_in_stage"] - before > 200  # the programs did map code (the test can fail)
    assert ctx.results["mappings_after"] - before < 100


def test_a_stage_whose_need_was_remade_by_an_earlier_process_runs_again(tmp_path):
    """A forced stage stopped before its dependents ran: the next process (a new ``run``) sees the
    need's record newer than the dependent's, although every key is the same."""
    CALLS.clear()
    quiet = lambda *_: None  # noqa: E731
    pipeline.run(_toy(), _ctx(tmp_path), log=quiet)
    assert pipeline.plan(_toy(), _ctx(tmp_path), force=("toy.count",)) == [
        "toy.count: would run: forced", "toy.double: would run: toy.count, which it reads, runs first"]
    pipeline.run(_toy()[:1], _ctx(tmp_path), force=("toy.count",), log=quiet)  # stopped after the need
    assert pipeline.plan(_toy(), _ctx(tmp_path))[1] == "toy.double: would run: toy.count, which it reads, was run again"
    pipeline.run(_toy(), _ctx(tmp_path), log=quiet)
    assert CALLS == ["toy.count", "toy.double", "toy.count", "toy.double"]
    assert pipeline.plan(_toy(), _ctx(tmp_path)) == ["toy.count: up to date", "toy.double: up to date"]


def _draw(ctx):  # another result each run, as fine-tuning again on another CPU type gives
    CALLS.append(ctx.stage.name)
    return {"n": len(CALLS)}


def _remembers(ctx):
    """Checkpoints what it read of its need and finishes from the checkpoint (a Michel curve's
    importance scores): resumable, and wrong if it resumes from what an earlier need gave."""
    CALLS.append(ctx.stage.name)
    mark = ctx.work() / "read"
    if not mark.exists():
        mark.write_text(str(ctx.result("toy.draw")["n"]))
    return {"n": int(mark.read_text())}


def test_a_stage_whose_need_was_run_again_does_not_resume_from_checkpoints_of_the_old_result(tmp_path):
    """Its key (and so its work folder) is the same after the need ran again, forced here or by an
    earlier process: checkpoints computed from the need's old result are discarded, and named."""
    CALLS.clear()
    quiet, said = (lambda *_: None), []
    stages = [pipeline.Stage("toy.draw", _draw), pipeline.Stage("toy.remembers", _remembers, needs=("toy.draw",))]
    assert pipeline.run(stages, _ctx(tmp_path), log=quiet)["toy.remembers"]["result"] == {"n": 1}
    ran = pipeline.run(stages, _ctx(tmp_path), force=("toy.draw",), log=said.append)
    assert ran["toy.draw"]["result"] == ran["toy.remembers"]["result"] == {"n": 3}
    assert any("earlier result of toy.draw" in line and "starts afresh" in line for line in said)
    pipeline.run(stages[:1], _ctx(tmp_path), force=("toy.draw",), log=quiet)  # stopped after the need
    assert pipeline.run(stages, _ctx(tmp_path), log=quiet)["toy.remembers"]["result"] == {"n": 5}
    assert CALLS == ["toy.draw", "toy.remembers"] * 3


def _remembers_weights(ctx):
    """Checkpoints a number computed from a model's weights, finishes from the checkpoint."""
    from safetensors.numpy import load_file

    from jattn.artefacts import making

    CALLS.append(ctx.stage.name)
    mark = ctx.work() / "read"
    if not mark.exists():
        mark.write_text(str(float(load_file(making.make("minilm-cola", log=None) / "model.safetensors")["w"][0])))
    return {"w": float(mark.read_text())}


def test_a_stage_whose_model_was_made_again_does_not_resume_from_checkpoints_of_the_old_weights(tmp_path,
                                                                                                  monkeypatch):
    CALLS.clear()
    cache, quiet = tmp_path / "cache", (lambda *_: None)
    monkeypatch.setenv("JATTN_CACHE", str(cache))
    stages = [pipeline.Stage("toy.reads", _remembers_weights, models=("minilm-cola",))]
    _made_weights(cache, "minilm-cola", 1.0)
    assert pipeline.run(stages, _ctx(tmp_path), log=quiet)["toy.reads"]["result"] == {"w": 1.0}
    _made_weights(cache, "minilm-cola", 2.0)
    assert pipeline.run(stages, _ctx(tmp_path), log=quiet)["toy.reads"]["result"] == {"w": 2.0}
    assert CALLS == ["toy.reads"] * 2


def test_a_resumed_stage_keeps_its_checkpoints_when_what_it_reads_is_the_same(tmp_path):
    """The basis noted beside the checkpoints does not stop a killed stage from resuming, and a
    stage that keeps no checkpoints leaves no work folder behind."""
    CALLS.clear()
    stages = [*_toy(), pipeline.Stage("toy.flaky", _flaky, needs=("toy.count",))]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    record = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)["toy.flaky"]
    assert record["result"] == {"resumed": "first half done"}
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["toy.flaky"]


def test_checkpoints_that_do_not_say_what_they_were_computed_from_are_not_resumed_from(tmp_path):
    CALLS.clear()
    stages = [pipeline.Stage("toy.flaky", _flaky)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    next((tmp_path / "work").rglob(records.BASIS)).unlink()  # a failed write; an older jattn's folder
    with pytest.raises(KeyboardInterrupt):  # its first half again
        pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)
    record = pipeline.run(stages, _ctx(tmp_path), log=lambda *_: None)["toy.flaky"]  # resumed: its basis is noted
    assert record["result"] == {"resumed": "first half done"} and CALLS == ["toy.flaky"] * 3


def test_fast_bootstraps_are_the_generic_bootstrap():
    """Every ``claims.FAST_BOOTSTRAP`` entry gives the value and interval ``stats.bootstrap_ci`` gives
    with the statistic recomputed on each resample (BLEU's from summed per-sentence counts, ρ
    from resampled ranks; ties and repeated sentences included)."""
    from jattn import stats

    rng = np.random.default_rng(0)
    words = "a man in a red shirt rides a bike down the street while two dogs watch".split()
    ref = np.array([" ".join(rng.choice(words, rng.integers(3, 9))) for _ in range(40)])
    noisy = lambda keep: np.array([" ".join(w for w in r.split() if rng.random() < keep) or "a" for r in ref])  # noqa: E731
    hyp = np.stack([noisy(0.9), noisy(0.6)], 1)  # (n, 2 systems)
    reference = noisy(0.8)
    heads = np.tile([12, 4], (40, 1))
    x = rng.integers(0, 6, 40).astype(float)
    cases = {"bleu": (ref, hyp), "bleu_gain": (ref, hyp, reference),
             "fewest_heads_within_1_bleu": (ref, hyp, heads, reference), "spearman": (x, x + rng.integers(0, 3, 40))}
    assert set(cases) == set(claims.FAST_BOOTSTRAP)
    for name, columns in cases.items():
        got = claims.FAST_BOOTSTRAP[name](*columns)
        want = stats.bootstrap_ci(claims.STATISTICS[name][1], *columns)
        assert got[0] == pytest.approx(want[0], abs=1e-12), name
        assert got[1] == pytest.approx(want[1], abs=1e-9), name


def test_an_experiments_package_registers_its_studies_and_the_command_runs_them(tmp_path, monkeypatch, capsys):
    """``jattn reproduce --experiments FOLDER``: the package's ``__init__`` registers a study on the
    public API; the command lists and runs its stages. A folder without ``__init__.py`` is named."""
    from jattn.cli import main
    from jattn.reproduce import studies

    monkeypatch.setattr(studies, "_REGISTERED", {})
    monkeypatch.setattr(studies, "_TITLES", {})
    monkeypatch.setattr(studies, "_RULES", {})
    package = tmp_path / "my_experiments_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import sys\n\nfrom jattn.reproduce import studies, verdicts\nfrom jattn.reproduce.pipeline import Stage\n\n\n"
        "def _count(ctx):\n    return {'n': 3}\n\n\n"
        "studies.register('mine', lambda profile: [Stage('mine.count', _count)], 'My study')\n"
        "def judge(claim, evidence):\n    return verdicts.context('a count')\n\n\n"
        "def describe(claim):\n    return {'paper': '-', 'differs': '-', 'finding': '-', 'on': '-'}\n\n\n"
        "studies.register_rules('mine', sys.modules[__name__])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    main(["reproduce", "--experiments", str(package), "--quick", "--out", str(out), "--no-progress", "--list"])
    assert capsys.readouterr().out.splitlines() == ["mine.count: would run: no record"]
    main(["reproduce", "--experiments", str(package), "mine", "--quick", "--out", str(out), "--no-progress"])
    assert json.loads((out / "stages" / "mine.count.json").read_text())["result"] == {"n": 3}
    assert "## My study" in (out / "REPORT.md").read_text()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no __init__.py"):
        studies.load(tmp_path / "empty")


def test_a_study_name_is_registered_once():
    from jattn.reproduce import studies

    def stages_of(profile):
        return []

    with pytest.raises(ValueError, match="without '.'"):
        studies.register("a.b", stages_of, "t")
    assert "clark" in studies.load() and studies.titles()["clark"].startswith("Clark et al. 2019")
    with pytest.raises(ValueError, match="registered already"):
        studies.register("clark", stages_of, "another")
    with pytest.raises(ValueError, match="register its stages first"):
        studies.register_rules("no-such-study", None)


def test_a_record_stopped_while_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    def stopped(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(records.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        records.write(tmp_path, {"name": "toy.count", "result": {}})
    assert list((tmp_path / "stages").iterdir()) == []


def test_spearman_of_counts_is_spearman_on_the_repeated_rows():
    """``statistics.spearman_of_counts``: ρ of each resample from its counts equals scipy's ρ on the
    rows repeated as often as drawn (ties included); ``spearman_arrays`` declines what scipy's checks
    should speak to (fewer than 2 rows, unequal lengths, non-finite values)."""
    from jattn.reproduce import statistics

    rng = np.random.default_rng(7)
    x, y = rng.integers(0, 5, 40).astype(float), rng.normal(size=40)  # x with ties
    w = rng.integers(0, 3, (6, 40))  # (c, n) counts of 6 resamples
    got = statistics.spearman_of_counts(*statistics.spearman_arrays(x, y))(w)
    want = [statistics.spearman(np.repeat(x, c), np.repeat(y, c)) for c in w]
    assert got == pytest.approx(want, abs=1e-12)
    assert statistics.spearman_arrays([1.0], [2.0]) is None and statistics.spearman_arrays([1, 2], [1]) is None
    assert statistics.spearman_arrays([1.0, np.nan], [1.0, 2.0]) is None


def test_seeds_examples_is_the_pigeonhole_bootstrap_written_out():
    """"seeds_examples": per resample, the drawn examples (shared) scored for each drawn seed, the
    statistic averaged over the drawn seeds; a loop over resamples, seeds and rows, against it."""
    rng = np.random.default_rng(5)
    n, k = 30, 3
    gold = rng.integers(0, 2, n)
    rows = [{"seed": s, "index": 100 + i, "gold": int(g), "pred": int(g if rng.random() < 0.6 + 0.1 * s else 1 - g),
             "base": int(g if rng.random() < 0.6 else 1 - g)} for s in range(k) for i, g in enumerate(gold)]
    rng.shuffle(rows)  # the order of the file does not matter
    spec = {"statistic": "accuracy_gain", "columns": {"gold": "gold", "pred": "pred", "reference": "base"},
            "ci_method": "seeds_examples"}
    got = claims.evaluate(rows, spec)
    draw = np.random.default_rng(0)
    examples, seeds = draw.integers(0, n, (1000, n)), draw.integers(0, k, (1000, k))
    table = {(r["seed"], r["index"]): r for r in rows}
    thetas = []
    for ex, ss in zip(examples, seeds):
        gains = []
        for s in ss:
            picked = [table[s, 100 + i] for i in ex]
            right = [(r["pred"] == r["gold"], r["base"] == r["gold"]) for r in picked]
            gains.append(np.mean([a for a, _ in right]) - np.mean([b for _, b in right]))
        thetas.append(np.mean(gains))
    per_seed = [np.mean([r["pred"] == r["gold"] for r in rows if r["seed"] == s])
                - np.mean([r["base"] == r["gold"] for r in rows if r["seed"] == s]) for s in range(k)]
    assert got["value"] == pytest.approx(np.mean(per_seed), abs=1e-12)
    assert got["ci"] == pytest.approx(list(np.quantile(thetas, [0.025, 0.975])), abs=1e-12)
    assert got["per_seed"] == pytest.approx({str(s): v for s, v in enumerate(per_seed)}, abs=1e-12)
    with pytest.raises(ValueError, match="one row per seed and example"):
        claims.evaluate(rows[1:], spec)


def test_the_resamples_a_claim_draws_are_the_documented_draws_written_out():
    """``cluster_codes``, ``resample_picks``, ``pigeonhole_picks`` and ``pick_counts``, which the
    studies' own tests use to draw the resamples of their claims, against the module docstring's
    recipe by hand."""
    codes, k = claims.cluster_codes(["b", "a", "b", "c", "a"])
    assert codes.tolist() == [0, 1, 0, 2, 1] and k == 3
    assert claims.cluster_codes(np.array([7, 7, 3]))[0].tolist() == [0, 0, 1]
    assert np.array_equal(claims.resample_picks(4, 50), np.random.default_rng(0).integers(0, 4, (50, 4)))
    draw = np.random.default_rng(0)
    examples, seeds = claims.pigeonhole_picks(9, 3, 40)
    assert np.array_equal(examples, draw.integers(0, 9, (40, 9))) and np.array_equal(
        seeds, draw.integers(0, 3, (40, 3))
    )
    picks = claims.resample_picks(5, 30)
    assert claims.pick_counts(picks, 5).tolist() == [[list(p).count(j) for j in range(5)] for p in picks]


def test_a_study_headline_names_what_reproduces_what_does_not_and_what_is_not_comparable():
    """One sentence per status, the findings in order of appearance, each with its settings and, where
    several claims test one finding on one setting, how many of them have the status."""
    rows = (("x", "M", "reproduced"), ("y", "M", "not reproduced"), ("x", "N", "not applicable"),
            ("y", "M", "reproduced"), ("z", "M", "context"), ("x", "M2", "reproduced"))
    claims = [{"id": str(i), "finding": f, "on": on, "status": s} for i, (f, on, s) in enumerate(rows)]
    assert report.headline(claims) == (
        "**Verdicts** (5 findings (6 claims): 2 reproduced, 1 not applicable, 1 context, "
        "1 mixed). Reproduces: x (M, M2); y (M 1 of 2). Does not reproduce: y "
        "(M 1 of 2). Not comparable here (a precondition absent): x (N). For context, "
        "not judged: z (M)."
    )
    assert report.headline(claims[4:5]) == ("**Verdicts** (1 findings (1 claims): 1 context). For context, not judged: "
                                            "z (M).")
    assert report.headline([{**claims[0], "stale": True}, claims[5]]).endswith(
        "Reproduces: x (M, M2). Stale until their stages run again (computed by other inputs or code than today's): "
        "1 of these 2 claims.")


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed experiments/results/reproduce.json")
def test_every_committed_claim_is_judged_as_its_studys_rules_judge_it_now():
    """The committed records judged by today's rules give the committed verdicts: each claim a
    status of ``verdicts.STATUSES`` with its rule and reason, what differs from its paper, and the
    paper cell of ``experiments/papers.py`` — so a rule edited without rerunning `jattn reproduce`
    fails here."""
    from experiments import papers
    from jattn.reproduce import records, studies, verdicts

    studies.load()
    names = [p.stem for p in (ROOT / "experiments" / "results" / "stages").glob("*.json")]
    judged = {c["id"]: c for c in report.judged(records.load(ROOT / "experiments" / "results", names), ROOT)}
    assert sorted(judged) == sorted(c["id"] for c in COMMITTED_CLAIMS)
    for c in COMMITTED_CLAIMS:
        now = judged[c["id"]]
        assert now["status"] in verdicts.STATUSES and now["reason"] and now["differs"], c["id"]
        assert now["paper"] == papers.for_claim(now), c["id"]
        assert (c["status"], c["rule"], c["reason"], c["paper"]) == (now["status"], now["rule"], now["reason"],
                                                                     now["paper"]), c["id"]


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_writes(tmp_path, monkeypatch):
    """Two `jattn reproduce` runs into one --out would interleave records and reports: the second
    is refused, naming the holder, before any stage runs; the lock goes with the run."""
    from jattn.cli import main
    from jattn.cli.reproduce import LOCK
    from jattn.io import results
    from jattn.reproduce import studies

    CALLS.clear()
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(studies, "stages", lambda profile, only=(): _toy())
    held = results.acquire_lock(out / LOCK, "the first run", "--out")
    try:
        with pytest.raises(SystemExit) as refused:
            main(["reproduce", "--quick", "--out", str(out), "--no-progress"])
    finally:
        results.release_lock(held, out / LOCK)
    assert "in use by another jattn run (pid" in str(refused.value) and CALLS == []
    main(["reproduce", "--quick", "--out", str(out), "--no-progress"])
    assert CALLS and not (out / LOCK).exists()


def test_the_list_in_a_new_process_knows_the_model_recipes(tmp_path):
    """``jattn reproduce --list`` as a user runs it (a new process, nothing imported before): the
    Kobayashi study reads the recipe of mpnet-sst2 (``jattn.artefacts``)."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "jattn.cli", "reproduce", "kobayashi", "--list", "--out",
                           str(tmp_path / "out"), "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kobayashi." in proc.stdout
