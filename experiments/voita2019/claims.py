"""The Voita claims, table and figures (``voita`` has the protocol), from the translations the
run stages saved. Every number is corpus sacreBLEU recomputed from those files; a Δ's interval
is a paired bootstrap over test sentences (one index resample scores both systems).

Claims: the unpruned model's BLEU (beside copying the source); per setting and λ, Δ BLEU of the
gated model vs the unpruned one (beside the Δ of the all-gates-open control trained for as many
updates), vs that control (beside the unpruned model's Δ vs it) and vs Michel's
importance pruning to the same open-head count (beside random orders' Δ); per setting and count,
Michel's Δ vs unpruned (beside random orders'); the fewest encoder heads within 1 BLEU of the
unpruned model (beside the same rule applied to importance pruning).

The harder set: the claims of the encoder setting again (ids ending in ``-long``) on the longest
quarter of the test sentences by source words (``longest``, fixed before any number), from the
same translations: on short, near-monotone captions an encoder may translate nearly as well
without self-attention, and long sentences are where it should be needed.
"""

from __future__ import annotations

import numpy as np

from jattn import stats
from jattn.reproduce.pipeline import Context
from experiments.common import TEST
from experiments.voita2019 import head_claims as voita_head_claims
from experiments.voita2019 import runs as V

NO_ENCODER = "no-encoder-attention"  # the control model's system name and claim id (voita-no-encoder-attention)
LONG_SHARE = 0.25  # the harder set: this share of the test sentences, the longest by source words


def longest(sources: list[str], share: float = LONG_SHARE) -> list[int]:
    """Indices (in test order) of the ``share`` of the sentences with the most source words; ties
    go to the earlier sentence."""
    k = max(1, round(share * len(sources)))
    return sorted(sorted(range(len(sources)), key=lambda i: (-len(sources[i].split()), i))[:k])


def _gain(hyp: str, reference: str) -> dict:
    return {"statistic": "bleu_gain", "columns": {"ref": "ref", "hyp": hyp, "reference": reference},
            "ci_method": "bootstrap"}


def _versus(ci: list, other: str) -> str:
    """How a Δ BLEU with interval ``ci`` compares its model with ``other``."""
    lo, hi = ci
    return (f"better than {other}" if lo > 0 else f"worse than {other}" if hi < 0
            else f"no difference from {other} detected (the interval includes 0)")


def claims_stage(gate_stages: list[str], michel_stages: list[str]):
    def run(ctx: Context) -> dict:
        base = ctx.result("voita.unpruned")
        refs, n = base["refs"], len(base["refs"])
        control = ctx.result("voita.control")
        text = {"unpruned": V.read_translations(ctx, base["translations"])}
        text.update({_control(int(k)): V.read_translations(ctx, f) for k, f in control["translations"].items()})
        runs = [ctx.result(g) for g in gate_stages]
        michel = {m["setting"]: m for m in map(ctx.result, michel_stages)}
        for m in michel.values():
            text.update({k: V.read_translations(ctx, f) for k, f in m["translations"].items()})
        for r in runs:
            text[_system(r)] = V.read_translations(ctx, r["translations"])
        text[NO_ENCODER] = V.read_translations(ctx, ctx.result("voita.no-encoder-attention")["translations"])
        protocol = (f"test {TEST} ({n} sentences), beam {ctx.params['beams']}; paired bootstrap over sentences "
                    "(B = 1000); one model seed; Multi30k fr-en, width 256 (module voita: deviations)")
        claims = [ctx.claim(
            id="voita-unpruned-bleu", claim="the converged 6+6 x 8 model's test BLEU", paper=V.PAPER, unit="BLEU",
            rows=_rows(refs, hyp=text["unpruned"], source=base["sources"]), n=n, seeds=1,
            measure={"statistic": "bleu", "columns": {"ref": "ref", "hyp": "hyp"}, "ci_method": "bootstrap"},
            baseline={"name": "the source sentence copied", "columns": {"ref": "ref", "hyp": "source"}},
            protocol=protocol)]
        heads = ctx.result("voita.roles")
        claims += _curve_claims(ctx, runs, michel, tuple(michel), text, refs, list(range(n)), protocol, heads)
        long = longest(base["sources"])
        words = min(len(base["sources"][i].split()) for i in long)
        claims.append(ctx.claim(
            id="voita-unpruned-bleu-long",
            claim=f"the converged model's BLEU on the longest {len(long)} test sentences ({words}+ source words)",
            paper=V.PAPER, unit="BLEU", n=len(long), seeds=1,
            rows=_rows([refs[i] for i in long], index=long, hyp=[text["unpruned"][i] for i in long],
                       source=[base["sources"][i] for i in long]),
            measure={"statistic": "bleu", "columns": {"ref": "ref", "hyp": "hyp"}, "ci_method": "bootstrap"},
            baseline={"name": "the source sentence copied", "columns": {"ref": "ref", "hyp": "source"}},
            protocol=f"the longest {LONG_SHARE:.0%} of the test sentences by source words; " + protocol))
        harder = _curve_claims(ctx, [r for r in runs if r["setting"] == "encoder"], michel, ("encoder",),
                               {k: [v[i] for i in long] for k, v in text.items()}, [refs[i] for i in long], long,
                               f"the longest {LONG_SHARE:.0%} of the test sentences by source words; " + protocol,
                               heads, suffix="-long")
        for c in harder:
            c["claim"] += f", on the longest {len(long)} test sentences"
        claims += harder
        claims += voita_head_claims.claims(ctx, heads, [r for r in runs if r["setting"] == "encoder"])
        systems = {name: stats.bleu_ci(hyps, refs) for name, hyps in text.items() if "-random-" not in name}
        figures = [_curve_figure(ctx, runs, michel, systems, text, refs, control["steps"]), _gates_figure(ctx, runs),
                   voita_head_claims.roles_figure(ctx, heads, runs)]
        return {"claims": claims, "figures": figures,
                "table": _table(runs, systems, control["steps"]) + "\n\n" + voita_head_claims.table(heads, runs)}

    return run


