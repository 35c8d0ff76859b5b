"""Causal interventions on coreference heads: activation and attribution patching of every head on
GAP clean/corrupted pairs, beside Clark et al.'s weight-based coreference heads.

Not one paper's study: it extends Clark et al. 2019 ("What Does BERT Look At?"), who name
coreference heads by their attention weights only (bert-base on CoNLL-2012, the best head's
antecedent accuracy beside the nearest mention), with interventions that test whether those heads
cause the behaviour: activation patching (Vig et al. 2020; Wang et al. 2022: clean and corrupted
inputs that differ in one cue, a head's output copied from the clean run into the corrupted one,
the change of a metric) and attribution patching (Nanda 2023; Syed et al. 2023: its first-order
approximation from one backward pass). The claims: the metric reflects the behaviour, the
corruption moves it, heads with a larger patching effect are Clark's heads, and attribution
patching ranks heads like exact patching.

Differences from those papers: all-mpnet-base-v2 and MiniLM, sentence-embedding checkpoints
without a masked-LM head (``config.with_mlm_head`` False), so the metric reads the
final hidden states instead of a prediction; GAP paragraphs instead of CoNLL-2012 (GAP's candidates
share the pronoun's gender, so swapping the antecedent's name for one of the other gender makes a
corrupted input aligned token by token); no head is selected, so there is no held-out split.

Data, metric and weight-based score: ``experiments.patching.pairs`` (its docstring). Per model (all-mpnet-base-v2,
144 heads, and the embedded MiniLM, 72 heads; quick profile: MiniLM on a dozen short pairs):

- ``patching-<model>-behaviour``: how often the metric m (the pronoun's final vector against each
  candidate's) leans to the coreferent name on the clean paragraphs, beside the nearest-name rule
  (accuracy). The metric measures the behaviour only if this beats the rule.
- ``patching-<model>-corruption``: Δ = mean m(clean) − mean m(corrupted), paired bootstrap, beside
  Δ = 0: what patching a head can restore.
- ``patching-<model>-clark``: Spearman ρ over heads between the mean exact patching effect
  (``jattn.patch_heads``: metric(corrupted, head ← clean) − metric(corrupted)) and Clark's
  weight-based score (the share of pairs where the pronoun attends more to the coreferent name),
  both averaged over the same pairs; percentile bootstrap (each resample recomputes both maps'
  means and ρ). Baselines: ρ with the weight-based map's heads shuffled (one fixed
  permutation, the same bootstrap), and the permutation interval over heads ("no association").
- ``patching-<model>-attribution``: the same ρ between attribution patching
  (``jattn.attribution_patch_heads``) and exact patching.

Every interval of these four claims resamples the Wikipedia pages the GAP pairs come from (the
document, ``experiments.patching.resampling``), the per-head tests too. The maps figure and the table of the
largest effects: ``experiments.patching.report``.

Behaviour read from an output head, beside the hidden-state metric (the coreference pairs have
none, the models having no MLM head): ``experiments.patching.sentiment`` (the fine-tuned SST-2
classifiers, seed 0: one sentiment word swapped for its antonym, the logit difference of the two
classes; every head patched under it and under a hidden-state metric on the same runs) and
``experiments.patching.gender`` (the translation studies' model: the French source's man/woman
noun swapped, the logit of the English word against its other-gender counterpart; every encoder,
decoder and cross-attention head patched):

- ``patching-<model>-sst2-behaviour``, ``-sst2-corruption``, ``-sst2-attribution`` and
  ``patching-translation-gender-behaviour``, ``-corruption``, ``-attribution``: as above, the
  behaviour beside the train majority class (SST-2) or the gender more frequent in the training
  captions (translation).
- ``patching-<model>-sst2-hidden``: Spearman ρ over heads between the exact effects under the
  hidden-state metric and under the logit difference: does a metric that needs no output head rank
  heads as the behaviour does?

Verdicts: by the decision rules of ``experiments.patching.verdicts`` (STATISTICS.md, Decision
rules: paired differences, a permutation over heads for the associations, signed and |effect|
both reported), applied after the stages: a stage measures and notes its tests' values, no verdict.
Per head, the paired bootstrap p-value of the exact effect ≠ 0 and Holm–Bonferroni over all
heads (the table gives how many heads survive).

Measured costs, per pair padded to 96 tokens, in chunks, on 2 CPU cores: with the machine to
itself, the exact sweeps of the full profile took 126 s for 160 MiniLM pairs (0.8 s a pair) and
289 s for 32 all-mpnet-base-v2 pairs (9.0 s a pair), compiles included; shared with other jobs
(load average 8-20, ``nice -n 10``) 2.9 s and 42.5 s a pair, attribution 0.2 s and 1.5 s, a
compile ≈ 30 s, loading a model 10-15 s. Full profile (``FULL``): 160 pairs for each model, as
many as the GAP development rows give (2.1 min MiniLM, 19.3 min MPNet measured on a machine of its own;
32 MPNet pairs left the behaviour claim's interval too wide to tell the metric from the
nearest-name rule). Quick: 12 MiniLM pairs
of ≤ 64 tokens.

Run: ``jattn reproduce patching --publish`` (full profile, into ``experiments/results/``; or ``--out FOLDER``);
``jattn reproduce patching --quick`` (small subsets, into ``results/reproduce-quick/``).
"""

