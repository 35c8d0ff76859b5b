"""The attention viewer's data: every map against model.forward / jattn.norms / jattn.attributions
within the documented normalisation and quantisation bounds, a second model's maps (``compare``)
against that model's own, bad input, page size. The page in a real browser:
tests/test_view_browser.py."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn.cli import main
from jattn.cli.view import add_arguments, run
from jattn.viz.view import read_page
from jattn.viz.view_codes import ERROR_BOUND, decode_measure, dequantize, encode_measure, quantize, row_shares
from tiny_encoders import TOKENIZER_FILES
from tiny_encoders import save_tiny as save_tiny_encoder
from tiny_seq2seq import save_tiny as save_tiny_seq2seq

SENTENCE = "The quick brown fox jumps over the lazy dog because it was tired."


def reference_shares(maps) -> np.ndarray:
    """Rows divided by their sums, one row at a time (the slow, obvious reference)."""
    maps = np.asarray(maps, np.float64)
    out = np.zeros_like(maps)
    for index in np.ndindex(maps.shape[:-1]):
        s = maps[index].sum()
        out[index] = maps[index] / s if s > 0 else 0.0
    return out


def assert_stored(decoded: dict, reference_maps, slack: float = 1e-6) -> None:
    """A stored measure: |decoded share − exact share| ≤ ERROR_BOUND · row max (+ float slack),
    and the decoded raw value within ERROR_BOUND · the row's largest raw value."""
    ref = reference_shares(reference_maps)
    assert decoded["share"].shape == ref.shape
    bound = ERROR_BOUND * ref.max(-1, keepdims=True) + slack
    assert (np.abs(decoded["share"] - ref) <= bound).all(), float(np.max(np.abs(decoded["share"] - ref) - bound))
    raw = np.asarray(reference_maps, np.float64)
    raw_bound = ERROR_BOUND * raw.max(-1, keepdims=True) * (1 + 1e-5) + slack * raw.sum(-1, keepdims=True)
    assert (np.abs(decoded["raw"] - raw) <= raw_bound).all()


def test_quantize_bound_against_loops():
    rng = np.random.default_rng(0)
    maps = rng.gamma(0.3, size=(3, 4, 9, 11)) * rng.choice([0.0, 1.0], size=(3, 4, 9, 11), p=[0.2, 0.8])
    maps[0, 0, 0] = 0.0  # an all-zero row stays zero
    shares, sums = row_shares(maps)
    codes, top = quantize(shares)
    for index in np.ndindex(maps.shape[:-1]):
        row = maps[index]
        assert sums[index] == pytest.approx(row.sum())
        m = (row / row.sum()).max() if row.sum() else 0.0
        assert top[index] == pytest.approx(m)
        for j, x in enumerate(row):
            exact = x / row.sum() if row.sum() else 0.0
            assert codes[index + (j,)] == (round(255 * exact / m) if m else 0)
    assert np.abs(dequantize(codes, top) - shares).max() <= ERROR_BOUND * shares.max() + 1e-12
    assert (dequantize(codes, top)[0, 0, 0] == 0).all()
    with pytest.raises(ValueError, match="negative or non-finite"):
        row_shares(-maps)


def test_norm_keeps_its_own_bound_where_alpha_rounds_to_zero():
    """‖αf‖ is stored as its own codes, so its bound holds also where α rounds to code 0 on a key
    whose ‖f‖ is large (most of the norm's row), which α's codes times ‖f‖ would not give."""
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 3, size=(2, 3, 7, 9))
    alpha = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # (L, H, q, k)
    alpha[0, 0, 0] = [0.9996] + [0.00005] * 8  # the [CLS]-sink row: the others round to code 0 in α
    f_norm = rng.gamma(2.0, size=(2, 3, 9)).astype(np.float32)
    f_norm[0, 0, 0] = 1e-6  # ... and the sink's ‖f‖ is small: the norm's share is elsewhere
    norm = alpha * f_norm[:, :, None, :]  # (L, H, q, k)
    assert (decode_measure(encode_measure("alpha", alpha))["codes"][0, 0, 0, 1:] == 0).all()
    decoded = decode_measure(encode_measure("norm", norm))
    codes, _ = quantize(row_shares(norm)[0])
    assert (decoded["codes"] == codes).all()
    assert_stored(decoded, norm)
    assert decoded["share"][0, 0, 0, 0] < 0.01 < decoded["share"][0, 0, 0, 1:].min()