def _curve_claims(ctx, runs: list[dict], michel: dict, settings: tuple, text: dict, refs: list[str],
                  index: list[int], protocol: str, heads: dict, suffix: str = "") -> list[dict]:
    """The curve's claims on the test sentences ``index`` (``text`` and ``refs`` cut to them): each
    of ``runs``' gate claims, Michel's at each count of ``settings``, and the fewest encoder heads;
    ids end in ``suffix``."""
    claims = []
    for r in runs:
        claims += _gate_claims(ctx, r, text, michel[r["setting"]], refs, protocol, index, suffix)
    for setting in settings:
        m = michel[setting]
        for k in m["counts"]:
            randoms = [text[f"michel-{setting}-{k}-{o}"] for o in m["orders"] if o.startswith("random")]
            rows = _rows(refs, index=index, importance=text[f"michel-{setting}-{k}-importance"],
                         unpruned=text["unpruned"], random=_per_row(randoms))
            c = ctx.claim(id=f"voita-michel-{setting}-{k}{suffix}", unit="Δ BLEU", rows=rows, n=len(refs), seeds=1,
                          claim=f"Michel importance pruning to {k} of {m['heads']} heads ({setting}), Δ BLEU vs "
                                "unpruned", paper="Michel et al. 2019, Fig. 3: BLEU vs heads pruned (WMT en-fr)",
                          measure=_gain("importance", "unpruned"), protocol=protocol,
                          baseline={"name": f"{len(randoms)} random orders (mean), Δ vs unpruned",
                                    **_gain("random", "unpruned")})
            c["note"] = _versus(c["ci"], "unpruned")
            claims.append(c)
    encoder_runs = [r for r in runs if r["setting"] == "encoder"]
    claims.append(_no_encoder_claim(ctx, encoder_runs, text, refs, index, protocol, suffix))
    claims.append(_fewest_claim(ctx, encoder_runs, text, michel["encoder"], refs, protocol, heads, index, suffix))
    return claims