from __future__ import annotations

import numpy as np

from jattn.reproduce.pipeline import Context, Profile, Stage
from jattn.reproduce import studies
from experiments import common
from experiments.patching import gender, sentiment
from experiments.patching.report import figure, table
from experiments.patching.resampling import resample_weights
from experiments.patching.pairs import GAP_FILE, pairs_stage, sweep_stage

# pairs per model: "small" the embedded MiniLM, "base" the 144-head model (≈ 11 × its cost per pair)
FULL = {"max_tokens": 96, "batch": 8, "pairs": {"small": 160, "base": 160}, "sst2_pairs": 160, "gender_pairs": 160}
QUICK = {"max_tokens": 64, "batch": 12, "pairs": {"small": 12}, "sst2_pairs": 12, "gender_pairs": 8}
PAPER = {
    "behaviour": "Clark et al. 2019 §4.3 (their 144-head base model, CoNLL-2012): the best attention head picks "
    "an antecedent ≈65 % of the time vs ≈27 % for the nearest mention; read from attention weights, no intervention",
    "corruption": "no paper number: the corruption (the antecedent's name swapped for one of the other gender) must "
    "move the metric for patching to measure anything",
    "clark": "Clark et al. 2019 name coreference heads by their attention weights only; whether those heads cause "
    "the behaviour is not tested there (activation patching: Vig et al. 2020, Wang et al. 2022)",
    "attribution": "Nanda 2023; Syed et al. 2023: attribution patching is the first-order approximation of "
    "activation patching, close for most sites, poor where the effect is non-linear",
    "sst2-behaviour": "no paper number: the classifier must get the clean sentences right for its logit difference "
    "to measure the behaviour",
    "sst2-corruption": "no paper number: the antonym must move the logit difference for patching to measure anything",
    "gender-behaviour": "no paper number: the model must prefer the English word of the source's gender for the "
    "logit difference to measure the behaviour",
    "gender-corruption": "no paper number: the other gender's noun must move the logit difference for patching to "
    "measure anything",
    "sst2-hidden": "Heimersheim & Nanda 2024 and Zhang & Nanda 2024 advise a metric read from the model's output "
    "(they compare probability, logit difference and KL); a hidden-state metric is not among them",
}


def _sizes(profile: Profile) -> dict:
    return profile.pick(FULL, QUICK)


