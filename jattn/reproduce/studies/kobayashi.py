"""Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector
Norms" (and the 2021 residual + LayerNorm extension), with the protocol of STATISTICS.md.

Stages (full profile; quick: MiniLM on 32 segments, the alignment on 32 pairs):

``kobayashi.<model>-tokens`` (all-mpnet-base-v2, 144 heads, the headline; the embedded MiniLM,
72 heads): one ``jattn.norms`` pass (``kobayashi_tokens``) over the first 992 GAP development
paragraphs as ``[CLS] A [SEP] B [SEP]`` (the paper's 992 Wikipedia segments; ≤ 128 tokens).
Claims, per token class c ([CLS], [SEP], "."/",", other; MPNet's ``<s>``/``</s>`` take the
[CLS]/[SEP] roles):
- ``kobayashi-<model>-weight-<c>``: the share of α going to c, beside the share uniform attention
  gives; Δ by the paired bootstrap, Holm over the model's 8 class tests;
- ``kobayashi-<model>-norm-<c>``: the share of ‖αf(x)‖ going to c, beside the share of α on the
  same tokens (paired Δ, same Holm family);
- ``kobayashi-<model>-mixing``: the 2021 mixing ratio AttnResLn-N beside the weight-based Attn-W;
- ``kobayashi-<model>-frequency``: Spearman ρ between each token occurrence's ‖f(x)‖ (mean over
  heads and layers) and its id's frequency rank (the authors' per-occurrence statistic; ranks of
  bert-base-uncased ids, which MiniLM shares; MPNet's ids mapped through their token strings,
  specials by role), beside ρ with the rank shuffled over occurrences, and the permutation
  interval (``jattn.stats.permutation_interval``); the bootstrap over occurrences is the claim's
  interval, the bootstrap over segments (occurrences of one segment are not independent) is
  given beside it (``ci_segments``).

``kobayashi.alignment`` (``alignment_stage(profile, model)``; the model is a parameter):
teacher-forced cross-attention alignments of the 447 Hansards fr→en pairs (``kobayashi_align``),
the best layer selected on the even-numbered pairs and reported on the odd ones, for AWO and AWI:
norm-based (‖Σ_h αf‖) vs weight-based (head-mean α), norm-based vs the diagonal; eflomal (trained
on Multi30k train + the Hansards pairs) vs the diagonal. The same-data best layer (the paper's
protocol) is in the table.

Costs measured on the 2-core machine while 3 other workers and a fine-tuning job ran (load
average 6-11): the ``jattn.norms`` pass (residual=True) 0.27 s per segment on MiniLM (256
segments, 65 s after the first compile) and 0.96 s on MPNet (96 segments, residual=False, 77 s);
eflomal on 29,000 Multi30k + 447 Hansards pairs 82 s (+ 9 s Moses tokenisation). Full profile:
MiniLM 992 segments ≈ 5 min, MPNet ≈ 17 min (each + ≈ 1.5 min of bootstraps of ρ over ≈ 95,000
occurrences), alignment ≈ 3 min: ≈ 28 min of the 45 min budget.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage, repository_root
from jattn.reproduce.studies import finetune

CLASSES = {"cls": "[CLS]", "sep": "[SEP]", "punct": '"." and ","', "other": "other tokens"}
SEGMENTS = {"full": 992, "quick": 32}
PAIRS = {"full": 0, "quick": 32}  # 0: all 447
TRANSLATION_MODEL = "checkpoints/multi30k-fr-en"
PAPER = {
    "weight": "BERT-base, 992 Wikipedia segments: [CLS], [SEP] and punctuation get large α "
              "(Kobayashi et al. 2020 Fig. 2, weight-based; Clark et al. 2019)",
    "weight-other": "BERT-base: the other tokens get the rest of α (Fig. 2)",
    "norm": "BERT-base: ‖αf(x)‖ to [CLS], [SEP] and punctuation far below their α; α and ‖f(x)‖ cancel (Fig. 2-3)",
    "norm-other": "BERT-base: the other tokens' share grows from α to ‖αf(x)‖ (Fig. 2)",
    "mixing": "BERT-base mean mixing ratio: AttnResLn-N 18.75 % vs Attn-W 96.41 % (2021 Table 1, 12 % masked)",
    "frequency": "BERT-base: ρ(‖f(x)‖, frequency rank) ≈ 0.75 over occurrences: rarer tokens, larger ‖f(x)‖ (§4.3)",
    "AWO": "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 41.4 (‖Σαf‖) vs 47.7 (α) (Table 4)",
    "AWI": "de-en Transformer 6+6 × 4 heads, 5 seeds, human gold: best-layer AER 25.0 (‖Σαf‖) vs 29.8 (α) (Table 4)",
    "diagonal": "norm- and weight-based alignments far better than trivial (best-layer AER 25-48, Table 4)",
    "eflomal": "statistical aligners are the field's reference (Kobayashi et al. cite fast_align/GIZA++)",
}


def base_model(model: str) -> str | None:
    """The pretrained model each fine-tuned classifier of ``model`` starts from (None: the embedded one)."""
    from jattn.io import artefacts

    return artefacts.recipe(finetune.artefact(model, "sst2", 0)).base


def verdict(delta: dict, expected: int, rejected: bool = True) -> tuple[str, str]:
    """The status of a directional finding from its paired Δ: "reproduced" when the CI of Δ lies on
    the paper's side of 0 (``expected`` +1 / −1) and the test survives Holm (``rejected``)."""
    lo, hi = delta["ci"]
    sign = "above" if expected > 0 else "below"
    if lo <= 0 <= hi:
        return "not reproduced", f"no difference detected: the 95 % CI of Δ [{lo:.3f}, {hi:.3f}] includes 0"
    if (lo > 0) != (expected > 0):
        return "not reproduced", f"opposite direction: Δ CI [{lo:.3f}, {hi:.3f}], the paper has it {sign} 0"
    if not rejected:
        return "not reproduced", f"Δ CI [{lo:.3f}, {hi:.3f}] excludes 0 but not after Holm (p = {delta['p']:.3g})"
    return "reproduced", f"Δ = {delta['value']:.3f}, CI [{lo:.3f}, {hi:.3f}], p = {delta['p']:.3g}"


