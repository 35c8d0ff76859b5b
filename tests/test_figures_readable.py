"""Every figure ``jattn demo`` and the registered methods draw can be read on its own (issue #57):
a title made of words, both axes labelled, a colour bar on every image, token names on the
attention maps; and the demo report captions each figure in one line. Each figure also names
every token of an attention map (a tick, or its position and name in the figure's text), shows no
image twice, names every head in both panels of the MDS map, calls [CLS] / [SEP] what the model's
tokenizer calls them, and says "head" only on the axes of per-head statistics.

The Figure objects are inspected as they are saved (``Figure.savefig`` wrapped), on the demo run
end to end on a tiny random model, and on each method's figure function fed small synthetic
statistics.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from jattn.viz import plots, words

KEY = re.compile(r"\b[A-Za-z]\w*_\w+\b")  # a bare identifier with an underscore: attn_to_cls


@pytest.fixture
def saved(monkeypatch):
    """(Figure, path) of every figure saved while the test runs."""
    out = []
    real = Figure.savefig

    def savefig(self, path, *args, **kwargs):
        out.append((self, str(path)))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return out


def colorbars(fig) -> list:
    found = []
    for ax in fig.axes:
        for m in [*ax.images, *ax.collections]:
            if getattr(m, "colorbar", None) is not None and m.colorbar not in found:
                found.append(m.colorbar)
    return found


def problems(fig) -> list[str]:
    """What keeps ``fig`` from being read on its own ([] when nothing)."""
    bad = []
    title = plots.figure_title(fig)
    if len(re.findall(r"[A-Za-z]{2,}|</?\w+>", title)) < 3 or KEY.search(re.sub(r"\S*/\S*", "", title)):  # paths aside
        bad.append(f"title not in words: {title!r}")
    bars = colorbars(fig)
    data = [ax for ax in fig.axes if ax not in {cb.ax for cb in bars}]
    shared = fig.get_supxlabel() and fig.get_supylabel()
    for ax in data:
        if not shared and not (ax.get_xlabel() and ax.get_ylabel()):
            bad.append(f"axes {ax.get_title()!r}: labels x={ax.get_xlabel()!r} y={ax.get_ylabel()!r}")
        legend = ax.get_legend()
        if ax.images and not bars and legend is None:
            bad.append(f"axes {ax.get_title()!r}: an image without a colour bar")
        if legend is not None and ax.lines + ax.collections:  # a legend inside the axes covers data
            fig.canvas.draw()
            box, inside = legend.get_window_extent(), ax.get_window_extent()
            if box.overlaps(inside) and legend.get_bbox_to_anchor().x0 < inside.x1:
                bad.append(f"axes {ax.get_title()!r}: the legend lies over the data")
    for cb in bars:
        if not cb.ax.get_ylabel() and not cb.ax.get_xlabel():
            bad.append("a colour bar without a label")
    if any(ax.images for ax in data) and bars:  # every image on the scale of a colour bar
        scales = {tuple(cb.mappable.get_clim()) for cb in bars}
        bad += [f"an image off the colour bar's scale {im.get_clim()}" for ax in data for im in ax.images
                if tuple(im.get_clim()) not in scales]
    return bad


def unnamed(fig, tokens: list[str]) -> list[str]:
    """The tokens of an attention map that an axis with token names leaves unnamed: neither its tick
    label at the token's position ("name" or "position name") nor the figure's text ("position name")
    names it. [] also needs a named x and a named y axis."""
    text = "\n".join([fig.get_suptitle(), *(t.get_text() for t in fig.texts)])
    listed = set(re.split(r" · |\n|: ", text))
    bad, axes = [], set()
    for ax in fig.axes:
        for axis, ticks, names in (("x", ax.get_xticks(), ax.get_xticklabels()),
                                   ("y", ax.get_yticks(), ax.get_yticklabels())):
            at = {int(round(p)): n.get_text() for p, n in zip(ticks, names) if n.get_text()}
            if not at or not ax.images:
                continue
            axes.add(axis)
            bad += [f"{axis} {i} {t!r}" for i, t in enumerate(tokens)
                    if at.get(i) not in (t, f"{i} {t}") and f"{i} {t}" not in listed]
    return bad + [f"no token names on {a}" for a in "xy" if a not in axes]


def images(fig) -> list[np.ndarray]:
    """The images of ``fig``'s data axes (colour bars left out)."""
    bars = {cb.ax for cb in colorbars(fig)}
    return [np.ma.filled(np.ma.asarray(im.get_array(), float), np.nan)
            for ax in fig.axes if ax not in bars for im in ax.images]


