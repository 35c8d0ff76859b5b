"""Run the main job on the embedded default: an attention report on the bundled sample.

Loads the model (default: the embedded all-MiniLM-L6-v2), streams --input (default: the bundled
sample, 300 UD English EWT sentences; a .conllu file is read as CoNLL-U, any other file as a
segment per line) through the corpus runner and writes to ``--out``:
  * ``report.md``: what the heads do, in numbers, with links to the figures;
  * ``results.json`` / ``results.npz`` / ``figures/``: as ``jattn analyze`` writes them
    (Clark et al. 2019's weight statistics, entropies, head distances; Kobayashi et al. 2020's
    weight- vs norm-based attention per token class);
  * ``attention_maps_<k>.png``: every (layer, head) attention map of sample sentence k;
  * the report's "Figures" section: a link and a one-line caption (the figure's title) per figure;
  * ``attention_view.html``: the interactive viewer (``jattn.viz.view``) on sample sentence 0.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

METHODS = ["weights", "entropy", "js", "norms"]


def sample_path(name: str) -> Path:
    return Path(str(resources.files("jattn.io").joinpath("sample", name)))


def sample_sentences() -> list[str]:
    """The bundled sample: 300 sentences of UD English EWT dev (CC BY-SA 4.0)."""
    text = resources.files("jattn.io").joinpath("sample/sentences.txt").read_text()
    return [line for line in text.splitlines() if line.strip()]


def add_arguments(parser) -> None:
    from jattn.cli.common import nonnegative_int, positive_int

    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded MiniLM)")
    parser.add_argument("--out", default="results/demo", help="output folder, replaced as a whole when done")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out even if it is a non-empty folder without jattn results")
    parser.add_argument("--maps", type=nonnegative_int, default=3, help="sentences whose attention maps are drawn")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch")
    parser.add_argument("--input", default=None,
                        help="a corpus: a .conllu file, or a segment per line ('A<TAB>B' for a pair) (default: the "
                             "bundled sample, 300 UD English EWT sentences)")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="use only the first N sentences of --input (default: all)")


def top_heads(stat: np.ndarray, k: int = 3) -> str:
    """The k largest entries of an (L, H) statistic as 'layer-head (value)', 0-based."""
    flat = np.argsort(np.nan_to_num(stat, nan=-np.inf), axis=None)[::-1][:k]
    return ", ".join(f"{l}-{h} ({stat[l, h]:.2f})" for l, h in zip(*np.unravel_index(flat, stat.shape)))


def report(stats: dict, meta: dict, name: str, figures: list[Path], out: Path,
           corpus: str = "bundled UD English EWT sample", labels: dict | None = None) -> str:
    """A short Markdown report of the per-head statistics (0-based layer-head); ``labels`` names
    [CLS] and [SEP] in the model's own terms (``jattn.viz.words.special_names``)."""
    cls, sep = ((labels or {}).get(c, c) for c in ("[CLS]", "[SEP]"))
    L = stats["attn_to_cls"].shape[0]
    rows = [f"| layer | {cls} | {sep} | . or , | other |", "|---|---|---|---|---|"]
    for l in range(L):
        rows.append(f"| {l} | " + " | ".join(f"{stats[k][l].mean():.3f}" for k in
                                              ("attn_to_cls", "attn_to_sep", "attn_to_punct", "attn_to_other")) + " |")
    lines = [
        f"# Attention report: {name}",
        "",
        f"{meta['segments']} sentences, {meta['tokens']} tokens ({corpus}). "
        "Heads are named layer-head, 0-based; every number is a mean over real query tokens, then "
        "over sentences.",
        "",
        "## Where attention goes (Clark et al. 2019, Fig. 2): head-mean per layer",
        "", *rows, "",
        "## Notable heads",
        "",
        f"- previous token: {top_heads(stats['attn_prev'])}",
        f"- next token: {top_heads(stats['attn_next'])}",
        f"- self: {top_heads(stats['attn_self'])}",
        f"- {sep}: {top_heads(stats['attn_to_sep'])}",
        f"- broadest (row entropy, nats; uniform would be {float(stats['entropy_uniform']):.2f}): "
        f"{top_heads(stats['entropy'])}",
    ]
    if "norm_share_to_sep" in stats:
        lines += ["", "## Weights vs vector norms (Kobayashi et al. 2020), mean over all heads", "",
                  "| key class | share by weight α | share by norm ‖αf(x)‖ |", "|---|---|---|"]
        for c, label in (("cls", cls), ("sep", sep), ("punct", ". or ,"), ("other", "other")):
            lines.append(f"| {label} | {np.nanmean(stats['weight_to_' + c]):.3f} | "
                         f"{np.nanmean(stats['norm_share_to_' + c]):.3f} |")
    lines += ["", "## Figures", "", *[f"- [{p.name}]({p.relative_to(out)}): {figure_caption(p)}" for p in figures],
              ""]
    return "\n".join(lines)