def stages(profile: Profile) -> list[Stage]:
    sizes = _sizes(profile)
    models = common.models(profile)
    shared = {"max_tokens": sizes["max_tokens"]}
    code = ("jattn.sweeps.patching", "jattn.analyses.coref", "jattn.io.labels")
    tests = ("experiments.patching.resampling",)  # the claims stages' bootstrap resamples
    scale = {m: "small" if common.base_model(m) is None else "base" for m in models}
    out = [Stage("patching.pairs", pairs_stage(models), params={**shared, "pairs": max(sizes["pairs"].values()),
                                                                 "models": list(models)},
                 data=(GAP_FILE,), models=tuple(b for m in models if (b := common.base_model(m))),
                 code=(*code, "experiments.common"))]
    for model in models:
        base = tuple(b for b in (common.base_model(model),) if b)
        params = {**shared, "batch": sizes["batch"], "pairs": sizes["pairs"][scale[model]]}
        out.append(Stage(f"patching.{model}-sweep", sweep_stage(model, "patching.pairs"), params=params,
                         needs=("patching.pairs",), data=(GAP_FILE,), models=base,
                         code=(*code, "experiments.common")))
        out.append(Stage(f"patching.{model}", _claims_stage(model, f"patching.{model}-sweep"), params=params,
                         needs=(f"patching.{model}-sweep",), data=(GAP_FILE,), models=base,
                         code=(*tests, "experiments.common", "experiments.patching.report")))
    classifiers = {m: (common.artefact(m, "sst2", 0),) if profile.name == "full" else () for m in models}
    sst2 = {"pairs": sizes["sst2_pairs"], "batch": 16}
    out.append(Stage("patching.sst2-pairs", sentiment.pairs_stage(models), params={**sst2, "models": list(models)},
                     data=(sentiment.DEV_FILE,), models=sum(classifiers.values(), ()),
                     code=("experiments.common",)))
    for model in models:
        out.append(Stage(f"patching.{model}-sst2-sweep", sentiment.sweep_stage(model, "patching.sst2-pairs"),
                         params=sst2, needs=("patching.sst2-pairs",), models=classifiers[model],
                         code=("jattn.sweeps.patching", "experiments.patching.pairs")))
        out.append(Stage(f"patching.{model}-sst2", _sentiment_claims_stage(model, f"patching.{model}-sst2-sweep"),
                         params=sst2, needs=(f"patching.{model}-sst2-sweep",), data=("sst2/train.tsv",), code=tests))
    translation = {"data": tuple(f"multi30k/{split}.{side}" for split, side in (
        (common.TEST, "fr"), (common.TEST, "en"), ("train", "en"))),
        "models": (common.MODEL,) if profile.name == "full" else ()}
    gender_sizes = {"pairs": sizes["gender_pairs"], "batch": 16}
    out += [Stage("patching.gender-pairs", gender.pairs_stage, params=gender_sizes, **translation),
            Stage("patching.gender-sweep", gender.sweep_stage, params=gender_sizes, needs=("patching.gender-pairs",),
                  code=("jattn.sweeps.patching", "experiments.patching.pairs"), **translation),
            Stage("patching.gender", _gender_claims_stage, params=gender_sizes,
                  needs=("patching.gender-pairs", "patching.gender-sweep"), code=tests)]
    return out


