"""The attention viewer (issue 17): the page's data against model.forward / jattn.norms /
jattn.attributions within the documented normalisation and quantisation bounds, bad input,
page size, and the page driven in a real headless Chromium (skipped when it is absent)."""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn.cli import main
from jattn.cli.view import add_arguments, run
from jattn.viz.view import (ERROR_BOUND, decode_measure, dequantize, encode_measure, quantize, read_page,
                            row_shares)
from tiny_encoders import TOKENIZER_FILES
from tiny_encoders import save_tiny as save_tiny_encoder
from tiny_seq2seq import save_tiny as save_tiny_seq2seq

SENTENCE = "The quick brown fox jumps over the lazy dog because it was tired."
ARTEFACTS = Path(__file__).resolve().parents[1] / "results" / "test_view"


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
    measures = data["views"]["encoder"]["measures"]
    assert list(measures) == ["alpha", "norm", "summed", "attnres", "attnresln", "rollout", "globenc", "alti"]
    alpha = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
    norms = jattn.norms(model, batch, residual=True)
    attributions = jattn.attributions(model, batch)
    assert_stored(measures["alpha"], alpha)
    for key, name in (("norm", "weighted_norm"), ("summed", "summed_norm"), ("attnres", "attnres_norm"),
                      ("attnresln", "attnresln_norm")):
        assert_stored(measures[key], norms[name][:, 0])
    for key in ("rollout", "globenc", "alti"):
        assert_stored(measures[key], attributions[key][:, 0])
    with pytest.raises(AssertionError):  # the comparison can fail: layer 1's maps are not layer 0's
        assert_stored({k: v[::-1] for k, v in measures["alpha"].items()}, alpha)
    return data


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
    with pytest.raises(ValueError, match=r"82 tokens, more than the 64 .*--truncate"):
        jattn.view(tiny_encoder, long_text)
    data = read_page(jattn.view(tiny_encoder, long_text, truncate=True))
    assert len(data["tokens"]["input"]) == 64 and data["tokens"]["input"][-1] == "[SEP]"
    with pytest.raises(ValueError, match="more than the 10"):
        jattn.view(tiny_encoder, SENTENCE, max_length=10)
    with pytest.raises(ValueError, match="max_length=65 must be in"):
        jattn.view(tiny_encoder, SENTENCE, max_length=65)
    with pytest.raises(ValueError, match="--target is for translation models"):
        jattn.view(tiny_encoder, SENTENCE, target="Le chien.")
    with pytest.raises(ValueError, match="not a jattn view page"):
        read_page("<html></html>")


def test_cli_writes_page_and_reports_errors(tiny_encoder, tmp_path, capsys):
    folder = save_tiny_encoder(tmp_path / "model", "bert-2x4", max_positions=64)
    out = tmp_path / "page.html"
    main(["view", "--model", str(folder), "--text", SENTENCE, "--out", str(out)])
    printed = capsys.readouterr().out
    assert re.search(r"wrote .*page\.html \(0\.\d\d MB; encoder 16×16 tokens\)", printed), printed
    check_encoder_page(tiny_encoder, out.read_text(encoding="utf-8"), SENTENCE)
    for argv, message in (([], "the text is empty"), (["--out", str(tmp_path)], "is a folder"),
                          (["--out", str(tmp_path / "no" / "p.html")], "does not exist"),
                          (["--text", "word " * 80], "--truncate")):
        args = ["view", "--model", str(folder), "--text", "", "--out", str(out)] + argv
        with pytest.raises(SystemExit) as info:
            main(args)
        assert message in str(info.value.code), (argv, info.value.code)
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


def test_minilm_page_at_128_tokens(minilm):
    from jattn.cli.demo import sample_sentences

    text = " ".join(sample_sentences()[:12])
    html = jattn.view(minilm, text, max_length=128, truncate=True)
    batch = minilm.tokenize([text], max_length=128, truncate=True)
    assert batch.input_ids.shape == (1, 128)
    check_encoder_page_batch(minilm, html, batch)
    print(f"MiniLM (6x12), 128 tokens: {len(html.encode('utf-8')) / 1e6:.2f} MB")