def _paired(rows: list[dict], statistic: str, columns: dict, against: dict) -> dict:
    from jattn.reproduce import claims

    spec = {"statistic": statistic, "columns": columns, "ci_method": "paired", "against": against}
    return {**claims.evaluate(rows, spec), "measure": spec}


def _load(model: str):
    import jattn

    return jattn.load(base_model(model))


# ---------------------------------------------------------------- token stage

def _class_claims(ctx: Context, model: str, rows: list[dict]) -> list[dict]:
    """Per class: α share vs uniform, ‖αf‖ share vs α share; Holm over the 8 paired tests."""
    from jattn import stats

    tests = []
    for c in CLASSES:
        up = 1 if c != "other" else -1
        tests.append(("weight", c, up, _paired(rows, "mean", {"value": f"weight_{c}"}, {"value": f"uniform_{c}"})))
        tests.append(("norm", c, -up, _paired(rows, "mean", {"value": f"norm_{c}"}, {"value": f"weight_{c}"})))
    rejected = stats.holm([t[3]["p"] for t in tests])
    out = []
    protocol = (f"{len(rows)} GAP development paragraphs as segment pairs (≤ 128 tokens); shares per real "
                "query row, averaged over rows, heads and layers per segment; bootstrap over segments; Δ by "
                f"the paired bootstrap, Holm over this model's {len(tests)} class tests. Deviations: GAP "
                "paragraphs for the paper's Wikipedia segments; the norm-based number as a share of Σ_j‖αf‖.")
    for (kind, c, expected, delta), ok in zip(tests, rejected):
        status, note = verdict(delta, expected, bool(ok))
        other = "weight" if kind == "norm" else "uniform"
        what = "attention weight α" if kind == "weight" else "‖αf(x)‖"
        out.append(ctx.claim(
            id=f"kobayashi-{model}-{kind}-{c}", claim=f"{model}: share of {what} to {CLASSES[c]}",
            paper=PAPER[kind + ("-other" if c == "other" else "")], unit="share", rows=rows,
            measure={"statistic": "mean", "columns": {"value": f"{kind}_{c}"}, "ci_method": "bootstrap"},
            baseline={"name": "α share (same tokens)" if other == "weight" else "uniform attention",
                      "columns": {"value": f"{other}_{c}"}},
            protocol=protocol, status=status, note=note, delta=delta, holm_rejected=bool(ok)))
    return out


