"""Every figure ``jattn demo`` and the registered methods draw can be read on its own (issue #57):
a title made of words, both axes labelled, a colour bar on every image, token names on the
attention maps; and the demo report captions each figure in one line.

The Figure objects are inspected as they are saved (``Figure.savefig`` wrapped), on the demo run
end to end on a tiny random model, and on each method's figure function fed small synthetic
statistics.
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
from matplotlib.figure import Figure

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
    if len(re.findall(r"[A-Za-z]{2,}", title)) < 3 or KEY.search(re.sub(r"\S*/\S*", "", title)):  # paths aside
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


def test_demo_figures_and_captions(tmp_path, saved, tiny_bert_folder):
    from jattn.cli import demo

    model = tiny_bert_folder
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    out = tmp_path / "out"
    demo.run(parser.parse_args(["--model", str(model), "--out", str(out), "--maps", "1", "--limit", "8"]))
    names = {re.sub(r".*/", "", path) for _, path in saved}
    assert {"attention_maps_0.png", "mds_heads.png", "entropy.png", "class_attention.png", "positional.png",
            "heatmap_attn_to_cls.png", "heatmap_norm_share_to_sep.png"} <= names
    bad = {path.rsplit("/", 1)[-1]: p for fig, path in saved if (p := problems(fig))}
    assert not bad, bad

    (grid,) = [fig for fig, path in saved if path.endswith("attention_maps_0.png")]
    ticks = [t.get_text() for ax in grid.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert ticks and "[CLS]" in ticks and "[SEP]" in ticks  # token names, first and last kept
    (heat,) = [fig for fig, path in saved if path.endswith("heatmap_attn_to_cls.png")]
    assert heat.axes[0].get_title() == "Attention to [CLS]"
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
    assert linked["figures/heatmap_attn_to_cls.png"] == "Attention to [CLS]"
    assert plots.caption(out / "figures" / "entropy.png") == linked["figures/entropy.png"]


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


def test_token_ticks_are_sampled():
    import matplotlib.pyplot as plt

    tokens = [f"t{i}" for i in range(40)]
    fig, ax = plt.subplots()
    plots.token_ticks(ax, tokens, "x", most=8)
    shown = [t.get_text() for t in ax.get_xticklabels()]
    assert len(shown) == 8 and shown[0] == "t0" and shown[-1] == "t39"
    plots.token_ticks(ax, tokens[:3], "y")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["t0", "t1", "t2"]
    plt.close(fig)


def test_attention_grid_names_tokens(tmp_path, saved):
    """A long sentence: at most 8 token names per axis, a colour bar, the title in words."""
    tokens = ["[CLS]", *[f"w{i}" for i in range(28)], "[SEP]"]
    weights = np.random.default_rng(0).dirichlet(np.ones(30), (2, 2, 30))  # (L, H, n, n)
    path = plots.attention_grid(weights, tokens, tmp_path / "grid.png", "Attention maps of a long sentence")
    ((fig, _),) = saved
    assert not problems(fig) and plots.caption(path) == "Attention maps of a long sentence"
    shown = [t.get_text() for t in fig.axes[2].get_xticklabels()]  # bottom row (layer 1), head 0
    assert 2 < len(shown) <= 8 and shown[0] == "[CLS]" and shown[-1] == "[SEP]"

