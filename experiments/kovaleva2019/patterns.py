"""The claims, tables and figures of Kovaleva et al. 2019 §4-5 (pattern types, the change under
fine-tuning) from the arrays of ``experiments.kovaleva2019.labels`` and ``experiments.kovaleva2019.maps``.

The verdicts are the study's rules' (``experiments.kovaleva2019.verdicts``), not this module's: a
classifier of pattern types beats the majority class on held-out hand-labelled maps; the
structured share is context (uniform attention loses to it by construction); the fine-tuning
change asks whether the last two layers are the two most changed (an ordering over resamples).
The paired Δs the claims carry here (structured − uniform, last two − other layers) are
descriptions beside them, not those tests.
"""

from __future__ import annotations

import numpy as np

from jattn.analyses.patterns import TYPES, Thresholds
from jattn.reproduce import claims as C

HETEROGENEOUS = TYPES.index("heterogeneous")
PAPER_TYPES = ("BERT-base, GLUE tasks: 400 maps labelled by hand into five types and a CNN for the rest (Fig. 2): "
               "the four structured types (vertical, diagonal, vertical+diagonal, block) cover a large share of the "
               "maps in every task; about 30 % of the hand-labelled maps vertical")


def _with_delta(claim: dict, rows: list[dict], spec: dict, what: str) -> dict:
    """``claim`` with the Δ of ``spec`` on its rows (``delta``, ``delta_measure``) and a note giving
    it (the verdict is ``experiments.kovaleva2019.verdicts``')."""
    d = C.evaluate(rows, spec)
    how = "t over seeds" if spec["ci_method"] == "seeds" else "paired bootstrap"
    return {**claim, "delta": d, "delta_measure": spec,
            "note": f"{what}: Δ {d['value']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}] ({how})."}


def labels_result(ctx, model, root, dev: list, train: list) -> dict:
    """The ``kovaleva.labels`` stage: cross-fitted rules and CNN on the hand-labelled maps."""
    from experiments.kovaleva2019 import labels as KL

    p = ctx.params
    hand = KL.hand_set(root, model.tokenizer, dev)
    stats, labels = KL.statistics(hand["maps"], hand["classes"]), hand["labels"]
    fold = KL.folds(labels)
    rules = KL.cross_fit_rules(stats, labels, fold)
    t_all, agree_all = KL.fit_thresholds(stats, labels)
    corpus = KL.sample_maps(model, [x for x, _ in train], p["corpus_sentences"], p["per_sentence"])
    cnn = KL.cross_fit_cnn(hand, fold, rules["thresholds"], corpus, steps=p["cnn_steps"])
    in_sample = KL.rule_labels(stats, t_all)
    rows = [{"id": int(i), "fold": int(f), "hand": int(h), "rule": int(r), "cnn": int(c), "rule_in_sample": int(s),
             "majority": int(m)} for i, f, h, r, c, s, m in
            zip(hand["ids"], fold, labels, rules["pred"], cnn["pred"], in_sample, rules["majority"])]
    protocol = (f"{len(rows)} maps of pretrained MiniLM on SST-2 dev, labelled by eye by one annotator (too few for "
                "a fixed split): two folds stratified by label, each map labelled by a classifier fitted on the "
                "other fold only (cross-fitting); deviations: model, 72 maps not 400, one annotator")
    out = []
    for name, column, paper, extra in (
        (
            "rules",
            "rule",
            "the paper uses no rules (hand labels and a CNN)",
            f"thresholds (V, R) on a grid, fitted per fold: "
            f"{[(t['vertical'], t['diagonal']) for t in rules['thresholds']]}; "
            f"fitted and scored on all {len(rows)} maps (the old, in-sample protocol): "
            f"({t_all.vertical}, {t_all.diagonal}) agreeing on {agree_all:.3f}",
        ),
        (
            "cnn",
            "cnn",
            "a CNN (8 convolutional layers) trained on 400 hand-labelled BERT-base maps labels the five types (Fig. 2)",
            f"2 conv layers, {p['cnn_steps']} Adam steps on the fitting fold's hand maps plus "
            f"{cnn['corpus_maps'] - cnn['corpus_held_out']} maps of SST-2 train sentences labelled by that fold's "
            f"rules; agreement with the rules on {cnn['corpus_held_out']} held-out such maps: "
            f"{', '.join(f'{a:.3f}' for a in cnn['corpus_agreement_with_rules'])} (per fold)",
        ),
    ):
        claim = ctx.claim(id=f"kovaleva-{name}-held-out", claim=f"pattern types by the {name}: agreement with "
                          "hand labels on held-out maps", paper=paper, unit="accuracy", rows=rows,
                          measure={"statistic": "accuracy", "columns": {"gold": "hand", "pred": column},
                                   "ci_method": "bootstrap"},
                          baseline={"name": "majority class of the fitting fold",
                                    "columns": {"gold": "hand", "pred": "majority"}},
                          protocol=f"{protocol}; {extra}.")
        spec = {"statistic": "accuracy", "columns": {"gold": "hand", "pred": column}, "against": {"pred": "majority"},
                "ci_method": "paired"}
        out.append(_with_delta(claim, rows, spec, f"The {name} against the majority class"))
    confusion = np.zeros((2, len(TYPES), len(TYPES)), np.int64)
    np.add.at(confusion, (0, labels, rules["pred"]), 1)
    np.add.at(confusion, (1, labels, cnn["pred"]), 1)
    table = ["Hand label (rows) against the held-out label of the rules | the CNN (columns, same order):", "",
             "| hand \\ predicted | " + " | ".join(TYPES) + " | | " + " | ".join(TYPES) + " |",
             "|---" * (2 * len(TYPES) + 2) + "|"]
    table += [
        f"| {t} | " + " | ".join(map(str, confusion[0, k])) + " | | " + " | ".join(map(str, confusion[1, k])) + " |"
        for k, t in enumerate(TYPES)
    ]
    return {"claims": out, "table": "\n".join(table),
            "thresholds": {"vertical": t_all.vertical, "diagonal": t_all.diagonal, "block": t_all.block}}