def _claims_stage(model: str, sweep: str):
    def run(ctx: Context) -> dict:
        r = ctx.result(sweep)
        L, H = r["shape"]
        clean, corr, nearest = (np.asarray(r[k], float) for k in ("clean", "corrupted", "nearest"))
        exact, attribution, clark = (np.asarray(r[k], float).reshape(len(clean), L * H)
                                     for k in ("exact", "attribution", "clark"))
        n, pages = len(clean), common.gap_pages(ctx.data(GAP_FILE))
        documents = [pages[i] for i in r["ids"]]  # the Wikipedia page of each pair's paragraph
        where = (f"{n} GAP development pairs (≤ {ctx.params['max_tokens']} tokens); clean = the paragraph, corrupted = "
                 "the coreferent name's mention replaced by an other-gender GAP name of equal word pieces; "
                 f"model {common.base_model(model) or 'the embedded all-MiniLM-L6-v2'} ({L}×{H} heads). Deviations: "
                 "sentence-embedding checkpoints without a masked-LM head (jattn.load: with_mlm_head False), so the "
                 "metric reads final hidden states; GAP instead of CoNLL-2012; no selection, so no held-out split; "
                 f"intervals resample the {len(set(documents))} Wikipedia pages the pairs come from")
        rows = [{"index": i, "document": page, "right": 1, "metric": int(c > 0), "corrupted_metric": int(d > 0),
                 "nearest": int(b)} for i, (page, c, d, b) in enumerate(zip(documents, clean, corr, nearest))]
        behaviour = ctx.claim(
            id=f"patching-{model}-behaviour", claim=f"{model}: the pronoun's final vector leans to the coreferent name "
            "(m > 0) on clean GAP paragraphs", paper=PAPER["behaviour"], unit="accuracy", rows=rows, n=n,
            measure={"statistic": "accuracy", "columns": {"gold": "right", "pred": "metric"}, "ci_method": "bootstrap",
                     **_cluster(documents)},
            baseline={"name": "nearest name", "columns": {"gold": "right", "pred": "nearest"}, **_cluster(documents)},
            protocol=where)
        behaviour["note"] = f"on the corrupted paragraphs m > 0 for {np.mean(corr > 0):.1%} of pairs"
        corruption = _corruption(
            ctx, id=f"patching-{model}-corruption", claim=f"{model}: the corruption lowers the metric (Δ mean m, "
            "clean − corrupted)", paper=PAPER["corruption"], unit="metric (dot product)", clean=clean, corrupted=corr,
            protocol=where, documents=documents)
        clark_claim = _association(
            ctx, id=f"patching-{model}-clark", claim=f"{model}: heads with a larger exact patching effect are Clark's "
            "weight-based coreference heads (Spearman over heads)", paper=PAPER["clark"], x=exact, y=clark,
            names=("effect", "clark"), protocol=where + "; ρ of the two maps' means over the same pairs, bootstrap "
            "over pages recomputing both means", documents=documents)
        agree = _association(
            ctx, id=f"patching-{model}-attribution", claim=f"{model}: attribution patching ranks heads like exact "
            "patching (Spearman over heads)", paper=PAPER["attribution"], x=attribution, y=exact,
            names=("attribution", "effect"), protocol=where, documents=documents)
        maps = {k: v.mean(0).reshape(L, H) for k, v in (("exact", exact), ("attribution", attribution),
                                                        ("clark", clark))}
        _, holm = _holm_heads(exact.reshape(n, L, H), documents)
        drawn = figure(ctx, model, maps, clark_claim["value"])
        return {"claims": [behaviour, corruption, clark_claim, agree], "figures": [drawn],
                "table": table(model, maps, holm, clean, corr, _spearman(np.abs(exact.mean(0)), clark.mean(0)),
                               r["measured_s"])}

    return run