# ---------------------------------------------------------------- tiny random encoder

@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return jattn.load(save_tiny_encoder(tmp_path_factory.mktemp("bert"), "bert-2x4", max_positions=64),
                      use_cache=False)


def check_encoder_page(model, html: str, example) -> dict:
    """Every measure of an encoder page against the library's arrays, on a batch made here."""
    data = read_page(html)
    batch = model.tokenize([example], max_length=model.config.max_length)
    n = int(batch.lengths[0])
    assert data["tokens"]["input"] == model.tokenizer.convert_ids_to_tokens(batch.input_ids[0, :n].tolist())
    check_encoder_measures(model, data["views"]["encoder"]["measures"], batch)
    return data


def check_encoder_measures(model, measures: dict, batch) -> None:
    """An encoder view's decoded measures against model.forward / jattn.norms / jattn.attributions."""
    assert list(measures) == ["alpha", "norm", "summed", "attnres", "attnresln", "rollout", "globenc", "alti"]
    alpha = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
    norms = jattn.norms(model, batch, residual=True)["encoder"]
    attributions = jattn.attributions(model, batch)["encoder"]
    assert_stored(measures["alpha"], alpha)
    for key, name in (("norm", "weighted_norm"), ("summed", "summed_norm"), ("attnres", "attnres_norm"),
                      ("attnresln", "attnresln_norm")):
        assert_stored(measures[key], norms[name][:, 0])
    for key in ("rollout", "globenc", "alti"):
        assert_stored(measures[key], attributions[key][:, 0])
    with pytest.raises(AssertionError):  # the comparison can fail: layer 1's maps are not layer 0's
        assert_stored({k: v[::-1] for k, v in measures["alpha"].items()}, alpha)


def test_encoder_page_equals_forward_and_norms(tiny_encoder):
    html = jattn.view(tiny_encoder, SENTENCE)
    data = check_encoder_page(tiny_encoder, html, SENTENCE)
    assert data["views"]["encoder"]["measures"]["alpha"]["share"].shape[:2] == (2, 4)
    assert data["error_bound"] == ERROR_BOUND


def test_pair_page(tiny_encoder):
    html = jattn.view(tiny_encoder, "Where is the dog?", pair="It sleeps in the park.")
    data = check_encoder_page(tiny_encoder, html, ("Where is the dog?", "It sleeps in the park."))
    assert data["tokens"]["input"].count("[SEP]") == 2 and data["pair"] == "It sleeps in the park."


def test_page_is_self_contained(tiny_encoder):
    html = jattn.view(tiny_encoder, "A </script> tag and </s> in the text & \"quotes\".")
    assert not re.search(r"""\b(src|href)\s*=\s*["'](?!data:)""", html), "a resource outside the page"
    assert "@import" not in html and "fetch(" not in html and "XMLHttpRequest" not in html
    assert html.count("</script>") == 2  # the data block and the script: the text's </script> is escaped
    assert read_page(html)["text"] == "A </script> tag and </s> in the text & \"quotes\"."


def test_bad_input(tiny_encoder):
    for text in ("", "   \n"):
        with pytest.raises(ValueError, match="the text is empty"):
            jattn.view(tiny_encoder, text)
    with pytest.raises(ValueError, match="second text is empty"):
        jattn.view(tiny_encoder, SENTENCE, pair=" ")
    long_text = " ".join(["word"] * 80)  # 82 tokens > the model's 64 positions
    with pytest.raises(ValueError, match=r"82 tokens, more than the 64 .*truncate=True"):
        jattn.view(tiny_encoder, long_text)
    data = read_page(jattn.view(tiny_encoder, long_text, truncate=True))
    assert len(data["tokens"]["input"]) == 64 and data["tokens"]["input"][-1] == "[SEP]"
    with pytest.raises(ValueError, match="more than the 10"):
        jattn.view(tiny_encoder, SENTENCE, max_length=10)
    with pytest.raises(ValueError, match="max_length=65 must be in"):
        jattn.view(tiny_encoder, SENTENCE, max_length=65)
    with pytest.raises(ValueError, match="target= is for translation models"):
        jattn.view(tiny_encoder, SENTENCE, target="Le chien.")
    with pytest.raises(ValueError, match="not a jattn view page"):
        read_page("<html></html>")