def _no_encoder_claim(ctx, runs: list[dict], text: dict, refs: list[str], index: list[int], protocol: str,
                      suffix: str) -> dict:
    """Δ BLEU vs unpruned of the control trained from scratch with no encoder self-attention (what
    the encoder's self-attention is worth to this model and data), beside the encoder gate run with
    the fewest heads open."""
    fewest = min(runs, key=_open)
    rows = _rows(refs, index=index, control=text[NO_ENCODER], unpruned=text["unpruned"], gated=text[_system(fewest)])
    c = ctx.claim(id=f"voita-{NO_ENCODER}{suffix}", unit="Δ BLEU", rows=rows, n=len(refs), seeds=1,
                  claim=f"{V.CONTROL} (the same recipe with no encoder self-attention, trained from scratch), "
                        "Δ BLEU vs unpruned", paper=V.PAPER, measure=_gain("control", "unpruned"), protocol=protocol,
                  baseline={"name": f"the L0 gate run with the fewest encoder heads open ({_open(fewest)}, λ "
                                    f"{fewest['lam']:g}), Δ vs unpruned", **_gain("gated", "unpruned")})
    c["note"] = _versus(c["ci"], "unpruned") + ": the precondition of the fewest-heads claim"
    return c


def _system(r: dict) -> str:
    return f"{r['setting']}-{V.lam_name(r['lam'])}"


def _control(steps: int) -> str:
    return f"control-{steps}"


def _span(values: list[int]) -> str:
    return f"{min(values)}" if min(values) == max(values) else f"{min(values)}-{max(values)}"


def _open(r: dict) -> int:
    return sum(r["open_heads"][t] for t in V.SETTINGS[r["setting"]])


def _rows(refs: list[str], index: list[int] | None = None, **columns) -> list[dict]:
    """Claim rows: per test sentence its index in the test set (``index``, default 0, 1, ...),
    reference and each column's entry (a column is a list of one entry per sentence: a translation,
    or a list of translations by several systems)."""
    index = range(len(refs)) if index is None else index
    return [{"index": t, "ref": ref, **{k: v[i] for k, v in columns.items()}}
            for i, (t, ref) in enumerate(zip(index, refs))]


def _per_row(systems: list[list]) -> list[list]:
    """Translations of R systems (R lists of n) -> per sentence the list of its R translations."""
    return [list(x) for x in zip(*systems)]


def _gate_claims(ctx, r: dict, text: dict, m: dict, refs: list[str], protocol: str, index: list[int],
                 suffix: str = "") -> list[dict]:
    name, k, n = _system(r), _open(r), len(refs)
    extra = {"open_heads": r["open_heads"], "fractional_gates": r["fractional_gates"], "lam": r["lam"],
             "steps": r["steps"]}
    randoms = [text[f"michel-{r['setting']}-{k}-{o}"] for o in m["orders"] if o.startswith("random")]
    rows = _rows(refs, index=index, gated=text[name], unpruned=text["unpruned"], control=text[_control(r["steps"])],
                 importance=text[f"michel-{r['setting']}-{k}-importance"], random=_per_row(randoms))
    gated = ", ".join(V.SETTINGS[r["setting"]])
    one = ctx.claim(id=f"voita-{name}{suffix}", unit="Δ BLEU", rows=rows, n=n, seeds=1,
                    claim=f"L0 gates on {gated} (λ {r['lam']:g}): {k} of {m['heads']} heads open, Δ BLEU vs unpruned",
                    paper=V.PAPER, measure=_gain("gated", "unpruned"), protocol=protocol,
                    baseline={"name": f"all-gates-open control trained alike for {r['steps']} updates, Δ vs "
                                      "unpruned",
                              **_gain("control", "unpruned")}, **extra)
    one["note"] = _versus(one["ci"], "unpruned") + (f"; {r['fractional_gates']} gate(s) still between 0 and 1"
                                                          if r["fractional_gates"] else "")
    versus = ctx.claim(id=f"voita-{name}-vs-control{suffix}", unit="Δ BLEU", rows=rows, n=n, seeds=1,
                       claim=f"L0 gates (λ {r['lam']:g}, {gated}): {k} of {m['heads']} heads open, Δ BLEU vs the "
                             f"all-gates-open control trained for as many updates ({r['steps']})",
                       paper=V.PAPER, measure=_gain("gated", "control"), protocol=protocol,
                       baseline={"name": "the unpruned model (no further training) vs the control",
                                 **_gain("unpruned", "control")}, **extra)
    versus["note"] = _versus(versus["ci"], "the control") + ": what the gates cost beyond the training alone"
    two = ctx.claim(id=f"voita-{name}-vs-importance{suffix}", unit="Δ BLEU", rows=rows, n=n, seeds=1,
                    claim=f"L0 gates (λ {r['lam']:g}, {gated}) vs Michel importance pruning to the same {k} heads, "
                          "Δ BLEU", paper=V.PAPER + "; Michel et al. 2019 (importance pruning)",
                    measure=_gain("gated", "importance"), protocol=protocol,
                    baseline={"name": f"{len(randoms)} random orders (mean) vs importance at {k} heads",
                              **_gain("random", "importance")}, **extra)
    two["note"] = "L0 " + _versus(two["ci"], f"importance pruning at {k} heads")
    return [one, versus, two]