def _sentiment_claims_stage(model: str, sweep: str):
    """The output-head claims of ``model``'s SST-2 classifier (``experiments.patching.sentiment``)."""
    def run(ctx: Context) -> dict:
        r = ctx.result(sweep)
        L, H = r["shape"]
        labels = np.asarray(r["labels"])
        clean, corr = (np.asarray(r[k], float) for k in ("clean", "corrupted"))
        exact, hidden, attribution = (np.asarray(r[k], float).reshape(len(clean), L * H)
                                      for k in ("exact", "hidden", "attribution"))
        n, name = len(clean), f"{model}-sst2"
        where = (f"{n} SST-2 development sentences with one sentiment word of a fixed antonym list; corrupted = that "
                 f"word swapped for its antonym (equal word pieces); model {model}'s SST-2 classifier (seed 0, "
                 f"{L}×{H} heads); output-head metric m = logit of the gold label − the other logit; no selection, "
                 "so no held-out split")
        majority = common.train_majority("sst2")
        rows = [{"index": i, "gold": int(y), "pred": int(y if m > 0 else 1 - y), "majority": majority}
                for i, (y, m) in enumerate(zip(labels, clean))]
        behaviour = ctx.claim(
            id=f"patching-{name}-behaviour", claim=f"{model} SST-2 classifier: the clean sentences are classified "
            "right (m > 0)", paper=PAPER["sst2-behaviour"], unit="accuracy", rows=rows, n=n, seeds=1,
            measure={"statistic": "accuracy", "columns": {"gold": "gold", "pred": "pred"}, "ci_method": "bootstrap"},
            baseline={"name": "majority class of train", "columns": {"gold": "gold", "pred": "majority"}},
            protocol=where)
        behaviour["note"] = f"on the corrupted sentences m > 0 for {np.mean(corr > 0):.1%} of pairs"
        corruption = _corruption(
            ctx, id=f"patching-{name}-corruption", claim=f"{model} SST-2 classifier: the antonym lowers the logit "
            "difference (Δ mean m, clean − corrupted)", paper=PAPER["sst2-corruption"], unit="logit difference",
            clean=clean, corrupted=corr, protocol=where, seeds=1)
        agree = _association(
            ctx, id=f"patching-{name}-attribution", claim=f"{model} SST-2 classifier: attribution patching ranks heads "
            "like exact patching, both on the output head's logit difference (Spearman over heads)",
            paper=PAPER["attribution"], x=attribution, y=exact, names=("attribution", "effect"), protocol=where,
            seeds=1)
        proxy = _association(
            ctx, id=f"patching-{name}-hidden", claim=f"{model} SST-2 classifier: a hidden-state metric (the first "
            "position's final vector on the clean − corrupted direction) ranks heads like the output head's logit "
            "difference (Spearman over heads, exact patching under each)", paper=PAPER["sst2-hidden"], x=hidden,
            y=exact, names=("hidden_effect", "effect"), protocol=where + "; both maps from the same pairs, bootstrap "
            "over pairs recomputing both means", seeds=1)
        maps = {k: v.mean(0).reshape(L, H) for k, v in (("exact", exact), ("attribution", attribution),
                                                        ("hidden", hidden))}
        _, holm = _holm_heads(exact.reshape(n, L, H))
        order = np.argsort(-np.abs(maps["exact"]).ravel())[:5]
        lines = [f"{name}: {n} pairs, mean m clean {clean.mean():.3f}, corrupted {corr.mean():.3f}; sweeps measured "
                 f"{r['measured_s']:.0f} s. Heads whose exact effect ≠ 0 after Holm–Bonferroni over {L * H} heads "
                 f"(paired bootstrap): {int(holm.sum())}. ρ(|effect| under the two metrics) = "
                 f"{_spearman(np.abs(maps['hidden']).ravel(), np.abs(maps['exact']).ravel()):.3f}.", "",
                 "| head (layer-head, 0-based) | exact effect (logit difference) | attribution | exact effect "
                 "(hidden-state metric) | Holm |", "|---|---|---|---|---|"]
        for k in order:
            l, h = divmod(int(k), H)
            lines.append(f"| {l}-{h} | {maps['exact'][l, h]:.3f} | {maps['attribution'][l, h]:.3f} | "
                         f"{maps['hidden'][l, h]:.3f} | {'yes' if holm[l, h] else 'no'} |")
        return {"claims": [behaviour, corruption, agree, proxy], "table": "\n".join(lines)}

    return run


