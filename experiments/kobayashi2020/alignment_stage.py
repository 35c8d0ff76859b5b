"""The alignment stage of the Kobayashi et al. study (2020, §5): word alignments from a translation
model's cross-attention, weight-based vs norm-based, on the Hansards fr→en gold, beside the diagonal
and eflomal (``experiments.kobayashi2020.align`` computes the links and counts). The model is a parameter
(``alignment_stage(profile, model)``): a folder of the repository or a made artefact; the studies
run it on the committed 6 + 6 × 8 model of the translation studies (the paper's depth). The Hansards gold is out of the
caption models' domain; the same claims are also made in it, on the Multi30k test pairs against
eflomal's links (a silver reference: eflomal's own AER on the Hansards gold says how far to trust
it), so that whether the domain or the model is what separates our numbers from the paper's can be read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from jattn.reproduce.pipeline import Context, Profile, Stage, repository_root
from experiments.kobayashi2020 import align as KA
from experiments.kobayashi2020.claims import paired

TRANSLATION_MODEL = "checkpoints/multi30k-fr-en-6x8"  # the committed copy of the translation studies' artefact
PAIRS = {"full": 0, "quick": 32}  # 0: all 447
IN_DOMAIN = {"full": 1000, "quick": 32}  # Multi30k test_2016_flickr pairs for the familiarity check


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


def _eflomal(ctx: Context, net, pairs: list, name: str = "eflomal.json") -> list:
    """eflomal's symmetrised links of ``pairs``, trained with Multi30k train (full profile); kept in
    the work folder as ``name`` (its sampler is seeded from the system, so a rerun would differ)."""
    import json

    cache = ctx.work() / name
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


def familiarity_note(fits: dict) -> str:
    """The model's teacher-forced next-token accuracy and subword fertility here vs in its domain."""
    h, m = fits["hansards"], fits["multi30k"]
    return (f"The model's teacher-forced next-token accuracy is {h['next_token_accuracy']:.1%} on these Hansards "
            f"pairs vs {m['next_token_accuracy']:.1%} on {m['pairs']} Multi30k test pairs (its domain); subwords per "
            f"French word {h['source_subwords_per_word']:.2f} vs {m['source_subwords_per_word']:.2f}.")


def model_label(net) -> str:
    """A translation model as the claims name it, e.g. "fr→en 6+6 × 8, cased"."""
    c = net.config
    case = "lowercased" if (net.text_normalization or {}).get("lowercase") else "cased"
    return f"fr→en {c.encoder_layers}+{c.decoder_layers} × {c.decoder_heads}, {case}"


def _alignment_claims(ctx: Context, net, tag: str, table: list[dict], note: str,
                      in_domain: bool = False) -> tuple[list[dict], dict]:
    """Norm- vs weight-based and norm-based vs diagonal alignment claims on ``table``: the Hansards
    human gold, or (``in_domain``) eflomal's links on the model's own test set; with the Hansards
    gold also eflomal's own AER."""
    select = [r for r in table if r["index"] % 2 == 0]
    report = [r for r in table if r["index"] % 2 == 1]
    layers, named = net.config.decoder_layers, model_label(net)
    chosen, claims = {}, []
    split = (f"best layer selected on the {len(select)} even-numbered pairs, AER pooled over the {len(report)} "
             "odd-numbered ones, bootstrap over pairs recomputing the pooled AER. Deviations: language pair and "
             "data, one model (no seeds), the model's own text normalisation")
    protocol = (f"Multi30k test_2016_flickr fr→en, {len(table)} pairs (the domain of {named}), against eflomal's "
                f"symmetrised links as the reference (a silver standard: no human gold exists for them); {split}."
                if in_domain else f"Hansards fr→en, {len(table)} pairs with human sure/possible gold (out of domain "
                f"for the caption model {named}); {split}.")
    if in_domain:
        tag, named = f"{tag}-in-domain", f"{named}, in domain vs eflomal"
    for setting in KA.SETTINGS:
        for name in KA.MAPS:
            chosen[(setting, name)] = KA.best_layer(select, setting, name, layers)[0]
        norms, weights = (f"{setting}/{n}/{chosen[(setting, n)]}" for n in ("summed", "weights"))
        for base, label in ((weights, f"α (head mean, layer {chosen[(setting, 'weights')]})"),
                            ("diagonal", "diagonal alignment")):
            keys = ("predicted", "sure_hits", "possible_hits")
            delta = paired(report, "aer", KA.columns(norms), {k: KA.columns(base)[k] for k in keys})
            suffix = "norms-vs-weights" if base == weights else "norms-vs-diagonal"
            claims.append(ctx.claim(
                id=f"kobayashi-align{tag}-{setting}-{suffix}", unit="AER", rows=report,
                claim=f"{named}: {setting} alignment AER from ‖Σ_h αf‖ (layer {chosen[(setting, 'summed')]}) vs "
                      + ("α" if base == weights else "the diagonal"),
                measure={"statistic": "aer", "columns": KA.columns(norms), "ci_method": "bootstrap"},
                baseline={"name": label, "columns": KA.columns(base)}, protocol=protocol, note=note, delta=delta))
    if in_domain:
        return claims, chosen
    claims.append(ctx.claim(
        id=f"kobayashi-align{tag}-eflomal", claim=f"{named}: eflomal (statistical aligner) AER on its subwords",
        paper="not in the paper: a statistical aligner as the reference point for attention-based alignments",
        unit="AER",
        rows=report, measure={"statistic": "aer", "columns": KA.columns("eflomal"), "ci_method": "bootstrap"},
        baseline={"name": "diagonal alignment", "columns": KA.columns("diagonal")}, protocol=protocol,
        note="the data are alignable: the reference point for the attention-based alignments"))
    return claims, chosen