def repeated_images(saved) -> list[str]:
    """Pairs of images, in one figure or two, with the same values."""
    shown = [(path.rsplit("/", 1)[-1], a) for fig, path in saved for a in images(fig)]
    return [f"{p} = {q}" for i, (p, a) in enumerate(shown) for q, b in shown[i + 1:]
            if a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-7, equal_nan=True)]


def mds_problems(fig, num_heads: int, labels: int) -> list[str]:
    """What keeps an MDS map of ``labels`` panels from naming every head "layer-head" once per
    panel, its names overlapping neither each other nor the points."""
    bars = {cb.ax for cb in colorbars(fig)}
    panels = [ax for ax in fig.axes if ax not in bars]
    bad = [] if len(panels) == labels else [f"{len(panels)} panels"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # the figure is closed once saved
    fig.draw(renderer)
    for ax in panels:
        names = [n for t in ax.texts for n in re.split(r", |\n", t.get_text())]
        points = np.concatenate([ax.transData.transform(c.get_offsets()) for c in ax.collections])  # (n, 2)
        if sorted(names) != sorted(f"{k // num_heads}-{k % num_heads}" for k in range(len(points))):
            bad.append(f"{ax.get_title()!r}: heads named {sorted(names)}")
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        bad += [f"{ax.get_title()!r}: names overlap" for i, b in enumerate(boxes) for c in boxes[i + 1:]
                if b.overlaps(c)]
        bad += [f"{ax.get_title()!r}: a name covers a point" for b in boxes if b.count_contains(points)]
    return bad


@pytest.fixture(scope="module")
def s_model(tmp_path_factory, tiny_bert_folder):
    """The tiny BERT with a tokenizer whose start token is <s> and end token </s> (MPNet's names)."""
    folder = tmp_path_factory.mktemp("s_model") / "model"
    shutil.copytree(tiny_bert_folder, folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        path.write_text(path.read_text().replace("[CLS]", "<s>").replace("[SEP]", "</s>"))
    return folder


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, s_model):
    """``jattn demo`` on the <s> model: its output folder, every (Figure, path) saved and the tokens
    of each attention grid."""
    from jattn.cli import demo
    from jattn.viz import plots as viz_plots

    saved, grids = [], []
    real_save, real_grid = Figure.savefig, viz_plots.attention_grid

    def savefig(self, path, *args, **kwargs):
        saved.append((self, str(path)))
        return real_save(self, path, *args, **kwargs)

    def grid(weights, tokens, path, title):
        grids.append(list(tokens))
        return real_grid(weights, tokens, path, title)

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    out = tmp_path_factory.mktemp("demo") / "out"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Figure, "savefig", savefig)
        m.setattr(viz_plots, "attention_grid", grid)
        demo.run(parser.parse_args(["--model", str(s_model), "--out", str(out), "--maps", "1", "--limit", "8"]))
    return out, saved, grids


def test_demo_figures_and_captions(demo_run):
    out, saved, _ = demo_run
    names = {re.sub(r".*/", "", path) for _, path in saved}
    assert {"attention_maps_0.png", "mds_heads.png", "entropy.png", "class_attention.png", "positional.png",
            "heatmap_attn_to_cls.png", "heatmap_norm_share_to_sep.png"} <= names
    bad = {path.rsplit("/", 1)[-1]: p for fig, path in saved if (p := problems(fig))}
    assert not bad, bad

    (heat,) = [fig for fig, path in saved if path.endswith("heatmap_attn_to_cls.png")]
    assert heat.axes[0].get_title() == "Attention to <s>"
    assert colorbars(heat)[0].ax.get_ylabel() == words.unit("attn_to_cls")

    report = (out / "report.md").read_text()
    section = report.split("## Figures", 1)[1].strip().splitlines()
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.suffix in (".png", ".html"))
    assert len(section) == len(files)
    linked = {}
    for line in section:
        m = re.fullmatch(r"- \[[^\]]+\]\(([^)]+)\): (.+)", line)
        assert m, f"no caption: {line!r}"
        linked[m[1]] = m[2]
        assert len(m[2].split()) >= 3 and not KEY.search(re.sub(r"\S*/\S*", "", m[2])), line
    assert sorted(linked) == files
    assert linked["figures/heatmap_attn_to_cls.png"] == "Attention to <s>"
    assert plots.caption(out / "figures" / "entropy.png") == linked["figures/entropy.png"]


