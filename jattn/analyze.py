"""Corpus attention statistics (Clark et al. 2019): ``jattn analyze --input FILE --out DIR``.

Streams the corpus through ``jattn.run.run_corpus`` and writes ``DIR/results.json`` (every
statistic: nested-list value, shape, description; plus ``meta``), ``DIR/results.npz`` and
``DIR/figures/*.png``. Several processes: start one per host with ``--coordinator HOST:PORT
--num-processes N --process-id I``; each reads its own shard, process 0 writes the outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

METHOD_HELP = {
    "weights": "attention to [CLS]/[SEP]/punctuation/other, SEP->SEP, prev/self/next",
    "entropy": "mean row entropy, [CLS]-row entropy, uniform reference",
    "js": "Jensen-Shannon distance between all heads + MDS",
    "grad": "|dL/d attention| per key class (masked-LM loss; needs an MLM head)",
    "word-weights": "'weights' on the word-level map (needs --format conllu)",
    "word-entropy": "'entropy' on the word-level map (needs --format conllu)",
    "norms": "weight- vs norm-based (‖αf‖) attention to token classes, ‖f(x)‖ per class (Kobayashi 2020)",
    "norm-freq": "mean received α and ‖f(x)‖ per token id, Spearman vs frequency rank (Kobayashi 2020)",
    "mixing": "mixing ratios Attn-W/N, AttnRes-W/N, AttnResLn-N, 12% masked (Kobayashi 2021)",
}


def make_methods(model, names: list[str], rank_file=None) -> list:
    from jattn.methods.distance import JSDistance
    from jattn.methods.grad import AttentionGradient
    from jattn.methods.norm_stats import DEFAULT_RANKS, MixingRatio, NormClassAttention, NormFrequency
    from jattn.methods.weights import ClassAttention, Entropy

    ranks = rank_file or DEFAULT_RANKS
    factories = {
        "weights": lambda: ClassAttention(), "entropy": lambda: Entropy(), "js": lambda: JSDistance(),
        "grad": lambda: AttentionGradient(model), "word-weights": lambda: ClassAttention("word"),
        "word-entropy": lambda: Entropy("word"),
        "norms": lambda: NormClassAttention(), "norm-freq": lambda: NormFrequency(model.config.vocab_size, ranks),
        "mixing": lambda: MixingRatio(model, rank_file=ranks),
    }
    unknown = [n for n in names if n not in factories]
    if unknown or not names:
        raise SystemExit(f"jattn analyze: unknown method(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(factories)}")
    return [factories[n]() for n in dict.fromkeys(names)]


def add_arguments(parser) -> None:
    from jattn.data.readers import FORMATS

    parser.add_argument("--model", default=None, help="HF folder or hub id (default: embedded all-MiniLM-L6-v2)")
    parser.add_argument("--input", required=True, help="corpus file")
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="text: a segment per line, 'A<TAB>B' for a pair; conllu; gap (GAP tsv)")
    parser.add_argument("--methods", default="weights,entropy,js",
                        help="comma-separated: " + "; ".join(f"{k}: {v}" for k, v in METHOD_HELP.items()))
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128, help="longest segment in tokens (specials included)")
    parser.add_argument("--truncate", action="store_true", help="cut over-long segments instead of failing")
    parser.add_argument("--rank-file", default=None,
                        help="token frequency ranks, 'rank count vocab_id' per line, for norm-freq and mixing "
                             "(default: ../shared/data/frequency/rank_count_ids.txt, BERT-vocabulary ranks)")
    parser.add_argument("--coordinator", help="HOST:PORT of process 0, for a multi-process run")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)


def to_json(value: np.ndarray):
    """Nested lists; NaN (a statistic with no contributing sequence) becomes null."""
    value = np.asarray(value, np.float64)
    return np.where(np.isnan(value), None, value).tolist() if np.isnan(value).any() else value.tolist()


def write_results(result, out: Path, num_layers: int) -> None:

    out.mkdir(parents=True, exist_ok=True)
    stats = {k: np.asarray(s.value) for k, s in result.statistics.items()}
    doc = {k: {"value": to_json(v), "shape": list(v.shape), "description": result.statistics[k].description}
           for k, v in stats.items()}
    doc["meta"] = result.meta
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    np.savez(out / "results.npz", **stats)
    write_figures(stats, num_layers, out / "figures")


def write_figures(stats: dict[str, np.ndarray], num_layers: int, folder: Path) -> list[Path]:
    from jattn import plots

    folder.mkdir(parents=True, exist_ok=True)
    paths = [plots.heatmap(v, k, folder / f"heatmap_{k}.png") for k, v in stats.items()
             if v.ndim == 2 and v.shape[0] == num_layers]
    classes = {"attn_to_cls": "[CLS]", "attn_to_sep": "[SEP]", "attn_to_punct": '"." or ","', "attn_to_other": "other"}
    for p in ("", "word_"):
        if all(p + k in stats for k in classes):
            paths.append(plots.per_layer({k: stats[p + k] for k in classes}, classes,
                                         f"{p.replace('_', '-')}attention to token classes", "mean attention",
                                         folder / f"{p}class_attention.png"))
            positional = {"attn_prev": "previous token", "attn_self": "self", "attn_next": "next token"}
            paths.append(plots.per_layer({k: stats[p + k] for k in positional}, positional,
                                         f"{p.replace('_', '-')}positional attention", "mean attention",
                                         folder / f"{p}positional.png"))
        if p + "entropy" in stats:
            paths.append(plots.entropy_plot(stats[p + "entropy"], stats[p + "entropy_cls"],
                                            float(stats[p + "entropy_uniform"]), folder / f"{p}entropy.png"))
    grads = {f"grad_to_{k}": v for k, v in (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", '"." or ","'), ("other", "other"))}
    if all(k in stats for k in grads):
        paths.append(plots.per_layer(stats, grads, "gradient of the loss w.r.t. attention, by key class",
                                     "mean Σ|dL/dα|", folder / "grad_by_class.png"))
    if "js_mds" in stats:
        needed = ["entropy", "attn_prev", "attn_next", "attn_self", "attn_to_cls", "attn_to_sep", "attn_to_punct"]
        labels = plots.behaviours(stats) if all(k in stats for k in needed) else None
        paths.append(plots.mds_scatter(stats["js_mds"], num_layers, folder / "mds_heads.png", labels))
    return paths


def run(args) -> None:
    import jax

    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

    import jattn
    from jattn.data.readers import Corpus
    from jattn.run import run_corpus

    corpus = Corpus(args.input, args.format)
    model = jattn.load(args.model)
    methods = make_methods(model, [m.strip() for m in args.methods.split(",") if m.strip()], args.rank_file)
    result = run_corpus(model, corpus, methods, batch_size=args.batch_size, max_length=args.max_length,
                        truncate=args.truncate)
    if jax.process_index() == 0:
        write_results(result, Path(args.out), model.config.num_layers)
        print(f"jattn analyze: {result.meta['segments']} segments, {result.meta['tokens']} tokens -> {args.out}")
