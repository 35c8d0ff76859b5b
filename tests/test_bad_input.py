"""Bad input, one table per entry point (issue 11): load, the conversion cache, tokenize,
``jattn analyze``, ``jattn demo``. Each case asserts the exception type (or exit status) and
that the message names the offending file/argument and a fix; cases that already behaved well
stay in the tables so they keep behaving."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn.io import checkpoints
from jattn.cli import COMMANDS, main
from jattn.nn.config import ConfigError
from jattn.io.hf import ConversionError
from jattn.io.tokenize import SequenceTooLongError
from jattn.models.load import _warned as load_warnings
from tiny_encoders import save_tiny


def assert_names(message: str, *needles: str) -> None:
    for needle in needles:
        assert needle.lower() in message.lower(), f"{needle!r} not in message: {message}"


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A tiny random BERT folder with MiniLM's tokenizer (safetensors)."""
    return save_tiny(tmp_path_factory.mktemp("good") / "model", "bert-2x4", max_positions=128)


@pytest.fixture(scope="module")
def good_bin(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("good_bin") / "model", "bert-2x4", safe=False, max_positions=64)


@pytest.fixture(scope="module")
def model(good):
    return jattn.load(good, use_cache=False)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _truncate(name, keep=0.5):
    def make(folder):
        f = folder / name
        data = f.read_bytes()
        f.write_bytes(data[: int(len(data) * keep)])
    return make