def _mixing_claim(ctx: Context, model: str, rows: list[dict]) -> dict:
    delta = _paired(rows, "mean", {"value": "mixing_attnresln_n"}, {"value": "mixing_attn_w"})
    status, note = verdict(delta, -1)
    return ctx.claim(
        id=f"kobayashi-{model}-mixing", claim=f"{model}: mixing ratio with residual and LayerNorm (AttnResLn-N)",
        paper=PAPER["mixing"], unit="ratio", rows=rows,
        measure={"statistic": "mean", "columns": {"value": "mixing_attnresln_n"}, "ci_method": "bootstrap"},
        baseline={"name": "Attn-W (1 − ᾱ_ii)", "columns": {"value": "mixing_attn_w"}},
        protocol=f"{len(rows)} segments; mean over real tokens and layers per segment, bootstrap over segments. "
                 "Deviation: unmasked input (the paper masks 12 % of the tokens).", status=status, note=note,
        delta=delta)


def _spearman_ranked(rx: np.ndarray, ry: np.ndarray) -> float:
    """Pearson r of two rank vectors: Spearman ρ of the values they rank."""
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / np.sqrt((rx * rx).sum() * (ry * ry).sum()))


def segment_bootstrap(x: np.ndarray, y: np.ndarray, segment: np.ndarray, b: int = 1000, seed: int = 0) -> list:
    """95 % percentile interval of Spearman ρ(x, y) resampling whole segments (B = ``b``)."""
    from scipy.stats import spearmanr

    ids, where = np.unique(segment, return_inverse=True)
    members = np.split(np.argsort(where, kind="stable"), np.cumsum(np.bincount(where))[:-1])
    rng = np.random.default_rng(seed)
    values = [spearmanr(x[idx], y[idx]).statistic
              for idx in (np.concatenate([members[k] for k in rng.integers(0, len(ids), len(ids))]) for _ in range(b))]
    return [float(v) for v in np.quantile(values, [0.025, 0.975])]


def _frequency_claim(ctx: Context, model: str, net, occ: dict) -> tuple[dict, tuple]:
    """The claim, and (rank, mean ‖f(x)‖) per token type for the figure."""
    import jattn
    from scipy.stats import rankdata

    from jattn import stats
    from jattn.analyses.norm_occurrences import bottom_ranked
    from jattn.analyses.norm_stats import read_ranks
    from jattn.reproduce.studies.kobayashi_tokens import rank_table

    # the rank file counts the ids of bert-base-uncased's vocabulary, which the embedded model shares
    reference = net.tokenizer if base_model(model) is None else jattn.load().tokenizer
    ranks, mapped = rank_table(net, reference, read_ranks(ctx.data("frequency/rank_count_ids.txt"),
                                                          len(reference.get_vocab())))
    rank = bottom_ranked(ranks)[np.asarray(occ["id"])]  # (N,) unranked ids at the bottom rank
    fnorm = np.round(np.asarray(occ["fnorm"]), 5)
    shuffled = np.random.default_rng(0).permutation(rank)
    rows = [{"segment": s, "id": i, "fnorm": f, "rank": int(r), "rank_shuffled": int(p)}
            for s, i, f, r, p in zip(occ["segment"], occ["id"], fnorm.tolist(), rank, shuffled)]
    _, perm = stats.permutation_interval(_spearman_ranked, rankdata(fnorm), rankdata(rank))
    claim = ctx.claim(
        id=f"kobayashi-{model}-frequency", claim=f"{model}: Spearman ρ(‖f(x)‖, frequency rank) over token occurrences",
        paper=PAPER["frequency"], unit="spearman", rows=rows, n=len(rows),
        measure={"statistic": "spearman", "columns": {"x": "fnorm", "y": "rank"}, "ci_method": "bootstrap"},
        baseline={"name": "ρ with the rank shuffled over occurrences", "columns": {"x": "fnorm", "y": "rank_shuffled"}},
        protocol=f"{len(rows)} occurrences in {len(set(occ['segment']))} segments, each its own ‖f(x)‖ (mean over "
                 f"heads and layers), specials included, ids absent from the rank file at the bottom rank; "
                 f"{mapped} of the model's {len(net.tokenizer.get_vocab())} vocabulary ids found a ranked-vocabulary "
                 "id by token string (specials by role). Bootstrap over occurrences; over segments in ci_segments.",
        permutation_interval=perm, ci_segments=segment_bootstrap(fnorm, rank, np.asarray(occ["segment"])),
        vocabulary_mapped=mapped)
    ok = claim["ci"][0] > perm[1]
    claim["status"] = "reproduced" if ok else "not reproduced"
    claim["note"] = (f"ρ = {claim['value']:.3f}: CI {'above' if ok else 'not above'} the permutation interval "
                     f"[{perm[0]:.3f}, {perm[1]:.3f}] (segment-bootstrap CI [{claim['ci_segments'][0]:.3f}, "
                     f"{claim['ci_segments'][1]:.3f}])")
    types, where = np.unique(np.asarray(occ["id"]), return_inverse=True)
    mean_fnorm = np.bincount(where, fnorm) / np.bincount(where)  # (types,) mean ‖f(x)‖ per token type
    return claim, (bottom_ranked(ranks)[types], mean_fnorm)