def test_demo_names_every_token_of_an_attention_map(demo_run):
    _, saved, grids = demo_run
    (grid,) = [fig for fig, path in saved if path.endswith("attention_maps_0.png")]
    ((tokens),) = grids
    assert tokens[0] == "<s>" and tokens[-1] == "</s>" and len(tokens) > 8
    assert not unnamed(grid, tokens)


def test_demo_shows_no_image_twice(demo_run):
    """Statistics with equal values (attention to <s> by α, by Σα and received) make one heatmap,
    which names the others."""
    out, saved, _ = demo_run
    assert not repeated_images(saved)
    (heat,) = [fig for fig, path in saved if path.endswith("heatmap_attn_to_cls.png")]
    note = " ".join(" ".join(t.get_text().split()) for t in heat.findobj(Text) if "Equal values" in t.get_text())
    assert "(weight_to_cls)" in note and "Attention weight to <s>" in note
    assert not (out / "figures" / "heatmap_weight_to_cls.png").exists()


def test_demo_mds_names_heads_in_both_panels(demo_run):
    _, saved, _ = demo_run
    (mds,) = [fig for fig, path in saved if path.endswith("mds_heads.png")]
    assert not mds_problems(mds, 3, 2)


def test_demo_names_special_tokens_as_the_tokenizer_does(demo_run):
    """The tokenizer's start token is <s> and its end token </s>: no figure, no report and no description in
    results.json says [CLS] or [SEP]."""
    out, saved, _ = demo_run
    said = {path.rsplit("/", 1)[-1]: [t.get_text() for t in fig.findobj(Text)
                                      if "[CLS]" in t.get_text() or "[SEP]" in t.get_text()] for fig, path in saved}
    assert not {k: v for k, v in said.items() if v}
    report = (out / "report.md").read_text()
    assert "[CLS]" not in report and "[SEP]" not in report
    assert "| layer | <s> | </s> |" in report and "- </s>: " in report
    described = [v["description"] for k, v in json.loads((out / "results.json").read_text()).items() if k != "meta"]
    assert not [d for d in described if "[CLS]" in d or "[SEP]" in d] and any("<s>" in d for d in described)
    (entropy,) = [fig for fig, path in saved if path.endswith("/entropy.png")]
    assert "<s> row" in [t.get_text() for t in entropy.axes[0].get_legend().get_texts()]


