"""Coreference heads per query (Clark et al. 2019, §4.3, Table 2), on LitBank and GAP.

LitBank (``jattn.analyses.coref`` defines the task): documents packed into segments of whole
sentences; every mention with an earlier mention of its cluster in the segment is a query; the
candidates are the head words (a mention's last word) of all earlier mentions; a head is right
when its word-level argmax over the candidates, from the query's head word, is an antecedent.
Baselines (``STATISTICS.md`` §4): the nearest candidate; the nearest with the same head word
(case-insensitive), else the nearest; the nearest of the same mention type, else the nearest.

Mention type (LitBank's coreference files carry no part of speech): *pronoun* when the head
word is one of ``jattn.analyses.coref.PRONOUNS``, *proper* when it starts with a capital letter,
else *nominal* (Clark's Table 2 breaks CoNLL-2012 down the same three ways, from its parses).

GAP: the pronoun's word-level attention summed over each candidate name's words; a head is
right when the coreferent name gets more (rows with exactly one coreferent name). Baselines:
the nearest name, the first name.

Intervals resample documents (``"cluster": "document"``): LitBank's novels, GAP's Wikipedia pages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.common import gap_pages

TYPES = ("pronoun", "proper", "nominal")


def mention_type(word: str) -> str:
    from jattn.analyses.coref import PRONOUNS

    return "pronoun" if word.lower() in PRONOUNS else "proper" if word[:1].isupper() else "nominal"


def litbank_split(names: list[str], count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Two disjoint sets of ``count`` of the LitBank files ``names``, drawn at random (selection,
    report)."""
    names = sorted(names)
    if 2 * count > len(names):
        raise ValueError(f"{len(names)} LitBank files, {2 * count} asked. Fix: ask for fewer documents")
    pick = np.random.default_rng(seed).permutation(len(names))[:2 * count]
    return [names[i] for i in pick[:count]], [names[i] for i in pick[count:]]


def litbank_queries(model, files: list[Path], budget: int = 256, max_segments: int | None = None,
                    batch_size: int = 8) -> dict:
    """Every query of the documents in ``files`` (their first ``max_segments`` segments each when
    given) -> {"correct" (Q, L, H) bool, "document" (Q,) str, "type" (Q,) str, "nearest",
    "same_head_word", "same_type" (Q,) bool, "segments", "dropped"}."""
    from jattn.analyses.coref import antecedent_queries
    from jattn.analyses.word_attention import word_attention
    from jattn.io import labels

    segs, dropped = [], {}
    for f in files:
        for doc in labels.read_litbank(f):
            s, drop = labels.segments(doc, model.tokenizer, budget)
            segs += [(doc.name, x) for x in s[:max_segments]]
            dropped = {k: dropped.get(k, 0) + v for k, v in drop.items()}
    kept, skipped = labels.fit_words(model.tokenizer, [s.words for _, s in segs], budget)
    out: dict = {k: [] for k in ("correct", "document", "type", "nearest", "same_head_word", "same_type")}
    found: list = [None] * len(kept)
    for r in word_attention(model, [segs[i][1].words for i in kept], max_length=budget, batch_size=batch_size):
        name, seg = segs[kept[r.index]]
        words, q_rows = seg.words, []
        for q, cands, gold, nearest, same in antecedent_queries(seg.mentions, words):
            att = r.maps[:, :, q + 1, [c + 1 for c in cands]]  # (L, H, candidates)
            kind = mention_type(words[q])
            of_type = [c for c in cands if mention_type(words[c]) == kind]
            q_rows.append((np.isin(np.asarray(cands)[att.argmax(-1)], list(gold)), name, kind, nearest in gold,
                           same in gold, (of_type[-1] if of_type else nearest) in gold))
        found[r.index] = q_rows
    for q_rows in found:  # segments in document order
        for row in q_rows:
            for key, value in zip(out, row):
                out[key].append(value)
    L, H = model.config.num_layers, model.config.num_heads
    result = {k: np.asarray(v) for k, v in out.items()}
    result["correct"] = result["correct"].reshape(-1, L, H)
    return {**result, "segments": len(kept), "dropped": {**dropped, **skipped}}