def _fewest_claim(ctx, runs: list[dict], text: dict, m: dict, refs: list[str], protocol: str, heads: dict,
                  index: list[int], suffix: str = "") -> dict:
    """The fewest open encoder heads whose BLEU is within 1 of the unpruned model's, with its
    bootstrap interval; the same rule over importance pruning at the same counts beside it
    (``heads``: the roles stage's result)."""
    runs = sorted(runs, key=_open)
    counts, n = [_open(r) for r in runs] + [m["heads"]], len(refs)
    rows = _rows(
        refs,
        index=index,
        gated=_per_row([text[_system(r)] for r in runs] + [text["unpruned"]]),
        importance=_per_row([text[f"michel-encoder-{_open(r)}-importance"] for r in runs] + [text["unpruned"]]),
        heads=[counts] * n,
        unpruned=text["unpruned"],
    )
    spec = lambda systems: {"statistic": "fewest_heads_within_1_bleu", "ci_method": "bootstrap",  # noqa: E731
                            "columns": {"ref": "ref", "systems": systems, "heads": "heads", "reference": "unpruned"}}
    c = ctx.claim(id=f"voita-encoder-fewest-heads{suffix}", unit="heads", rows=rows, n=n, seeds=1,
                  claim=f"fewest encoder heads (of {m['heads']}) whose BLEU is within 1 of the unpruned model's "
                        "(L0 gates on the encoder)", paper=V.PAPER, measure=spec("gated"), protocol=protocol,
                  baseline={"name": "the same rule over Michel importance pruning at the same counts",
                            **spec("importance")})
    specialised = int((np.asarray(heads["roles"]) != "other").sum())
    c["note"] = fewest_note(
        c["value"],
        m["heads"],
        runs,
        lambda name: stats.bleu_from_statistics(stats.bleu_statistics(text[name], refs)),
        specialised,
    )
    return c


def fewest_note(value: float, heads: int, runs: list[dict], bleu, specialised: int) -> str:
    """The fewest-heads claim's note: the count, the paper's, and (below all ``heads``) the BLEU of
    the gate run that kept that many beside the unpruned model's, the control trained for as many
    updates and importance pruning to as many heads without training (``bleu(system name)``);
    with no encoder head left, what that model is; then how many of the unpruned model's encoder
    heads have a role by Voita's criteria (``specialised``)."""
    run = next((r for r in runs if _open(r) == value), None) if value < heads else None
    at = ""
    if run:
        k = _open(run)
        gated, unpruned, untrained = bleu(_system(run)), bleu("unpruned"), bleu(f"michel-encoder-{k}-importance")
        at = (f"; at {k} open heads (λ {run['lam']:g}, {run['steps']} joint updates) BLEU {gated:.2f}, unpruned "
              f"{unpruned:.2f}, the all-gates-open control after as many updates {bleu(_control(run['steps'])):.2f}, "
              f"importance pruning to {k} heads without training {untrained:.2f}")
        if k == 0:
            at += (". With no encoder self-attention head open the encoder is a per-position feed-forward stack: "
                   "each source vector is computed from its own token and position, and only the decoder's "
                   f"cross-attention mixes the source; closing every head without training costs "
                   f"{unpruned - untrained:.2f} BLEU, and the joint training wins back {gated - untrained:.2f}")
    return (f"{value:.0f} of {heads} encoder heads kept within 1 BLEU (the paper: 10 of 48){at}; {specialised} of the "
            f"unpruned model's {heads} encoder heads have a positional, syntactic or rare-word role by the paper's "
            f"criteria (the roles table); reproduced means at most half of them kept, with the interval below all "
            f"{heads}")


