"""Bad input and faults, round 2 (issue 30): the intervention commands (importance, disable, prune,
finetune, patterns, analyze's coordinator) and their Python API, through the one validation
layer ``jattn.io.validate``. One table per command: every case asserts the exit status, that the
one-line message names the argument and a fix, and that an earlier results folder survives; then
property-based tests of the numeric and shape checks, the output writer's symlink and foreign-file
rules, translation's truncation and normalisation, and the labelled reader's header rule."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jattn
from jattn.cli import main
from jattn.io import validate
from jattn.io.results import MANIFEST, Output, OutputError
from test_bad_input import _free_port, assert_names, run_cli
from tiny_encoders import save_tiny
from tiny_seq2seq import save_tiny as save_seq2seq


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"cls": save_tiny(root / "cls", "bert-2x4", head="cls", max_positions=64),  # 3 classes
            "base": save_tiny(root / "base", "bert-2x4", max_positions=64),
            "marian": save_seq2seq(root / "marian", "marian")}


@pytest.fixture()
def files(tmp_path, models):
    f = {k: str(v) for k, v in models.items()} | {"tmp": str(tmp_path), "port": str(_free_port())}
    texts = {"good": "a red cat\t0\nthe dog ran\t1\nold warm sun\t2\n",
             "header": "sentence\tlabel\na red cat\t0\nthe dog ran\t1\n",
             "label7": "a red cat\t0\nthe dog ran\t7\n",
             "label_neg": "a red cat\t0\nthe dog ran\t-1\n",
             "label_float": "a red cat\t0\nthe dog ran\t1.0\n",
             "notab": "a red cat\nthe dog ran\t1\n",
             "gap": "a red cat\t0\nthe dog ran\t5\n",
             "nul": "a red cat\t0\n\x00\x00\x00\t1\n",
             "zw": "a red cat\t0\n\u200b\u200d\ufeff\t1\n",
             "corpus": "The cat sat.\nA dog ran far.\n",
             "corpus_nul": "The cat sat.\n\x00\x00\n",
             "corpus_zw": "The cat sat.\n\u200b\u200c\n",
             "src": "le chat\nun chien\n", "tgt": "the cat\na dog\n"}
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text)
        f[name] = str(tmp_path / f"{name}.txt")
    previous = tmp_path / "o"  # an earlier complete results folder every failing case must leave as it was
    previous.mkdir()
    (previous / "results.json").write_text(json.dumps({"meta": {"complete": True, "earlier": True}}))
    (previous / MANIFEST).write_text("results.json\n")
    return f


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_case(command, argv, status, needles, files, capsys, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(Path(files["tmp"]) / "cache"))
    before = snapshot(Path(files["tmp"]) / "o")
    code, err = run_cli([command, *argv.format(**files).split()], capsys)
    assert code == status, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert_names(err, *needles)
    if status == 1:
        assert "fix" in err.lower(), err
    assert snapshot(Path(files["tmp"]) / "o") == before


IMPORTANCE_CASES = [
    ("label 7 of 3 classes", "--model {cls} --input {label7} --out {tmp}/o", 1, ["labels", "label 7", "0..2", "Fix"]),
    ("label gap 5", "--model {cls} --input {gap} --out {tmp}/o", 1, ["label 5", "0..2"]),
    ("negative label", "--model {cls} --input {label_neg} --out {tmp}/o", 1, ["label_neg.txt:2", "'-1'", "Fix"]),
    ("float label", "--model {cls} --input {label_float} --out {tmp}/o", 1, ["label_float.txt:2", "'1.0'"]),
    ("no tab on line 1", "--model {cls} --input {notab} --out {tmp}/o", 1, ["notab.txt:1", "no tab", "Fix"]),
    ("NUL line", "--model {cls} --input {nul} --out {tmp}/o", 1, ["nul.txt:2", "invisible", "U+0000", "Fix"]),
    ("zero-width line", "--model {cls} --input {zw} --out {tmp}/o", 1, ["zw.txt:2", "invisible", "U+200B"]),
    ("NUL text line", "--model {base} --format text --input {corpus_nul} --out {tmp}/o", 1,
     ["corpus_nul.txt:2", "invisible"]),
    ("encoder without a head, labelled", "--model {base} --input {good} --out {tmp}/o", 1,
     ["--model", "classifier", "Fix"]),
    ("translation model, labelled", "--model {marian} --input {good} --out {tmp}/o", 1, ["--format parallel", "Fix"]),
    # already behaving well
    ("batch-size 0", "--model {cls} --input {good} --out {tmp}/o --batch-size 0", 2, ["--batch-size"]),
    ("bad estimator", "--model {cls} --input {good} --out {tmp}/o --estimator x", 2, ["--estimator"]),
    ("missing input", "--model {cls} --input {tmp}/none.txt --out {tmp}/o", 1, ["none.txt", "does not exist"]),
]


@pytest.mark.parametrize("case,argv,status,needles", IMPORTANCE_CASES, ids=[c[0] for c in IMPORTANCE_CASES])
def test_importance_bad_input(case, argv, status, needles, files, capsys, monkeypatch):
    check_case("importance", argv, status, needles, files, capsys, monkeypatch)


DISABLE_CASES = [
    ("label 7", "--model {cls} --input {label7} --out {tmp}/o", 1, ["labels", "label 7", "0..2"]),
    ("heads 3:x", "--model {cls} --input {good} --out {tmp}/o --heads 3:x", 1, ["--heads", "'3:x'", "Fix"]),
    ("heads layer out of range", "--model {cls} --input {good} --out {tmp}/o --heads 9:0", 1,
     ["--heads", "9:0", "2 layers", "Fix"]),
    ("heads head out of range", "--model {cls} --input {good} --out {tmp}/o --heads 0:4", 1, ["--heads", "4 heads"]),
    ("heads negative", "--model {cls} --input {good} --out {tmp}/o --heads=-1:0", 1, ["--heads", "'-1:0'"]),
    ("heads no colon", "--model {cls} --input {good} --out {tmp}/o --heads 3", 1, ["--heads", "LAYER:HEAD"]),
    ("translation model", "--model {marian} --input {good} --out {tmp}/o", 1, ["--model", "not a translation", "Fix"]),
    ("no classification head", "--model {base} --input {good} --out {tmp}/o", 1, ["--model", "classifier", "Fix"]),
    ("NUL line", "--model {cls} --input {nul} --out {tmp}/o", 1, ["nul.txt:2", "invisible"]),
    # already behaving well
    ("unknown mode", "--model {cls} --input {good} --out {tmp}/o --mode bogus", 1, ["--mode", "choose from"]),
    ("batch-size 0", "--model {cls} --input {good} --out {tmp}/o --batch-size 0", 2, ["--batch-size"]),
]


@pytest.mark.parametrize("case,argv,status,needles", DISABLE_CASES, ids=[c[0] for c in DISABLE_CASES])
def test_disable_bad_input(case, argv, status, needles, files, capsys, monkeypatch):
    check_case("disable", argv, status, needles, files, capsys, monkeypatch)


PRUNE_CASES = [
    ("tolerance nan", "--tolerance nan", 2, ["--tolerance", "finite"]),
    ("tolerance inf", "--tolerance inf", 2, ["--tolerance", "finite"]),
    ("tolerance negative", "--tolerance=-1", 2, ["--tolerance", "≥ 0"]),
    ("tolerance text", "--tolerance lots", 2, ["--tolerance", "not a number"]),
    ("step nan", "--step nan", 2, ["--step", "finite"]),
    ("step 0", "--step 0", 2, ["--step", "(0, 1]"]),
    ("step 1.5", "--step 1.5", 2, ["--step", "(0, 1]"]),
    ("dev label 7", "--dev {label7}", 1, ["labels", "label 7"]),
    ("NUL line in dev", "--dev {nul}", 1, ["nul.txt:2", "invisible"]),
    ("no classifier", "--model {base}", 1, ["--model", "classifier"]),
    ("export onto another model", "--export {base}", 1, ["--export", "holds no jattn results"]),
]


@pytest.mark.parametrize("case,argv,status,needles", PRUNE_CASES, ids=[c[0] for c in PRUNE_CASES])
def test_prune_bad_input(case, argv, status, needles, files, capsys, monkeypatch):
    base = {"--model": "{cls}", "--input": "{good}", "--dev": "{good}", "--out": "{tmp}/o"}
    given_ = argv.split()
    extra = " ".join(f"{k} {v}" for k, v in base.items() if k not in given_)
    check_case("prune", f"{argv} {extra}", status, needles, files, capsys, monkeypatch)


FINETUNE_CASES = [
    ("lr nan", "--lr nan", 2, ["--lr", "finite"]),
    ("lr inf", "--lr inf", 2, ["--lr", "finite"]),
    ("lr negative", "--lr=-0.1", 2, ["--lr", "> 0"]),
    ("lr zero", "--lr 0", 2, ["--lr", "> 0"]),
    ("translation model", "--model {marian}", 1, ["--model", "not a translation model", "Fix"]),
    ("label gap", "--train {gap}", 1, ["train labels", "without [1, 2, 3, 4]", "Fix"]),
    ("dev label out of range", "--dev {label7}", 1, ["dev labels", "label 7", "0..2"]),
    ("NUL line", "--train {nul}", 1, ["nul.txt:2", "invisible"]),
    # already behaving well
    ("train without dev", "--dev", 1, ["--train needs --dev"]),
    ("epochs 0", "--epochs 0", 2, ["--epochs"]),
]


@pytest.mark.parametrize("case,argv,status,needles", FINETUNE_CASES, ids=[c[0] for c in FINETUNE_CASES])
def test_finetune_bad_input(case, argv, status, needles, files, capsys, monkeypatch):
    base = {"--model": "{base}", "--train": "{good}", "--dev": "{good}", "--out": "{tmp}/o", "--epochs": "1"}
    given_ = argv.split()
    if given_ == ["--dev"]:  # the case: no --dev at all
        base.pop("--dev")
        argv = ""
    extra = " ".join(f"{k} {v}" for k, v in base.items() if k not in given_)
    check_case("finetune", f"{argv} {extra}", status, needles, files, capsys, monkeypatch)


PATTERNS_CASES = [
    ("translation model", "--model {marian} --input {corpus} --out {tmp}/o", 1,
     ["--model", "encoder", "not a translation model", "Fix"]),
    ("before a translation model", "--model {base} --before {marian} --input {corpus} --out {tmp}/o --max-length 32",
     1, ["--before", "encoder"]),
    ("NUL line", "--model {base} --input {corpus_nul} --out {tmp}/o --max-length 32", 1,
     ["corpus_nul.txt:2", "invisible"]),
    ("zero-width line", "--model {base} --input {corpus_zw} --out {tmp}/o --max-length 32", 1,
     ["corpus_zw.txt:2", "U+200C"]),
]


@pytest.mark.parametrize("case,argv,status,needles", PATTERNS_CASES, ids=[c[0] for c in PATTERNS_CASES])
def test_patterns_bad_input(case, argv, status, needles, files, capsys, monkeypatch):
    check_case("patterns", argv, status, needles, files, capsys, monkeypatch)


COORDINATOR_CASES = [
    ("no port", "localhost", ["--coordinator", "HOST:PORT", "Fix"]),
    ("port out of range", "127.0.0.1:99999", ["--coordinator", "1..65535"]),
    ("port not a number", "127.0.0.1:http", ["--coordinator", "HOST:PORT"]),
    ("host does not resolve", "no-such-host.invalid:1234", ["--coordinator", "resolves", "Fix"]),
    ("empty host", ":1234", ["--coordinator", "HOST:PORT"]),
]


@pytest.mark.parametrize("process", [0, 1])
@pytest.mark.parametrize("case,address,needles", COORDINATOR_CASES, ids=[c[0] for c in COORDINATOR_CASES])
def test_coordinator_address(case, address, needles, process, files, capsys, monkeypatch):
    argv = (f"--model {{base}} --input {{corpus}} --out {{tmp}}/o --coordinator {address} --num-processes 2 "
            f"--process-id {process} --coordinator-timeout 1")
    check_case("analyze", argv, 1, needles, files, capsys, monkeypatch)


# ---------------------------------------------------------------- the Python API


def test_api_labels_against_num_labels(models):
    from jattn.sweeps.pruning_curve import classification_metric

    model = jattn.load(models["cls"], use_cache=False)
    for bad in ([("a cat", 0), ("a dog", 3)], [("a cat", 7)], [("a cat", -2)]):
        for call in (lambda: jattn.importance(model, bad, progress=False),
                     lambda: jattn.disable(model, bad, progress=False),
                     lambda: classification_metric(model, bad)):
            with pytest.raises(validate.BadArgument, match=r"labels label -?\d.*0\.\.2.*Fix"):
                call()


def test_api_finetune_refuses_translation_models_and_bad_configs(models, tmp_path):
    from jattn.training.finetune import FinetuneConfig, finetune

    for kw in (dict(learning_rate=float("nan")), dict(learning_rate=-1.0), dict(epochs=0), dict(batch_size=2.5),
               dict(warmup_fraction=1.5), dict(seed=True)):
        with pytest.raises(validate.BadArgument) as info:
            FinetuneConfig(**kw)
        assert_names(str(info.value), next(iter(kw)), "Fix")
    with pytest.raises(validate.BadArgument, match="--model.*not a translation model"):
        finetune(str(models["marian"]), [("a", 0), ("b", 1)], [("a", 0)], tmp_path / "o", progress=False)


def test_api_gate_config_is_checked(tmp_path):
    from jattn.training import l0

    for kw in (dict(lam=float("nan")), dict(lam=-1.0), dict(lr=0.0), dict(lr=float("inf")), dict(steps=0),
               dict(label_smoothing=1.0)):
        with pytest.raises(validate.BadArgument) as info:
            l0.check_gate_config(l0.GateConfig(**kw))
        assert_names(str(info.value), next(iter(kw)), "Fix")


def test_api_pruning_numbers(models):
    from jattn.sweeps.pruning_curve import prunable_fraction

    curve = [[0.0, 90.0], [0.1, 89.5], [0.2, 80.0]]
    assert prunable_fraction(curve, 90.0, 1.0) == 0.1
    for tol in (float("nan"), -1.0, float("inf"), "1"):
        with pytest.raises(validate.BadArgument, match="tolerance"):
            prunable_fraction(curve, 90.0, tol)
    with pytest.raises(validate.BadArgument, match="curve point at 10.0%"):
        prunable_fraction([[0.0, 90.0], [0.1, float("nan")]], 90.0, 1.0)


# the forward's interventions on every axis: (field, shape builder from (L, b, H, n), value, words)
AXES_CASES = [
    ("gates batch axis", "head_gates", lambda L, b, H, n: (L, b + 1, H), 1.0, ["axis 1 (example)", "is 3, not 2"]),
    ("gates token axis", "head_gates", lambda L, b, H, n: (L, b, H, n - 1), 1.0, ["axis 3 (query)"]),
    ("gates broadcast batch", "head_gates", lambda L, b, H, n: (L, 1, H), 1.0, ["axis 1 (example)", "is 1, not 2"]),
    ("gates NaN per example", "head_gates", lambda L, b, H, n: (L, b, H), np.nan, ["NaN/inf"]),
    ("gates inf per token", "head_gates", lambda L, b, H, n: (L, b, H, n), np.inf, ["NaN/inf"]),
    ("delta NaN", "weights_delta", lambda L, b, H, n: (L, b, H, n, n), np.nan, ["weights_delta", "NaN/inf"]),
    ("delta key axis", "weights_delta", lambda L, b, H, n: (L, b, H, n, n + 1), 0.0, ["axis 4 (key)"]),
    ("delta batch axis", "weights_delta", lambda L, b, H, n: (L, 1, H, n, n), 0.0, ["axis 1 (example)"]),
    ("mask batch axis", "disabled_heads", lambda L, b, H, n: (L, b + 2, H), False, ["axis 1 (example)"]),
    ("gates 5 axes", "head_gates", lambda L, b, H, n: (L, b, H, n, 1), 1.0, ["head_gates", "shape"]),
]


@pytest.mark.parametrize("case,field,shape,value,needles", AXES_CASES, ids=[c[0] for c in AXES_CASES])
def test_interventions_checked_on_every_axis(case, field, shape, value, needles, models):
    model = jattn.load(models["cls"], use_cache=False)
    batch = model.tokenize(["a red cat", "the dog ran far"], max_length=32)
    (b, n), c = batch.input_ids.shape, model.config
    array = np.full(shape(c.num_layers, b, c.num_heads, n), value)
    for call in (model.forward, model.classify):
        with pytest.raises(validate.BadArgument) as info:
            call(batch, jattn.Interventions(**{field: array}))
        assert_names(str(info.value), *needles, "Fix")


def test_seq2seq_interventions_checked_on_every_axis(models):
    from tiny_seq2seq import padded_batch

    model = jattn.load(models["marian"], use_cache=False)
    c = model.config
    batch = padded_batch(c, b=2, s=5, t=4)
    good = np.ones((c.decoder_layers, 2, c.decoder_heads, 4, 5), np.float32) * 0.0
    model.forward(batch, {"cross": jattn.Interventions(weights_delta=good)})  # (L, b, H, t, s) is right
    for kind, shape in (("cross", (c.decoder_layers, 2, c.decoder_heads, 5, 4)),
                        ("encoder", (c.encoder_layers, 2, c.encoder_heads, 4, 4)),
                        ("decoder", (c.decoder_layers, 3, c.decoder_heads, 4, 4))):
        with pytest.raises(validate.BadArgument, match=rf"interventions\['{kind}'\]\.weights_delta"):
            model.forward(batch, {kind: jattn.Interventions(weights_delta=np.zeros(shape, np.float32))})
    gates = np.ones((c.encoder_layers, c.encoder_heads), np.float32)
    gates[0, 0] = np.nan
    with pytest.raises(validate.BadArgument, match="NaN"):
        model.generate(batch["input_ids"], batch["attention_mask"], interventions={"encoder": jattn.Interventions(
            head_gates=gates)})


# ---------------------------------------------------------------- property-based: numbers and shapes


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6),
                       st.booleans(), st.text(max_size=3)),
       low=st.one_of(st.none(), st.floats(-100, 100)), span=st.floats(0, 100), low_open=st.booleans())
def test_number_accepts_exactly_the_finite_values_in_range(value, low, span, low_open):
    high = None if low is None else low + span
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
          and (low is None or (value > low if low_open else value >= low)) and (high is None or value <= high))
    try:
        got = validate.number("--x", value, low=low, high=high, low_open=low_open)
    except validate.BadArgument as e:
        assert not ok
        assert_names(str(e), "--x", "expected", "Fix")
    else:
        assert ok and got == float(value)


@settings(max_examples=200, deadline=None)
@given(expected=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_array_accepts_exactly_the_expected_shape(expected, data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
    poison = data.draw(st.sampled_from([None, np.nan, np.inf, -np.inf]))
    a = np.zeros(shape, np.float32)
    if poison is not None:
        a.flat[data.draw(st.integers(0, a.size - 1))] = poison
    axes = tuple((f"a{i}", s) for i, s in enumerate(expected))
    try:
        validate.array("x", a, axes)
    except validate.BadArgument as e:
        assert list(shape) != expected or poison is not None
        assert_names(str(e), "x ", "Fix")
    else:
        assert list(shape) == expected and poison is None


@settings(max_examples=150, deadline=None)
@given(L=st.integers(1, 4), H=st.integers(1, 4), pairs=st.lists(st.tuples(st.integers(-2, 6), st.integers(-2, 6)),
                                                                min_size=1, max_size=4))
def test_heads_accepts_exactly_the_pairs_inside_the_model(L, H, pairs):
    text = ",".join(f"{l}:{h}" for l, h in pairs)
    ok = all(0 <= l < L and 0 <= h < H for l, h in pairs)
    try:
        got = validate.heads(text, L, H)
    except validate.BadArgument as e:
        assert not ok
        assert_names(str(e), "--heads", "Fix")
    else:
        assert ok and got == sorted(set(pairs))


# ---------------------------------------------------------------- outputs: symlinks, foreign files


def _results(folder: Path, tag: str) -> Path:
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"meta": {"tag": tag}}))
    (folder / MANIFEST).write_text("results.json\n")
    return folder


def test_symlinked_out_keeps_the_link_and_replaces_the_target(tmp_path):
    real = _results(tmp_path / "real", "old")
    link = tmp_path / "link"
    link.symlink_to(real)
    with Output(link) as output:
        assert output.out == real
        output.write(lambda f: (f / "results.json").write_text(json.dumps({"meta": {"tag": "new"}})))
    assert link.is_symlink() and json.loads((link / "results.json").read_text())["meta"]["tag"] == "new"
    assert (real / MANIFEST).read_text().splitlines() == ["results.json"]


def test_symlink_and_real_path_exclude_each_other(tmp_path):
    real = _results(tmp_path / "real", "old")
    (tmp_path / "link").symlink_to(real)
    with Output(real):
        with pytest.raises(OutputError, match="in use by another jattn run"):
            Output(tmp_path / "link")


def test_symlink_to_a_user_folder_is_refused(tmp_path):
    user = tmp_path / "photos"
    user.mkdir()
    (user / "cat.jpg").write_bytes(b"x")
    (tmp_path / "link").symlink_to(user)
    with pytest.raises(OutputError, match="holds no jattn results.*--overwrite"):
        Output(tmp_path / "link")
    assert (user / "cat.jpg").read_bytes() == b"x"


def test_a_user_file_in_earlier_results_is_never_deleted(tmp_path):
    out = _results(tmp_path / "out", "old")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"notes\.txt.*Fix: move them out"):
        Output(out)
    with Output(out) if False else Output(tmp_path / "other") as output:  # noqa: SIM222 another folder is fine
        output.write(lambda f: (f / "results.json").write_text("{}"))
    assert (out / "notes.txt").read_text() == "mine"
    legacy = tmp_path / "legacy"  # written before manifests: results, figures, no notes
    legacy.mkdir()
    (legacy / "results.json").write_text(json.dumps({"meta": {}}))
    (legacy / "draft.txt").write_text("mine")
    with pytest.raises(OutputError, match="draft.txt"):
        Output(legacy)


def test_a_user_file_added_during_the_run_stops_publishing(tmp_path):
    out = _results(tmp_path / "out", "old")
    with Output(out) as output:
        (out / "late.txt").write_text("mine")
        with pytest.raises(OutputError, match="late.txt"):
            output.write(lambda f: (f / "results.json").write_text("{}"))
    assert (out / "late.txt").read_text() == "mine"
    assert json.loads((out / "results.json").read_text())["meta"]["tag"] == "old"


def test_every_command_records_arguments_and_complete(models, files, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    main(["importance", "--model", files["cls"], "--input", files["header"], "--out", str(tmp_path / "imp")])
    out = capsys.readouterr().out
    assert "2 labelled examples read from" in out and "header line skipped" in out
    meta = json.loads((tmp_path / "imp" / "results.json").read_text())["meta"]
    assert meta["complete"] is True and meta["examples"] == 2 and meta["estimator"] == "token"
    main(["disable", "--model", files["cls"], "--input", files["good"], "--out", str(tmp_path / "dis"),
          "--heads", "0:1,1:3", "--unit", "layer", "--mode", "zero"])
    doc = json.loads((tmp_path / "dis" / "results.json").read_text())
    assert doc["meta"]["complete"] is True and doc["meta"]["heads"] == "0:1,1:3"
    assert "metric_heads_zero" in doc and "3 labelled examples" in capsys.readouterr().out
    assert (tmp_path / "dis" / MANIFEST).is_file()


def test_heads_metric_equals_an_independent_forward(models):
    from jattn.sweeps.disable import heads_metric

    model = jattn.load(models["cls"], use_cache=False)
    data = [("a red cat", 0), ("the dog ran", 1), ("old warm sun", 2), ("new blue sky", 1)]
    c = model.config
    gates = np.ones((c.num_layers, c.num_heads), np.float32)
    gates[0, 1] = gates[1, 3] = 0.0
    logits = model.forward(
        model.tokenize([t for t, _ in data], max_length=32), jattn.Interventions(head_gates=gates)
    ).logits
    expected = float(np.mean(np.asarray(logits).argmax(-1) == [y for _, y in data]))
    assert heads_metric(model, data, "1:3,0:1", mode="zero", max_length=32) == expected


# ---------------------------------------------------------------- labelled files


@pytest.mark.parametrize("first,header", [("sentence\tlabel", True), ("text\tLabel", True), ("a good film\t1", False),
                                          ("label\t0", False), ("42\t1", False)])
def test_labelled_header_is_decided_by_content(first, header, tmp_path):
    from jattn.io.readers import read_labelled

    (tmp_path / "f.tsv").write_text(first + "\nthe dog ran\t0\n")
    rows = read_labelled(tmp_path / "f.tsv")
    assert rows.header == header and len(rows) == (1 if header else 2)
    assert rows.describe().startswith(f"{len(rows)} labelled examples read from")


# ---------------------------------------------------------------- translation


def test_translate_refuses_silent_truncation(models):
    model = jattn.load(models["marian"], use_cache=False)
    from tiny_seq2seq import sentences

    long = " ".join(sentences(200, 1))
    with pytest.raises(validate.BadArgument) as info:
        model.translate(["a", long], num_beams=1, max_length=8)
    assert_names(str(info.value), "texts sentence 1", "positions", "truncate=True")
    assert len(model.translate([long], num_beams=1, max_length=8, truncate=True)) == 1
    for bad in (dict(num_beams=0), dict(batch_size=0), dict(length_penalty=float("nan"))):
        with pytest.raises(validate.BadArgument):
            model.translate(["a"], **bad)
    with pytest.raises(validate.BadArgument, match="invisible"):
        model.translate(["\x00\x00"])


def test_translate_applies_the_recorded_normalisation(models, tmp_path):
    from jattn.models.seq2seq import record_normalization
    from tiny_seq2seq import sentences

    folder = shutil.copytree(models["marian"], tmp_path / "m")
    text = sentences(1, 3)[0]
    plain = jattn.load(folder, use_cache=False)
    assert plain.text_normalization is None
    record_normalization(folder, lowercase=True)
    lowered = jattn.load(folder, use_cache=False)
    assert lowered.text_normalization == {"unicode": "NFKC", "lowercase": True}
    cased = text.upper().replace(" ", "  ")
    assert lowered.translate([cased], num_beams=1, max_length=8) == plain.translate([text.lower()], num_beams=1,
                                                                                      max_length=8)


def test_the_committed_translation_model_records_its_normalisation():
    folder = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-fr-en-6x8"
    doc = json.loads((folder / "tokenizer_config.json").read_text())
    assert doc["text_normalization"] == {"unicode": "NFKC", "lowercase": False}


def test_validate_imports_nothing_from_jattn():
    """The validation layer sits in ``io`` and every layer calls it: it must not import upwards."""
    import ast

    tree = ast.parse(Path(validate.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m.startswith("jattn")], names


def test_cache_on_a_full_disk_warns_once_and_loads(tmp_path):
    """The conversion cache is best-effort: a full disk under it is one warning, never a traceback."""
    import subprocess
    import sys

    from test_output_faults import tmpfs

    model = save_tiny(tmp_path / "model", "bert-2x4", safe=False, max_positions=64)  # a pickle: cached by default
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        with open(disk / "filler", "wb") as f:  # leave ~8 kB: too little for the converted parameters
            f.write(b"\0" * max(0, shutil.disk_usage(disk).free - 8 * 1024))
        env = dict(os.environ, JATTN_CACHE=str(disk / "cache"), HF_HUB_OFFLINE="1")
        proc = subprocess.run(
            [sys.executable, "-c", f"import jattn; print(jattn.load({str(model)!r}).config.num_layers)"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0 and proc.stdout.strip() == "2", proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and "not caching" in warnings[0] and "Fix" in warnings[0], proc.stderr
    assert "Traceback" not in proc.stderr
