"""The claims of Kovaleva et al. 2019 §6 (disabling heads and layers) from the sweeps' predictions,
the stage's table and figures (their verdicts: ``experiments.kovaleva2019.verdicts``).

Per model and task, over the seeds swept (each seed a fine-tuned classifier, its own dev
predictions):

- best head, held out: the head whose removal raises the metric most on one half of dev
  (``experiments.kovaleva2019.disabling.halves``), its Δ on the other half;
- best head, in sample: selected and reported on all the dev examples swept, as the paper did
  (optimistic: the maximum of 144 noisy Δs);
- heads / layers after Holm: the share whose removal changes the metric, family-wise error 5 %
  over the model's heads × seeds (layers × seeds separately), paired bootstrap p-values
  (B = 10,000): the family the verdicts test.

With one seed a Δ carries the paired bootstrap interval over examples; with several, the Δ per
seed and a Student-t interval over seeds (STATISTICS.md §2).
"""

from __future__ import annotations

import numpy as np

from experiments.kovaleva2019 import disabling as D

UNITS = {"sst2": ("accuracy", "accuracy"), "cola": ("MCC", "mcc")}  # unit, claims statistic


def unpack(record: dict) -> dict:
    """A sweep stage's result -> gold (n,), base (n,), heads (L·H, n), layers (L, n) arrays."""
    base = np.asarray(record["base"])
    return {"gold": np.asarray(record["gold"]), "base": base, "heads": D.unflip(base, record["head_flips"]),
            "layers": D.unflip(base, record["layer_flips"]), "seed": record["seed"], "index": record["index"]}


def _delta_measure(statistic: str, seeds: int) -> tuple[dict, dict]:
    """(measure, baseline) of a Δ against the unmodified model: paired bootstrap for one seed,
    t over seeds for several; the baseline is the unmodified model's metric."""
    if seeds == 1:
        return ({"statistic": statistic, "columns": {"gold": "gold", "pred": "pred"}, "against": {"pred": "base"},
                 "ci_method": "paired"},
                {"name": "unmodified model", "columns": {"gold": "gold", "pred": "base"}, "ci_method": "bootstrap"})
    return ({"statistic": f"{statistic}_gain", "columns": {"gold": "gold", "pred": "pred", "reference": "base"},
             "ci_method": "seeds"},
            {"name": "unmodified model (mean over seeds)", "statistic": statistic,
             "columns": {"gold": "gold", "pred": "base"}, "ci_method": "seeds"})


def best_head_claims(ctx, model: str, task: str, sweeps: list[dict], paper: str, protocol: str) -> tuple[list, list]:
    """The held-out and in-sample best-head claims, and a table line per seed."""
    unit, statistic = UNITS[task]
    metric = "accuracy" if statistic == "accuracy" else "mcc"
    H = sweeps[0]["heads_per_layer"]
    held, insample, lines = [], [], []
    for s in sweeps:
        n = len(s["gold"])
        select, report = D.halves(n, seed=0)
        best = D.best_variant(s["gold"], s["base"], s["heads"], metric, select)
        top = D.best_variant(s["gold"], s["base"], s["heads"], metric, np.arange(n))
        for rows, out, head in ((report, held, best), (np.arange(n), insample, top)):
            out += [{"index": int(s["index"][i]), "seed": s["seed"], "head": f"{head // H}:{head % H}",
                     "gold": int(s["gold"][i]), "pred": int(s["heads"][head, i]), "base": int(s["base"][i])}
                    for i in rows]
        lines.append((s["seed"], f"{best // H}:{best % H}", f"{top // H}:{top % H}"))
    measure, baseline = _delta_measure(statistic, len(sweeps))
    seeds = len(sweeps)
    claims = []
    split = "; the selection half and the report half: a fixed random split of these examples (seed 0)"
    # held out: seeds × examples (the seeds share the report half), the interval its verdict judges
    two_way = {"ci_method": "seeds_examples"} if seeds > 1 else {}
    for kind, rows, what, how, over in (
            ("heldout", held, "selected on one half of dev, Δ on the other half", split, two_way),
            ("insample", insample, "selected and reported on the same dev examples (the paper's way)",
             "; optimistic by construction: the largest of many noisy Δs, reported on the examples it was chosen on",
             {})):
        c = ctx.claim(id=f"kovaleva-{model}-{task}-best-head-{kind}",
                      claim=f"{model} {task}: disabling the head whose removal helps most, {what}",
                      paper=paper, unit=f"Δ {unit}", rows=rows, n=len(rows) // seeds, seeds=seeds,
                      measure={**measure, **over}, baseline={**baseline, **over}, protocol=protocol + how + ".")
        heads = ", ".join(f"seed {sd}: {b if kind == 'heldout' else t}" for sd, b, t in lines)
        claims.append({**c, "note": f"Head (layer:head) {heads}."})
    return claims, lines


