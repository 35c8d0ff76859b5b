"""The attention viewer's page in a real headless Chromium (skipped when it is absent): both
panels draw their measure's decoded shares, the difference view holds right − left of the two
selected maps (read back through the page's ``window.jattnView`` hook), hovering a token marks
it in both panels, thumbnails jump, thumbnails show every block's largest code, and the saved
screenshot (results/test_view/*.png) is not blank."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import jattn
from jattn.viz.view import read_page
from tiny_encoders import save_tiny as save_tiny_encoder
from tiny_seq2seq import save_tiny as save_tiny_seq2seq

SENTENCE = "The quick brown fox jumps over the lazy dog because it was tired."
SOURCE, TARGET = "un homme court sur la plage", "the man runs on the beach"
ARTEFACTS = Path(__file__).resolve().parents[1] / "results" / "test_view"
SHARE_SLACK = 2e-6  # the page's float32 decoding of a share (code × row max / 255) against float64


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
                "--disable-dev-shm-usage", "--window-size=1500,1000", "--force-device-scale-factor=1",
                f"--user-data-dir={profile}"):
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


def panel_state(driver, p: int) -> dict:
    return driver.execute_script(f"return Object.assign({{}}, document.querySelector('#panel-{p} .head-svg').dataset)")


def wait_for(driver, p: int, **expected) -> dict:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: all(panel_state(d, p).get(k) == str(v) for k, v in expected.items()))
    return panel_state(driver, p)


def console_errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def check_lines(driver, p: int, share: np.ndarray, head: int, threshold: float = 0.01) -> None:
    """Panel p's head-view lines: one per share ≥ the threshold, opacity = the decoded share."""
    lines = driver.execute_script(
        f"return [...document.querySelectorAll('#panel-{p} .head-svg line')].map(l => [+l.dataset.q, "
        "+l.dataset.k, +l.dataset.h, +l.getAttribute('stroke-opacity')])")
    assert lines and len(lines) == int(panel_state(driver, p)["lines"])
    for i, j, h, opacity in lines:
        assert h == head and opacity == pytest.approx(share[i, j], abs=SHARE_SLACK)
    assert {(i, j) for i, j, _, _ in lines} == {(i, j) for i, j in zip(*np.nonzero(share >= threshold))}


def check_difference(driver, right: np.ndarray, left: np.ndarray) -> dict:
    """The drawn difference equals right − left of the decoded shares; its scale is max |Δ|."""
    diff = driver.execute_script("return jattnView.difference()")
    assert "reason" not in diff, diff
    expected = right - left  # (q, k)
    values = np.asarray(diff["values"]).reshape(diff["nq"], diff["nk"])
    assert values.shape == expected.shape
    np.testing.assert_allclose(values, expected, rtol=0, atol=2 * SHARE_SLACK)
    assert diff["scale"] == pytest.approx(np.abs(expected).max(), abs=2 * SHARE_SLACK)
    with pytest.raises(AssertionError):  # the check can fail: left − right is not it
        np.testing.assert_allclose(values, -expected, rtol=0, atol=2 * SHARE_SLACK)
    return diff


