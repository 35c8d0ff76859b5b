"""Syntax heads per dependency relation (Clark et al. 2019, §4.2, Table 1), selected on one split
and reported on another, with per-word predictions.

One pass over a split (``split_pass``) gives, for every word, the head each attention head
predicts in both directions (``jattn.analyses.syntax.predicted_heads``: the word-level map with
[CLS]/[SEP] dropped and the diagonal zeroed, argmax per row of A and of Aᵀ), and writes the
probe's feature shards of the same sentences (``jattn.analyses.probe.write_shards``). From the
selection split's predictions ``select`` picks per relation the best (direction, layer, head)
and the best fixed offset k ∈ {−3..3} \\ {0}; ``rows`` applies them to the report split's words.

Stanford Dependencies (Clark's PTB conversion) vs UD (EWT): ``CLARK_TABLE1`` maps Clark's
relations to UD's: dobj -> obj, poss -> nmod:poss, and pobj (preposition -> its object) ->
case (the same word pair, the arc reversed: UD attaches the preposition to the noun); a
reversed arc scores the same heads, as both directions of every head are tried. ``EXCLUDED``:
UD's ``list`` (EWT's lists of contact details and items, chained to the first item) has no
Stanford counterpart and is trivially close to a fixed offset; it is reported on its own, not in
the headline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.clark2019.common import FAMILY_RESAMPLES, mean_deltas
from jattn.analyses.syntax import DIRECTIONS, OFFSETS, predicted_heads

CLARK_TABLE1 = {  # UD relation -> Clark's relation (Table 1, bert-base, PTB WSJ; its numbers: experiments/papers.py)
    "det": "det", "obj": "dobj", "case": "pobj, arc reversed", "nmod:poss": "poss", "nsubj": "nsubj", "aux": "aux"}
EXCLUDED = ("list",)
ALL = "all"  # every scored word of a relation not EXCLUDED


def read_trees(path: Path, tokenizer, count: int | None = None, seed: int = 0, max_length: int = 128):
    """The trees of a CoNLL-U file that fit ``max_length`` subwords (``fit_words``): the first
    ``count`` (``seed`` None) or ``count`` drawn at random (``seed``), in file order.
    -> (trees, skipped counts)."""
    from jattn.io import labels

    trees = list(labels.read_conllu_trees(path))
    kept, skipped = labels.fit_words(tokenizer, [t.words for t in trees], max_length)
    if count is not None and count < len(kept):
        kept = kept[:count] if seed is None else sorted(np.random.default_rng(seed).choice(kept, count, replace=False))
    return [trees[i] for i in kept], skipped


def split_pass(model, trees, shards: Path, table: np.ndarray, max_length: int = 128, batch_size: int = 16) -> dict:
    """Per-word predictions of every head on ``trees`` (and the probe shards of them in
    ``shards``). -> {"pred" (N, 2, L, H) int16 predicted head (1-based word), "gold" (N,) 1-based
    head (0 = ROOT), "position" (N,) 1-based, "sentence" (N,), "relation" (N,) str}, words in
    sentence order."""
    from jattn.analyses import probe
    from jattn.analyses.word_attention import word_attention

    pred: list = [None] * len(trees)

    def records():
        for r in word_attention(model, [t.words for t in trees], max_length=max_length, batch_size=batch_size):
            t = trees[r.index]
            pred[r.index] = np.moveaxis(predicted_heads(r.maps), -1, 0).astype(np.int16)  # (w, 2, L, H)
            pair, root = probe.sentence_features(r.maps)
            yield {
                "pair": pair,
                "root": root,
                "emb": probe.word_embeddings(table, r.input_ids, r.word_ids, len(t.words)),
                "heads": t.heads,
                "punct": np.asarray([u == "PUNCT" for u in t.upos]),
            }

    probe.write_shards(records(), shards, shard_size=500)
    return {"pred": np.concatenate(pred), "gold": np.concatenate([t.heads for t in trees]).astype(np.int32),
            "position": np.concatenate([np.arange(1, len(t.words) + 1) for t in trees]).astype(np.int32),
            "sentence": np.concatenate([np.full(len(t.words), s) for s, t in enumerate(trees)]).astype(np.int32),
            "relation": np.concatenate([np.asarray(t.relations, dtype=str) for t in trees])}


def word_sets(split: dict, relations: list[str]) -> dict[str, np.ndarray]:
    """Indices of the scored words (gold head a word, not ROOT) of each relation and of ``ALL``."""
    scored = split["gold"] > 0
    out = {r: np.flatnonzero(scored & (split["relation"] == r)) for r in relations}
    out[ALL] = np.flatnonzero(scored & ~np.isin(split["relation"], EXCLUDED))
    return out


def head_accuracy(split: dict, words: np.ndarray) -> np.ndarray:
    """(2, L, H) share of ``words`` whose gold head each head finds, per direction."""
    return (split["pred"][words] == split["gold"][words, None, None, None]).mean(0)


def offset_accuracy(split: dict, words: np.ndarray) -> np.ndarray:
    """(K,) share of ``words`` whose gold head is word position + k, k in ``OFFSETS``."""
    return np.asarray([(split["gold"][words] == split["position"][words] + k).mean() for k in OFFSETS])


def select(split: dict, relations: list[str]) -> dict[str, dict]:
    """Per relation (and ``ALL``): the best head [direction, layer, head] and the best offset on
    ``split`` (ties: the first in (direction, layer, head) / offset order)."""
    out = {}
    for r, words in word_sets(split, relations).items():
        acc = head_accuracy(split, words)  # (2, L, H)
        d, l, h = np.unravel_index(int(np.argmax(acc)), acc.shape)
        out[r] = {"head": [int(d), int(l), int(h)], "offset": OFFSETS[int(np.argmax(offset_accuracy(split, words)))]}
    return out


def rows(split: dict, relation: str, chosen: dict, in_sample: dict) -> list[dict]:
    """The report split's words of ``relation``: gold head, the prediction of the head chosen on
    the selection split, of the best offset chosen there, and of the head chosen on these words
    themselves (Clark's protocol)."""
    words = word_sets(split, [relation] if relation != ALL else [])[relation]
    d, l, h = chosen[relation]["head"]
    di, li, hi = in_sample[relation]["head"]
    return [{"index": int(i), "sentence": int(split["sentence"][i]), "relation": str(split["relation"][i]),
             "gold": int(split["gold"][i]), "head": int(split["pred"][i, d, l, h]),
             "offset": int(split["position"][i] + chosen[relation]["offset"]),
             "in_sample": int(split["pred"][i, di, li, hi])} for i in words]


def head_name(head: list[int]) -> str:
    """[direction, layer, head] -> "l-h" (0-based) with the direction when it is head->dep."""
    d, l, h = head
    return f"{l}-{h}" + (" (Aᵀ)" if DIRECTIONS[d] == "head->dep" else "")


def concat(first: dict, second: dict) -> dict:
    """Two ``split_pass`` results as one (the second's sentences numbered after the first's)."""
    shift = int(first["sentence"].max()) + 1 if len(first["sentence"]) else 0
    return {k: np.concatenate([first[k], second[k] + shift if k == "sentence" else second[k]]) for k in first}


def sentence_tests(found: list[dict], b: int, by_relation: bool = False) -> dict:
    """Held-out head − offset accuracy Δ of ``found``'s words (``rows``), sentences resampled
    ``b`` times: the test the study's verdicts apply (``experiments.clark2019.common.mean_deltas``),
    so the stage's Holm family and counts are theirs. -> {"" or relation: {"value", "ci", "p", "b"}}."""
    d = [float(x["head"] == x["gold"]) - float(x["offset"] == x["gold"]) for x in found]  # (N,) per word
    groups = [x["relation"] for x in found] if by_relation else None
    return mean_deltas(d, [x["sentence"] for x in found], groups, b=b)


# ---------------------------------------------------------------- the stages

EWT_TRAIN, EWT_DEV = "ud-english-ewt/en_ewt-ud-train.conllu", "ud-english-ewt/en_ewt-ud-dev.conllu"
SPLITS = ("select", "dev_a", "dev_b")  # train sentences; the first dev sentences (the probe's early stopping), the rest


def cached_pass(net, trees, folder: Path, table) -> dict:
    """``split_pass`` once per split: its arrays (``pass.npz``) and shards kept in ``folder``."""
    import shutil

    done = folder / "pass.npz"
    if done.is_file():
        with np.load(done) as z:
            return {k: z[k] for k in z.files}
    shutil.rmtree(folder / "shards", ignore_errors=True)
    got = split_pass(net, trees, folder / "shards", table)
    np.savez(folder / "tmp.npz", **got)
    (folder / "tmp.npz").replace(done)
    return got


def stage(model: str):
    """The stage function of ``clark.<model>-syntax`` (params: ``select_sentences``,
    ``report_sentences``, ``stop_sentences``, ``min_count``); its result names the probe's shards."""

    def run(ctx) -> dict:
        from jattn import stats
        from jattn.analyses import probe
        from experiments.clark2019.common import load, note, p_text, rate, said

        p, net = ctx.params, load(model)
        select_trees, _ = read_trees(ctx.data(EWT_TRAIN), net.tokenizer, p["select_sentences"], seed=0)
        dev, _ = read_trees(ctx.data(EWT_DEV), net.tokenizer, p["report_sentences"], seed=None)
        stop, work, table = p["stop_sentences"], ctx.work(), probe.word_embedding_table(net)
        if not 0 < stop < len(dev):
            raise ValueError(f"stop_sentences={stop} must leave dev sentences on both sides of {len(dev)}")
        trees = dict(zip(SPLITS, (select_trees, dev[:stop], dev[stop:])))
        passes = {name: cached_pass(net, trees[name], work / name, table) for name in SPLITS}
        sel, rep = passes["select"], concat(passes["dev_a"], passes["dev_b"])
        count = lambda split, r: int(((split["relation"] == r) & (split["gold"] > 0)).sum())  # noqa: E731
        relations = [r for r in sorted(set(rep["relation"])) if r not in EXCLUDED
                     and min(count(rep, r), count(sel, r)) >= p["min_count"]]
        apart = [r for r in EXCLUDED if min(count(rep, r), count(sel, r)) > 0]
        chosen, in_sample = select(sel, relations + apart), select(rep, relations + apart)
        found = {r: rows(rep, r, chosen, in_sample) for r in relations + apart + [ALL]}
        pooled = [x for r in relations for x in found[r]]
        tests = {**sentence_tests(pooled, FAMILY_RESAMPLES, by_relation=True),  # the verdicts' Holm family
                 **{r: sentence_tests(found[r], stats.B)[""] for r in apart + [ALL]}}
        holm = dict(zip(relations, stats.holm([tests[r]["p"] for r in relations]))) if relations else {}
        wins = [r for r in relations if holm[r] and tests[r]["value"] > 0]
        protocol = (f"head and offset (−3…+3) chosen on {len(select_trees)} random EWT train sentences, reported on "
                    f"{len(dev)} EWT dev sentences (≤ 128 tokens); words whose head is ROOT not scored; UD relations "
                    "(Clark: PTB WSJ §22, Stanford Dependencies; mapping in experiments.clark2019.syntax).")
        measure = {"statistic": "accuracy", "columns": {"gold": "gold", "pred": "head"}, "ci_method": "bootstrap"}
        claims = []
        for r in [x for x in CLARK_TABLE1 if x in relations] + [ALL]:
            what = (
                f"UD {r} (Clark's {CLARK_TABLE1[r]})" if r != ALL else "every UD relation but list (one head for all)"
            )
            claims.append(
                ctx.claim(
                    id=f"clark-{model}-syntax-{r.replace(':', '-')}",
                    claim=f"{model}: best head for {what} "
                    f"({head_name(chosen[r]['head'])}, 0-based) vs the best offset ({chosen[r]['offset']:+d})",
                    unit="accuracy",
                    rows=found[r],
                    protocol=protocol,
                    measure=measure,
                    baseline={"name": "best fixed offset", "columns": {"gold": "gold", "pred": "offset"}},
                    **note(
                        f"head − offset {said(tests[r], 'sentences')}"
                        + (", Holm over the relations" if r in holm else "")
                        + f"; head chosen on the dev words themselves (Clark's way): {rate(found[r], 'in_sample'):.3f}"
                    ),
                )
            )
        if pooled:
            test = sentence_tests(pooled, stats.B)[""]
            claims.append(ctx.claim(
                id=f"clark-{model}-syntax-pooled", claim=f"{model}: each relation's best head vs its best offset, "
                f"pooled over {len(relations)} relations; the head wins after Holm in {len(wins)} of them",
                unit="accuracy", rows=pooled, measure=measure,
                protocol=protocol + f" Relations with ≥ {p['min_count']} scored words in both splits, UD list apart.",
                baseline={"name": "each relation's best offset", "columns": {"gold": "gold", "pred": "offset"}},
                **note(f"pooled head − offset {said(test, 'sentences')}; the head wins after Holm in {len(wins)} of "
                         f"{len(relations)} relations ({', '.join(wins)})")))
        path = ctx.figure(f"{model}_syntax.png")
        figure(found, relations + apart, path, model)
        lines = ["| relation | words | head (0-based) | accuracy | offset | accuracy | head − offset (sentences "
                 "resampled) | Holm | "
                 "in-sample head | accuracy |", "|---|---:|---|---:|---:|---:|---|---|---|---:|"]
        for r in relations + apart + [ALL]:
            lines.append(
                f"| {r}{' (apart)' if r in apart else ''} | {len(found[r])} | {head_name(chosen[r]['head'])} | "
                f"{rate(found[r], 'head'):.3f} | {chosen[r]['offset']:+d} | {rate(found[r], 'offset'):.3f} | "
                f"{tests[r]['value']:+.3f} ({p_text(tests[r])}) | {'yes' if holm.get(r) else '–'} | "
                f"{head_name(in_sample[r]['head'])} | {rate(found[r], 'in_sample'):.3f} |"
            )
        return {"claims": claims, "figures": [str(path.relative_to(ctx.out))], "table": "\n".join(lines),
                "shards": {name: str(work / name / "shards") for name in SPLITS},
                "sentences": {name: len(trees[name]) for name in SPLITS}}

    return run


def figure(found: dict, relations: list[str], path: Path, model: str) -> Path:
    """Held-out accuracy of each relation's best head and best offset, by count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.clark2019.common import rate

    order = sorted(relations, key=lambda r: -len(found[r]))
    x = np.arange(len(order))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(order)), 3.2))
    ax.bar(x - 0.2, [rate(found[r], "head") for r in order], 0.4, label="best head (chosen on train)")
    ax.bar(x + 0.2, [rate(found[r], "offset") for r in order], 0.4, label="best offset (chosen on train)")
    ax.set(xticks=x, ylabel="accuracy on EWT dev", title=f"{model}: syntax heads per UD relation (Clark Table 1)")
    ax.set_xticklabels(order, rotation=70, fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