def _token_table(model: str, rows: list[dict], layers: dict, claims: list[dict]) -> str:
    by_id = {c["id"]: c for c in claims}
    lines = [f"**{model}**, {len(rows)} segments: shares averaged over query rows, heads, layers and segments "
             "(bootstrap CIs in the claims table); mean ‖f(x)‖ and mean α received (row mean) over the class's tokens.",
             "", "| class | uniform | α | ‖αf‖ | Δ ‖αf‖ − α (95 % CI) | mean ‖f(x)‖ | mean α received |",
             "|---|---|---|---|---|---|---|"]
    for k, (c, label) in enumerate(CLASSES.items()):
        w, n = by_id[f"kobayashi-{model}-weight-{c}"], by_id[f"kobayashi-{model}-norm-{c}"]
        d = n["delta"]
        lines.append(f"| {label} | {w['baseline']['value']:.3f} | {w['value']:.3f} | {n['value']:.3f} | "
                     f"{d['value']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] | "
                     f"{np.mean(np.asarray(layers['fnorm'])[:, k]):.3f} | {np.mean(np.asarray(layers['received'])[:, k]):.4f} |")
    mix = {k: np.mean([r[f"mixing_{k}"] for r in rows]) for k in ("attn_w", "attn_n", "attnres_w", "attnres_n",
                                                                   "attnresln_n")}
    lines += ["", "Mixing ratios (2021; mean over tokens, layers, segments; unmasked): " +
              ", ".join(f"{k} {v:.3f}" for k, v in mix.items())]
    f = by_id[f"kobayashi-{model}-frequency"]
    ci = lambda v: f"[{v[0]:.3f}, {v[1]:.3f}]"
    lines += ["", f"ρ(‖f(x)‖, frequency rank) = {f['value']:.3f} {ci(f['ci'])} over {f['n']} occurrences "
              f"(segment bootstrap {ci(f['ci_segments'])}); permutation interval {ci(f['permutation_interval'])}; "
              f"shuffled-rank baseline {f['baseline']['value']:.3f}."]
    return "\n".join(lines)


def _token_stage(model: str):
    def run(ctx: Context) -> dict:
        from jattn.io.readers import read
        from jattn.reproduce.studies import kobayashi_figures, kobayashi_tokens

        net = _load(model)
        segments = list(read(ctx.data("gap/gap-development.tsv"), "gap"))[:ctx.params["segments"]]
        m = kobayashi_tokens.measure(net, segments, ctx.work(), batch_size=ctx.params["batch_size"],
                                     key=f"{model}:{net.source}", progress=ctx.progress)
        claims = _class_claims(ctx, model, m["rows"])
        claims.append(_mixing_claim(ctx, model, m["rows"]))
        frequency, per_type = _frequency_claim(ctx, model, net, m["occurrences"])
        claims.append(frequency)
        figures = [kobayashi_figures.class_shares(ctx.figure(f"{model}-classes.png"), model, m["layers"], m["rows"]),
                   kobayashi_figures.frequency(ctx.figure(f"{model}-frequency.png"), model, *per_type, frequency)]
        return {"claims": claims, "figures": [str(f.relative_to(ctx.out)) for f in figures],
                "table": _token_table(model, m["rows"], m["layers"], claims),
                "layers": {k: np.asarray(v).tolist() for k, v in m["layers"].items()}}

    return run


# ---------------------------------------------------------------- alignment stage