def check_encoder_page_batch(model, html, batch):
    data = read_page(html)
    measures = data["views"]["encoder"]["measures"]
    alpha = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
    norms = jattn.norms(model, batch, residual=True)
    assert_stored(measures["alpha"], alpha)
    assert_stored(measures["norm"], norms["weighted_norm"][:, 0])
    assert_stored(measures["attnresln"], norms["attnresln_norm"][:, 0])
    assert_stored(measures["alti"], jattn.attributions(model, batch)["alti"][:, 0])


# ---------------------------------------------------------------- tiny random translation model

@pytest.fixture(scope="module")
def tiny_marian(tmp_path_factory):
    return jattn.load(save_tiny_seq2seq(tmp_path_factory.mktemp("marian"), "marian"), use_cache=False)


SOURCE, TARGET = "un homme court sur la plage", "the man runs on the beach"


def test_translation_page_teacher_forced(tiny_marian):
    model = tiny_marian
    data = read_page(jattn.view(model, SOURCE, target=TARGET))
    src = np.asarray(model.tokenizer([SOURCE])["input_ids"])  # (1, s)
    tgt = model.tokenizer(text_target=[TARGET])["input_ids"][0]
    dec = np.asarray([[model.config.decoder_start_token_id] + tgt])  # (1, t)
    batch = {"input_ids": src, "attention_mask": np.ones_like(src), "decoder_input_ids": dec,
             "decoder_attention_mask": np.ones_like(dec)}
    out, norms = model.forward(batch), jattn.norms(model, batch, residual=True)
    assert data["target"] == TARGET and not data["generated"]
    assert data["tokens"]["source"] == model.tokenizer.convert_ids_to_tokens(src[0].tolist())
    assert data["tokens"]["target"] == model.tokenizer.convert_ids_to_tokens(dec[0].tolist())
    s, t = src.shape[1], dec.shape[1]
    views = data["views"]
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


def test_translation_page_own_translation(tiny_marian):
    model = tiny_marian
    data = read_page(jattn.view(model, SOURCE, num_beams=2))
    src = np.asarray(model.tokenizer([SOURCE])["input_ids"])
    ids = np.asarray(model.generate(src, np.ones_like(src), num_beams=2))[0]
    ends = np.nonzero(ids[1:] == model.config.eos_token_id)[0]
    ids = ids[: ends[0] + 2] if len(ends) else ids
    assert data["generated"] and data["tokens"]["target"] == model.tokenizer.convert_ids_to_tokens(ids.tolist())
    assert data["target"] == model.tokenizer.decode(ids, skip_special_tokens=True)


def test_translation_bad_input(tiny_marian):
    with pytest.raises(ValueError, match="--pair is for encoders"):
        jattn.view(tiny_marian, SOURCE, pair="x")
    with pytest.raises(ValueError, match="the target text is empty"):
        jattn.view(tiny_marian, SOURCE, target=" ")
    with pytest.raises(ValueError, match="the source text has .* tokens, more than the 8.*--truncate"):
        jattn.view(tiny_marian, SOURCE + " " + SOURCE, target=TARGET, max_length=8)
    data = read_page(jattn.view(tiny_marian, SOURCE + " " + SOURCE, target=TARGET + " " + TARGET, max_length=8,
                                truncate=True))
    assert len(data["tokens"]["source"]) == 8 and len(data["tokens"]["target"]) == 8


# ---------------------------------------------------------------- a real browser

@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through selenium, no network; skipped with the reason when absent."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed. Fix: pip install -e '.[test]'")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("headless Chromium is absent (the browser test needs it). Fix: apt-get install -y chromium "
                    "chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile = tempfile.mkdtemp(prefix="jattn-chromium-")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1500,1000", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    assert driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []


def svg_state(driver) -> dict:
    return driver.execute_script("return Object.assign({}, document.getElementById('head-svg').dataset)")


def wait_for(driver, **expected) -> dict:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: all(svg_state(d).get(k) == str(v) for k, v in expected.items()))
    return svg_state(driver)