def synthetic(L: int = 3, H: int = 4, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    share = lambda: rng.uniform(0, 1, (L, H))  # noqa: E731
    stats = {f"{p}{k}": share() for p in ("", "word_") for k in
             ("attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other", "attn_prev", "attn_self", "attn_next")}
    stats |= {f"grad_to_{c}": share() for c in ("cls", "sep", "punct", "other")}
    stats |= {k: share() for k in ("lm_first_token", "lm_previous_token", "lm_self", "lm_other")}
    stats |= {"entropy": 3 * share(), "entropy_cls": 3 * share(), "entropy_uniform": np.array(2.9),
              "pattern_share": rng.dirichlet(np.ones(5), (L, H)), "js_mds": rng.normal(size=(L * H, 2)) * 100}
    return stats


def test_method_figures(tmp_path, saved):
    """The registered methods' own figures (those the demo does not draw too) and the syntax role map."""
    from jattn.viz import figures

    stats, L = synthetic(), 3
    paths = figures.class_figures("word_")(stats, L, tmp_path) + figures.entropy_figures("")(stats, L, tmp_path)
    paths += figures.grad_figures(stats, L, tmp_path) + figures.lm_attention_figures(stats, L, tmp_path)
    paths += figures.pattern_figures(stats, L, tmp_path) + figures.mds_figures({"js_mds": stats["js_mds"]}, L, tmp_path)
    paths.append(plots.heatmap(stats["word_attn_prev"], words.title("word_attn_prev"), tmp_path / "h.png",
                               label=words.unit("word_attn_prev")))
    roles = {"role": np.array([["other", "positional"], ["syntactic", "positional+syntactic"]], dtype=object),
             "positional": np.array([["", "prev"], ["", "next"]], dtype=object),
             "relation": np.array([["", ""], ["nsubj", "det"]], dtype=object)}
    paths.append(figures.role_map(roles, tmp_path / "roles.png"))
    assert len(saved) == len(paths) == 13
    bad = {path.rsplit("/", 1)[-1]: p for fig, path in saved if (p := problems(fig))}
    assert not bad, bad
    assert all(plots.caption(p) for p in paths)
    assert saved[-2][0].axes[0].get_title() == "Attention to the previous token (word level)"


def test_keys_in_words():
    assert words.title("attn_to_punct") == 'Attention to punctuation ("." or ",")'
    assert words.title("cross_norm_share_to_sep").endswith("(cross-attention)")
    assert words.title("word_entropy") == "Attention entropy, mean over all rows (word level)"
    assert words.title("made_up_key") == "Made up key" and words.unit("made_up_key") == "value"


def test_token_ticks_name_every_token():
    """Up to plots.LEGIBLE tokens: each named at its tick; past that every k-th, as "position name"."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    tokens = ["[CLS]", "the", "train", "comes", "at", "nine", "every", "day", "[SEP]"]
    plots.token_ticks(ax, tokens, "x")
    plots.token_ticks(ax, tokens[:3], "y")
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens[:3]
    long = [f"t{i}" for i in range(2 * plots.LEGIBLE + 5)]
    plots.token_ticks(ax, long, "x")
    shown = [t.get_text() for t in ax.get_xticklabels()]
    assert shown[:2] == ["0 t0", "3 t3"] and len(shown) <= plots.LEGIBLE
    assert plots.token_list(long, 32).split("\n")[0] == "0 t0 · 1 t1 · 2 t2 · 3 t3 · 4 t4"
    plt.close(fig)


@pytest.mark.parametrize("n", [9, 30, 100])
def test_attention_grid_names_tokens(tmp_path, saved, n):
    """Every token of a short or a long sentence named; a colour bar; the title in words."""
    tokens = ["[CLS]", *[f"w{i}" for i in range(n - 2)], "[SEP]"]
    weights = np.random.default_rng(0).dirichlet(np.ones(n), (2, 2, n))  # (L, H, n, n)
    path = plots.attention_grid(weights, tokens, tmp_path / "grid.png", "Attention maps of a long sentence")
    ((fig, _),) = saved
    assert not problems(fig) and plots.caption(path) == "Attention maps of a long sentence"
    assert not unnamed(fig, tokens)


def test_mds_names_every_head_in_both_panels(tmp_path, saved):
    from jattn.viz import figures

    stats = synthetic(L=3, H=4)
    figures.mds_figures(stats, 3, tmp_path)
    ((fig, _),) = saved
    assert not mds_problems(fig, 4, 2)


def test_head_labels_only_on_per_head_statistics(tmp_path, saved):
    """A per-layer statistic over the 4 token classes (as wide as the 4 heads) is drawn with class
    names, not heads; the report's "largest heads" only for per-head statistics."""
    from jattn.cli.reporting import statistics_lines
    from jattn.runner.protocol import Statistic
    from jattn.viz.results import write_figures

    rng = np.random.default_rng(0)
    stats = {"attn_to_cls": rng.uniform(size=(3, 4)), "alti_class": rng.uniform(size=(3, 4)),
             "alti_self": rng.uniform(size=3), "js_mds": rng.normal(size=(12, 2))}
    described = {"attn_to_cls": "(L, H) mean attention to [CLS]", "alti_class": "(L, 4) mean ALTI share per class",
                 "alti_self": "(L,) mean ALTI share to self", "js_mds": "(L·H, 2) MDS embedding"}
    paths = write_figures(stats, 3, tmp_path, labels={"[CLS]": "<s>", "[SEP]": "</s>"})  # shapes from the keys
    assert [p.name for p in paths] == ["heatmap_attn_to_cls.png", "heatmap_alti_class.png"]
    (head, cls) = [fig.axes[0] for fig, _ in saved]
    assert "head" not in cls.get_xlabel() + cls.get_ylabel() + cls.get_title()
    assert [t.get_text() for t in cls.get_xticklabels()] == ["<s>", "</s>", '"." or ","', "other"]
    assert head.get_xlabel() == plots.HEAD and head.get_title() == "Attention to <s>"
    again = write_figures(stats, 3, tmp_path / "described", labels={"[CLS]": "<s>", "[SEP]": "</s>"},
                          descriptions=described)  # shapes from the descriptions: the same figures
    assert [p.name for p in again] == [p.name for p in paths]
    assert [fig.axes[0].get_xlabel() for fig, _ in saved[2:]] == [head.get_xlabel(), cls.get_xlabel()]
    rows = statistics_lines({k: Statistic(v, described[k]) for k, v in stats.items()})
    largest = {r.split("|")[1].strip(): r.split("|")[-2].strip() for r in rows[2:]}
    assert largest["attn_to_cls"] and not largest["alti_class"] and not largest["js_mds"]
