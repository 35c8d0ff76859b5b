"""Dependency-syntax heads (Clark et al. 2019, §4.2, Table 1) and Voita et al. 2019's head roles.

Definitions (``METHODS.md`` §1, §5): take a sentence's word-level map ([CLS], words, [SEP]),
drop the [CLS]/[SEP] rows and columns, zero the diagonal; the head predicted for word i is
argmax_j A[i, j] (dependent→head) or argmax_j A[j, i] (head→dependent, the transposed map);
ties go to the leftmost word. Every word whose gold head is a word (not ROOT) is scored, per
relation (UD relation with subtype) and over "all". Baseline: word i's head is word i+k for a
fixed k ∈ {−3..3} \\ {0}, the best k per relation.

Head roles (Voita et al. 2019, §5): *positional* when the argmax of the full word-level map
(specials kept, diagonal kept) of ≥ 90% of the word rows that have the neighbour is the
previous (or next) word; *syntactic* when, for some relation with ≥ 100 occurrences, the head's
accuracy (its better direction) beats the best offset by ≥ 10 points.

Everything accumulates as additive counts (``DependencyCounts``), so a corpus streams.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jattn.runner.protocol import HostBatch, Method, Statistic, StepContext
from jattn.analyses.registry import register
from jattn.analyses.weights import word_level

__all__ = ["DependencyHeads", "DIRECTIONS", "OFFSETS", "predicted_heads"]

OFFSETS = (-3, -2, -1, 1, 2, 3)
DIRECTIONS = ("dep->head", "head->dep")  # A, Aᵀ
MIN_COUNT = 100  # relations with fewer occurrences are not tabulated (Clark et al. 2019)
POSITIONAL = 0.9  # Voita et al. 2019
SYNTACTIC_MARGIN = 10.0  # points over the best offset (Voita et al. 2019)


@dataclasses.dataclass
class DependencyCounts:
    """Additive counts; ``relations`` names the last axis of every count."""

    relations: tuple[str, ...]
    correct: np.ndarray  # (2, L, H, R) words whose head the head's argmax finds, per direction
    total: np.ndarray  # (R,) scored words
    offset_correct: np.ndarray  # (K, R) words whose head is at offset OFFSETS[k]
    prev_hits: np.ndarray  # (L, H) rows whose argmax is the previous word
    prev_rows: np.ndarray  # () rows that have a previous word
    next_hits: np.ndarray  # (L, H)
    next_rows: np.ndarray  # ()

    @classmethod
    def zeros(cls, relations, num_layers: int, num_heads: int) -> "DependencyCounts":
        R, L, H = len(relations), num_layers, num_heads
        z = lambda *s: np.zeros(s, np.int64)  # noqa: E731
        return cls(tuple(relations), z(2, L, H, R), z(R), z(len(OFFSETS), R), z(L, H), z(), z(L, H), z())

    def __add__(self, other: "DependencyCounts") -> "DependencyCounts":
        if self.relations != other.relations:
            raise ValueError("adding DependencyCounts over different relation lists")
        return DependencyCounts(self.relations, *(getattr(self, f.name) + getattr(other, f.name)
                                                  for f in dataclasses.fields(self)[1:]))

    def accuracy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Percent: (heads (2, L, H, R+1), offsets (K, R+1), totals (R+1,)); last column "all"."""
        correct = np.concatenate([self.correct, self.correct.sum(-1, keepdims=True)], -1)
        offsets = np.concatenate([self.offset_correct, self.offset_correct.sum(-1, keepdims=True)], -1)
        total = np.append(self.total, self.total.sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            return 100.0 * correct / total, 100.0 * offsets / total, total


def predicted_heads(word_map: np.ndarray) -> np.ndarray:
    """word_map (..., u, u) with [CLS] first and [SEP] last -> (2, ..., w) predicted head
    (1-based word index) of every word: dependent→head, then head→dependent."""
    A = np.array(word_map[..., 1:-1, 1:-1], dtype=np.float64)  # (..., w, w)
    w = A.shape[-1]
    A[..., np.arange(w), np.arange(w)] = 0.0
    return np.stack([A.argmax(-1), np.swapaxes(A, -1, -2).argmax(-1)]) + 1  # (2, ..., w)


def sentence_counts(word_map: np.ndarray, heads: np.ndarray, relation_ids: np.ndarray,
                    relations: tuple[str, ...]) -> DependencyCounts:
    """Counts of one sentence. word_map (L, H, u, u), heads (w,) 1-based (0 = ROOT),
    relation_ids (w,) indices into ``relations``."""
    L, H, u, _ = word_map.shape
    w = u - 2
    if len(heads) != w:
        raise ValueError(f"the map has {w} words, the tree {len(heads)}")
    c = DependencyCounts.zeros(relations, L, H)
    scored = heads > 0  # (w,)
    onehot = (relation_ids[:, None] == np.arange(len(relations))) & scored[:, None]  # (w, R)
    hit = predicted_heads(word_map) == heads  # (2, L, H, w)
    c.correct += np.einsum("dlhw,wr->dlhr", hit.astype(np.int64), onehot.astype(np.int64))
    c.total += onehot.sum(0)
    pos = np.arange(1, w + 1)  # (w,)
    for k, off in enumerate(OFFSETS):
        c.offset_correct[k] += ((heads == pos + off)[:, None] & onehot).sum(0)
    top = word_map[:, :, 1:-1, :].argmax(-1)  # (L, H, w) unit index of each word row's argmax
    rows = np.arange(1, w + 1)  # unit index of each word
    c.prev_hits += (top[..., 1:] == rows[1:] - 1).sum(-1)
    c.next_hits += (top[..., :-1] == rows[:-1] + 1).sum(-1)
    c.prev_rows += w - 1
    c.next_rows += w - 1
    return c


def relation_ids(tree_relations: list[str], relations: tuple[str, ...]) -> np.ndarray:
    index = {r: i for i, r in enumerate(relations)}
    return np.array([index[r] for r in tree_relations], np.int64)


def table(counts: DependencyCounts, min_count: int = MIN_COUNT, select: DependencyCounts | None = None) -> dict:
    """Clark et al. 2019 Table 1: per relation with ≥ ``min_count`` scored words, and "all":
    count, best head [layer, head, direction] (0-based), its accuracy, best offset, its
    accuracy (percent), sorted by count. The best head and offset are chosen on ``select``
    (e.g. dev) when given, else on ``counts`` itself as Clark did; accuracies are ``counts``'."""
    acc, off, total = counts.accuracy()
    sel_acc, sel_off, _ = (select or counts).accuracy()
    if select is not None and select.relations != counts.relations:
        raise ValueError("select and counts must share the relation list")
    names = counts.relations + ("all",)
    out = {}
    for r in np.argsort(-total, kind="stable"):
        if total[r] < min_count:
            continue
        with np.errstate(invalid="ignore"):
            pick = np.nan_to_num(sel_acc[..., r], nan=-1.0)
        d, l, h = np.unravel_index(np.argmax(pick), acc.shape[:3])
        k = int(np.argmax(np.nan_to_num(sel_off[:, r], nan=-1.0)))
        out[names[r]] = {"count": int(total[r]), "best_head": [int(l), int(h), DIRECTIONS[d]],
                         "head_accuracy": float(acc[d, l, h, r]), "best_offset": OFFSETS[k],
                         "offset_accuracy": float(off[k, r])}
    return out


def head_roles(counts: DependencyCounts, min_count: int = MIN_COUNT) -> dict:
    """Voita et al. 2019 roles per (layer, head): positional (previous/next word ≥ 90%),
    syntactic (≥ 10 points over the best offset on some relation with ≥ ``min_count`` words;
    the relation with the largest margin named). -> {"role": (L, H) str, "relation": (L, H)
    str, "margin": (L, H) float, "prev": (L, H), "next": (L, H) fractions}."""
    acc, off, total = counts.accuracy()
    prev = counts.prev_hits / max(int(counts.prev_rows), 1)
    nxt = counts.next_hits / max(int(counts.next_rows), 1)
    keep = [r for r in range(len(counts.relations)) if total[r] >= min_count]
    L, H = prev.shape
    margin = np.full((L, H), -np.inf)
    relation = np.full((L, H), "", dtype=object)
    for r in keep:
        m = acc[:, :, :, r].max(0) - np.nanmax(off[:, r])  # (L, H)
        better = m > margin
        margin[better], relation[better] = m[better], counts.relations[r]
    syntactic = margin >= SYNTACTIC_MARGIN
    positional = np.where(prev >= POSITIONAL, "previous", np.where(nxt >= POSITIONAL, "next", ""))
    role = np.full((L, H), "other", dtype=object)
    role[syntactic] = "syntactic"
    role[positional != ""] = "positional"
    role[(positional != "") & syntactic] = "positional+syntactic"
    return {"role": role, "relation": np.where(syntactic, relation, ""), "margin": margin,
            "prev": prev, "next": nxt, "positional": positional}


def write_table(rows: dict, folder) -> tuple[Path, Path]:
    """``dependency.json`` and ``dependency.md`` (Table 1 form) in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dependency.json").write_text(json.dumps(rows, indent=1))
    lines = ["| relation | count | best head (layer-head, 0-based) | direction | accuracy | best offset | "
             "offset accuracy |", "|---|---:|---|---|---:|---:|---:|"]
    for name, r in rows.items():
        l, h, d = r["best_head"]
        lines.append(f"| {name} | {r['count']} | {l}-{h} | {d} | {r['head_accuracy']:.1f} | "
                     f"{r['best_offset']:+d} | {r['offset_accuracy']:.1f} |")
    (folder / "dependency.md").write_text("\n".join(lines) + "\n")
    return folder / "dependency.json", folder / "dependency.md"


# ---------------------------------------------------------------- the same counts through the runner

def _word_rows(word_map: jax.Array) -> jax.Array:
    """Rows of the words of a single segment: unit k + 1 is word k. (L, b, H, u, u) -> (L, b, H, u, u),
    row k = word k's row (the last row zero)."""
    return jnp.concatenate([word_map[..., 1:, :], jnp.zeros_like(word_map[..., :1, :])], axis=-2)


@dataclasses.dataclass(frozen=True)
class DependencyHeads(Method):
    """``sentence_counts`` summed over a corpus by the runner (``jattn analyze --format conllu
    --methods syntax``): per-head dependency accuracy both directions per relation, the offset
    baselines and the previous/next-word counts of the head roles, from each sentence's
    word-level map and its gold tree (labels ``heads`` and ``relations`` of the CoNLL-U reader).
    ``relations``: the relation names counted (every relation of the corpus)."""

    relations: tuple[str, ...]
    min_count: int = MIN_COUNT  # relations with fewer scored words stay out of the table and the roles
    name = "syntax"
    level = "word"
    layerwise = True  # each layer's counts from that layer's α alone: reduced inside the scan

    def prepare(self, batch: HostBatch) -> dict:
        if "heads" not in batch.labels or "relations" not in batch.label_lists:
            raise ValueError("method 'syntax' needs gold trees: examples labelled with 'heads' and 'relations'. "
                             "Fix: --format conllu with a treebank whose HEAD and DEPREL columns are filled")
        index = {r: i for i, r in enumerate(self.relations)}
        relation = np.full(batch.labels["heads"].shape, -1, np.int32)  # (b, n)
        for r, names in enumerate(batch.label_lists["relations"]):
            if names is None:
                continue
            if unknown := sorted(set(names) - set(index)):
                raise ValueError(f"relations {unknown} are not in the method's list. Fix: build DependencyHeads "
                                 "with every relation of the corpus (jattn analyze does)")
            relation[r, :len(names)] = [index[x] for x in names]
        return {"heads": batch.labels["heads"], "relation": relation}

    def reduce(self, ctx: StepContext) -> dict:
        W = word_level(ctx.internals["weights"], ctx.batch["unit_ids"])  # (L, b, H, u, u)
        heads, relation = ctx.features["heads"], ctx.features["relation"]  # (b, n) word k: 1-based head, -1 pad
        n = W.shape[-1]
        word = heads >= 0  # (b, n) real words
        w = word.sum(-1)  # (b,)
        unit, pos = jnp.arange(n), jnp.arange(n) + 1  # (u,), (n,) unit of word k
        word_unit = (unit >= 1)[None] & (unit[None] <= w[:, None])  # (b, u)
        cands = word_unit[None, :, None, None, :] & (unit[None, :] != pos[:, None])[None, None, None]  # (1, b, 1, n, u)
        rows = _word_rows(W)  # (L, b, H, n, u)
        cols = _word_rows(jnp.swapaxes(W, -1, -2))  # (L, b, H, n, u) row k = word k's column
        off_diag = lambda A: jnp.where(unit[None, :] == pos[:, None], 0.0, A)  # noqa: E731  zero diagonal
        pick = lambda A: jnp.where(cands | (unit[None, :] == pos[:, None]), off_diag(A), -1.0).argmax(-1)  # noqa: E731
        predicted = jnp.stack([pick(rows), pick(cols)])  # (2, L, b, H, n) 1-based word index
        scored = word & (heads > 0)  # (b, n)
        onehot = ((relation[..., None] == jnp.arange(len(self.relations))) & scored[..., None]).astype(jnp.int32)
        hit = (predicted == heads[None, None, :, None, :]).astype(jnp.int32)  # (2, L, b, H, n)
        real_unit = word_unit | (unit[None] == 0) | (unit[None] == (w + 1)[:, None])  # (b, u)
        top = jnp.where(real_unit[None, :, None, None, :], rows, -1.0).argmax(-1)  # (L, b, H, n)
        has_prev, has_next = word & (pos[None] >= 2), word & (pos[None] <= (w - 1)[:, None])  # (b, n)
        count = lambda m: m.astype(jnp.int32).sum((1, 3))  # noqa: E731  (L, b, H, n) -> (L, H)
        layers = lambda a: jnp.broadcast_to(a, (W.shape[0], *a.shape))  # noqa: E731  a count, the same every layer
        return {
            "correct": jnp.einsum("dlbhn,bnr->ldhr", hit, onehot),  # (L, 2, H, R)
            "total": layers(onehot.sum((0, 1))),  # (L, R)
            "offset_correct": layers(jnp.stack([((heads == pos[None] + o)[..., None] * onehot).sum((0, 1))
                                                for o in OFFSETS])),  # (L, K, R)
            "prev_hits": count((top == pos - 1) & has_prev[None, :, None]),  # (L, H)
            "prev_rows": jnp.maximum(w - 1, 0).sum(),  # ()
            "next_hits": count((top == pos + 1) & has_next[None, :, None]),  # (L, H)
            "next_rows": jnp.maximum(w - 1, 0).sum(),  # ()
        }

    def finalize(self, totals, meta):
        c = self.counts(totals)
        acc, off, total = c.accuracy()
        return {
            "dependency_accuracy": Statistic(np.fmax.reduce(acc[..., -1], 0), "(L, H) percent of words (all relations) "
                                             "whose gold head the head's argmax finds, better direction (Clark et al. "
                                             "2019, §4.2)"),
            **{f"dependency_{f.name}": Statistic(getattr(c, f.name).astype(np.float64), f"{f.name} of "
                                                 "jattn.analyses.syntax.DependencyCounts over relations "
                                                 f"{', '.join(self.relations)}")
               for f in dataclasses.fields(c)[1:]},
        }

    def counts(self, totals: dict) -> DependencyCounts:
        """The summed totals (or ``dependency_*`` statistics) as ``DependencyCounts``."""
        if "correct" in totals:  # the totals, layer axis first (``reduce``): the counts' order
            totals = {**totals, "correct": np.moveaxis(totals["correct"], 0, 1), "total": totals["total"][0],
                      "offset_correct": totals["offset_correct"][0]}
        get = lambda k: np.rint(np.asarray(totals.get(k, totals.get(f"dependency_{k}")))).astype(np.int64)  # noqa
        return DependencyCounts(self.relations, *(get(f.name) for f in dataclasses.fields(DependencyCounts)[1:]))

    def write_report(self, stats: dict, folder) -> list[Path]:
        """Table 1 (``dependency.json`` / ``.md``, best head chosen in-sample as Clark did); its
        figures, the per-relation heatmaps and the head-role map, are ``jattn.viz.figures``'."""
        return list(write_table(table(self.counts(stats), self.min_count), folder))


register("syntax", "per-head dependency accuracy per relation, best offsets, head roles (Clark et al. 2019 Table 1, "
         "Voita et al. 2019; needs --format conllu with gold trees)",
         lambda model, options: DependencyHeads(tuple(options.relations), options.min_count))
