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
    """``claim`` with the paired Δ of ``spec`` on its rows (``delta``, ``delta_measure``) and a note
    giving it (the verdict is ``experiments.kovaleva2019.verdicts``')."""
    d = C.evaluate(rows, spec)
    return {**claim, "delta": d, "delta_measure": spec,
            "note": f"{what}: Δ {d['value']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}] (paired bootstrap)."}


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
            ("rules", "rule", "the paper uses no rules (hand labels and a CNN)",
             f"thresholds (V, R) on a grid, fitted per fold: {[(t['vertical'], t['diagonal']) for t in rules['thresholds']]}; "
             f"fitted and scored on all {len(rows)} maps (the old, in-sample protocol): "
             f"({t_all.vertical}, {t_all.diagonal}) agreeing on {agree_all:.3f}"),
            ("cnn", "cnn", "a CNN (8 convolutional layers) trained on 400 hand-labelled BERT-base maps labels the "
             "five types (Fig. 2)",
             f"2 conv layers, {p['cnn_steps']} Adam steps on the fitting fold's hand maps plus "
             f"{cnn['corpus_maps'] - cnn['corpus_held_out']} maps of SST-2 train sentences labelled by that fold's rules; "
             f"agreement with the rules on {cnn['corpus_held_out']} held-out such maps: "
             f"{', '.join(f'{a:.3f}' for a in cnn['corpus_agreement_with_rules'])} (per fold)")):
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
    table += [f"| {t} | " + " | ".join(map(str, confusion[0, k])) + " | | " + " | ".join(map(str, confusion[1, k])) + " |"
              for k, t in enumerate(TYPES)]
    return {"claims": out, "table": "\n".join(table),
            "thresholds": {"vertical": t_all.vertical, "diagonal": t_all.diagonal, "block": t_all.block}}