def maps_result(ctx, model: str, task: str, index: np.ndarray, runs: dict[int, dict], thresholds: Thresholds,
                protocol: str) -> dict:
    """The ``kovaleva.maps-<model>-<task>`` stage from each fine-tuning seed's ``dev_maps`` (``runs``:
    seed -> arrays): the structured share beside uniform attention, and the per-layer cosine before
    vs after fine-tuning; one row per seed and example, the claims' intervals Student-t over the
    seeds (the maps depend on training; ``STATISTICS.md``)."""
    seeds = sorted(runs)
    last = max(runs[seeds[0]]["cosine"].shape[1] - 2, 1)  # the first of the last two layers
    rows, change_rows = [], []
    for seed in seeds:
        r = runs[seed]
        keep = np.flatnonzero(r["rows"] > 0)  # examples with a pattern statistic (a body row)
        share = {m: r["types"][m] / r["types"][m].sum(1, keepdims=True) for m in r["types"]}  # (N, 5) each
        for i in keep:
            structured = 1.0 - share["finetuned"][i, HETEROGENEOUS]
            uniform = float(r["uniform"][i] != HETEROGENEOUS)
            rows.append({"seed": seed, "index": int(index[i]), "structured": structured,
                         "pretrained_structured": 1.0 - share["pretrained"][i, HETEROGENEOUS],
                         "uniform_structured": uniform, "beyond_uniform": structured - uniform,
                         **{t: float(share["finetuned"][i, k]) for k, t in enumerate(TYPES)}})
        for i in range(len(index)):
            change_rows.append({"seed": seed, "index": int(index[i]), "last": float(r["cosine"][i, last:].mean()),
                                "rest": float(r["cosine"][i, :last].mean()),
                                "last_minus_rest": float(r["cosine"][i, last:].mean() - r["cosine"][i, :last].mean()),
                                "per_layer": np.round(r["cosine"][i], 5).tolist()})
    tag, over = f"{model}-{task}", {"ci_method": "seeds"}
    structured = ctx.claim(
        id=f"kovaleva-{tag}-structured-share",
        claim=f"{model} {task}: share of head maps of a structured type (not heterogeneous), fine-tuned",
        paper=PAPER_TYPES, unit="share of maps", rows=rows, n=len(rows) // len(seeds), seeds=len(seeds),
        measure={"statistic": "mean", "columns": {"value": "structured"}, **over},
        baseline={"name": "uniform attention on the same sentences", "columns": {"value": "uniform_structured"}},
        protocol=f"{protocol}; rules' thresholds V ≥ {thresholds.vertical}, R ≥ {thresholds.diagonal} fitted on the "
                 "72 hand-labelled maps (disjoint from these).")
    structured = _with_delta(structured, rows, {"statistic": "mean", "columns": {"value": "beyond_uniform"}, **over},
                             "Structured maps beyond what uniform attention gets")
    change = ctx.claim(
        id=f"kovaleva-{tag}-finetune-change",
        claim=f"{model} {task}: cosine of each head's map before vs after fine-tuning, last two layers",
        paper="BERT-base, GLUE tasks, Fig. 5: the last two layers' maps change most under fine-tuning",
        unit="cosine", rows=change_rows, n=len(index), seeds=len(seeds),
        measure={"statistic": "mean", "columns": {"value": "last"}, **over},
        baseline={"name": f"layers 0-{last - 1} on the same examples", "columns": {"value": "rest"}},
        protocol=f"{protocol}; maps over real tokens only (the released code used padded maps).")
    change = _with_delta(change, change_rows, {"statistic": "mean", "columns": {"value": "last_minus_rest"}, **over},
                         "Last two − other layers")
    return {"claims": [structured, change], "table": _table(model, task, runs, seeds),
            "figures": _figures(ctx, tag, runs, seeds)}