def test_cli_writes_page_and_reports_errors(tiny_encoder, tmp_path, capsys):
    folder = Path(tiny_encoder.source)  # the fixture's saved folder
    (tmp_path / "mine.py").write_text("print('a file of the user')\n")
    out = tmp_path / "page.html"
    main(["view", "--model", str(folder), "--text", SENTENCE, "--out", str(out)])
    printed = capsys.readouterr().out
    assert re.search(r"wrote .*page\.html \(0\.\d\d MB; encoder 16×16 tokens\)", printed), printed
    assert "compare" not in read_page(out.read_text(encoding="utf-8"))
    check_encoder_page(tiny_encoder, out.read_text(encoding="utf-8"), SENTENCE)
    for argv, message in (([], "the text is empty"), (["--out", str(tmp_path)], "is a folder"),
                          (["--out", str(tmp_path / "no" / "p.html")], "does not exist"),
                          (["--text", "word " * 80], "--truncate"),
                          (["--text", SENTENCE, "--pair", " "], "e.g. --pair"),
                          (["--text", SENTENCE, "--out", str(tmp_path / "mine.py")], "not a page jattn view wrote")):
        args = ["view", "--model", str(folder), "--text", "", "--out", str(out)] + argv
        with pytest.raises(SystemExit) as info:
            main(args)
        assert message in str(info.value.code), (argv, info.value.code)
    assert (tmp_path / "mine.py").read_text() == "print('a file of the user')\n"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    run(parser.parse_args(["--model", str(folder), "--text", "word " * 80, "--truncate", "--out", str(out)]))
    assert len(read_page(out.read_text(encoding="utf-8"))["tokens"]["input"]) == 64


@pytest.mark.parametrize("hidden", [192, pytest.param(768, marks=pytest.mark.slow)])
def test_size_at_128_tokens_on_12x12(tmp_path, hidden):
    """128 tokens on a 12-layer × 12-head random BERT (HF's init), under 7 MB. The array sizes
    depend on L, H and n only; how well they compress on the attention's shape (hidden 192 here;
    768, bert-base's, with --runslow). Nearly all of the page is α's and the per-head norm's
    8-bit codes, each L·H·n² bytes before compression, which deflate brings to their entropy
    (random BERT at hidden 192: 6.0 and 7.1 bits a code), plus base64's third."""
    import torch
    from transformers import BertConfig, BertModel

    from jattn.cli.demo import sample_sentences
    from jattn.models.load import default_model_path

    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=hidden, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=4 * hidden, max_position_embeddings=128)).save_pretrained(tmp_path)
    for f in TOKENIZER_FILES:
        shutil.copy(default_model_path() / f, tmp_path / f)
    model = jattn.load(tmp_path, use_cache=False)
    html = jattn.view(model, " ".join(sample_sentences()[:12]), truncate=True)
    data = read_page(html)
    assert data["views"]["encoder"]["measures"]["alpha"]["share"].shape == (12, 12, 128, 128)
    size = len(html.encode("utf-8"))
    print(f"12x12 random BERT (hidden {hidden}), 128 tokens: {size / 1e6:.2f} MB")
    assert size < 7e6


