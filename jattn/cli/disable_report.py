"""``jattn disable``'s numbers beside their noise: a paired bootstrap over examples for every
unit's Δmetric (Koehn 2004, ``jattn.stats.paired_bootstrap``), Holm–Bonferroni over the units of
one sweep (``jattn.stats.holm``), and the report, results and figures that state them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jattn.cli.reporting import SCALE, table, write_report

ALPHA = 0.05  # family-wise error rate of the Holm–Bonferroni correction


def noise(result, fn, labels: np.ndarray, b: int) -> dict[str, np.ndarray]:
    """Per unit of a ``SweepResult`` (on the ×100 scale): the 95 % paired-bootstrap interval of
    Δmetric, its two-sided p-value, and whether it survives Holm over the sweep's units.
    A unit whose predictions equal the intact model's has Δ = 0 in every resample (p = 1)."""
    from jattn.stats import holm, paired_bootstrap

    metric = lambda pred, gold: SCALE * fn(pred, gold)  # noqa: E731
    shape, n = result.delta.shape, len(labels)
    flat = result.predictions.reshape(-1, n)  # (units, N)
    low, high, p = np.zeros(len(flat)), np.zeros(len(flat)), np.ones(len(flat))
    for i, pred in enumerate(flat):
        if not np.array_equal(pred, result.baseline_predictions):
            t = paired_bootstrap(metric, pred, result.baseline_predictions, labels, b=b)
            low[i], high[i], p[i] = t["ci"][0], t["ci"][1], t["p"]
    return {"ci_low": low.reshape(shape), "ci_high": high.reshape(shape), "p": p.reshape(shape),
            "significant": holm(p, ALPHA).reshape(shape)}


def units(result, noise: dict, sign: int) -> list[dict]:
    """Units whose removal improves (sign +1) or hurts (-1) the metric, largest change first, each
    with its interval, p-value and Holm verdict (0-based layer, head)."""
    d = result.delta * SCALE
    order = np.argsort(-sign * d, axis=None, kind="stable")
    keys = ("layer", "head")[:d.ndim]
    return [dict(zip(keys, map(int, np.unravel_index(i, d.shape))), delta=float(d.flat[i]),
                 ci=[float(noise["ci_low"].flat[i]), float(noise["ci_high"].flat[i])], p=float(noise["p"].flat[i]),
                 significant=bool(noise["significant"].flat[i]))
            for i in order if sign * d.flat[i] > 0]


def _said(cells: list[dict], k: int = 5) -> str:
    """'3-2: +1.15 [−0.23, +2.52], p = 0.11 (not significant)'; the first ``k``."""
    if not cells:
        return "none"
    out = []
    for c in cells[:k]:
        where = f"{c['layer']}-{c['head']}" if "head" in c else f"layer {c['layer']}"
        out.append(f"{where}: {c['delta']:+.2f} [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}], p = {c['p']:.3g}"
                   + ("" if c["significant"] else " (not significant)"))
    return "; ".join(out) + (f"; and {len(cells) - k} more" if len(cells) > k else "")


def statements(sweeps: dict, noises: dict, name: str, b: int) -> list[str]:
    """report.md's section per sweep: baseline, then which units improve / hurt, with their noise."""
    lines = []
    for (u, m), r in sweeps.items():
        nz = noises[u, m]
        up, down = units(r, nz, +1), units(r, nz, -1)
        n = r.delta.size
        lines += [f"## One {u} disabled ({m})", "",
                  f"Intact model: {name} {r.baseline * SCALE:.2f}. Δ = {name} with the {u} disabled − intact; "
                  f"each Δ with its 95 % paired-bootstrap interval over examples ({b} resamples) and p-value; "
                  f"significant = rejected by Holm–Bonferroni over the {n} {u}s at α = {ALPHA}.", "",
                  f"- improves the metric when disabled ({len(up)} {u}s, {sum(c['significant'] for c in up)} "
                  f"significant): {_said(up)}",
                  f"- hurts the metric when disabled ({len(down)} {u}s, {sum(c['significant'] for c in down)} "
                  f"significant): {_said(down)}", ""]
        if u == "layer":
            lines += table(["layer", f"Δ {name}", "95 % interval", "p", "significant"],
                           [[l, float(r.delta[l] * SCALE), f"[{nz['ci_low'][l]:+.2f}, {nz['ci_high'][l]:+.2f}]",
                             f"{nz['p'][l]:.3g}", "yes" if nz["significant"][l] else "no"]
                            for l in range(len(r.delta))]) + [""]
    return lines


def figures(sweeps: dict, noises: dict, name: str, folder: Path) -> list[Path]:
    """Signed Δ on a diverging map centred at 0 (heads; Holm-significant cells outlined) and as
    bars with their intervals (layers)."""
    from jattn.viz import plots

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for (u, m), r in sweeps.items():
        nz = noises[u, m]
        title = f"Δ {name}, one {u} disabled ({m}); intact {r.baseline * SCALE:.2f}"
        if u == "head":
            paths.append(plots.signed_heatmap(r.delta * SCALE, title + "\noutlined: significant (Holm)",
                                              folder / f"delta_head_{m}.png", label=f"Δ {name}",
                                              marks=nz["significant"]))
        else:
            paths.append(plots.signed_bars(r.delta * SCALE, nz["ci_low"], nz["ci_high"], title, f"Δ {name}",
                                           folder / f"delta_layer_{m}.png", marks=nz["significant"]))
    return paths


def report(folder: Path, sweeps: dict, noises: dict, name: str, meta: dict, extra: list[str], paths) -> Path:
    head = [f"Model: {meta['model']}. Data: {meta['input']} ({meta['examples']} examples). Metric: {name}. "
            "Disabling (Kovaleva et al. 2019; Michel et al. 2019): uniform = the head's weights replaced by "
            "uniform attention over the real tokens; zero = the head's output zeroed (ξ = 0).", "", *extra]
    return write_report(folder, "Head and layer disabling", head + statements(sweeps, noises, name, meta["bootstrap"]),
                        paths)