def _write(name, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def _remove(*names):
    def make(folder):
        for n in names:
            (folder / n).unlink()
    return make


def _edit_config(**changes):
    def make(folder):
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(changes)
        (folder / "config.json").write_text(json.dumps(cfg))
    return make


def _small_vocab(folder):
    """A foreign, smaller WordPiece vocabulary beside the weights."""
    (folder / "tokenizer.json").unlink()
    lines = (folder / "vocab.txt").read_text().splitlines()
    (folder / "vocab.txt").write_text("\n".join(lines[:2000]) + "\n")


def _nan_weight(folder):
    from safetensors.numpy import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    key = sorted(k for k in state if k.endswith("attention.self.query.weight"))[0]
    state[key][1, 2] = np.nan
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


# (case, source: "good"|"good_bin", make the folder bad, exception type, words the message must hold)
LOAD_CASES = [
    ("invalid config.json", "good", _write("config.json", b'{"model_type": "bert",\n "hidden_size": 32,,}'),
     ConversionError, ["config.json:2:", "invalid JSON", "Fix"]),
    ("empty safetensors", "good", _write("model.safetensors", b""), ConversionError,
     ["model.safetensors", "truncated", "Fix: download it again"]),
    ("truncated safetensors", "good", _truncate("model.safetensors"), ConversionError,
     ["model.safetensors", "Fix: download it again"]),
    ("garbage safetensors", "good", _write("model.safetensors", b"\x00garbage" * 1000), ConversionError,
     ["model.safetensors", "Fix: download it again"]),
    ("truncated pytorch_model.bin", "good_bin", _truncate("pytorch_model.bin"), ConversionError,
     ["pytorch_model.bin", "Fix: download it again"]),
    ("no tokenizer files", "good", _remove("vocab.txt", "tokenizer.json"), ConfigError,
     ["no tokenizer files", "vocab.txt", "Fix"]),
    ("foreign smaller tokenizer", "good", _small_vocab, ConfigError, ["2000 tokens", "30522", "Fix"]),
    ("NaN weight", "good", _nan_weight, ConversionError,
     ["NaN or inf", "attention.self.query.weight", "1 values", "Fix"]),
    # already behaving well
    ("no config.json", "good", _remove("config.json"), FileNotFoundError, ["config.json"]),
    ("no weights", "good", _remove("model.safetensors"), FileNotFoundError,
     ["model.safetensors or pytorch_model.bin", "save_pretrained"]),
    ("unsupported model_type", "good", _edit_config(model_type="bloom"), ConfigError, ["bloom", "supports"]),
    ("config does not match weights", "good", _edit_config(num_hidden_layers=3), ConversionError,
     ["missing tensors", "encoder.layer.2", "Fix"]),
]


@pytest.mark.parametrize("case,source,make,error,needles", LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_load_bad_folders(case, source, make, error, needles, good, good_bin, tmp_path):
    folder = copy(good if source == "good" else good_bin, tmp_path / "model")
    make(folder)
    with pytest.raises(error) as info:
        jattn.load(folder, use_cache=False)
    assert_names(str(info.value), *needles)


def test_load_not_a_folder(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        jattn.load(tmp_path / "file.txt")


def test_marian_folder_without_sentencepiece_files(tmp_path):
    from tiny_seq2seq import save_tiny as save_seq2seq

    folder = save_seq2seq(tmp_path / "marian", "marian")
    assert jattn.load(folder, use_cache=False).config.model_type == "marian"
    for name in ("source.spm", "target.spm"):
        (folder / name).unlink()
    with pytest.raises(ConfigError) as info:
        jattn.load(folder, use_cache=False)
    assert_names(str(info.value), "source.spm", "target.spm", "Fix")


# ---------------------------------------------------------------- the conversion cache


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / "converted").iterdir()]
    return entry


def _largest_file(entry: Path) -> Path:
    return max((p for p in entry.rglob("*") if p.is_file() and p.name != checkpoints.CHECKSUM_FILE),
               key=lambda p: p.stat().st_size)


def _flip(entry):
    f = _largest_file(entry)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x10
    f.write_bytes(bytes(data))


CACHE_CASES = [
    ("bit flip", _flip),
    ("truncated file", lambda e: _largest_file(e).write_bytes(_largest_file(e).read_bytes()[:50])),
    ("deleted file", lambda e: _largest_file(e).unlink()),
    ("no checksum (interrupted save)", lambda e: (e / checkpoints.CHECKSUM_FILE).unlink()),
    ("emptied entry", lambda e: [shutil.rmtree(p) if p.is_dir() else p.unlink() for p in e.iterdir()]),
]


@pytest.mark.parametrize("case,damage", CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_damaged_cache_is_detected_and_converted_again(case, damage, good, model, tmp_path, capfd):
    load_warnings.clear()
    cache = tmp_path / "cache"
    jattn.load(good, cache_dir=cache, use_cache=True)
    damage(_entry(cache))
    again = jattn.load(good, cache_dir=cache, use_cache=True)
    assert_names(capfd.readouterr().err, "conversion cache is damaged", str(_entry(cache)), "converting again")
    for a, b in zip(jax_leaves(again.params), jax_leaves(model.params)):
        np.testing.assert_array_equal(a, b)
    checkpoints.restore_params(_entry(cache))  # the entry was written again, sound


def jax_leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_cache_folder_that_is_a_file_warns_once_and_goes_on(good, tmp_path, capfd):
    load_warnings.clear()
    (tmp_path / "afile").write_text("x")
    for _ in range(2):
        assert jattn.load(good, cache_dir=tmp_path / "afile", use_cache=True) is not None
    err = capfd.readouterr().err
    assert err.count("not caching") == 1
    assert_names(err, str(tmp_path / "afile"), "Not a directory", "Fix: set JATTN_CACHE")


# ---------------------------------------------------------------- tokenize


TOKENIZE_CASES = [
    ("3-tuple", dict(examples=[("a", "b", "c")]), TypeError, ["example 0", "3 items", "Fix"]),
    ("max_length=1 truncate", dict(examples=["a b c d"], max_length=1, truncate=True), ValueError,
     ["max_length=1", "2 special tokens", "Fix"]),
    ("max_length=3 pair truncate", dict(examples=[("a b c", "d e f")], max_length=3, truncate=True), ValueError,
     ["max_length=3", "3 special tokens", "Fix"]),
    ("max_length=0", dict(examples=["a"], max_length=0), ValueError, ["max_length", "positive"]),
    # already behaving well
    ("string, not a list", dict(examples="a string"), TypeError, ["list", "str"]),
    ("empty list", dict(examples=[]), TypeError, ["non-empty"]),
    ("words mixed with strings", dict(examples=["a", ["b"]]), TypeError, ["mixed"]),
    ("too long", dict(examples=["short", "w " * 40], max_length=16), SequenceTooLongError,
     ["example 1", "42 tokens", "max_length=16", "Fix"]),
    ("beyond the positions", dict(examples=["a"], max_length=1000), ValueError, ["max_length=1000", "positions"]),
    ("pad_to too short", dict(examples=["a b c d e f"], pad_to=3), ValueError, ["pad_to=3"]),
]


@pytest.mark.parametrize("case,kwargs,error,needles", TOKENIZE_CASES, ids=[c[0] for c in TOKENIZE_CASES])
def test_tokenize_bad_input(case, kwargs, error, needles, model):
    with pytest.raises(error) as info:
        model.tokenize(**kwargs)
    assert_names(str(info.value), *needles)


def test_tokenize_mixes_singles_and_pairs_like_separate_calls(model):
    mixed = model.tokenize(["The cat sat on the mat.", ("A question?", "An answer."), "Short."])
    single = model.tokenize(["The cat sat on the mat.", "Short."])
    pair = model.tokenize([("A question?", "An answer.")])
    for row, (ref, r) in zip((0, 1, 2), ((single, 0), (pair, 0), (single, 1))):
        n = int(ref.lengths[r])
        assert mixed.lengths[row] == n
        for key in ("input_ids", "token_type_ids"):
            np.testing.assert_array_equal(getattr(mixed, key)[row, :n], getattr(ref, key)[r, :n])


def test_truncation_never_returns_rows_longer_than_max_length(model):
    texts = ["one two three four five six seven", ("a b c d e f g h", "i"), "x"]
    for max_length in (3, 4, 5, 8):
        batch = model.tokenize(texts[:1] + texts[2:], max_length=max_length, truncate=True)
        assert batch.lengths.max() <= max_length
        batch = model.tokenize(texts, max_length=max(max_length, 4), truncate=True)
        assert batch.lengths.max() <= max(max_length, 4)


def test_empty_strings_are_skipped_and_counted_by_the_runner(model):
    from jattn.analyses.weights import ClassAttention
    from jattn.runner import run_corpus

    with_empty = run_corpus(model, ["A cat.", "", "   ", "A dog sat.", ("", "x")], [ClassAttention()],
                            batch_size=2, progress=False)
    without = run_corpus(model, ["A cat.", "A dog sat."], [ClassAttention()], batch_size=2, progress=False)
    assert with_empty.meta["segments"] == 2 and with_empty.meta["skipped_empty"] == 3
    np.testing.assert_allclose(with_empty.statistics["attn_to_cls"].value, without.statistics["attn_to_cls"].value)
    with pytest.raises(ValueError, match="corpus is empty.*2 empty"):
        run_corpus(model, ["", " "], [ClassAttention()], progress=False)


# ---------------------------------------------------------------- jattn analyze / demo (command line)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_every_command(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "usage: jattn " + command in capsys.readouterr().out


def test_help_of_jattn(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and all(c in out for c in COMMANDS), out


def run_cli(argv, capsys) -> tuple[int, str]:
    """(exit status, stderr) of ``jattn argv`` run in this process."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    err = "\n".join(line for line in capsys.readouterr().err.splitlines() if "ex/s]" not in line)  # progress bars
    if isinstance(code, str):  # SystemExit(message): printed by the interpreter, status 1
        return 1, err + code
    return code, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def files(tmp_path, good):
    """Inputs for the CLI cases: a corpus, a non-UTF-8 corpus, a short GAP row, a bad rank file."""
    f = {"corpus": tmp_path / "c.txt", "latin": tmp_path / "latin.txt", "gap": tmp_path / "g.tsv",
         "ranks": tmp_path / "ranks.txt", "blank": tmp_path / "blank.txt", "file": tmp_path / "a_file",
         "foreign": tmp_path / "foreign", "model": good}
    f["corpus"].write_text("The cat sat.\nA dog.\n")
    f["latin"].write_bytes("Fine line.\nCaf\xe9 au lait.\n".encode("latin-1"))
    f["gap"].write_text("ID\tText\tPronoun\nd-1\tOne. Two.\this\nd-2\n")
    f["ranks"].write_text("1 100 1012\n2 x 1010\n")
    f["blank"].write_text("\n   \n\n")
    f["file"].write_text("not a folder")
    f["foreign"].mkdir()
    (f["foreign"] / "notes.txt").write_text("mine")
    (tmp_path / "invalid").mkdir()
    (tmp_path / "invalid" / "config.json").write_text("{oops")
    f["invalid"] = tmp_path / "invalid"
    return f


# (case, argv with {placeholders} from ``files``, exit status, words stderr must hold)
ANALYZE_CASES = [
    ("batch-size 0", "--input {corpus} --out {tmp}/o --batch-size 0", 2, ["--batch-size", "positive"]),
    ("batch-size negative", "--input {corpus} --out {tmp}/o --batch-size -3", 2, ["--batch-size", "positive"]),
    ("max-length negative", "--input {corpus} --out {tmp}/o --max-length -1", 2, ["--max-length", "positive"]),
    ("input a directory", "--input {tmp} --out {tmp}/o", 1, ["is a folder", "Fix: pass a corpus file"]),
    ("non-UTF-8 input", "--input {latin} --out {tmp}/o", 1, ["latin.txt:2", "utf-8", "--encoding"]),
    ("short GAP row", "--input {gap} --format gap --out {tmp}/o", 1, ["g.tsv:3", "Text", "Fix"]),
    ("non-integer rank-file field", "--input {corpus} --methods norm-freq --rank-file {ranks} --out {tmp}/o", 1,
     ["ranks.txt:2", "three integers", "Fix"]),
    ("rank file not given", "--input {corpus} --methods mixing --out {tmp}/o", 1, ["'mixing'", "--rank-file"]),
    ("out an existing file", "--input {corpus} --out {file} --model {tmp}/no-such-model", 1,
     ["a_file is an existing file", "Fix"]),
    ("out a foreign non-empty folder", "--input {corpus} --out {foreign} --model {tmp}/no-such-model", 1,
     ["foreign is a non-empty folder", "--overwrite"]),
    ("num-processes without coordinator", "--input {corpus} --out {tmp}/o --num-processes 2", 1,
     ["--num-processes without --coordinator", "Fix"]),
    ("process-id without coordinator", "--input {corpus} --out {tmp}/o --process-id 1", 1,
     ["--process-id without --coordinator"]),
    ("unreachable coordinator", "--input {corpus} --out {tmp}/o --coordinator 127.0.0.1:{port} --num-processes 2 "
     "--process-id 1 --coordinator-timeout 1", 1, ["cannot reach the coordinator 127.0.0.1:", "within 1 s", "Fix"]),
    ("invalid config.json", "--input {corpus} --out {tmp}/o --model {invalid}", 1, ["config.json:1:", "invalid JSON"]),
    ("blank corpus", "--input {blank} --out {tmp}/o", 1, ["corpus is empty", "1 empty examples skipped"]),
    # already behaving well
    ("unknown method", "--input {corpus} --out {tmp}/o --methods weights,bogus", 1, ["'bogus'", "Fix: choose from"]),
    ("missing input", "--input {tmp}/nope.txt --out {tmp}/o", 1, ["nope.txt does not exist"]),
    ("word-level methods on text", "--input {corpus} --out {tmp}/o --methods word-weights", 1,
     ["pre-split into words", "--format conllu"]),
    ("too long without --truncate", "--input {corpus} --out {tmp}/o --max-length 4", 1,
     ["c.txt:1", "--max-length 4", "--truncate"]),
    ("three tabs", "--input {gap} --out {tmp}/o", 1, ["g.tsv:1", "tabs"]),
    ("bad format", "--input {corpus} --out {tmp}/o --format xml", 2, ["--format", "invalid choice"]),
]


@pytest.mark.parametrize("case,argv,status,needles", ANALYZE_CASES, ids=[c[0] for c in ANALYZE_CASES])
def test_analyze_bad_input(case, argv, status, needles, files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    values = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path), "port": _free_port()}
    args = argv.format(**values).split()
    if "--model" not in args:
        args += ["--model", str(files["model"])]
    code, err = run_cli(["analyze", *args], capsys)
    assert code == status, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert_names(err, *needles)


def test_analyze_non_utf8_input_reads_with_encoding(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    main(["analyze", "--input", str(files["latin"]), "--encoding", "latin-1", "--model", str(files["model"]),
          "--methods", "weights", "--out", str(tmp_path / "o")])
    meta = json.loads((tmp_path / "o" / "results.json").read_text())["meta"]
    assert meta["segments"] == 2 and meta["complete"] is True


def test_debug_shows_the_exception(files, tmp_path, monkeypatch):
    with pytest.raises(IsADirectoryError):
        main(["analyze", "--input", str(tmp_path), "--out", str(tmp_path / "o"), "--debug"])
    monkeypatch.setenv("JATTN_DEBUG", "1")
    with pytest.raises(IsADirectoryError):
        main(["analyze", "--input", str(tmp_path), "--out", str(tmp_path / "o")])


def test_cli_error_is_one_line_in_a_real_process(tmp_path):
    """No traceback reaches the terminal for an expected error (the interpreter's own printing)."""
    import sys

    proc = subprocess.run([sys.executable, "-m", "jattn.cli", "analyze", "--input", str(tmp_path), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"jattn analyze: error: input {tmp_path} is a folder. Fix: pass a "
                                                "corpus file (text format)"]


DEMO_CASES = [
    ("limit negative", "--limit -1", 2, ["--limit", "positive"]),
    ("limit 0", "--limit 0", 2, ["--limit", "positive"]),
    ("maps negative", "--maps -2", 2, ["--maps", "0 or more"]),
    ("batch-size 0", "--batch-size 0", 2, ["--batch-size", "positive"]),
    ("out an existing file", "--out {file} --model {tmp}/no-such-model", 1, ["a_file is an existing file"]),
    ("model folder without config.json", "--out {tmp}/o --model {tmp}", 1, ["has no config.json"]),
    ("too many maps", "--out {tmp}/o --maps 100000 --limit 4", 1, ["--maps 100000", "Fix"]),
]


@pytest.mark.parametrize("case,argv,status,needles", DEMO_CASES, ids=[c[0] for c in DEMO_CASES])
def test_demo_bad_input(case, argv, status, needles, files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    args = argv.format(tmp=tmp_path, file=files["file"]).split()
    if "--model" not in args:
        args += ["--model", str(files["model"])]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "o")]
    code, err = run_cli(["demo", *args], capsys)
    assert code == status, err
    assert "Traceback" not in err
    assert_names(err, *needles)


# ---------------------------------------------------------------- results: non-finite numbers


def test_non_finite_totals_are_an_error_naming_layer_and_head(tmp_path):
    from jattn.runner.protocol import Statistic
    from jattn.io.results import NonFiniteError
    from jattn.viz.results import write_files
    from jattn.runner import RunResult

    total = np.ones((2, 3))
    total[1, 2] = np.nan
    result = RunResult({"attn_to_cls": Statistic(total, "x")}, {"custom": {"attn_to_cls": total},
                                                                "_meta": {}}, {"segments": 1})
    with pytest.raises(NonFiniteError) as info:
        write_files(result, tmp_path / "o", num_layers=2)
    assert_names(str(info.value), "'custom'", "'attn_to_cls'", "layer 1, head 2", "Fix")
    assert not (tmp_path / "o" / "results.json").exists()
    # NaN where no sequence contributed (finite totals, 0/0) is written as null, as documented
    ok = RunResult({"attn_to_cls": Statistic(np.full((2, 3), np.nan), "x")},
                   {"custom": {"attn_to_cls": np.zeros((2, 3)), "attn_to_cls_n": np.zeros(())}}, {"segments": 1})
    write_files(ok, tmp_path / "o", num_layers=2)
    assert json.loads((tmp_path / "o" / "results.json").read_text())["attn_to_cls"]["value"][0][0] is None


def test_mds_refuses_non_finite_distances():
    from jattn.analyses.distance import mds

    d = np.ones((4, 4)) - np.eye(4)
    d[1, 3] = np.inf
    with pytest.raises(ValueError, match="heads 1 and 3"):
        mds(d)


def test_mds_of_all_zero_distances_is_the_fits_result_without_the_fit():
    """All-zero distances (every head alike; the zero totals ``check_statistic_names`` finalizes before
    the first batch): the embedding scikit-learn's fit reaches, every head at the origin, returned
    without its 5 x 1000 steps dividing by the zero total distance."""
    import warnings

    from sklearn.manifold import MDS

    from jattn.analyses.distance import mds

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        fitted = MDS(n_components=2, metric_mds=True, metric="precomputed", init="random", n_init=5, max_iter=1000,
                     eps=1e-10, random_state=0).fit_transform(np.zeros((5, 5)))
    np.testing.assert_array_equal(mds(np.zeros((5, 5))), fitted)


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`jattn data list | head`: the reader has gone before the listing is written; exit 0, no error."""
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "jattn.cli", "data", "list", "--data-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command has imported anything: its first write meets a closed pipe
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Broken pipe" not in err and b"Traceback" not in err, err.decode()


def test_reproduce_force_takes_one_known_name_each(tmp_path, capsys):
    """--force takes one stage or study per flag (a study named after it stays a positional study)
    and refuses a name no stage of the run has."""
    from jattn.cli import build_parser

    args = build_parser()[0].parse_args(["reproduce", "--force", "induction.attn-only", "induction"])
    assert args.force == ["induction.attn-only"] and args.studies == ["induction"]
    with pytest.raises(SystemExit, match=r"--force induction\.nonsense: no stage or study of this run"):
        main(["reproduce", "induction", "--quick", "--list", "--out", str(tmp_path), "--force", "induction.nonsense"])


def test_conllu_head_outside_its_sentence_is_named_with_its_line(tmp_path):
    from jattn.io.readers import read_conllu

    rows = ["1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_", "2\tcat\tcat\tNOUN\t_\t_\t0\troot\t_\t_",
            "3\tsat\tsit\tVERB\t_\t_\t7\tacl\t_\t_"]
    path = tmp_path / "bad.conllu"
    path.write_text("# text = The cat sat\n" + "\n".join(rows) + "\n\n")
    with pytest.raises(ValueError, match=r"bad\.conllu:4: word 3 'sat' has HEAD 7, but its sentence has 3 words"):
        list(read_conllu(path))
    path.write_text("\n".join(rows[:2]) + "\n\n")
    assert list(read_conllu(path))[0].labels["heads"].tolist() == [2, 0]


def test_analyze_refuses_truncate_with_skip_too_long(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--input", "x.txt", "--out", "o", "--truncate", "--skip-too-long"])
    assert "--skip-too-long: not allowed with argument --truncate" in capsys.readouterr().err


def test_reproduce_refuses_an_unwritable_out_before_any_stage(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(SystemExit, match=r"--out .*a-file/out is not writable .*no stage has run"):
        main(["reproduce", "induction", "--quick", "--out", str(tmp_path / "a-file" / "out")])


def test_a_pair_on_a_model_with_one_token_type_is_refused_by_the_runner(tmp_path):
    """The tokenizer marks segment B with type 1, the model embeds type 0 only: an error naming the
    example, where the embedding's gather would have read type 0 silently."""
    from jattn.analyses.weights import Entropy

    model = jattn.load(save_tiny(tmp_path / "r", "roberta-2x4"), use_cache=False)
    with pytest.raises(ValueError, match=r"a segment pair.*token type 1, but this model has 1 token type"):
        jattn.run_corpus(model, [("A question?", "An answer.")], [Entropy()], max_length=32, progress=False)
    assert jattn.run_corpus(model, ["A single segment."], [Entropy()], max_length=32, progress=False).statistics


def test_a_conllu_file_read_as_text_points_to_the_format(tmp_path):
    from jattn.io.readers import read_text

    path = tmp_path / "x.conllu"
    path.write_text("# text = Hi\n1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(ValueError, match=r"x\.conllu:2: 9 tabs.*CoNLL-U file.*format=conllu"):
        list(read_text(path))
    path.write_text("a\tb\tc\n")
    with pytest.raises(ValueError, match="2 tabs.*Fix: remove the extra tabs"):
        list(read_text(path))
