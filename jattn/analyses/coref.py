"""Coreference heads (Clark et al. 2019, §4.3), on GAP and on LitBank.

Word-level maps: units [CLS], words, [SEP]; unit k+1 is word k.

GAP: attention from the pronoun to a candidate name is the word-level attention from the
pronoun's word summed over the name's words (a name is one unit, as subwords are one word).
A head is right on an example when it gives the coreferent name more attention than the other
one; only examples with exactly one coreferent name are scored. Baselines: the nearest name
(word distance from the pronoun to the name's closest word; ties to the earlier name) and the
first name in the text.

LitBank: a mention's head word is the span's last word (LitBank has no parses; this picks
"Chancellor" in "the Lord Chancellor" but "London" in "the streets of London"). For every
mention with an earlier mention of its cluster in the segment, the candidates are the head
words of all mentions whose head word comes before its own; a head is right when its argmax
over the candidates (from the mention's head word) is the head word of a mention of the same
cluster. Baselines: the nearest candidate; the nearest candidate with the same head word
(case-insensitive), else the nearest.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jattn.io.labels import GapExample, Mention
from jattn.runner.protocol import HostBatch, Method, Statistic, StepContext
from jattn.analyses.registry import register
from jattn.analyses.weights import word_level

__all__ = ["antecedent_queries", "gap_baselines", "gap_correct", "PRONOUNS"]


def gap_scores(word_map: np.ndarray, ex: GapExample) -> tuple[np.ndarray, np.ndarray]:
    """Word-level attention from the pronoun to names A and B. word_map (L, H, u, u) ->
    ((L, H), (L, H))."""
    row = word_map[:, :, ex.pronoun + 1, :]  # (L, H, u)
    return row[..., [i + 1 for i in ex.a]].sum(-1), row[..., [i + 1 for i in ex.b]].sum(-1)


def gap_correct(word_map: np.ndarray, ex: GapExample) -> np.ndarray:
    """(L, H) bool: the head gives the coreferent name strictly more attention."""
    if ex.gold is None:
        raise ValueError(f"{ex.id}: no single coreferent name; GAP scoring needs gold 'A' or 'B'")
    a, b = gap_scores(word_map, ex)
    return a > b if ex.gold == "A" else b > a


def gap_baselines(ex: GapExample) -> dict[str, bool]:
    """Nearest-name and first-name baselines on one example."""
    dist = lambda span: min(abs(i - ex.pronoun) for i in span)  # noqa: E731
    nearest = "A" if (dist(ex.a), ex.a[0]) <= (dist(ex.b), ex.b[0]) else "B"
    first = "A" if ex.a[0] <= ex.b[0] else "B"
    return {"nearest": nearest == ex.gold, "first": first == ex.gold}


@dataclasses.dataclass
class CorefCounts:
    """Additive counts of antecedent selection."""

    correct: np.ndarray  # (L, H)
    total: int
    baselines: dict  # name -> correct count

    def __add__(self, other: "CorefCounts") -> "CorefCounts":
        return CorefCounts(self.correct + other.correct, self.total + other.total,
                           {k: self.baselines[k] + other.baselines[k] for k in self.baselines})

    def summary(self) -> dict:
        """Percent: best_head [layer, head], accuracy, each baseline, count."""
        acc = 100.0 * self.correct / max(self.total, 1)
        l, h = np.unravel_index(int(np.argmax(acc)), acc.shape)
        return {"count": int(self.total), "best_head": [int(l), int(h)], "accuracy": float(acc[l, h]),
                **{k: 100.0 * v / max(self.total, 1) for k, v in self.baselines.items()}}


def gap_counts(word_map: np.ndarray, ex: GapExample) -> CorefCounts:
    base = gap_baselines(ex)
    return CorefCounts(gap_correct(word_map, ex).astype(np.int64), 1, {k: int(v) for k, v in base.items()})


def antecedent_queries(mentions: list[Mention], words: list[str]):
    """Yield (query head word, candidate head words (sorted, before the query), gold set,
    nearest, same-head-word choice) for every mention with an earlier mention of its cluster
    (by head word position)."""
    heads = sorted({m.head for m in mentions})
    clusters_at: dict[int, set] = {}
    for m in mentions:
        clusters_at.setdefault(m.head, set()).add(m.cluster)
    for m in sorted(mentions, key=lambda m: (m.head, m.start)):
        cands = [h for h in heads if h < m.head]
        gold = {h for h in cands if m.cluster in clusters_at[h]}
        if not gold:
            continue
        nearest = cands[-1]
        same = [h for h in cands if words[h].lower() == words[m.head].lower()]
        yield m.head, cands, gold, nearest, (same[-1] if same else nearest)


PRONOUNS = frozenset("i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his "
                     "himself she her hers herself it its itself they them their theirs themselves".split())


def litbank_query_profile(mentions: list[Mention], words: list[str]) -> dict[str, int]:
    """What makes the same-head-word baseline strong on a segment: of the scored mentions
    (``antecedent_queries``), how many are pronouns, how many have an earlier candidate with the
    same head word, and how often that nearest same-word candidate is a right antecedent."""
    out = {"queries": 0, "pronoun": 0, "same_word_candidate": 0, "same_word_right": 0}
    for q, cands, gold, _, same in antecedent_queries(mentions, words):
        has_same = any(words[c].lower() == words[q].lower() for c in cands)
        out["queries"] += 1
        out["pronoun"] += words[q].lower() in PRONOUNS
        out["same_word_candidate"] += has_same
        out["same_word_right"] += has_same and same in gold
    return out


def litbank_counts(word_map: np.ndarray, mentions: list[Mention], words: list[str]) -> CorefCounts:
    """Antecedent selection counts of one segment. word_map (L, H, u, u)."""
    L, H = word_map.shape[:2]
    correct, total, base = np.zeros((L, H), np.int64), 0, {"nearest": 0, "same_head_word": 0}
    for q, cands, gold, nearest, same in antecedent_queries(mentions, words):
        att = word_map[:, :, q + 1, [c + 1 for c in cands]]  # (L, H, candidates)
        pick = np.asarray(cands)[att.argmax(-1)]  # (L, H) word index
        correct += np.isin(pick, list(gold))
        total += 1
        base["nearest"] += nearest in gold
        base["same_head_word"] += same in gold
    return CorefCounts(correct, total, base)


# ---------------------------------------------------------------- GAP through the runner

@dataclasses.dataclass(frozen=True)
class GapCoreference(Method):
    """``gap_counts`` summed over a corpus by the runner (``jattn analyze --format gap --methods
    coref``): per head, the share of GAP examples with exactly one coreferent name where the
    pronoun's word attends more to that name than to the other (word level), with the
    nearest- and first-name baselines. Reads the labels of ``--format gap`` read as words
    (``pronoun``, ``candidates``, ``gold``); other examples (gold -1) are not scored."""

    name = "coref"
    level = "word"
    layerwise = True  # each layer's counts from that layer's α alone: reduced inside the scan

    def prepare(self, batch: HostBatch) -> dict:
        if not {"pronoun", "candidates", "gold"} <= set(batch.labels):
            raise ValueError("method 'coref' needs GAP labels (pronoun, candidate names, gold name). "
                             "Fix: --format gap with the GAP tsv")
        base = np.zeros((2, len(batch.example)), np.int32)  # (2, b) nearest, first right
        for r, gold in enumerate(batch.labels["gold"]):
            if gold < 0:
                continue
            cand = batch.labels["candidates"][r]  # (n,)
            ex = GapExample("", [], int(batch.labels["pronoun"][r]), tuple(np.flatnonzero(cand == 1)),
                            tuple(np.flatnonzero(cand == 2)), "AB"[gold])
            right = gap_baselines(ex)
            base[:, r] = right["nearest"], right["first"]
        return {"pronoun": batch.labels["pronoun"], "candidates": batch.labels["candidates"],
                "gold": batch.labels["gold"], "baselines": base.T}  # (b,), (b, n), (b,), (b, 2)

    def reduce(self, ctx: StepContext) -> dict:
        W = word_level(ctx.internals["weights"], ctx.batch["unit_ids"])  # (L, b, H, u, u)
        f = ctx.features
        scored = f["gold"] >= 0  # (b,)
        row = jnp.take_along_axis(W, (f["pronoun"] + 1)[None, :, None, None, None], axis=3)[:, :, :, 0]  # (L, b, H, u)
        units = jnp.concatenate([jnp.zeros_like(f["candidates"][:, :1]), f["candidates"][:, :-1]], 1)  # (b, u)
        to_a = (row * (units == 1)[None, :, None]).sum(-1)  # (L, b, H)
        to_b = (row * (units == 2)[None, :, None]).sum(-1)  # (L, b, H)
        right = jnp.where((f["gold"] == 0)[None, :, None], to_a > to_b, to_b > to_a) & scored[None, :, None]
        return {"correct": right.astype(jnp.int32).sum(1),  # (L, H)
                "total": scored.astype(jnp.int32).sum(),  # ()
                "baselines": jnp.broadcast_to((f["baselines"] * scored[:, None]).sum(0), (W.shape[0], 2))}  # (L, 2)

    def finalize(self, totals, meta):
        n = max(float(totals["total"]), 1.0)
        return {"coref_gap_accuracy": Statistic(100.0 * totals["correct"] / n, "(L, H) percent of GAP examples "
                                                "where the pronoun attends more to the coreferent name (Clark et al. "
                                                "2019, §4.3)"),
                "coref_gap_count": Statistic(np.float64(totals["total"]), "() GAP examples scored"),
                "coref_gap_nearest": Statistic(100.0 * totals["baselines"][0, 0] / n, "() percent right, nearest "
                                               "name"),
                "coref_gap_first": Statistic(100.0 * totals["baselines"][0, 1] / n, "() percent right, first name")}

    def summary(self, stats: dict) -> dict:
        """As ``CorefCounts.summary``: count, best_head [layer, head], accuracy, baselines (percent)."""
        acc = np.asarray(stats["coref_gap_accuracy"])
        l, h = np.unravel_index(int(np.argmax(acc)), acc.shape)
        return {"count": int(stats["coref_gap_count"]), "best_head": [int(l), int(h)], "accuracy": float(acc[l, h]),
                "nearest": float(stats["coref_gap_nearest"]), "first": float(stats["coref_gap_first"])}

    def write_report(self, stats: dict, folder) -> list[Path]:
        path = Path(folder) / "coref_gap.json"
        path.write_text(json.dumps(self.summary(stats), indent=1))
        return [path]


register("coref", "GAP coreference heads: pronoun -> right name, nearest/first-name baselines (Clark et al. 2019; "
         "needs --format gap)", lambda model, options: GapCoreference())