def console_errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_browser_encoder_page(browser, minilm, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    page = tmp_path / "minilm.html"
    page.write_text(jattn.view(minilm, SENTENCE), encoding="utf-8")
    data = read_page(page.read_text(encoding="utf-8"))
    measures, tokens = data["views"]["encoder"]["measures"], data["tokens"]["input"]
    open_page(browser, page)
    assert wait_for(browser, measure="alpha", layer=0)["heads"] == ",".join(map(str, range(12)))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 6 * 12

    # click a model-view cell: it opens in the head view
    cell = browser.find_element(By.CSS_SELECTOR, '#grid canvas[data-layer="2"][data-head="7"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    wait_for(browser, layer=2, heads=7)
    assert "selected" in cell.get_attribute("class")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#head-svg text.q")) == len(tokens)

    def check_lines(key: str, layer: int, head: int) -> None:
        share = measures[key]["share"][layer, head]  # (n, n)
        lines = browser.execute_script(
            "return [...document.querySelectorAll('#head-svg line')].map(l => [+l.dataset.q, +l.dataset.k, "
            "+l.dataset.h, +l.getAttribute('stroke-opacity')])")
        assert lines and len(lines) == int(svg_state(browser)["lines"])
        for i, j, h, opacity in lines:
            assert h == head and opacity == pytest.approx(share[i, j], abs=2e-6)
        expected = {(i, j) for i, j in zip(*np.nonzero(share >= 0.01))}
        assert {(i, j) for i, j, _, _ in lines} == expected  # every share ≥ the threshold, nothing else

    check_lines("alpha", 2, 7)

    # switch the measure
    Select(browser.find_element(By.ID, "measure")).select_by_value("norm")
    wait_for(browser, measure="norm", layer=2, heads=7)
    check_lines("norm", 2, 7)
    first = browser.find_element(By.CSS_SELECTOR, '#grid canvas[data-layer="0"][data-head="0"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", first)
    WebDriverWait(browser, 10).until(lambda d: first.get_attribute("data-drawn") == "encoder/norm")

    # keyboard: down = next layer, right = next head
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    wait_for(browser, layer=3, heads=7, measure="norm")
    ActionChains(browser).send_keys(Keys.ARROW_RIGHT).perform()
    wait_for(browser, layer=3, heads=8)
    check_lines("norm", 3, 8)
    assert browser.find_element(By.ID, "layer").get_attribute("value") == "3"

    # a layer-level measure: one map per layer, lines of the whole layer
    Select(browser.find_element(By.ID, "measure")).select_by_value("attnresln")
    wait_for(browser, measure="attnresln", layer=3, heads=-1)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 6
    lines = browser.execute_script("return [...document.querySelectorAll('#head-svg line')].map(l => "
                                   "[+l.dataset.q, +l.dataset.k, +l.getAttribute('stroke-opacity')])")
    share = measures["attnresln"]["share"][3]
    assert all(o == pytest.approx(share[i, j], abs=2e-6) for i, j, o in lines)

    # hover over a map: the tooltip names the cell and its exact decoded share
    cell = browser.find_element(By.CSS_SELECTOR, '#grid canvas[data-layer="1"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    ActionChains(browser).move_to_element(cell).perform()
    tip = browser.find_element(By.ID, "tooltip")
    WebDriverWait(browser, 10).until(lambda d: tip.is_displayed() and "share" in tip.text)
    found = re.search(r"layer 1, all heads: .* \((\d+)\) → .* \((\d+)\)\n.*share ([0-9.e-]+), raw", tip.text)
    assert found, tip.text
    i, j, shown = int(found.group(1)), int(found.group(2)), float(found.group(3))
    assert shown == pytest.approx(measures["attnresln"]["share"][1, i, j], abs=5e-5)

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    for folder in (tmp_path, ARTEFACTS):
        assert browser.save_screenshot(str(folder / "view_minilm.png"))
    assert console_errors(browser) == []


def test_browser_translation_page(browser, tiny_marian, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "marian.html"
    page.write_text(jattn.view(tiny_marian, SOURCE, target=TARGET), encoding="utf-8")
    tokens = read_page(page.read_text(encoding="utf-8"))["tokens"]
    open_page(browser, page)
    wait_for(browser, view="encoder")
    Select(browser.find_element(By.ID, "kind")).select_by_visible_text("cross-attention (target → source)")
    wait_for(browser, view="cross", measure="alpha")
    labels = lambda side: [e.text for e in browser.find_elements(By.CSS_SELECTOR, f"#head-svg text.{side}")]
    assert labels("q") == tokens["target"] and labels("k") == tokens["source"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 3 * 2  # decoder layers × heads
    Select(browser.find_element(By.ID, "measure")).select_by_value("summed")
    wait_for(browser, view="cross", measure="summed", heads=-1)
    assert browser.save_screenshot(str(tmp_path / "view_marian.png"))
    assert console_errors(browser) == []