def _table(runs: list[dict], systems: dict, control_steps: list[int]) -> str:
    fmt = lambda s: f"{s['bleu']:.2f} [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]"  # noqa: E731
    controls = "; ".join(f"{k} updates {fmt(systems[_control(k)])}" for k in control_steps)
    lines = [f"Unpruned {fmt(systems['unpruned'])} BLEU; all-gates-open control: {controls}; the same recipe trained "
             f"without encoder self-attention: {fmt(systems[NO_ENCODER])}.", "",
             "| setting | λ | updates | open heads (enc / dec / cross) | gates in (0, 1) | L0 BLEU [CI] | "
             "control, as many updates [CI] | importance at the same count [CI] |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["setting"], r["lam"])):
        o, importance = r["open_heads"], systems["michel-%s-%d-importance" % (r["setting"], _open(r))]
        lines.append(f"| {r['setting']} | {r['lam']:g} | {r['steps']} | {o['encoder']} / {o['decoder']} / {o['cross']} "
                     f"| {r['fractional_gates']} | {fmt(systems[_system(r)])} | {fmt(systems[_control(r['steps'])])} "
                     f"| {fmt(importance)} |")
    return "\n".join(lines)


def _curve_figure(ctx, runs: list[dict], michel: dict, systems: dict, text: dict, refs: list[str],
                  control_steps: list[int]) -> str:
    """BLEU vs open heads of the gated types, per setting: L0, importance, the random band, unpruned,
    and the control (all heads open) at each update count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(V.SETTINGS), figsize=(4.6 * len(V.SETTINGS), 3.4), squeeze=False, sharey=True)
    for ax, (setting, m) in zip(axes[0], michel.items()):
        mine = sorted((r for r in runs if r["setting"] == setting), key=_open)
        for label, keys, color in (("L0 gates (95 % CI)", [_system(r) for r in mine], "C0"),
                                   ("importance (95 % CI)", [f"michel-{setting}-{_open(r)}-importance" for r in mine],
                                    "C1")):
            x = [_open(r) for r in mine]
            y = np.array([[systems[k]["bleu"], *systems[k]["ci"]] for k in keys])  # (points, 3)
            ax.errorbar(x, y[:, 0], yerr=[y[:, 0] - y[:, 1], y[:, 2] - y[:, 0]], fmt="o-", color=color, ms=3,
                        capsize=2, label=label)
        ks = m["counts"]
        band = np.array([[stats.bleu_from_statistics(stats.bleu_statistics(text[f"michel-{setting}-{k}-{o}"], refs))
                          for o in m["orders"] if o.startswith("random")] for k in ks])  # (counts, orders)
        ax.fill_between(ks, band.min(1), band.max(1), color="grey", alpha=0.25, label=f"{band.shape[1]} random orders")
        ax.axhline(systems["unpruned"]["bleu"], color="k", ls=":", lw=0.8, label="unpruned")
        ax.plot([m["heads"]] * len(control_steps), [systems[_control(k)]["bleu"] for k in control_steps], "s",
                color="C2", ms=4, mfc="none", label=f"control (gates open), {_span(control_steps)} updates")
        if setting == "encoder":
            ax.plot([0], [systems[NO_ENCODER]["bleu"]], "D", color="C3", ms=4, mfc="none",
                    label="trained without encoder self-attention")
        ax.set_title(f"gates on {', '.join(V.SETTINGS[setting])}", fontsize=9)
        ax.set_xlabel(f"open heads (of {m['heads']})")
    axes[0][0].set_ylabel("test BLEU")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return ctx.save_figure(fig, "bleu-vs-heads.png")


def _gates_figure(ctx, runs: list[dict]) -> str:
    """The evaluation gates per layer and head: one panel per gate run and attention type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(runs, key=lambda r: (r["setting"], r["lam"]))
    kinds = ("encoder", "decoder", "cross")
    fig, axes = plt.subplots(len(runs), 3, figsize=(7.5, 1.5 * len(runs) + 0.6), squeeze=False)
    for row, r in zip(axes, runs):
        for ax, kind in zip(row, kinds):
            ax.imshow(np.asarray(r["gates"][kind]), vmin=0, vmax=1, cmap="Greys", aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{r['setting']} λ {r['lam']:g}: {kind} ({r['open_heads'][kind]} open)", fontsize=7)
    fig.supylabel("layer (rows) × head (columns); black = open", fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "gates.png")