# the same page code at 128 tokens as the 12 × 12 random BERT's (test_size_at_128_tokens_on_12x12), whose
# measures test_encoder_page_equals_forward_and_norms checks against forward/norms/attributions; compare:
# test_compare_page_holds_both_models_maps. Here on the real MiniLM only.
@pytest.mark.slow(twin="tests/test_view.py::test_size_at_128_tokens_on_12x12[192]")
def test_minilm_page_at_128_tokens(minilm):
    from jattn.cli.demo import sample_sentences

    text = " ".join(sample_sentences()[:12])
    html = jattn.view(minilm, text, max_length=128, truncate=True)
    batch = minilm.tokenize([text], max_length=128, truncate=True)
    assert batch.input_ids.shape == (1, 128)
    check_encoder_page_batch(minilm, html, batch)
    size = len(html.encode("utf-8"))
    # with a second model of the same shape (here the same one): its data again, the assets once
    both = len(jattn.view(minilm, text, compare=minilm, max_length=128, truncate=True).encode("utf-8"))
    print(f"MiniLM (6x12), 128 tokens: {size / 1e6:.2f} MB; compared with a second 6x12 model: {both / 1e6:.2f} MB")
    assert size < both < 2 * size


def check_encoder_page_batch(model, html, batch):
    data = read_page(html)
    measures = data["views"]["encoder"]["measures"]
    alpha = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
    norms = jattn.norms(model, batch, residual=True)["encoder"]
    assert_stored(measures["alpha"], alpha)
    assert_stored(measures["norm"], norms["weighted_norm"][:, 0])
    assert_stored(measures["attnresln"], norms["attnresln_norm"][:, 0])
    assert_stored(measures["alti"], jattn.attributions(model, batch)["encoder"]["alti"][:, 0])


# ---------------------------------------------------------------- tiny random translation model

@pytest.fixture(scope="module")
def tiny_marian(tmp_path_factory):
    return jattn.load(save_tiny_seq2seq(tmp_path_factory.mktemp("marian"), "marian"), use_cache=False)


SOURCE, TARGET = "un homme court sur la plage", "the man runs on the beach"


def teacher_forced_batch(model, source: str, target: str) -> dict:
    src = np.asarray(model.tokenizer([source])["input_ids"])  # (1, s)
    tgt = model.tokenizer(text_target=[target])["input_ids"][0]
    dec = np.asarray([[model.config.decoder_start_token_id] + tgt])  # (1, t)
    return {"input_ids": src, "attention_mask": np.ones_like(src), "decoder_input_ids": dec,
            "decoder_attention_mask": np.ones_like(dec)}


def check_translation_views(model, views: dict, batch: dict) -> None:
    """A translation model's three views against model.forward / jattn.norms on ``batch``."""
    out, norms = model.forward(batch), jattn.norms(model, batch, residual=True)
    s, t = batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1]
    assert [(v["queries"], v["keys"]) for v in views.values()] == [("source", "source"), ("target", "target"),
                                                                  ("target", "source")]
    for kind, alpha in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                        ("cross", out.cross_attentions)):
        measures = views[kind]["measures"]
        alpha = np.asarray(alpha)[:, 0]
        assert_stored(measures["alpha"], alpha)
        assert_stored(measures["norm"], norms[kind]["weighted_norm"][:, 0])
        assert_stored(measures["summed"], norms[kind]["summed_norm"][:, 0])
        has_residual = kind != "cross"
        assert ("attnres" in measures) == has_residual and ("attnresln" in measures) == has_residual
        if has_residual:
            assert_stored(measures["attnresln"], norms[kind]["attnresln_norm"][:, 0])
    assert views["cross"]["measures"]["alpha"]["share"].shape[2:] == (t, s)
    assert np.triu(views["decoder"]["measures"]["alpha"]["share"], 1).max() == 0  # causal


def test_translation_page_teacher_forced(tiny_marian):
    model = tiny_marian
    data = read_page(jattn.view(model, SOURCE, target=TARGET))
    batch = teacher_forced_batch(model, SOURCE, TARGET)
    assert data["target"] == TARGET and not data["generated"]
    assert data["tokens"]["source"] == model.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert data["tokens"]["target"] == model.tokenizer.convert_ids_to_tokens(batch["decoder_input_ids"][0].tolist())
    check_translation_views(model, data["views"], batch)