def _gender_claims_stage(ctx: Context) -> dict:
    """The translation model's output-layer claims (``experiments.patching.gender``)."""
    r, made = ctx.result("patching.gender-sweep"), ctx.result("patching.gender-pairs")
    clean, corr = (np.asarray(r[k], float) for k in ("clean", "corrupted"))
    n = len(clean)
    exact, attribution = (np.concatenate([np.asarray(r[f"{what}_{k}"], float).reshape(n, -1) for k in gender.KINDS], 1)
                          for what in ("exact", "attribution"))  # (n, K) every head of the three types
    sizes = {k: int(np.prod(r["shapes"][k])) for k in gender.KINDS}
    where = (f"{n} Multi30k test_2016_flickr captions whose French source names one man, woman, boy or girl (or "
             "their plurals); corrupted = that noun and the determiner or adjective agreeing with it swapped for the "
             "other gender's (equal source pieces), the reference the target of both runs (teacher forcing); "
             f"model {common.MODEL if ctx.profile.name == 'full' else 'the quick profile’s tiny fr→en model'} "
             f"({' + '.join(f'{sizes[k]} {k}' for k in gender.KINDS)} heads); metric m = logit "
             "of the reference's word − logit of its other-gender counterpart at the position predicting it; no "
             "selection, so no held-out split")
    majority = int(made["train_counts"]["male"] >= made["train_counts"]["female"])  # 1: male words are more frequent
    rows = [{"index": i, "right": 1, "metric": int(m > 0), "majority": int(male == majority)}
            for i, (m, male) in enumerate(zip(clean, r["male"]))]
    behaviour = ctx.claim(
        id="patching-translation-gender-behaviour", claim="translation model: on the clean sources the output prefers "
        "the English word of the source's gender (m > 0)", paper=PAPER["gender-behaviour"], unit="accuracy",
        rows=rows, n=n, seeds=1, measure={"statistic": "accuracy", "columns": {"gold": "right", "pred": "metric"},
                                          "ci_method": "bootstrap"},
        baseline={"name": "the gender more frequent in the training captions", "columns": {"gold": "right",
                                                                                           "pred": "majority"}},
        protocol=where)
    behaviour["note"] = f"on the corrupted sources m > 0 for {np.mean(corr > 0):.1%} of pairs"
    corruption = _corruption(
        ctx, id="patching-translation-gender-corruption", claim="translation model: the other gender's noun in the "
        "source lowers the logit difference (Δ mean m, clean − corrupted)", paper=PAPER["gender-corruption"],
        unit="logit difference", clean=clean, corrupted=corr, protocol=where, seeds=1)
    agree = _association(
        ctx, id="patching-translation-gender-attribution", claim="translation model: attribution patching ranks the "
        "encoder, decoder and cross-attention heads like exact patching, on the output's logit difference (Spearman "
        "over heads)", paper=PAPER["attribution"], x=attribution, y=exact, names=("attribution", "effect"),
        protocol=where, seeds=1)
    means = exact.mean(0)  # (K,)
    _, holm = _holm_heads(exact[:, :, None])  # (K, 1) per head
    lines = [f"{n} pairs, mean m clean {clean.mean():.3f}, corrupted {corr.mean():.3f}; sweeps measured "
             f"{r['measured_s']:.0f} s. ρ(|attribution|, |exact|) = "
             f"{_spearman(np.abs(attribution.mean(0)), np.abs(means)):.3f}.", "",
             "| attention type | heads | Σ mean effect | Σ |mean effect| | largest (layer-head, 0-based: effect) | "
             "heads ≠ 0 after Holm over all |", "|---|---|---|---|---|---|"]
    start = 0
    for kind in gender.KINDS:
        part, H = slice(start, start + sizes[kind]), r["shapes"][kind][1]
        k = int(np.argmax(np.abs(means[part])))
        lines.append(f"| {kind} | {sizes[kind]} | {means[part].sum():.3f} | {np.abs(means[part]).sum():.3f} | "
                     f"{k // H}-{k % H}: {means[part][k]:.3f} | {int(holm[part].sum())} |")
        start += sizes[kind]
    return {"claims": [behaviour, corruption, agree], "table": "\n".join(lines)}


def _spearman(x, y) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def _head_rows(a, b, key_a: str, key_b: str, perm: np.ndarray, documents=None) -> list[dict]:
    """Rows (one per pair) of two (N, K) per-head arrays, and ``b`` with its heads permuted (with
    each pair's ``documents`` where its intervals resample them)."""
    return [{"index": i, **({"document": documents[i]} if documents else {}), key_a: x.tolist(), key_b: y.tolist(),
             f"{key_b}_shuffled": y[perm].tolist()} for i, (x, y) in enumerate(zip(a, b))]