def _layer_table(table: list[dict], chosen: dict, layers: int) -> list[str]:
    """Per setting and map: every layer's pooled AER (%) and the chosen layer's on the held-out pairs."""
    report = [r for r in table if r["index"] % 2 == 1]
    lines = ["| setting | map | " + " | ".join(f"layer {k}" for k in range(layers)) + " | best (same data) | "
             "chosen layer: held-out AER |", "|---" * (layers + 4) + "|"]
    for setting in KA.SETTINGS:
        for name in KA.MAPS:
            best, per_layer = KA.best_layer(table, setting, name, layers)
            held = KA.pooled_aer(report, f"{setting}/{name}/{chosen[(setting, name)]}")
            lines.append(f"| {setting} | {name} | " + " | ".join(f"{100 * a:.1f}" for a in per_layer)
                         + f" | {best}: {100 * per_layer[best]:.1f} | {chosen[(setting, name)]}: {100 * held:.1f} |")
    return lines


def _alignment_table(table: list[dict], chosen: dict, layers: int, fits: dict, silver: list[dict],
                     silver_chosen: dict) -> str:
    lines = ["AER (%) pooled over all pairs per layer (the paper's protocol: the best layer read off the same "
             "pairs), and on the odd-numbered pairs at the layer chosen on the even-numbered ones. Hansards, "
             "human gold:", "", *_layer_table(table, chosen, layers)]
    lines += ["", f"Baselines, all pairs: diagonal {100 * KA.pooled_aer(table, 'diagonal'):.1f}, eflomal "
              f"{100 * KA.pooled_aer(table, 'eflomal'):.1f}. Maps: weights = α averaged over heads, norms = "
              "‖α_h f_h‖ averaged over heads, summed = ‖Σ_h α_h f_h‖.", "",
              f"In the model's domain: the {len(silver)} Multi30k test pairs against eflomal's links (trained as "
              "above; a silver reference, no human gold):", "", *_layer_table(silver, silver_chosen, layers), "",
              f"Diagonal against the same links: {100 * KA.pooled_aer(silver, 'diagonal'):.1f}.", "",
              "| text | pairs | next-token accuracy (teacher forcing) | subwords per source word | per target word |",
              "|---|---|---|---|---|"]
    for name, f in fits.items():
        lines.append(f"| {name} | {f['pairs']} | {f['next_token_accuracy']:.3f} | {f['source_subwords_per_word']:.2f} "
                     f"| {f['target_subwords_per_word']:.2f} |")
    return "\n".join(lines)


def alignment_stage(profile: Profile, model: str = TRANSLATION_MODEL) -> Stage:
    """The alignment stage for translation model ``model`` (a repository folder or an artefact name)."""
    source, params, models = _translation_source(model)
    tag = "" if model == TRANSLATION_MODEL else f"-{Path(model).name}"  # in the stage's, claims' and figure's names
    data = ["alignment/enfr.src-tgt", "alignment/enfr.gold", "multi30k/test_2016_flickr.fr",
            "multi30k/test_2016_flickr.en"]
    if profile.name == "full":
        data += ["multi30k/train.fr", "multi30k/train.en"]

    def run(ctx: Context) -> dict:
        import jattn
        from experiments.kobayashi2020 import figures as kobayashi_figures

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
        read = lambda side: ctx.data(f"multi30k/test_2016_flickr.{side}").read_text(encoding="utf-8").splitlines()
        n = ctx.params["in_domain_pairs"]
        own = KA.moses_pairs(net, read("fr")[:n], read("en")[:n])  # the model's domain
        own_items = KA.encode(net, own)
        fits = {"hansards": KA.fit(net, items, ctx.params["batch_size"]),
                "multi30k": KA.fit(net, own_items, ctx.params["batch_size"])}
        eflomal_own = _eflomal(ctx, net, own, "eflomal-in-domain.json")
        silver = KA.rows(
            [(set(links), set(links)) for links in eflomal_own],
            KA.model_links(net, own_items, ctx.params["batch_size"]) | {"diagonal": KA.diagonal_links(own)},
        )
        layers = net.config.decoder_layers
        claims, chosen = _alignment_claims(ctx, net, tag, table, familiarity_note(fits))
        silver_claims, silver_chosen = _alignment_claims(
            ctx, net, tag, silver, "Reference: eflomal, whose AER against the Hansards human gold is "
            f"{100 * KA.pooled_aer(table, 'eflomal'):.1f}.", in_domain=True)
        fig = kobayashi_figures.alignment(ctx.figure(f"alignment{tag}.png"), table, layers)
        return {"claims": claims + silver_claims, "figures": [str(fig.relative_to(ctx.out))],
                "table": _alignment_table(table, chosen, layers, fits, silver, silver_chosen), "familiarity": fits,
                "chosen_layers": {f"{s}/{n}": v for (s, n), v in chosen.items()},
                "chosen_layers_in_domain": {f"{s}/{n}": v for (s, n), v in silver_chosen.items()}}

    return Stage(f"kobayashi.alignment{tag}", run, data=tuple(data), models=models,
                 params={**params, "pairs": profile.pick(PAIRS["full"], PAIRS["quick"]), "batch_size": 32,
                         "eflomal_multi30k": profile.name == "full",
                         "in_domain_pairs": profile.pick(IN_DOMAIN["full"], IN_DOMAIN["quick"])},
                 code=("experiments.kobayashi2020.align", "experiments.kobayashi2020.figures",
                       "experiments.kobayashi2020.claims",
                       "jattn.analyses.alignment", "jattn.analyses.eflomal_align", "jattn.analyses.norms"))