def _translation_source(model: str) -> tuple[str, dict, tuple]:
    """(what ``jattn.load`` takes, params naming the exact weights, named artefacts): a folder of
    the repository (its weight files' sha256 in the key) or the name of a made artefact."""
    root = repository_root(Path(__file__).resolve())
    folder = root / model if root is not None else Path(model)
    if folder.is_dir():
        digest = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())
                  if f.suffix in (".safetensors", ".bin", ".json", ".spm")}
        return str(folder), {"translation_model": model, "files_sha256": digest}, ()
    return model, {"translation_model": model}, (model,)


def _eflomal(ctx: Context, net, pairs: list) -> list:
    """eflomal's symmetrised links of ``pairs``, trained with Multi30k train (full profile); kept in
    the work folder (its sampler is seeded from the system, so a rerun would differ)."""
    import json

    from jattn.reproduce.studies import kobayashi_align as KA

    cache = ctx.work() / "eflomal.json"
    fp = hashlib.sha256(json.dumps([pairs, ctx.params], default=str).encode()).hexdigest()
    if cache.is_file() and json.loads(cache.read_text())["fingerprint"] == fp:
        return [set(map(tuple, links)) for links in json.loads(cache.read_text())["links"]]
    extra = []
    if ctx.params["eflomal_multi30k"]:
        read = lambda side: ctx.data(f"multi30k/train.{side}").read_text(encoding="utf-8").splitlines()
        extra = KA.moses_pairs(net, read("fr"), read("en"))
    links = KA.eflomal_links(pairs, extra)
    cache.write_text(json.dumps({"fingerprint": fp, "links": [sorted(x) for x in links], "extra_pairs": len(extra)}))
    return links


def _alignment_claims(ctx: Context, table: list[dict], layers: int) -> tuple[list[dict], dict]:
    from jattn.reproduce.studies import kobayashi_align as KA

    select = [r for r in table if r["index"] % 2 == 0]
    report = [r for r in table if r["index"] % 2 == 1]
    chosen, claims = {}, []
    protocol = (f"Hansards fr→en, {len(table)} pairs with human sure/possible gold (out of domain for the caption "
                f"model); best layer selected on the {len(select)} even-numbered pairs, AER pooled over the "
                f"{len(report)} odd-numbered ones, bootstrap over pairs recomputing the pooled AER. Deviations: "
                "language pair and data, one model (no seeds), the model's own normalisation (lowercased).")
    for setting in KA.SETTINGS:
        for name in KA.MAPS:
            chosen[(setting, name)] = KA.best_layer(select, setting, name, layers)[0]
        norms, weights = (f"{setting}/{n}/{chosen[(setting, n)]}" for n in ("summed", "weights"))
        for base, label, key in ((weights, f"α (head mean, layer {chosen[(setting, 'weights')]})", setting),
                                 ("diagonal", "diagonal alignment", "diagonal")):
            keys = ("predicted", "sure_hits", "possible_hits")
            delta = _paired(report, "aer", KA.columns(norms), {k: KA.columns(base)[k] for k in keys})
            status, note = verdict(delta, -1)
            suffix = "norms-vs-weights" if base == weights else "norms-vs-diagonal"
            claims.append(ctx.claim(
                id=f"kobayashi-align-{setting}-{suffix}", paper=PAPER[key], unit="AER", rows=report,
                claim=f"{setting} alignment AER from ‖Σ_h αf‖ (layer {chosen[(setting, 'summed')]}) vs "
                      + ("α" if base == weights else "the diagonal"),
                measure={"statistic": "aer", "columns": KA.columns(norms), "ci_method": "bootstrap"},
                baseline={"name": label, "columns": KA.columns(base)}, protocol=protocol, status=status,
                note=note, delta=delta))
    claims.append(ctx.claim(
        id="kobayashi-align-eflomal", claim="eflomal (statistical aligner) AER", paper=PAPER["eflomal"], unit="AER",
        rows=report, measure={"statistic": "aer", "columns": KA.columns("eflomal"), "ci_method": "bootstrap"},
        baseline={"name": "diagonal alignment", "columns": KA.columns("diagonal")}, protocol=protocol,
        note="the data are alignable: the reference point for the attention-based alignments"))
    return claims, chosen


