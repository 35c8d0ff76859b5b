"""Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector
Norms" (and the 2021 residual + LayerNorm extension), with the protocol of STATISTICS.md.

The paper (Kobayashi, Kuribayashi, Yokoi and Inui 2020) finds that the large attention weights on
[CLS], [SEP] and punctuation shrink once each weight is multiplied by the norm of the transformed
vector it weights (‖αf(x)‖), that ‖f(x)‖ grows with a token's rarity, and that norm-based
cross-attention alignments beat weight-based ones; the 2021 extension finds that, with the
residual and LayerNorm counted, a token mixes in far less context than the weights suggest. Its
protocol: BERT-base on 992 Wikipedia segments (shares, Spearman ρ over token occurrences, mixing
ratios with 12 % of tokens masked); de-en Transformers (6 + 6 layers × 4 heads, 5 seeds) aligned
against the RWTH human gold, AER of the best layer chosen on the same data.

Differences here (``docs/METHODS.md``; each claim's protocol names its own): all-mpnet-base-v2
and MiniLM (the encoders jattn has offline) instead of BERT-base; 512 GAP paragraphs instead of
the 992 Wikipedia segments (time budget); unmasked input for the mixing ratios; the alignment on
the Hansards fr→en gold with translation models trained here on Multi30k (one model each, no
seeds) instead of German–English Europarl with the RWTH gold, the best layer selected on one half of the pairs
and reported on the other (the same-data number beside it); eflomal added as a reference point.

Stages (full profile; quick: MiniLM on 32 segments, the alignment on 32 pairs):

``kobayashi.<model>-tokens`` (all-mpnet-base-v2, 144 heads, the headline; the embedded MiniLM,
72 heads): one ``jattn.norms`` pass (``experiments.kobayashi2020.tokens``) over the first 512 GAP development
paragraphs as ``[CLS] A [SEP] B [SEP]`` (≤ 128 tokens; the paper used 992 Wikipedia segments:
fewer here for the time budget). Claims, per token class c ([CLS], [SEP], "."/",", other;
MPNet's ``<s>``/``</s>`` take the [CLS]/[SEP] roles, and its pairs read ``<s> A </s></s> B </s>``):
- ``kobayashi-<model>-weight-<c>``: the share of α going to c, beside the share uniform attention
  gives; Δ by the paired bootstrap, Holm over the model's 8 class tests;
- ``kobayashi-<model>-norm-<c>``: the share of ‖αf(x)‖ going to c, beside the share of α on the
  same tokens (paired Δ, same Holm family);
- ``kobayashi-<model>-mixing``: the 2021 mixing ratio AttnResLn-N beside the weight-based Attn-W
  (unmasked input);
- ``kobayashi-<model>-frequency``: Spearman ρ between each token occurrence's ‖f(x)‖ (mean over
  heads and layers) and its id's frequency rank (the authors' per-occurrence statistic; ranks of
  bert-base-uncased ids, which MiniLM shares; MPNet's ids mapped through their token strings,
  specials by role: the claim says how many map), beside ρ with the rank shuffled over
  occurrences; the claim's interval resamples token types (all occurrences of an id together: the
  unit a frequency claim generalises over, as the verdict's test does), and the bootstrap over
  segments is given beside it as a labelled sensitivity check (``ci_segments``).

``kobayashi.alignment`` (``experiments.kobayashi2020.alignment_stage.alignment_stage``: the committed 6 + 6 × 8
model of the translation studies, ``checkpoints/multi30k-fr-en-6x8``): teacher-forced
cross-attention alignments of the 447 Hansards fr→en pairs (``experiments.kobayashi2020.align``), the best layer
selected on the even-numbered pairs and reported on the odd ones, for AWO and AWI: norm-based
(‖Σ_h αf‖) vs weight-based (head-mean α), norm-based vs the diagonal; eflomal (trained on
Multi30k train + the Hansards pairs) vs the diagonal. The same-data best layer (the paper's
protocol) is in the table, and so is how familiar the model is with the text (teacher-forced
next-token accuracy and subwords per word on Hansards vs 1,000 Multi30k test pairs).

Costs, measured on the 2-core machine shared with 3 other workers and a fine-tuning job (so
upper bounds; load average in brackets): the ``jattn.norms`` pass 0.27 s per segment on MiniLM
(residual=True, 256 segments, after the first compile; load 6-11) and 0.96 s on MPNet
(residual=False, 96 segments; load 6-11); under load ~20, a 64-segment stage took 178 s on
MiniLM and 296 s on MPNet (model load, 3-4 compiles, the pass and the claims). One bootstrap of
ρ over 95,000 occurrences (``claims.evaluate``, B = 1000) 181 s and 4 GB at load ~20; the segment
bootstrap over 50,000 occurrences 30 s. eflomal on 29,000 Multi30k + 447 Hansards pairs 82 s
(+ 9 s Moses tokenisation; load ~6); the whole alignment stage (447 pairs, eflomal, the
familiarity check on 1,000 Multi30k pairs) 406 s at load ~21. Full profile: ≈ 20 min at load
6-11 (MPNet ≈ 10 min + 2 min of claims, MiniLM ≈ 3 min + 2 min, alignment ≈ 3 min), ≈ 50 min
at load ~20; the budget is 45 min. Quick profile: 91 s of stage time at load ~19 (23 s of CPU).

Run: ``jattn reproduce kobayashi --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce kobayashi --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage
from jattn.reproduce import studies
from experiments import common
from experiments.kobayashi2020.alignment_stage import alignment_stage
from experiments.kobayashi2020.claims import paired

CLASSES = {"cls": "[CLS]", "sep": "[SEP]", "punct": '"." and ","', "other": "other tokens"}
SEGMENTS = {"full": 512, "quick": 32}  # the paper: 992 Wikipedia segments


def stages(profile: Profile) -> list[Stage]:
    out = []
    for model in common.models(profile):
        base = common.base_model(model)
        out.append(Stage(f"kobayashi.{model}-tokens", _token_stage(model),
                         params={"segments": profile.pick(SEGMENTS["full"], SEGMENTS["quick"]),
                                 "batch_size": profile.pick(16, 32)},  # quick: one batch, one compile
                         data=("gap/gap-development.tsv", "frequency/rank_count_ids.txt"),
                         models=(base,) if base else (),
                         code=("experiments.common", "experiments.kobayashi2020.tokens",
                               "experiments.kobayashi2020.figures", "experiments.kobayashi2020.claims",
                               "jattn.analyses.norms", "jattn.analyses.norm_occurrences")))
    out.append(alignment_stage(profile))
    return out


def _token_stage(model: str):
    def run(ctx: Context) -> dict:
        from jattn.io.readers import read
        from experiments.kobayashi2020 import figures as kobayashi_figures
        from experiments.kobayashi2020 import tokens as kobayashi_tokens

        net = _load(model)
        segments = list(read(ctx.data("gap/gap-development.tsv"), "gap"))[:ctx.params["segments"]]
        m = kobayashi_tokens.measure(net, segments, ctx.work(), batch_size=ctx.params["batch_size"],
                                     key=f"{model}:{net.source}", progress=ctx.progress)
        claims = _class_claims(ctx, model, m["rows"], net.tokenizer)
        claims.append(_mixing_claim(ctx, model, m["rows"]))
        frequency, per_type = _frequency_claim(ctx, model, net, m["occurrences"])
        claims.append(frequency)
        figures = [kobayashi_figures.class_shares(ctx.figure(f"{model}-classes.png"), model, m["layers"], m["rows"]),
                   kobayashi_figures.frequency(ctx.figure(f"{model}-frequency.png"), model, *per_type, frequency)]
        return {"claims": claims, "figures": [str(f.relative_to(ctx.out)) for f in figures],
                "table": _token_table(model, m["rows"], m["layers"], claims),
                "layers": {k: np.asarray(v).tolist() for k, v in m["layers"].items()}}

    return run


def _class_claims(ctx: Context, model: str, rows: list[dict], tokenizer) -> list[dict]:
    """Per class: α share vs uniform, ‖αf‖ share vs α share, each a paired Δ (the study's rules take
    Holm over the 8)."""
    tests = []
    for c in CLASSES:
        up = 1 if c != "other" else -1
        tests.append(("weight", c, up, paired(rows, "mean", {"value": f"weight_{c}"}, {"value": f"uniform_{c}"})))
        tests.append(("norm", c, -up, paired(rows, "mean", {"value": f"norm_{c}"}, {"value": f"weight_{c}"})))
    out = []
    protocol = (f"{len(rows)} GAP development paragraphs as segment pairs (≤ 128 tokens); shares per real "
                "query row, averaged over rows, heads and layers per segment; bootstrap over segments; Δ by "
                f"the paired bootstrap, Holm over this model's {len(tests)} class tests. Deviations: GAP "
                "paragraphs for the paper's 992 Wikipedia segments; the norm-based number as a share of Σ_j‖αf‖")
    cls, sep = tokenizer.cls_token, tokenizer.sep_token
    if (cls, sep) != ("[CLS]", "[SEP]"):  # a pair reads <s> A </s></s> B </s>: three separators
        protocol += f"; the model's {cls} and {sep} take the [CLS] and [SEP] roles"
    protocol += "."
    for kind, c, expected, delta in tests:
        other = "weight" if kind == "norm" else "uniform"
        what = "attention weight α" if kind == "weight" else "‖αf(x)‖"
        out.append(ctx.claim(
            id=f"kobayashi-{model}-{kind}-{c}", claim=f"{model}: share of {what} to {CLASSES[c]}",
            unit="share", rows=rows,
            measure={"statistic": "mean", "columns": {"value": f"{kind}_{c}"}, "ci_method": "bootstrap"},
            baseline={"name": "α share (same tokens)" if other == "weight" else "uniform attention",
                      "columns": {"value": f"{other}_{c}"}},
            protocol=protocol, delta=delta, expected_sign=expected))
    return out


def _mixing_claim(ctx: Context, model: str, rows: list[dict]) -> dict:
    delta = paired(rows, "mean", {"value": "mixing_attnresln_n"}, {"value": "mixing_attn_w"})
    return ctx.claim(
        id=f"kobayashi-{model}-mixing", claim=f"{model}: mixing ratio with residual and LayerNorm (AttnResLn-N)",
        unit="ratio", rows=rows,
        measure={"statistic": "mean", "columns": {"value": "mixing_attnresln_n"}, "ci_method": "bootstrap"},
        baseline={"name": "Attn-W (1 − ᾱ_ii)", "columns": {"value": "mixing_attn_w"}},
        protocol=f"{len(rows)} segments; mean over real tokens and layers per segment, bootstrap over segments. "
                 "Deviation: unmasked input (the paper masks 15 % of the tokens, 80 % of them as [MASK]).",
        delta=delta)


def _frequency_claim(ctx: Context, model: str, net, occ: dict) -> tuple[dict, tuple]:
    """The claim, and (rank, mean ‖f(x)‖) per token type for the figure."""
    import jattn
    from jattn.analyses.norm_occurrences import bottom_ranked
    from jattn.analyses.norm_stats import read_ranks
    from experiments.kobayashi2020.tokens import rank_table

    # the rank file counts the ids of bert-base-uncased's vocabulary, which the embedded model shares
    reference = net.tokenizer if common.base_model(model) is None else jattn.load().tokenizer
    ranks, mapped = rank_table(net, reference, read_ranks(ctx.data("frequency/rank_count_ids.txt"),
                                                          len(reference.get_vocab())))
    rank = bottom_ranked(ranks)[np.asarray(occ["id"])]  # (N,) unranked ids at the bottom rank
    fnorm = np.round(np.asarray(occ["fnorm"]), 5)
    shuffled = np.random.default_rng(0).permutation(rank)
    rows = [{"segment": s, "id": i, "fnorm": f, "rank": int(r), "rank_shuffled": int(p)}
            for s, i, f, r, p in zip(occ["segment"], occ["id"], fnorm.tolist(), rank, shuffled)]
    claim = ctx.claim(
        id=f"kobayashi-{model}-frequency", claim=f"{model}: Spearman ρ(‖f(x)‖, frequency rank) over token occurrences",
        unit="spearman", rows=rows, n=len(rows),
        measure={"statistic": "spearman", "columns": {"x": "fnorm", "y": "rank"}, "ci_method": "bootstrap",
                 "cluster": "id"},
        baseline={"name": "ρ with the rank shuffled over occurrences", "columns": {"x": "fnorm", "y": "rank_shuffled"}},
        protocol=f"{len(rows)} occurrences in {len(set(occ['segment']))} segments, each its own ‖f(x)‖ (mean over "
                 f"heads and layers), specials included, ids absent from the rank file at the bottom rank; "
                 f"{mapped} of the model's {len(net.tokenizer.get_vocab())} vocabulary ids found a ranked-vocabulary "
                 "id by token string (specials by role). Bootstrap over token types (each type's occurrences "
                 "together: the unit a frequency claim generalises over); over segments in ci_segments.",
        ci_segments=segment_bootstrap(fnorm, rank, np.asarray(occ["segment"])), vocabulary_mapped=mapped)
    types, where = np.unique(np.asarray(occ["id"]), return_inverse=True)
    mean_fnorm = np.bincount(where, fnorm) / np.bincount(where)  # (types,) mean ‖f(x)‖ per token type
    return claim, (bottom_ranked(ranks)[types], mean_fnorm)


def _load(model: str):
    import jattn

    return jattn.load(common.base_model(model))


def _token_table(model: str, rows: list[dict], layers: dict, claims: list[dict]) -> str:
    by_id = {c["id"]: c for c in claims}
    lines = [f"**{model}**, {len(rows)} segments: shares averaged over query rows, heads, layers and segments "
             "(bootstrap CIs in the claims table); mean ‖f(x)‖ and mean α received (row mean) over the class's tokens.",
             "", "| class | uniform | α | ‖αf‖ | Δ ‖αf‖ − α (95 % CI) | mean ‖f(x)‖ | mean α received |",
             "|---|---|---|---|---|---|---|"]
    for k, (c, label) in enumerate(CLASSES.items()):
        w, n = by_id[f"kobayashi-{model}-weight-{c}"], by_id[f"kobayashi-{model}-norm-{c}"]
        d = n["delta"]
        lines.append(
            f"| {label} | {w['baseline']['value']:.3f} | {w['value']:.3f} | {n['value']:.3f} | "
            f"{d['value']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] | "
            f"{np.mean(np.asarray(layers['fnorm'])[:, k]):.3f} | {np.mean(np.asarray(layers['received'])[:, k]):.4f} |"
        )
    mix = {k: np.mean([r[f"mixing_{k}"] for r in rows]) for k in ("attn_w", "attn_n", "attnres_w", "attnres_n",
                                                                   "attnresln_n")}
    lines += ["", "Mixing ratios (2021; mean over tokens, layers, segments; unmasked): " +
              ", ".join(f"{k} {v:.3f}" for k, v in mix.items())]
    f = by_id[f"kobayashi-{model}-frequency"]
    ci = lambda v: f"[{v[0]:.3f}, {v[1]:.3f}]"
    lines += ["", f"ρ(‖f(x)‖, frequency rank) = {f['value']:.3f} over {f['n']} occurrences: {ci(f['ci'])} resampling "
              f"token types, {ci(f['ci_segments'])} resampling segments; shuffled-rank baseline "
              f"{f['baseline']['value']:.3f}."]
    return "\n".join(lines)


class WeightedSpearman:
    """Spearman ρ of (x, y) over the multiset where occurrence i appears w[i] times, i.e. exactly
    ``spearmanr(np.repeat(x, w), np.repeat(y, w))``, in O(n) per weight vector: x and y are sorted
    once, and each call only re-counts the tie groups' average ranks."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.sides = []
        for v in (np.asarray(x, np.float64), np.asarray(y, np.float64)):
            order = np.argsort(v, kind="stable")
            starts = np.flatnonzero(np.r_[True, v[order][1:] != v[order][:-1]])  # first of each tie group
            self.sides.append((order, starts, np.diff(np.r_[starts, len(v)])))

    def _ranks(self, side, w: np.ndarray) -> np.ndarray:
        order, starts, sizes = side
        group = np.add.reduceat(w[order], starts)  # (groups,) occurrences in each tie group
        mid = np.cumsum(group) - group + (group + 1) / 2  # average rank of each group
        ranks = np.empty(len(w))
        ranks[order] = np.repeat(mid, sizes)
        return ranks

    def __call__(self, w: np.ndarray) -> float:
        w = np.asarray(w, np.float64)
        rx, ry = (self._ranks(side, w) for side in self.sides)
        mx, my = np.average(rx, weights=w), np.average(ry, weights=w)
        dx, dy = rx - mx, ry - my
        return float(np.sum(w * dx * dy) / np.sqrt(np.sum(w * dx * dx) * np.sum(w * dy * dy)))


def segment_bootstrap(x: np.ndarray, y: np.ndarray, segment: np.ndarray, b: int = 1000, seed: int = 0) -> list:
    """95 % percentile interval of Spearman ρ(x, y) resampling whole segments (B = ``b``): each
    resample weights an occurrence by how often its segment was drawn."""
    _, where = np.unique(segment, return_inverse=True)  # (N,) segment number of each occurrence
    n, rho = where.max() + 1, WeightedSpearman(x, y)
    rng = np.random.default_rng(seed)
    values = [rho(np.bincount(rng.integers(0, n, n), minlength=n)[where]) for _ in range(b)]
    return [float(v) for v in np.quantile(values, [0.025, 0.975])]


studies.register('kobayashi', stages,
                 'Kobayashi et al. 2020: Attention is not only a weight')