def figure_caption(path: Path) -> str:
    """A figure's one-line caption: the title ``jattn.viz.plots.save`` stored in the PNG."""
    from jattn.viz import plots

    if path.suffix == ".html":
        return ("interactive viewer of sample sentence 0: every head's attention, by weight and by vector norm "
                "(open in a browser)")
    return plots.caption(path) or path.stem.replace("_", " ")


def run(args) -> None:
    from jattn.models import load
    from jattn.viz.view import view
    from jattn.io import results
    from jattn.viz.results import write_files
    from jattn.io.readers import Corpus
    from jattn.analyses.registry import make_methods
    from jattn.runner.loop import run_corpus
    from jattn.viz import plots, words

    if args.input is None:
        source, fmt, corpus = sample_path("en_ewt-ud-dev.sample.conllu"), "conllu", "bundled UD English EWT sample"
    else:
        source = Path(args.input)
        fmt, corpus = ("conllu" if source.suffix == ".conllu" else "text"), str(source)
    examples = [ex for ex in Corpus(source, fmt) if not ex.is_empty][: args.limit]
    sentences = [ex.a if isinstance(ex.a, str) else " ".join(ex.a) for ex in examples]
    if args.maps > len(sentences):
        raise ValueError(f"--maps {args.maps}: {corpus} has {len(sentences)} sentences. Fix: --maps "
                         f"{len(sentences)} or fewer")
    with results.Output(args.out, overwrite=args.overwrite) as output:  # checked and locked before any work
        model = load(args.model)
        name = "all-MiniLM-L6-v2 (embedded default)" if args.model is None else str(args.model)
        result = run_corpus(model, examples, make_methods(model, METHODS), batch_size=args.batch_size)
        labels = words.special_names(model.tokenizer)  # [CLS] / [SEP] as the tokenizer names them

        def fill(out: Path) -> list[Path]:
            figures = write_files(result, out, model.config.num_layers,
                                  results.run_meta(input=corpus, methods=METHODS), labels)
            stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
            maps = []
            for k in range(args.maps):
                batch = model.tokenize([sentences[k]])
                weights = np.asarray(model.forward(batch).attentions)[:, 0]  # (L, H, n, n)
                tokens = model.tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
                maps.append(out / f"attention_maps_{k}.png")
                plots.attention_grid(weights, tokens, maps[-1], f"Attention maps of every head on sample sentence {k}, "
                                     f"{name}")
            page = out / "attention_view.html"  # interactive head/model views, weights vs norms
            page.write_text(view(model, sentences[0]), encoding="utf-8")
            figures = maps + [page] + sorted(figures)
            (out / "report.md").write_text(report(stats, result.meta, name, figures, out, corpus, labels))
            return figures

        figures = output.write(fill)
    print(f"jattn demo: wrote {args.out}/report.md, results.json, {len(figures)} figures")