def maps_result(ctx, model: str, task: str, index: np.ndarray, r: dict, thresholds: Thresholds,
                protocol: str) -> dict:
    """The ``kovaleva.maps-<model>-<task>`` stage: the structured share beside uniform attention,
    and the per-layer cosine before vs after fine-tuning."""
    from jattn import stats

    keep = np.flatnonzero(r["rows"] > 0)  # examples with a pattern statistic (a body row)
    total = r["types"]["finetuned"].sum(1)  # (N,) maps per example: L·H
    share = {m: r["types"][m] / total[:, None] for m in r["types"]}  # (N, 5) each
    L = r["cosine"].shape[1]
    rows = [{"index": int(index[i]), "structured": 1.0 - share["finetuned"][i, HETEROGENEOUS],
             "pretrained_structured": 1.0 - share["pretrained"][i, HETEROGENEOUS],
             "uniform_structured": float(r["uniform"][i] != HETEROGENEOUS),
             **{t: float(share["finetuned"][i, k]) for k, t in enumerate(TYPES)}} for i in keep]
    tag = f"{model}-{task}"
    structured = ctx.claim(
        id=f"kovaleva-{tag}-structured-share",
        claim=f"{model} {task}: share of head maps of a structured type (not heterogeneous), fine-tuned",
        paper=PAPER_TYPES, unit="share of maps", rows=rows,
        measure={"statistic": "mean", "columns": {"value": "structured"}, "ci_method": "bootstrap"},
        baseline={"name": "uniform attention on the same sentences", "columns": {"value": "uniform_structured"}},
        protocol=f"{protocol}; rules' thresholds V ≥ {thresholds.vertical}, R ≥ {thresholds.diagonal} fitted on the "
                 "72 hand-labelled maps (disjoint from these).")
    spec = {"statistic": "mean", "columns": {"value": "structured"}, "against": {"value": "uniform_structured"},
            "ci_method": "paired"}
    structured = _with_delta(structured, rows, spec, "Structured maps beyond what uniform attention gets")
    last = max(L - 2, 1)
    change_rows = [{"index": int(index[i]), "last": float(r["cosine"][i, last:].mean()),
                    "rest": float(r["cosine"][i, :last].mean()), "per_layer": np.round(r["cosine"][i], 5).tolist()}
                   for i in range(len(index))]
    change = ctx.claim(
        id=f"kovaleva-{tag}-finetune-change",
        claim=f"{model} {task}: cosine of each head's map before vs after fine-tuning, last two layers",
        paper="BERT-base, GLUE tasks, Fig. 5: the last two layers' maps change most under fine-tuning",
        unit="cosine", rows=change_rows,
        measure={"statistic": "mean", "columns": {"value": "last"}, "ci_method": "bootstrap"},
        baseline={"name": f"layers 0-{last - 1} on the same examples", "columns": {"value": "rest"}},
        protocol=f"{protocol}; maps over real tokens only (the released code used padded maps).")

    spec = {"statistic": "mean", "columns": {"value": "last"}, "against": {"value": "rest"}, "ci_method": "paired"}
    change = _with_delta(change, change_rows, spec, "Last two − other layers")
    types = {m: [stats.mean_ci(share[m][keep, k]) for k in range(len(TYPES))] for m in share}
    uniform = [stats.mean_ci((r["uniform"][keep] == k).astype(float)) for k in range(len(TYPES))]
    per_layer = [stats.mean_ci(r["cosine"][:, l]) for l in range(L)]
    fmt = lambda v: f"{v[0]:.3f} [{v[1][0]:.3f}, {v[1][1]:.3f}]"  # noqa: E731
    table = [f"{model} {task}: share of maps per type (mean over examples of the share of their L·H maps, 95 % CI)",
             "", "| type | fine-tuned | pretrained | uniform attention |", "|---|---|---|---|"]
    table += [f"| {t} | {fmt(types['finetuned'][k])} | {fmt(types['pretrained'][k])} | {fmt(uniform[k])} |"
              for k, t in enumerate(TYPES)]
    table += ["", "Cosine of the maps before vs after fine-tuning, per layer (mean over heads and examples, 95 % CI): "
              + ", ".join(f"layer {l} {fmt(v)}" for l, v in enumerate(per_layer))]
    return {"claims": [structured, change], "table": "\n".join(table),
            "figures": _figures(ctx, tag, types, uniform, per_layer, r["cosine_heads"])}


def _figures(ctx, tag: str, types: dict, uniform: list, per_layer: list, cosine_heads: np.ndarray) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 3.6), gridspec_kw={"width_ratios": [5, 4, 5]})
    bars = {"fine-tuned": types["finetuned"], "pretrained": types["pretrained"], "uniform attention": uniform}
    for i, (name, values) in enumerate(bars.items()):
        v = np.array([x[0] for x in values])
        ci = np.array([x[1] for x in values])
        ax.bar(np.arange(len(TYPES)) + 0.27 * (i - 1), v, width=0.27, yerr=[v - ci[:, 0], ci[:, 1] - v], label=name,
               capsize=2)
    ax.set(xticks=range(len(TYPES)), ylabel="share of maps (95 % CI)", title="pattern types (Kovaleva Fig. 2)")
    ax.set_xticklabels(TYPES, fontsize=7)
    ax.legend(fontsize=7)
    v = np.array([x[0] for x in per_layer])
    ci = np.array([x[1] for x in per_layer])
    bx.errorbar(range(len(v)), v, yerr=[v - ci[:, 0], ci[:, 1] - v], fmt="-o", capsize=3)
    bx.set(xlabel="layer", ylabel="cosine (95 % CI)", title="before vs after fine-tuning (Fig. 5)",
           xticks=range(len(v)))
    im = cx.imshow(cosine_heads, cmap="viridis", aspect="auto")
    cx.set(xlabel="head", ylabel="layer", title="cosine per head (mean over dev)")
    fig.colorbar(im, ax=cx)
    fig.suptitle(tag, fontsize=9, y=1.03)
    return [ctx.save_figure(fig, f"{tag}-patterns-change.png", dpi=100)]