def test_translation_page_own_translation(tiny_marian):
    model = tiny_marian
    data = read_page(jattn.view(model, SOURCE, num_beams=2))
    src = np.asarray(model.tokenizer([SOURCE])["input_ids"])
    ids = np.asarray(model.generate(src, np.ones_like(src), num_beams=2).sequences)[0]
    ends = np.nonzero(ids[1:] == model.config.eos_token_id)[0]
    ids = ids[: ends[0] + 2] if len(ends) else ids
    assert data["generated"] and data["tokens"]["target"] == model.tokenizer.convert_ids_to_tokens(ids.tolist())
    assert data["target"] == model.tokenizer.decode(ids, skip_special_tokens=True)


def test_translation_bad_input(tiny_marian):
    with pytest.raises(ValueError, match="pair= is for encoders"):
        jattn.view(tiny_marian, SOURCE, pair="x")
    with pytest.raises(ValueError, match="the target text is empty"):
        jattn.view(tiny_marian, SOURCE, target=" ")
    with pytest.raises(ValueError, match="the source text has .* tokens, more than the 8.*truncate=True"):
        jattn.view(tiny_marian, SOURCE + " " + SOURCE, target=TARGET, max_length=8)
    data = read_page(jattn.view(tiny_marian, SOURCE + " " + SOURCE, target=TARGET + " " + TARGET, max_length=8,
                                truncate=True))
    assert len(data["tokens"]["source"]) == 8 and len(data["tokens"]["target"]) == 8


# ---------------------------------------------------------------- a second model (compare)

@pytest.fixture(scope="module")
def tiny_encoder_b(tmp_path_factory):
    """Another random encoder, of another shape (3 layers × 2 heads), with the same tokenizer."""
    folder = save_tiny_encoder(tmp_path_factory.mktemp("bert_b"), "bert-3x2-gelu_new", seed=1, max_positions=64)
    return jattn.load(folder, use_cache=False)


def test_compare_page_holds_both_models_maps(tiny_encoder, tiny_encoder_b):
    """The second model's maps equal its own forward / norms / attributions, computed here; the
    first model's are those of the page without ``compare``, code for code."""
    html = jattn.view(tiny_encoder, SENTENCE, compare=tiny_encoder_b)
    data = check_encoder_page(tiny_encoder, html, SENTENCE)
    second = data["compare"]["views"]["encoder"]["measures"]
    check_encoder_measures(tiny_encoder_b, second, tiny_encoder_b.tokenize([SENTENCE], max_length=64))
    assert second["alpha"]["share"].shape[:2] == (3, 2) and data["compare"]["model"] != data["model"]
    alone = read_page(jattn.view(tiny_encoder, SENTENCE))["views"]["encoder"]["measures"]
    for key, decoded in alone.items():
        assert (decoded["codes"] == data["views"]["encoder"]["measures"][key]["codes"]).all(), key
    with pytest.raises(AssertionError):  # the two models' maps differ: the check can fail
        check_encoder_measures(tiny_encoder_b, data["views"]["encoder"]["measures"],
                               tiny_encoder_b.tokenize([SENTENCE], max_length=64))


# a sentence pair through the compare page: the pair path of test_pair_page and the second model's
# measures of test_compare_page_holds_both_models_maps, the same code on another input shape
@pytest.mark.slow(twin="tests/test_view.py::test_compare_page_holds_both_models_maps")
def test_compare_pair_page(tiny_encoder, tiny_encoder_b):
    example = ("Where is the dog?", "It sleeps in the park.")
    data = read_page(jattn.view(tiny_encoder, *example, compare=tiny_encoder_b))
    check_encoder_measures(tiny_encoder_b, data["compare"]["views"]["encoder"]["measures"],
                           tiny_encoder_b.tokenize([example], max_length=64))


@pytest.fixture(scope="module")
def tiny_marian_b(tmp_path_factory):
    return jattn.load(save_tiny_seq2seq(tmp_path_factory.mktemp("marian_b"), "marian", seed=1), use_cache=False)