def click_thumbnail(driver, p: int, layer: int, head: int) -> None:
    from selenium.webdriver.common.by import By

    cell = driver.find_element(By.CSS_SELECTOR, f'#panel-{p} .grid canvas[data-layer="{layer}"][data-head="{head}"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()


def hover_token(driver, p: int, side: str, index: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    attr = "i" if side == "q" else "j"
    token = driver.find_element(By.CSS_SELECTOR, f'#panel-{p} .head-svg text.{side}[data-{attr}="{index}"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", token)
    ActionChains(driver).move_to_element(token).perform()


def marked(driver, p: int) -> dict:
    """Panel p's highlighted tokens and lines."""
    return driver.execute_script(
        f"const svg = document.querySelector('#panel-{p} .head-svg');"
        "return {focus: svg.classList.contains('focus'), "
        "q: [...svg.querySelectorAll('text.q.on')].map(e => +e.dataset.i), "
        "k: [...svg.querySelectorAll('text.k.on')].map(e => +e.dataset.j), "
        "lines: [...svg.querySelectorAll('line.on')].map(e => [+e.dataset.q, +e.dataset.k])}")


def test_browser_two_panels(browser, minilm, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    page = tmp_path / "minilm.html"
    page.write_text(jattn.view(minilm, SENTENCE), encoding="utf-8")
    data = read_page(page.read_text(encoding="utf-8"))
    measures, tokens = data["views"]["encoder"]["measures"], data["tokens"]["input"]
    alpha, norm = measures["alpha"]["share"], measures["norm"]["share"]  # (L, H, n, n)
    open_page(browser, page)

    # both panels render: weights on the left, per-head norms on the right (Kobayashi et al.)
    wait_for(browser, 0, measure="alpha", layer=0, heads=0)
    wait_for(browser, 1, measure="norm", layer=0, heads=0)
    check_lines(browser, 0, alpha[0, 0], 0)
    check_lines(browser, 1, norm[0, 0], 0)
    for p in (0, 1):
        cells = browser.find_elements(By.CSS_SELECTOR, f"#panel-{p} .grid canvas")
        assert len(cells) == 6 * 12 and all(c.get_attribute("data-drawn").endswith(("alpha", "norm")[p])
                                            for c in cells)
    check_difference(browser, norm[0, 0], alpha[0, 0])

    # a thumbnail jumps: the right panel's (2, 7) opens there and, linked, on the left
    click_thumbnail(browser, 1, 2, 7)
    wait_for(browser, 1, layer=2, heads=7)
    wait_for(browser, 0, layer=2, heads=7)
    assert "selected" in browser.find_element(
        By.CSS_SELECTOR, '#panel-0 .grid canvas[data-layer="2"][data-head="7"]').get_attribute("class")
    check_lines(browser, 0, alpha[2, 7], 7)
    check_lines(browser, 1, norm[2, 7], 7)
    diff = check_difference(browser, norm[2, 7], alpha[2, 7])
    assert diff["left"] == "α (weights), layer 2, head 7" and diff["right"] == "‖αf‖ per head, layer 2, head 7"
    scale = browser.find_element(By.ID, "diff-hi").text
    assert scale.startswith("+") and float(scale[1:]) == pytest.approx(diff["scale"], abs=5e-5)

    # linked token highlighting: a query token hovered on the left is marked on both sides
    hover_token(browser, 0, "q", 4)
    WebDriverWait(browser, 10).until(lambda d: marked(d, 1)["q"] == [4])
    left, right = marked(browser, 0), marked(browser, 1)
    assert left["focus"] and right["focus"] and left["q"] == [4] and left["k"] == [] and right["k"] == []
    for p, share in ((0, alpha[2, 7]), (1, norm[2, 7])):
        lines = marked(browser, p)["lines"]
        assert lines and {i for i, _ in lines} == {4}
        assert {j for _, j in lines} == set(np.nonzero(share[4] >= 0.01)[0].tolist())
    assert browser.find_element(By.ID, "diff-map").get_attribute("data-highlight") == "q:4"
    hover_token(browser, 1, "k", 9)  # ... and a key token hovered on the right
    WebDriverWait(browser, 10).until(lambda d: marked(d, 0)["k"] == [9])
    assert marked(browser, 1)["k"] == [9] and marked(browser, 0)["q"] == []
    assert browser.find_element(By.ID, "diff-map").get_attribute("data-highlight") == "k:9"
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    WebDriverWait(browser, 10).until(lambda d: not marked(d, 0)["focus"] and not marked(d, 1)["focus"])

    # keyboard on the last panel used (linked: both): down = next layer, right = next head
    browser.execute_script("window.scrollTo(0, 0)")
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    wait_for(browser, 0, layer=3, heads=7)
    ActionChains(browser).send_keys(Keys.ARROW_RIGHT).perform()
    wait_for(browser, 0, layer=3, heads=8)
    wait_for(browser, 1, layer=3, heads=8)
    check_difference(browser, norm[3, 8], alpha[3, 8])

    # unlinked: two heads of one measure (the right panel to α too, then its own layer and head)
    browser.find_element(By.ID, "link").click()
    Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 .measure")).select_by_value("alpha")
    wait_for(browser, 1, measure="alpha", layer=3, heads=8)
    click_thumbnail(browser, 1, 5, 1)
    wait_for(browser, 1, layer=5, heads=1)
    assert wait_for(browser, 0, layer=3, heads=8)
    check_difference(browser, alpha[5, 1], alpha[3, 8])

    # a layer measure on the right: one thumbnail per layer, the difference against the left's head
    Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 .measure")).select_by_value("attnresln")
    wait_for(browser, 1, measure="attnresln", layer=5, heads=-1)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#panel-1 .grid canvas")) == 6
    check_difference(browser, measures["attnresln"]["share"][5], alpha[3, 8])

    # two heads on the left: no single map, and the difference view says so
    browser.find_element(By.CSS_SELECTOR, '#panel-0 .head-chip[data-head="2"]').click()
    wait_for(browser, 0, heads="2,8")
    assert "pick one" in browser.execute_script("return jattnView.difference()")["reason"]
    assert "pick one" in browser.find_element(By.ID, "diff-what").text
    assert console_errors(browser) == []
    assert len(tokens) == alpha.shape[-1]


def pooled(codes: np.ndarray, size: int) -> np.ndarray:
    """A thumbnail's display pixels: the largest code of each block (the page's drawThumbnail)."""
    nq, nk = codes.shape
    h, w = min(nq, size), min(nk, size)
    out = np.zeros((h, w), np.uint8)
    for y in range(h):
        i0 = y * nq // h
        i1 = max(i0 + 1, (y + 1) * nq // h)
        for x in range(w):
            j0 = x * nk // w
            out[y, x] = codes[i0:i1, j0:max(j0 + 1, (x + 1) * nk // w)].max()
    return out


def ramp(codes: np.ndarray) -> np.ndarray:
    """The thumbnails' colours: white (code 0) to (8, 48, 107) (code 255). (...,) -> (..., 3)."""
    t = codes[..., None] / 255.0
    return 255 + (np.asarray([8, 48, 107]) - 255) * t


def screenshot_stats(png: Path, boxes: list | None = None):
    """Fraction of non-white pixels and number of distinct colours (within ``boxes`` if given)."""
    from PIL import Image

    rgb = np.asarray(Image.open(png).convert("RGB")).astype(np.int32)  # (h, w, 3)
    if boxes is not None:
        keep = np.zeros(rgb.shape[:2], bool)
        for x0, y0, x1, y1 in boxes:
            keep[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = True
        rgb = rgb[keep]
    rgb = rgb.reshape(-1, 3)
    colours = len(np.unique(rgb[:, 0] * 65536 + rgb[:, 1] * 256 + rgb[:, 2]))
    return float((rgb != 255).any(-1).mean()), colours


def test_browser_thumbnails_and_screenshot_at_128_tokens(browser, minilm, tmp_path):
    """Thumbnails hold the largest code of every block they cover (a previous-token head at 128
    tokens keeps its line: nearest-neighbour scaling of the 128-pixel map drew it blank), and
    the screenshot shows the maps: against the same page with its maps hidden (the known blank
    page), its non-white share rises by at least half the maps' own non-white area and it has at
    least half as many more colours as the maps draw."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from jattn.cli.demo import sample_sentences

    page = tmp_path / "minilm128.html"
    page.write_text(jattn.view(minilm, " ".join(sample_sentences()[:12]), max_length=128, truncate=True),
                    encoding="utf-8")
    measures = read_page(page.read_text(encoding="utf-8"))["views"]["encoder"]["measures"]
    codes = measures["alpha"]["codes"]  # (L, H, n, n)
    open_page(browser, page)
    wait_for(browser, 0, measure="alpha", layer=0, heads=0)
    # the head whose rows are most peaked, one token wide: each thumbnail row must show it
    peaked = np.unravel_index(np.argmax(measures["alpha"]["share"].max(-1).mean(-1)), codes.shape[:2])
    l, h = int(peaked[0]), int(peaked[1])
    click_thumbnail(browser, 0, l, h)
    wait_for(browser, 0, layer=l, heads=h)
    drawn = browser.execute_script(
        f"const c = document.querySelector('#panel-0 .grid canvas[data-layer=\"{l}\"][data-head=\"{h}\"]');"
        "return [c.width, c.height, Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)]")
    width, height, pixels = drawn
    assert width < 128 and height < 128  # downscaled: several tokens a pixel
    expected = pooled(codes[l, h], width)
    shown = np.asarray(pixels).reshape(height, width, 4)[..., :3]
    assert np.abs(shown - ramp(expected)).max() <= 1
    assert (expected.max(-1) >= 128).all()  # every display row holds a strong share, so none is blank
    nearest = codes[l, h][np.arange(height) * 128 // height][:, np.arange(width) * 128 // width]
    print(f"thumbnail of layer {l}, head {h}: rows with a code ≥ 128, block max {int((expected.max(-1) >= 128).sum())}"
          f"/{height}, nearest-neighbour sampling {int((nearest.max(-1) >= 128).sum())}/{height}")

    # the screenshot: the head where weights and norms differ most (the difference view shows it)
    gap = np.abs(measures["norm"]["share"] - measures["alpha"]["share"]).sum((-2, -1))  # (L, H)
    l, h = (int(k) for k in np.unravel_index(np.argmax(gap), gap.shape))
    click_thumbnail(browser, 0, l, h)
    wait_for(browser, 1, layer=l, heads=h)
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()  # no tooltip
    WebDriverWait(browser, 10).until(lambda d: not d.find_element(By.ID, "tooltip").is_displayed())
    browser.execute_script("window.scrollTo(0, 0)")
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('canvas')].filter(c => c.id !== 'diff-bar').map(c => {"
        "const r = c.getBoundingClientRect(); return [r.left + 2, r.top + 2, r.right - 2, r.bottom - 2]})"
        ".filter(b => b[2] > 0 && b[3] > 0 && b[0] < innerWidth && b[1] < innerHeight)")
    boxes = [[int(np.ceil(v)) if k < 2 else int(v) for k, v in enumerate(b)] for b in boxes]
    drawn_share = browser.execute_script(  # what the page drew: the non-white share of the visible maps' pixels
        "let on = 0, all = 0; for (const c of document.querySelectorAll('canvas')) {"
        "  const r = c.getBoundingClientRect();"
        " if (c.id === 'diff-bar' || r.bottom <= 0 || r.top >= innerHeight) continue;"
        "  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data,"
        " w = r.width * r.height / (c.width * c.height);"
        "  for (let p = 0; p < d.length; p += 4) { all += w;"
        " if (d[p] < 255 || d[p + 1] < 255 || d[p + 2] < 255) on += w; } }"
        "return on / all"
    )
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "view_minilm_128.png"
    assert browser.save_screenshot(str(shot))
    browser.execute_script("const s = document.createElement('style'); s.id = 'hide-maps';"
                           "s.textContent = 'canvas, svg line { visibility: hidden }'; document.head.append(s)")
    blank = tmp_path / "blank.png"
    assert browser.save_screenshot(str(blank))
    browser.execute_script("document.getElementById('hide-maps').remove()")
    full, colours = screenshot_stats(shot)
    full_blank, colours_blank = screenshot_stats(blank)
    in_maps, map_colours = screenshot_stats(shot, boxes)
    in_maps_blank, _ = screenshot_stats(blank, boxes)
    from PIL import Image

    area = sum((x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in boxes) / np.prod(Image.open(shot).size)
    print(f"screenshot: non-white {full:.3f} (maps hidden: {full_blank:.3f}), colours {colours} "
          f"({colours_blank}); inside the {len(boxes)} maps: non-white {in_maps:.3f} ({in_maps_blank:.3f}), "
          f"{map_colours} colours, {area:.3f} of the image; the page drew {drawn_share:.3f} of them non-white")
    assert in_maps_blank == 0.0 and in_maps >= 0.5 * drawn_share and drawn_share > 0
    assert full - full_blank >= 0.5 * in_maps * area
    assert colours - colours_blank >= 0.5 * map_colours
    assert console_errors(browser) == []


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """Two random encoders of one shape with one tokenizer, as a model and its fine-tuned version."""
    folder = tmp_path_factory.mktemp("pair")
    return [jattn.load(save_tiny_encoder(folder / name, "bert-2x4", seed=seed, max_positions=64), use_cache=False)
            for name, seed in (("a", 0), ("b", 1))]


def test_browser_compare_models(browser, tiny_pair, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    first, second = tiny_pair
    page = tmp_path / "compare.html"
    page.write_text(jattn.view(first, SENTENCE, compare=second), encoding="utf-8")
    data = read_page(page.read_text(encoding="utf-8"))
    a = data["views"]["encoder"]["measures"]["alpha"]["share"]
    b = data["compare"]["views"]["encoder"]["measures"]["alpha"]["share"]
    open_page(browser, page)
    wait_for(browser, 0, source=0, measure="alpha", heads=0)
    wait_for(browser, 1, source=1, measure="alpha", heads=0)  # the same head in the two models
    options = [o.text for o in Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 .source")).options]
    assert options == [f"A: {data['model']}", f"B: {data['compare']['model']}"]
    check_lines(browser, 1, b[0, 0], 0)
    click_thumbnail(browser, 0, 1, 3)
    wait_for(browser, 1, source=1, layer=1, heads=3)
    check_lines(browser, 0, a[1, 3], 3)
    check_lines(browser, 1, b[1, 3], 3)
    diff = check_difference(browser, b[1, 3], a[1, 3])
    assert diff["left"].startswith("A α") and diff["right"].startswith("B α")
    Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 .source")).select_by_value("0")
    wait_for(browser, 1, source=0, layer=1, heads=3)
    diff = browser.execute_script("return jattnView.difference()")
    assert diff["scale"] == 0 and browser.find_element(By.ID, "diff-status").text == "the two maps are equal"
    assert console_errors(browser) == []


def test_browser_translation_page(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    model = jattn.load(save_tiny_seq2seq(tmp_path / "marian", "marian"), use_cache=False)
    page = tmp_path / "marian.html"
    page.write_text(jattn.view(model, SOURCE, target=TARGET), encoding="utf-8")
    data = read_page(page.read_text(encoding="utf-8"))
    tokens, cross = data["tokens"], data["views"]["cross"]["measures"]
    open_page(browser, page)
    wait_for(browser, 0, view="encoder")
    Select(browser.find_element(By.ID, "kind")).select_by_visible_text("cross-attention (target → source)")
    for p in (0, 1):
        wait_for(browser, p, view="cross")
        labels = lambda side: [
            e.text for e in browser.find_elements(By.CSS_SELECTOR, f"#panel-{p} .head-svg text.{side}")
        ]
        assert labels("q") == tokens["target"] and labels("k") == tokens["source"]
        assert len(browser.find_elements(By.CSS_SELECTOR, f"#panel-{p} .grid canvas")) == 3 * 2  # layers × heads
    check_difference(browser, cross["norm"]["share"][0, 0], cross["alpha"]["share"][0, 0])
    Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 .measure")).select_by_value("summed")
    wait_for(browser, 1, view="cross", measure="summed", heads=-1)
    diff = check_difference(browser, cross["summed"]["share"][0], cross["alpha"]["share"][0, 0])
    assert (diff["nq"], diff["nk"]) == (len(tokens["target"]), len(tokens["source"]))
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTEFACTS / "view_marian.png"))
    assert console_errors(browser) == []