def gap_examples(path: Path, tokenizer, count: int, max_length: int = 256) -> list:
    """The first ``count`` GAP rows with exactly one coreferent name that fit ``max_length``."""
    from jattn.io import labels

    rows = [x for x in labels.read_gap(path) if x.gold]
    kept, _ = labels.fit_words(tokenizer, [x.words for x in rows], max_length)
    if len(kept) < count:
        raise ValueError(f"{path}: {len(kept)} usable GAP rows, {count} asked. Fix: ask for fewer")
    return [rows[i] for i in kept[:count]]


def gap_queries(model, examples: list, max_length: int = 256, batch_size: int = 8) -> dict:
    """-> {"correct" (Q, L, H) bool, "nearest", "first" (Q,) bool, "id" (Q,) str}."""
    from jattn.analyses.coref import gap_baselines, gap_correct
    from jattn.analyses.word_attention import word_attention

    L, H = model.config.num_layers, model.config.num_heads
    correct = np.zeros((len(examples), L, H), bool)
    for r in word_attention(model, [x.words for x in examples], max_length=max_length, batch_size=batch_size):
        correct[r.index] = gap_correct(r.maps, examples[r.index])
    base = [gap_baselines(x) for x in examples]
    return {"correct": correct, "nearest": np.asarray([b["nearest"] for b in base]),
            "first": np.asarray([b["first"] for b in base]), "id": np.asarray([x.id for x in examples])}


def best_head(correct: np.ndarray) -> tuple[int, int]:
    """(layer, head) with the most right queries (the first on ties). correct (Q, L, H)."""
    acc = correct.mean(0)  # (L, H)
    l, h = np.unravel_index(int(np.argmax(acc)), acc.shape)
    return int(l), int(h)


# ---------------------------------------------------------------- the stages

LITBANK = "litbank"
GAP_VAL, GAP_TEST = "gap/gap-validation.tsv", "gap/gap-test.tsv"
GAP_LENGTH = 256  # tokens of a GAP paragraph (or the model's maximum, if shorter)


def litbank_names() -> list[str]:
    """Every LitBank coreference file of the data manifest, as ``litbank/coref/<name>.conll``."""
    from jattn.io import manifest

    return sorted(f"{e.dataset}/{e.path}" for e in manifest.files([LITBANK]) if e.path.endswith(".conll"))