def _cluster(documents) -> dict:
    """The spec entry that resamples documents, when the rows carry them."""
    return {"cluster": "document"} if documents else {}


def _association(ctx: Context, *, id: str, claim: str, paper: str, x: np.ndarray, y: np.ndarray, names: tuple,
                 protocol: str, seeds: int = 0, documents=None) -> dict:
    """A head_spearman claim of x against y (N, K) with the shuffled-heads baseline and the
    permutation interval over heads (the verdict is ``experiments.patching.verdicts``'); intervals
    resample the pairs' ``documents`` when given, else the pairs."""
    from jattn import stats

    perm = np.random.default_rng(0).permutation(x.shape[1])
    rows = _head_rows(np.round(x, 6), np.round(y, 6), *names, perm, documents)
    _, band = stats.permutation_interval(_spearman, x.mean(0), y.mean(0))
    out = ctx.claim(id=id, claim=claim, paper=paper, unit="spearman", rows=rows, n=len(rows), seeds=seeds,
                    measure={"statistic": "head_spearman", "columns": {"x": names[0], "y": names[1]},
                             "ci_method": "bootstrap", **_cluster(documents)},
                    baseline={"name": "ρ with the heads of the second map shuffled",
                              "columns": {"x": names[0], "y": f"{names[1]}_shuffled"}, **_cluster(documents)},
                    protocol=protocol, permutation_interval=list(band), heads=int(x.shape[1]))
    out["note"] = (f"ρ = {out['value']:.3f}; the permutation interval over {x.shape[1]} heads "
                   f"[{band[0]:.3f}, {band[1]:.3f}]")
    return out


def _corruption(ctx: Context, *, id: str, claim: str, paper: str, unit: str, clean, corrupted, protocol: str,
                seeds: int = 0, documents=None) -> dict:
    """Δ = mean m(clean) − mean m(corrupted), paired over the pairs (their ``documents`` resampled
    when given), beside Δ = 0. ``seeds``: the training seeds of the model (0: a pretrained model,
    none trained here)."""
    rows = [{"index": i, **({"document": documents[i]} if documents else {}), "clean": round(float(c), 6),
             "corrupted": round(float(d), 6)} for i, (c, d) in enumerate(zip(clean, corrupted))]
    out = ctx.claim(id=id, claim=claim, paper=paper, unit=unit, rows=rows, n=len(rows), seeds=seeds,
                    measure={"statistic": "mean", "columns": {"value": "clean"}, "against": {"value": "corrupted"},
                             "ci_method": "paired", **_cluster(documents)},
                    baseline={"name": "no change (Δ = 0: clean against itself)", "columns": {"value": "clean"},
                              "against": {"value": "clean"}, **_cluster(documents)}, protocol=protocol)
    out["note"] = f"paired bootstrap p = {out['p']:.3g}"
    return out


def _holm_heads(effects: np.ndarray, documents=None) -> tuple[np.ndarray, np.ndarray]:
    """Per head (L, H): the paired bootstrap p-value of mean effect ≠ 0 (resampling the pairs, or
    their ``documents``), and Holm's rejections."""
    from jattn import stats

    n, L, H = effects.shape
    w = resample_weights(n, documents).astype(np.float64)  # (B, n): paired_bootstrap's resamples without documents
    deltas = (w @ effects.reshape(n, L * H)) / w.sum(1, keepdims=True)  # (B, L·H) every head on the same resample
    p = np.minimum(1.0, 2 * np.minimum((deltas <= 0).mean(0), (deltas >= 0).mean(0)))  # (L·H,)
    return p.reshape(L, H), stats.holm(p).reshape(L, H)


studies.register('patching', stages,
                 'Causal interventions: activation and attribution patching of attention heads (GAP coreference, '
                 'SST-2 sentiment, translation gender)')