def family_claim(ctx, model: str, task: str, sweeps: list[dict], unit_name: str, paper: str, protocol: str,
                 b: int = D.B_FAMILY) -> tuple[dict, list[dict]]:
    """The share of heads (or layers) whose removal changes the metric after Holm over every test
    of the family, units × seeds (the study's verdicts' family, ``verdicts._holm``); rows: one per
    seed and unit with its Δ, interval, p and verdicts. Returns (claim, per-seed summaries)."""
    from jattn import stats

    unit, statistic = UNITS[task]
    metric = "accuracy" if statistic == "accuracy" else "mcc"
    key = "heads" if unit_name == "head" else "layers"
    tests = [D.paired_family(s["gold"], s["base"], s[key], metric, b=b) for s in sweeps]  # per seed: (U,) each
    rejected = np.split(stats.holm(np.concatenate([t["p"] for t in tests]), D.ALPHA), len(sweeps))  # (S, U)
    rows, summary = [], []
    for s, t, holm in zip(sweeps, tests, rejected):
        f = {**t, "hurts": holm & (t["delta"] < 0), "improves": holm & (t["delta"] > 0),
             "uncorrected": t["p"] < D.ALPHA}
        H = s["heads_per_layer"] if key == "heads" else 1
        for v in range(len(f["p"])):
            rows.append({"seed": s["seed"], "layer": v // H, **({"head": v % H} if key == "heads" else {}),
                         "delta": float(f["delta"][v]), "ci": [float(x) for x in f["ci"][v]], "p": float(f["p"][v]),
                         "hurts": int(f["hurts"][v]), "improves": int(f["improves"][v]),
                         "changes": int(f["hurts"][v] | f["improves"][v]), "uncorrected": int(f["uncorrected"][v])})
        summary.append({"seed": s["seed"], "units": len(f["p"]), "hurts": int(f["hurts"].sum()),
                        "improves": int(f["improves"].sum()), "uncorrected": int(f["uncorrected"].sum()),
                        "raised": int((f["delta"] > 0).sum()), "delta": f["delta"], "ci": f["ci"],
                        "hurt_mask": f["hurts"], "improve_mask": f["improves"]})
    seeds = len(sweeps)
    method = "bootstrap" if seeds == 1 else "seeds"
    c = ctx.claim(id=f"kovaleva-{model}-{task}-{key}-holm",
                  claim=f"{model} {task}: share of {key} whose removal changes dev {unit} (paired bootstrap, Holm 5 % "
                        f"over {key} × seeds)",
                  paper=paper, unit=f"share of {key}", rows=rows, n=len(rows) // seeds, seeds=seeds,
                  measure={"statistic": "mean", "columns": {"value": "changes"}, "ci_method": method},
                  baseline={"name": "uncorrected p < 0.05", "columns": {"value": "uncorrected"}},
                  protocol=protocol + f"; interval: {'bootstrap over ' + key if seeds == 1 else 't over seeds'}; "
                  f"p-values from B = {b:,} paired resamples (Holm at 5 % over the {len(rows)} tests of {key} × seeds "
                  f"needs p < {D.ALPHA / len(rows):.1e}).")
    note = "; ".join(f"seed {x['seed']}: {x['hurts']} hurt, {x['improves']} improve after Holm "
                     f"({x['raised']} raise the metric before any test, {x['uncorrected']} with p < 0.05 uncorrected)"
                     for x in summary)
    note = note[0].upper() + note[1:] + "."
    return {**c, "note": note}, summary


def table(model: str, task: str, sweeps: list[dict], heads: list[dict], layers: list[dict], best: list) -> str:
    """The stage's Markdown block: per seed, the unmodified metric, the Holm counts, the best heads."""
    unit, statistic = UNITS[task]
    metric = "accuracy" if statistic == "accuracy" else "mcc"
    out = [f"{model} {task} ({len(sweeps[0]['gold'])} dev examples; layers and heads 0-based)", "",
           "| seed | unmodified | heads hurt / improve (Holm over heads × seeds) | layers hurt / improve (Holm over "
           "layers × seeds) | best head: held out / in sample |",
           "|---|---|---|---|---|"]
    for s, h, lay, (seed, held, insample) in zip(sweeps, heads, layers, best):
        value = D.metric_counts(np.ones((1, len(s["gold"]))), s["gold"], s["base"][None], metric)[0, 0]
        out.append(f"| {seed} | {value:.3f} {unit} | {h['hurts']} / {h['improves']} of {h['units']} | "
                   f"{lay['hurts']} / {lay['improves']} of {lay['units']} | {held} / {insample} |")
    return "\n".join(out)


def figures(ctx, model: str, task: str, L: int, H: int, heads: dict, layers: dict) -> list[str]:
    """Fig. 9-10 of the paper with the tests: Δ per head (× where removal hurts, + where it
    improves after Holm) and Δ per layer with its 95 % interval (seed ``heads['seed']``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit = UNITS[task][0]
    d = np.asarray(heads["delta"]).reshape(L, H)
    lim = max(float(np.abs(d).max()), 1e-6)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(0.5 * H + 8, 0.4 * L + 2), gridspec_kw={"width_ratios": [H, 6]})
    im = ax.imshow(d, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    for mask, mark in ((heads["hurt_mask"], "x"), (heads["improve_mask"], "+")):
        ys, xs = np.divmod(np.flatnonzero(np.asarray(mask)), H)
        ax.scatter(xs, ys, marker=mark, color="k", s=30)
    ax.set(xlabel="head", ylabel="layer", xticks=range(H), yticks=range(L),
           title=f"Δ{unit}, one head disabled (× hurts, + improves after Holm)")
    fig.colorbar(im, ax=ax)
    dl, ci = np.asarray(layers["delta"]), np.asarray(layers["ci"])
    bx.errorbar(range(L), dl, yerr=[dl - ci[:, 0], ci[:, 1] - dl], fmt="o", capsize=3)
    bx.axhline(0, color="k", lw=0.8)
    bx.set(xlabel="layer disabled", ylabel=f"Δ{unit} (95 % paired CI)", xticks=range(L), title="whole layer")
    fig.suptitle(
        f"{model} {task}, seed {heads['seed']}: Kovaleva et al. Fig. 9-10 with paired tests", fontsize=9, y=1.03
    )
    return [ctx.save_figure(fig, f"{model}-{task}-disabling.png", dpi=100)]