def _alignment_table(table: list[dict], chosen: dict, layers: int) -> str:
    from jattn.reproduce.studies import kobayashi_align as KA

    report = [r for r in table if r["index"] % 2 == 1]
    lines = ["AER (%) pooled over all pairs per layer (the paper's protocol: the best layer read off the same "
             "pairs), and on the odd-numbered pairs at the layer chosen on the even-numbered ones.", "",
             "| setting | map | " + " | ".join(f"layer {k}" for k in range(layers)) + " | best (same data) | "
             "chosen layer: held-out AER |", "|---" * (layers + 4) + "|"]
    for setting in KA.SETTINGS:
        for name in KA.MAPS:
            best, per_layer = KA.best_layer(table, setting, name, layers)
            held = KA.pooled_aer(report, f"{setting}/{name}/{chosen[(setting, name)]}")
            lines.append(f"| {setting} | {name} | " + " | ".join(f"{100 * a:.1f}" for a in per_layer)
                         + f" | {best}: {100 * per_layer[best]:.1f} | {chosen[(setting, name)]}: {100 * held:.1f} |")
    lines += ["", f"Baselines, all pairs: diagonal {100 * KA.pooled_aer(table, 'diagonal'):.1f}, eflomal "
              f"{100 * KA.pooled_aer(table, 'eflomal'):.1f}. Maps: weights = α averaged over heads, norms = "
              "‖α_h f_h‖ averaged over heads, summed = ‖Σ_h α_h f_h‖."]
    return "\n".join(lines)


def alignment_stage(profile: Profile, model: str = TRANSLATION_MODEL) -> Stage:
    """The alignment stage for translation model ``model`` (a repository folder or an artefact name)."""
    source, params, models = _translation_source(model)
    data = ["alignment/enfr.src-tgt", "alignment/enfr.gold"]
    if profile.name == "full":
        data += ["multi30k/train.fr", "multi30k/train.en"]

    def run(ctx: Context) -> dict:
        import jattn
        from jattn.reproduce.studies import kobayashi_align as KA
        from jattn.reproduce.studies import kobayashi_figures

        net = jattn.load(source)
        pairs, gold = KA.read_pairs(ctx.data("alignment/enfr.src-tgt"), ctx.data("alignment/enfr.gold"),
                                    ctx.params["pairs"])
        pairs = KA.normalised(net, pairs)
        items = KA.encode(net, pairs)
        fits = [k for k, x in enumerate(items) if max(len(x["src"]), len(x["tgt"])) <= net.config.max_length]
        if len(fits) < len(items):
            raise ValueError(f"{len(items) - len(fits)} pairs exceed the model's {net.config.max_length} positions")
        systems = KA.model_links(net, items, ctx.params["batch_size"])
        systems |= {"diagonal": KA.diagonal_links(pairs), "eflomal": _eflomal(ctx, net, pairs)}
        table = KA.rows(gold, systems)
        layers = net.config.decoder_layers
        claims, chosen = _alignment_claims(ctx, table, layers)
        fig = kobayashi_figures.alignment(ctx.figure("alignment.png"), table, layers)
        return {"claims": claims, "figures": [str(fig.relative_to(ctx.out))],
                "table": _alignment_table(table, chosen, layers),
                "chosen_layers": {f"{s}/{n}": v for (s, n), v in chosen.items()}}

    name = "kobayashi.alignment" if model == TRANSLATION_MODEL else f"kobayashi.alignment-{Path(model).name}"
    return Stage(name, run, data=tuple(data), models=models,
                 params={**params, "pairs": profile.pick(PAIRS["full"], PAIRS["quick"]), "batch_size": 32,
                         "eflomal_multi30k": profile.name == "full"},
                 code=("jattn.reproduce.studies.kobayashi_align", "jattn.reproduce.studies.kobayashi_figures",
                       "jattn.analyses.alignment", "jattn.analyses.eflomal_align", "jattn.analyses.norms"))


def stages(profile: Profile) -> list[Stage]:
    out = []
    for model in finetune.models(profile):
        base = base_model(model)
        out.append(Stage(f"kobayashi.{model}-tokens", _token_stage(model),
                         params={"segments": profile.pick(SEGMENTS["full"], SEGMENTS["quick"]),
                                 "batch_size": profile.pick(16, 32)},  # quick: one batch, one compile
                         data=("gap/gap-development.tsv", "frequency/rank_count_ids.txt"),
                         models=(base,) if base else (),
                         code=("jattn.reproduce.studies.kobayashi_tokens", "jattn.reproduce.studies.kobayashi_figures",
                               "jattn.analyses.norms", "jattn.analyses.norm_occurrences")))
    out.append(alignment_stage(profile))
    return out