def litbank_stage(model: str, select_files: list[str], report_files: list[str]):
    """The stage function of ``clark.<model>-litbank`` (params: ``litbank_budget``,
    ``litbank_segments``): best head chosen on ``select_files``, reported on ``report_files``."""

    def run(ctx) -> dict:
        from experiments.clark2019.common import load, mean_deltas, note, said

        p, net = ctx.params, load(model)
        get = lambda files: litbank_queries(net, [ctx.data(f) for f in files], p["litbank_budget"],  # noqa: E731
                                            p["litbank_segments"])
        sel, rep = get(select_files), get(report_files)
        l, h = best_head(sel["correct"])
        li, hi = best_head(rep["correct"])
        rows = [
            {
                "index": i,
                "document": str(rep["document"][i]),
                "type": str(rep["type"][i]),
                "head": int(rep["correct"][i, l, h]),
                "in_sample": int(rep["correct"][i, li, hi]),
                **{k: int(rep[k][i]) for k in ("nearest", "same_head_word", "same_type")},
            }
            for i in range(len(rep["type"]))
        ]
        protocol = (
            f"LitBank: head {l}-{h} (0-based) chosen on {len(select_files)} documents ({len(sel['type'])} queries), "
            f"reported on {len(report_files)} others; segments of whole sentences ≤ {p['litbank_budget']} "
            "tokens, a mention's head its last word, mention type from the head word (pronoun list, capital "
            "letter, else nominal). Clark: CoNLL-2012, parsed heads."
        )
        claims = []
        for kind in ("all",) + TYPES:
            mine = [r for r in rows if kind in ("all", r["type"])]
            if len(mine) < 2:
                continue
            test, floor = (mean_deltas([r["head"] - r[other] for r in mine], [r["document"] for r in mine])[""]
                           for other in ("same_head_word", "nearest"))
            claims.append(ctx.claim(
                id=f"clark-{model}-coref-litbank" + ("" if kind == "all" else f"-{kind}"),
                claim=f"{model}: coreference head {l}-{h}, antecedent accuracy on LitBank, "
                      + ("every mention" if kind == "all" else f"{kind} mentions"),
                unit="accuracy", rows=mine, protocol=protocol,
                measure={"statistic": "mean", "columns": {"value": "head"}, "ci_method": "bootstrap",
                         "cluster": "document"},
                baseline={"name": "same head word", "columns": {"value": "same_head_word"}, "cluster": "document"},
                **note(f"head − same head word {said(test, 'documents')}; − nearest "
                         f"{said(floor, 'documents')}; head chosen on these queries (Clark's way): "
                         f"{np.mean([r['in_sample'] for r in mine]):.3f}")))
        lines = [
            "| mentions | queries | head (chosen on other documents) | in-sample head | nearest | same head word | "
            "most recent of the same type |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in ("all",) + TYPES:
            mine = [r for r in rows if kind in ("all", r["type"])]
            if mine:
                lines.append(f"| {kind} | {len(mine)} | " + " | ".join(
                    f"{np.mean([r[k] for r in mine]):.3f}" for k in ("head", "in_sample", "nearest", "same_head_word",
                                                                       "same_type")) + " |")
        lines.append(f"\nHeads (0-based): chosen on the selection documents {l}-{h}, in-sample {li}-{hi}; segments: "
                     f"{sel['segments']} + {rep['segments']}; dropped: {rep['dropped']}")
        return {"claims": claims, "table": "\n".join(lines), "head": [l, h]}

    return run


def gap_stage(model: str):
    """The stage function of ``clark.<model>-gap`` (params: ``gap_select``, ``gap_report``): best
    head chosen on GAP validation rows, reported on GAP test rows."""

    def run(ctx) -> dict:
        from experiments.clark2019.common import load, mean_deltas, note, said

        p, net = ctx.params, load(model)
        n = min(GAP_LENGTH, net.config.max_length)
        sel = gap_queries(net, gap_examples(ctx.data(GAP_VAL), net.tokenizer, p["gap_select"], n), n)
        rep = gap_queries(net, gap_examples(ctx.data(GAP_TEST), net.tokenizer, p["gap_report"], n), n)
        l, h = best_head(sel["correct"])
        li, hi = best_head(rep["correct"])
        pages = gap_pages(ctx.data(GAP_TEST))
        rows = [{"index": i, "id": str(rep["id"][i]), "document": pages[str(rep["id"][i])],
                 "head": int(rep["correct"][i, l, h]),
                 "in_sample": int(rep["correct"][i, li, hi]), "nearest": int(rep["nearest"][i]),
                 "first": int(rep["first"][i])} for i in range(len(rep["id"]))]
        test = mean_deltas([r["head"] - r["nearest"] for r in rows], [r["document"] for r in rows])[""]
        claim = ctx.claim(
            id=f"clark-{model}-coref-gap",
            claim=f"{model}: coreference head {l}-{h} (0-based), GAP pronoun -> the right one of two names",
            unit="accuracy",
            rows=rows,
            protocol=f"head chosen on the first {len(sel['id'])} GAP validation rows with exactly one coreferent name, "
            f"reported on the first {len(rows)} such test rows (≤ {n} tokens); a head is right when the pronoun's "
            "word attends more to the coreferent name's words.",
            measure={
                "statistic": "mean",
                "columns": {"value": "head"},
                "ci_method": "bootstrap",
                "cluster": "document",
            },
            baseline={"name": "nearest name", "columns": {"value": "nearest"}, "cluster": "document"},
            **note(
                f"head − nearest name {said(test, 'documents')}; first name "
                f"{np.mean([r['first'] for r in rows]):.3f}; in-sample head {li}-{hi}: "
                f"{np.mean([r['in_sample'] for r in rows]):.3f}"
            ),
        )
        return {"claims": [claim], "head": [l, h]}

    return run