def _over_seeds(values) -> tuple[float, tuple[float, float]]:
    """The mean of one value per seed and its Student-t 95 % interval (``claims.evaluate``'s "seeds")."""
    got = C.evaluate([{"seed": s, "value": float(v)} for s, v in enumerate(values)],
                     {"statistic": "mean", "columns": {"value": "value"}, "ci_method": "seeds"})
    return got["value"], tuple(got["ci"])


def _summaries(runs: dict[int, dict], seeds: list[int]) -> dict:
    """Per type and model the share of maps, per type the uniform map's, per layer the cosine: each
    a mean over the examples per seed, then over seeds with its t-interval; the cosine per head
    averaged over seeds."""
    keep = {s: np.flatnonzero(runs[s]["rows"] > 0) for s in seeds}
    share = {s: {m: (t / t.sum(1, keepdims=True))[keep[s]].mean(0) for m, t in runs[s]["types"].items()}
             for s in seeds}  # seed -> model -> (5,)
    return {"types": {m: [_over_seeds([share[s][m][k] for s in seeds]) for k in range(len(TYPES))]
                      for m in ("finetuned", "pretrained")},
            "uniform": [_over_seeds([np.mean(runs[s]["uniform"][keep[s]] == k) for s in seeds])
                        for k in range(len(TYPES))],
            "per_layer": [_over_seeds([runs[s]["cosine"][:, l].mean() for s in seeds])
                          for l in range(runs[seeds[0]]["cosine"].shape[1])],
            "cosine_heads": np.mean([runs[s]["cosine_heads"] for s in seeds], 0)}


def _table(model: str, task: str, runs: dict[int, dict], seeds: list[int]) -> str:
    got = _summaries(runs, seeds)
    fmt = lambda v: f"{v[0]:.3f} [{v[1][0]:.3f}, {v[1][1]:.3f}]"  # noqa: E731
    table = [f"{model} {task}: share of maps per type (the mean over examples of the share of their L·H maps, then "
             f"over {len(seeds)} seed(s); 95 % t-interval over seeds, 0 wide for the pretrained model and uniform "
             "attention, which no fine-tuning seed changes)", "",
             "| type | fine-tuned | pretrained | uniform attention |", "|---|---|---|---|"]
    table += [f"| {t} | {fmt(got['types']['finetuned'][k])} | {fmt(got['types']['pretrained'][k])} | "
              f"{fmt(got['uniform'][k])} |" for k, t in enumerate(TYPES)]
    table += ["", "Cosine of the maps before vs after fine-tuning, per layer (mean over heads and examples, then over "
              "seeds; 95 % t-interval over seeds): "
              + ", ".join(f"layer {l} {fmt(v)}" for l, v in enumerate(got["per_layer"]))]
    return "\n".join(table)


def _figures(ctx, tag: str, runs: dict[int, dict], seeds: list[int]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    got = _summaries(runs, seeds)
    types, uniform, per_layer, cosine_heads = got["types"], got["uniform"], got["per_layer"], got["cosine_heads"]
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 3.6), gridspec_kw={"width_ratios": [5, 4, 5]})
    bars = {"fine-tuned": types["finetuned"], "pretrained": types["pretrained"], "uniform attention": uniform}
    for i, (name, values) in enumerate(bars.items()):
        v = np.array([x[0] for x in values])
        ci = np.array([x[1] for x in values])
        ax.bar(np.arange(len(TYPES)) + 0.27 * (i - 1), v, width=0.27, yerr=[v - ci[:, 0], ci[:, 1] - v], label=name,
               capsize=2)
    ax.set(xticks=range(len(TYPES)), ylabel="share of maps (95 % CI over seeds)",
           title="pattern types (Kovaleva Fig. 2)")
    ax.set_xticklabels(TYPES, fontsize=7)
    ax.legend(fontsize=7)
    v = np.array([x[0] for x in per_layer])
    ci = np.array([x[1] for x in per_layer])
    bx.errorbar(range(len(v)), v, yerr=[v - ci[:, 0], ci[:, 1] - v], fmt="-o", capsize=3)
    bx.set(xlabel="layer", ylabel="cosine (95 % CI over seeds)", title="before vs after fine-tuning (Fig. 5)",
           xticks=range(len(v)))
    im = cx.imshow(cosine_heads, cmap="viridis", aspect="auto")
    cx.set(xlabel="head", ylabel="layer", title="cosine per head (mean over dev and seeds)")
    fig.colorbar(im, ax=cx)
    fig.suptitle(tag, fontsize=9, y=1.03)
    return [ctx.save_figure(fig, f"{tag}-patterns-change.png", dpi=100)]
