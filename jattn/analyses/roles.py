"""Head roles of an encoder's self-attention at the subword level (Voita et al. 2019, §4:
positional, syntactic, rare-word heads), from the argmax key of each query row: a translation
model's encoder (the paper's setting) or an encoder model, where heads of known roles validate
the detectors (the embedded MiniLM's head 0-2 attends to the previous token: ``tests/test_roles.py``).

Voita et al. read roles off the model's own (subword) tokens, so do we; a parsed word is
represented by its first subword token (``token_labels``):

* **positional** (§4.1): row i's argmax is token i − 1 (previous) or i + 1 (next); rows of real
  non-EOS tokens that have that neighbour. Role when ≥ 90% of them hit (``syntax.POSITIONAL``).
* **syntactic** (§4.2): for a word with a head word and a relation in ``RELATIONS`` (Voita's
  nsubj, dobj, amod, advmod; UD v2 names dobj ``obj``), the row of the dependent's first token,
  keys of its own word excluded: correct when the argmax key's word is the gold head
  (dependent→head); and the column of the dependent's first token, rows of its own word excluded:
  correct when the argmax row's word is the head (head→dependent). Baseline per relation: the
  best fixed word offset k ∈ {−3..3} \\ {0}. Role when a head's better direction beats the best
  offset by ≥ 10 points on a relation with ≥ ``min_count`` words (``syntax.head_roles``). On a
  language with a gold structure of its own (the synthetic clause language: each dependent's head
  is its clause's head noun, ``jattn.artefacts.synthetic``) the relations are that structure's
  (``TokenRoles.relations``, ``token_labels``' ``known``).
* **rare words** (§4.3): in sentences whose rarest token (fewest occurrences in the training
  source; ties the leftmost; EOS excluded) is not among the ``top`` most frequent tokens, the
  share of real non-EOS rows whose argmax is that token. Role when > 50% ("mostly", METHODS §5;
  the paper's rare-word head hits 66%).

Everything is an additive count over sentences (``syntax.DependencyCounts`` plus the rare-word
hits), streamed by the runner on (source, target) pairs; each layer's counts come from that
layer's α alone, so the runner reduces them inside the encoder's layer loop and never holds every
layer's α. The labels come from ``token_labels`` (a dependency parse of the source, e.g.
``jattn.io.parse``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.confidence import scored_rows
from jattn.analyses.syntax import OFFSETS, DependencyCounts, head_roles

__all__ = ["frequency_rank", "RELATIONS", "token_labels", "token_words", "TokenRoles"]

RELATIONS = ("nsubj", "obj", "amod", "advmod")
RARE = 0.5  # a rare-word head attends to the rarest token in more than half of the rows


def token_words(tokenizer, ids: np.ndarray, text: str, words: list[str]) -> np.ndarray | None:
    """Word index of each token of ``ids`` (the tokenization of ``text``), -1 for specials;
    ``words`` are substrings of ``text`` in order (a parser's tokens). A token belongs to the word
    holding its first non-blank character. None when the tokenizer's decoding does not give back
    ``text`` (then no character offsets exist) or a word is not found in order."""
    decoded = [len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) for k in range(len(ids))]
    full = tokenizer.decode(ids, skip_special_tokens=True)
    if full != text:
        return None
    word_of_char, at = np.full(len(text), -1), 0
    for w, word in enumerate(words):
        start = text.find(word, at)
        if start < 0:
            return None
        word_of_char[start:start + len(word)] = w
        at = start + len(word)
    out, previous = np.full(len(ids), -1), 0
    for k, end in enumerate(decoded):
        chars = [c for c in range(previous, end) if not text[c].isspace()]
        if chars:
            out[k] = word_of_char[chars[0]]
        previous = end
    return out


def token_labels(word: np.ndarray | None, heads: np.ndarray, relations: list[str], ids: np.ndarray,
                 rank: np.ndarray, top: int, known: tuple[str, ...] = RELATIONS) -> dict:
    """Per-token labels of one sentence for ``TokenRoles``: ``word`` (n,) word index (-1 specials and
    unmapped sentences), ``dep_head`` (n,) the gold head word at the first token of each dependent
    of ``known`` relations (default ``RELATIONS``; -1 elsewhere), ``dep_rel`` (n,) its index in
    ``known``, ``rarest`` (n,) 1 at the rarest token when the sentence qualifies. heads (w,)
    1-based (0 root); rank (V,) frequency rank of every token id in the training source (0 the
    most frequent); the last id is EOS."""
    n = len(ids)
    word = np.full(n, -1) if word is None else word
    dep_head, dep_rel = np.full(n, -1), np.full(n, -1)
    first = {}
    for k in range(n):
        if word[k] >= 0 and word[k] not in first:
            first[word[k]] = k
    for w, k in first.items():
        base = relations[w].split(":")[0]
        if heads[w] > 0 and base in known:
            dep_head[k], dep_rel[k] = heads[w] - 1, known.index(base)
    rarest = np.zeros(n, np.int32)
    ranks = rank[ids[:-1]]  # EOS excluded
    if len(ranks) and ranks.max() >= top:
        rarest[int(np.argmax(ranks))] = 1  # the highest rank is the rarest; ties: the leftmost
    return {"word": word.astype(np.int32), "dep_head": dep_head.astype(np.int32),
            "dep_rel": dep_rel.astype(np.int32), "rarest": rarest}


def frequency_rank(sentences: list[np.ndarray], vocab_size: int) -> np.ndarray:
    """(V,) rank of each token id by its count in ``sentences`` (0 the most frequent; ties the lower
    id first; unseen ids last)."""
    counts = np.bincount(np.concatenate(sentences), minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))
    rank = np.empty(vocab_size, np.int64)
    rank[order] = np.arange(vocab_size)
    return rank


@dataclasses.dataclass(frozen=True)
class TokenRoles(Method):
    """Positional, syntactic and rare-word counts of every encoder self-attention head (module
    docstring), from examples labelled by ``token_labels``."""

    min_count: int = 100  # relations with fewer scored words give no syntactic role
    relations: tuple[str, ...] = RELATIONS  # what ``dep_rel`` indexes (``token_labels``' ``known``)
    name = "roles"
    families = ("seq2seq", "encoder")
    kinds = ("encoder",)  # of a translation model: its encoder self-attention
    layerwise = True  # each layer's counts from that layer's α alone: reduced inside the scan

    def prepare(self, batch) -> dict:
        missing = {"word", "dep_head", "dep_rel", "rarest"} - set(batch.labels)
        if missing:
            raise ValueError(f"method 'roles' needs per-token labels {sorted(missing)}. Fix: label each pair with "
                             "jattn.analyses.roles.token_labels")
        return {k: batch.labels[k] for k in ("word", "dep_head", "dep_rel", "rarest")}

    def reduce(self, ctx: StepContext) -> dict:
        W = ctx.internals["weights"]  # (L, b, H, n, n), L = 1 inside the runner's layer loop
        allowed = ctx.batch["allowed"]  # (b, n, n)
        word, dep_head, dep_rel = ctx.features["word"], ctx.features["dep_head"], ctx.features["dep_rel"]  # (b, n)
        rarest = ctx.features["rarest"] > 0  # (b, n)
        n = W.shape[-1]
        pos = jnp.arange(n)  # (n,)
        rows = scored_rows(ctx.batch)  # (b, n) real non-EOS rows, as confidence reads them
        top = jnp.where(allowed[None, :, None], W, -1.0).argmax(-1)  # (L, b, H, n) argmax key of each row
        count = lambda hit, m: (hit & m[None, :, None]).astype(jnp.int32).sum((1, 3))  # noqa: E731 -> (L, H)
        real = ctx.batch["key_mask"] > 0  # (b, n)
        has_next = jnp.concatenate([real[:, 1:], jnp.zeros_like(real[:, :1])], 1)  # (b, n)
        prev_rows, next_rows = rows & (pos >= 1)[None], rows & has_next
        qualifies = rarest.any(-1)  # (b,)
        rare_rows = rows & qualifies[:, None]
        rare_at = rarest.argmax(-1)  # (b,)
        # syntax: exclude the dependent's own word; the predicted word is the argmax token's word
        scored = dep_head >= 0  # (b, n)
        same = (word[:, :, None] == word[:, None, :]) & (word[:, :, None] >= 0)  # (b, n, n)
        keep = allowed & ~same  # (b, n, n)
        kept = jnp.where(keep[None, :, None], W, -1.0)  # (L, b, H, n, n)
        to_head = kept.argmax(-1)  # (L, b, H, n) row i's argmax key: dependent -> ?
        from_head = kept.argmax(-2)  # (L, b, H, n) column i's argmax query: ? -> dependent
        word_at = lambda idx: jnp.take_along_axis(word[None, :, None], idx, -1)  # noqa: E731 (L, b, H, n)
        R = len(self.relations)
        onehot = ((dep_rel[..., None] == jnp.arange(R)) & scored[..., None]).astype(jnp.int32)  # (b, n, R)
        hit = jnp.stack([word_at(to_head), word_at(from_head)]) == dep_head[None, None, :, None]  # (2, L, b, H, n)
        layers = lambda a: jnp.broadcast_to(a, (W.shape[0], *a.shape))  # noqa: E731  a count, the same every layer
        return {
            "correct": jnp.einsum("dlbhn,bnr->ldhr", hit.astype(jnp.int32), onehot),  # (L, 2, H, R)
            "total": layers(onehot.sum((0, 1))),  # (L, R)
            "offset_correct": layers(jnp.stack([((dep_head == word + o)[..., None] * onehot).sum((0, 1))
                                                for o in OFFSETS])),  # (L, K, R)
            "prev_hits": count(top == pos - 1, prev_rows), "prev_rows": prev_rows.sum(),  # (L, H), ()
            "next_hits": count(top == pos + 1, next_rows), "next_rows": next_rows.sum(),
            "rare_hits": count(top == rare_at[None, :, None, None], rare_rows), "rare_rows": rare_rows.sum(),
        }

    def counts(self, totals: dict) -> DependencyCounts:
        get = lambda k: np.rint(np.asarray(totals[k])).astype(np.int64)  # noqa: E731
        return DependencyCounts(self.relations, *(get(f.name) for f in dataclasses.fields(DependencyCounts)[1:]))

    def finalize(self, totals, meta):
        totals = {**totals, "correct": np.moveaxis(totals["correct"], 0, 1), "total": totals["total"][0],
                  "offset_correct": totals["offset_correct"][0]}  # reduce's layer axis first -> the counts' order
        counts = self.counts(totals)
        shares = lambda hits, rows: np.asarray(totals[hits], np.float64) / max(float(totals[rows]), 1.0)  # noqa
        acc, off, _ = counts.accuracy()
        return {
            "previous": Statistic(shares("prev_hits", "prev_rows"), "(L, H) share of rows whose argmax is the "
                                  "previous token"),
            "next": Statistic(shares("next_hits", "next_rows"), "(L, H) share of rows whose argmax is the next token"),
            "rare": Statistic(shares("rare_hits", "rare_rows"), "(L, H) share of rows whose argmax is the sentence's "
                              "rarest token"),
            "syntactic_accuracy": Statistic(np.nan_to_num(acc[..., :-1]).max(0), "(L, H, R) percent of dependents of "
                                            f"{', '.join(self.relations)} whose head the head finds, better direction"),
            **{f"roles_{k}": Statistic(np.asarray(v, np.float64), f"additive count {k}") for k, v in totals.items()},
        }

    def roles(self, statistics: dict, prefix: str = "encoder_") -> dict:
        """The role of every head from the finalized statistics (``prefix`` the runner's attention-type
        prefix): ``syntax.head_roles`` plus rare-word heads -> {"role": (L, H) str, "relation", ...}."""
        counts = prefix + "roles_"
        totals = {k[len(counts):]: s.value for k, s in statistics.items() if k.startswith(counts)}
        out = head_roles(self.counts(totals), self.min_count)
        out["rare"] = statistics[prefix + "rare"].value  # (L, H)
        rare, role = out["rare"] > RARE, out["role"].copy()
        role[rare] = np.where(role[rare] == "other", "rare", np.char.add(role[rare].astype(str), "+rare"))
        out["role"] = role
        return out