def test_compare_translation_models(tiny_marian, tiny_marian_b):
    """Teacher-forced on the given target, and on the first model's own translation: the second
    model's three views equal its forward / norms on that batch."""
    data = read_page(jattn.view(tiny_marian, SOURCE, target=TARGET, compare=tiny_marian_b))
    check_translation_views(tiny_marian, data["views"], teacher_forced_batch(tiny_marian, SOURCE, TARGET))
    check_translation_views(
        tiny_marian_b, data["compare"]["views"], teacher_forced_batch(tiny_marian_b, SOURCE, TARGET)
    )
    own = read_page(jattn.view(tiny_marian, SOURCE, num_beams=2, compare=tiny_marian_b))
    src = np.asarray(tiny_marian.tokenizer([SOURCE])["input_ids"])  # (1, s)
    ids = np.asarray(tiny_marian.generate(src, np.ones_like(src), num_beams=2).sequences)[0]
    ends = np.nonzero(ids[1:] == tiny_marian.config.eos_token_id)[0]
    ids = ids[: ends[0] + 2] if len(ends) else ids  # the first model's own translation, fed to both
    assert own["generated"] and own["tokens"]["target"] == tiny_marian_b.tokenizer.convert_ids_to_tokens(ids.tolist())
    batch = {"input_ids": src, "attention_mask": np.ones_like(src), "decoder_input_ids": ids[None],
             "decoder_attention_mask": np.ones_like(ids[None])}
    check_translation_views(tiny_marian_b, own["compare"]["views"], batch)


def test_compare_bad_input(tiny_encoder, tiny_marian, tmp_path):
    fsmt = jattn.load(save_tiny_seq2seq(tmp_path / "fsmt", "fsmt"), use_cache=False)
    with pytest.raises(ValueError, match=r"compare: the two models tokenize the source text differently \(.*first "
                                         r"difference at position 0: .*share a tokenizer"):
        jattn.view(tiny_marian, SOURCE, target=TARGET, compare=fsmt)
    with pytest.raises(ValueError, match="is an encoder but .* is a translation model. Fix: compare two models"):
        jattn.view(tiny_encoder, SENTENCE, compare=tiny_marian)
    with pytest.raises(ValueError, match=r"max_length=65 must be in \[2, 64\] for both models"):
        jattn.view(tiny_encoder, SENTENCE, compare=tiny_encoder, max_length=65)
    from jattn.viz.view import _same_tokens

    with pytest.raises(ValueError, match=r"target text differently \(A: 3 tokens, B: 2; first difference at "
                                         r"position 2: 'c' vs the end\).*or pass the target text \(target=\)"):
        _same_tokens({"source": ["a"], "target": ["a", "b", "c"]}, {"source": ["a"], "target": ["a", "b"]}, ("A", "B"))


def test_cli_compare_model(tiny_encoder, tiny_encoder_b, tmp_path, capsys):
    first, second = Path(tiny_encoder.source), Path(tiny_encoder_b.source)  # the fixtures' saved folders
    out = tmp_path / "page.html"
    main(["view", "--model", str(first), "--compare-model", str(second), "--text", SENTENCE, "--out", str(out)])
    printed = capsys.readouterr().out
    assert re.search(rf"encoder 16×16 tokens; models .*{re.escape(first.name)} and .*{re.escape(second.name)}\)",
                     printed), printed
    data = read_page(out.read_text(encoding="utf-8"))
    check_encoder_measures(tiny_encoder_b, data["compare"]["views"]["encoder"]["measures"],
                           tiny_encoder.tokenize([SENTENCE], max_length=64))


def test_the_header_names_the_model_not_its_path(tmp_path):
    """The embedded default by its name, a folder by its own name, a hub id as given."""
    from types import SimpleNamespace

    from jattn.models.load import default_model_path
    from jattn.viz.view import _name

    assert _name(SimpleNamespace(source=str(default_model_path()))) == "all-MiniLM-L6-v2 (the embedded default)"
    (tmp_path / "my-model").mkdir()
    assert _name(SimpleNamespace(source=str(tmp_path / "my-model"))) == "my-model"
    assert _name(SimpleNamespace(source="org/some-model")) == "org/some-model"
