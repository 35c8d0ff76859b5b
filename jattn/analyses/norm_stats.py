"""Corpus statistics of the norm-based analysis, as methods of the streaming runner
(``jattn.runner.protocol``; CLI ``jattn analyze --methods norms,norm-freq,mixing``).

* ``NormClassAttention`` ("norms", Kobayashi et al. 2020, §4.2, Fig. 2-4): per (layer, head)
  and token class ([CLS], [SEP], "."/",", other), the weight-based attention Σ_{j∈c} α[h,i,j],
  the norm-based Σ_{j∈c} ‖α f_h(x_j)‖ (raw, and as a share of Σ_j ‖α f‖), each averaged over
  real query rows then over sequences, and the mean ‖f_h(x_j)‖ and mean received α over the
  class's tokens (per sequence, then over sequences): the α vs ‖f‖ scatter per class.
* ``NormFrequency`` ("norm-freq", §4.3): per vocabulary id, the mean over occurrences of the
  received α (mean over layers, heads and real query rows) and of ‖f(x)‖ (mean over layers and
  heads); Spearman ρ of each against the frequency rank, per token type, from a rank file
  (``rank count id`` lines, ``rank_file=``; ``jattn analyze --rank-file``) and from
  the token counts of the analysed corpus itself.
* ``MixingRatio`` ("mixing", Kobayashi et al. 2021, §4, Table 1): 12% of each sequence's real
  non-special tokens (⌊0.12·m⌋, at least one, as the authors' code) replaced by [MASK],
  positions drawn from a generator seeded by (seed, corpus index); mean mixing ratio of Attn-W,
  Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N over all real tokens (specials and [MASK]
  included, as the authors' code), per layer and pooled over layers; per-type means and their
  Spearman ρ against the frequency rank.

Spearman ρ is reported over token types (ids seen in the corpus and in the ranking), and over
token occurrences with each occurrence carrying its type's mean (exact from the per-id sums
and counts) — a *type-mean weighting*, not the authors' statistic. Their code correlates each
occurrence's own value (and for mixing ratios uses unmasked input), which needs every
occurrence kept: ``jattn.analyses.norm_occurrences`` computes it from a streamed pass. The
weightings differ (MiniLM, 1,000 GAP paragraphs: ρ(‖f‖, rank) −0.08 over types, 0.76 with the
type-mean weighting, 0.73 with the authors' own-value statistic).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn.token_classes import CLASS_NAMES, CLS, SEP
from jattn.runner.protocol import HostBatch, Method, Statistic, StepContext
from jattn.analyses.base import class_sums, ratio, segment_mean
from jattn.analyses.norms import residual_norms, transformed_norm
from jattn.analyses.registry import register, require_rank_file

__all__ = ["MIXING", "read_ranks"]

MIXING = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")


def _f_norms(internals, view) -> jax.Array:
    """‖f_h(x_j)‖ for stacked internals and parameter views, one layer at a time. -> (L, b, H, n)"""
    return jax.lax.map(lambda it: transformed_norm(*it), (internals["values"], view["out_kernel"]))


@dataclasses.dataclass(frozen=True)
class NormClassAttention(Method):
    """Weight- vs norm-based attention to token classes per (layer, head) (Kobayashi et al. 2020);
    on a translation model per attention type (queries × keys: source × source, target ×
    target, target × source), the classes those of ``jattn.nn.token_classes``."""

    name = "norms"
    layerwise = True  # each layer's statistics from that layer alone: reduced inside the scan
    families = ("encoder", "seq2seq")

    def reduce(self, ctx: StepContext) -> dict:
        real, keys = ctx.batch["query_mask"] > 0, ctx.batch["key_mask"] > 0  # (b, q), (b, k)
        key_class = ctx.batch["key_class"]  # (b, k)
        A = ctx.internals["weights"].astype(jnp.float32) * real[None, :, None, :, None]  # (L, b, H, q, k) real rows
        fn = _f_norms(ctx.internals, ctx.view) * keys[None, :, None, :]  # (L, b, H, k)
        AN = A * fn[:, :, :, None, :]  # (L, b, H, q, k)  ‖α f‖
        total = AN.sum(-1)  # (L, b, H, q)
        received = A.sum(3) / jnp.maximum(real.sum(-1), 1)[None, :, None, None]  # (L, b, H, k) row-mean α[:, j]
        to_w = class_sums(A, key_class)  # (C, L, b, H, q)
        to_n = class_sums(AN, key_class)  # (C, L, b, H, q)
        out = {}
        for c, name in enumerate(CLASS_NAMES):
            cols = (key_class == c)  # (b, k)
            w, nrm = to_w[c], to_n[c]  # (L, b, H, q) each
            out[f"weight_to_{name}"], out[f"weight_to_{name}_n"] = segment_mean(w, real)
            out[f"norm_to_{name}"], out[f"norm_to_{name}_n"] = segment_mean(nrm, real)
            share = nrm / jnp.where(total > 0, total, 1.0)  # (L, b, H, q)
            out[f"norm_share_to_{name}"], out[f"norm_share_to_{name}_n"] = segment_mean(share, real)
            out[f"fnorm_{name}"], out[f"fnorm_{name}_n"] = segment_mean(fn, cols & keys)
            out[f"received_{name}"], out[f"received_{name}_n"] = segment_mean(received, cols & keys)
        return out

    def finalize(self, totals, meta):
        tail = "; mean over real query rows, then over sequences (Kobayashi et al. 2020)"
        stats = {}
        for c, label in zip(CLASS_NAMES, ("[CLS]", "[SEP]", '"." or ","', "other")):
            stats[f"weight_to_{c}"] = Statistic(ratio(totals, f"weight_to_{c}"), f"(L, H) Σ_j∈{label} α" + tail)
            stats[f"norm_to_{c}"] = Statistic(ratio(totals, f"norm_to_{c}"), f"(L, H) Σ_j∈{label} ‖α f(x_j)‖" + tail)
            stats[f"norm_share_to_{c}"] = Statistic(ratio(totals, f"norm_share_to_{c}"),
                                                    f"(L, H) Σ_j∈{label} ‖α f‖ / Σ_j ‖α f‖" + tail)
            stats[f"fnorm_{c}"] = Statistic(ratio(totals, f"fnorm_{c}"),
                                            f"(L, H) mean ‖f(x_j)‖ over {label} tokens, then over sequences")
            stats[f"received_{c}"] = Statistic(ratio(totals, f"received_{c}"),
                                               f"(L, H) mean over {label} tokens j of the row-mean α[:, j], "
                                               "then over sequences")
        return stats


def read_ranks(path, vocab_size: int) -> np.ndarray:
    """``rank count id`` lines -> rank per vocabulary id (V,), NaN for ids not ranked."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"frequency rank file {path} not found. Fix: pass rank_file= a "
                                "file of 'rank count id' lines, e.g. frequency/rank_count_ids.txt in the "
                                "data folder (jattn data fetch frequency)")
    ranks = np.full(vocab_size, np.nan)
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"{path}:{n}: expected three integers 'rank count id', got {line!r}. "
                             "Fix: pass a rank file of 'rank count vocab_id' lines")
        rank, _, i = map(int, parts)
        if not 0 <= i < vocab_size:
            raise ValueError(f"{path}:{n}: id {i} outside the vocabulary [0, {vocab_size})")
        ranks[i] = rank
    return ranks


def corpus_ranks(counts: np.ndarray) -> np.ndarray:
    """Frequency rank (1 = most frequent, ties share the lowest rank) of ids with count > 0."""
    from scipy.stats import rankdata

    ranks = np.full(counts.shape, np.nan)
    seen = counts > 0
    ranks[seen] = rankdata(-counts[seen], method="min")
    return ranks


def spearman(values: np.ndarray, ranks: np.ndarray) -> tuple[float, int]:
    """Spearman ρ over ids where both are defined; (ρ, number of ids)."""
    from scipy.stats import spearmanr

    ok = ~np.isnan(values) & ~np.isnan(ranks)
    if ok.sum() < 3:
        return float("nan"), int(ok.sum())
    return float(spearmanr(values[ok], ranks[ok]).statistic), int(ok.sum())


def _tied_ranks(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) of each value in the multiset where value k occurs weights[k]
    times — the ranks ``rankdata(np.repeat(values, weights))`` gives, per distinct entry."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])  # first entry of each tie group
    group_w = np.add.reduceat(w, starts)  # occurrences per group
    before = np.cumsum(group_w) - group_w  # occurrences ranked below each group
    rank_of_group = before + (group_w + 1) / 2
    ranks = np.empty_like(values, dtype=np.float64)
    ranks[order] = np.repeat(rank_of_group, np.diff(np.r_[starts, len(v)]))
    return ranks


def spearman_occurrences(values: np.ndarray, ranks: np.ndarray, counts: np.ndarray) -> float:
    """Spearman ρ over token occurrences, each occurrence carrying its type's value: exactly
    ``spearmanr(np.repeat(values, counts), np.repeat(ranks, counts))`` without the repeat."""
    ok = ~np.isnan(values) & ~np.isnan(ranks) & (counts > 0)
    x, y, w = values[ok], ranks[ok], counts[ok].astype(np.float64)
    if w.sum() < 3:
        return float("nan")
    rx, ry = _tied_ranks(x, w), _tied_ranks(y, w)
    mx, my = np.average(rx, weights=w), np.average(ry, weights=w)
    cov = np.average((rx - mx) * (ry - my), weights=w)
    return float(cov / np.sqrt(np.average((rx - mx) ** 2, weights=w) * np.average((ry - my) ** 2, weights=w)))


def _per_id(vocab: int, ids: jax.Array, values: jax.Array, real: jax.Array) -> jax.Array:
    """Σ over real token occurrences of values, by vocabulary id. (b, n) -> (V,)"""
    return jnp.zeros(vocab, jnp.float32).at[ids.reshape(-1)].add((values * real).reshape(-1))


def _frequency_stats(counts: np.ndarray, sums: dict, ranks: np.ndarray, what: str) -> dict:
    """sums: name -> (Σ over occurrences per id (V,), description). Per-id means and their
    Spearman ρ vs the rank file and vs the frequency rank counted in the analysed corpus."""
    own = corpus_ranks(counts)
    stats = {}
    for name, (total, desc) in sums.items():
        mean = np.where(counts > 0, total / np.maximum(counts, 1), np.nan)
        rho, n = spearman(mean, ranks)
        rho_own, n_own = spearman(mean, own)
        stats[f"{name}_by_id"] = Statistic(mean, f"(V,) {desc} per vocabulary id, NaN if unseen")
        stats[f"{name}_spearman_rank"] = Statistic(np.array(rho), f"() Spearman ρ of {desc} vs frequency "
                                                   f"rank ({what}; {n} token types)")
        stats[f"{name}_spearman_corpus_rank"] = Statistic(
            np.array(rho_own), f"() Spearman ρ of {desc} vs frequency rank counted in this corpus ({n_own} types)")
        stats[f"{name}_spearman_rank_occurrences"] = Statistic(
            np.array(spearman_occurrences(mean, ranks, counts)),
            f"() Spearman ρ of {desc} vs frequency rank ({what}) over token occurrences, each carrying its "
            "type's mean (a type-mean weighting; the authors' statistic gives each occurrence its own value: "
            "jattn.analyses.norm_occurrences)")
    return stats


@dataclasses.dataclass(frozen=True)
class NormFrequency(Method):
    """Mean received α and ‖f(x)‖ per vocabulary id vs frequency rank (Kobayashi et al. 2020, §4.3)."""

    vocab_size: dataclasses.InitVar[int]
    rank_file: Path
    vocab: int = dataclasses.field(init=False)
    ranks: np.ndarray = dataclasses.field(init=False, repr=False, compare=False)
    name = "norm-freq"
    layerwise = True  # per layer and vocabulary id, reduced inside the scan; finalize averages the layers

    def __post_init__(self, vocab_size):
        object.__setattr__(self, "vocab", vocab_size)
        object.__setattr__(self, "rank_file", Path(self.rank_file))
        object.__setattr__(self, "ranks", read_ranks(self.rank_file, vocab_size))

    def reduce(self, ctx: StepContext) -> dict:
        real = (ctx.batch["attention_mask"] > 0).astype(jnp.float32)  # (b, n)
        A = ctx.internals["weights"].astype(jnp.float32) * real[None, :, None, :, None]  # (L, b, H, n, n) real rows
        received = A.sum(3).mean(2) / jnp.maximum(real.sum(-1), 1.0)[None, :, None]  # (L, b, n)
        fn = _f_norms(ctx.internals, ctx.view).mean(2)  # (L, b, n)
        ids = ctx.batch["input_ids"]
        per_id = jax.vmap(lambda v: _per_id(self.vocab, ids, v, real))  # (L, b, n) -> (L, V)
        return {"count": per_id(jnp.ones_like(fn)),  # (L, V) the same occurrences in every layer
                "alpha": per_id(received), "fnorm": per_id(fn)}

    def finalize(self, totals, meta):
        count = totals["count"][0]  # (V,)
        stats = _frequency_stats(count, {
            "freq_alpha": (totals["alpha"].mean(0), "mean received α (layers, heads, query rows)"),
            "freq_fnorm": (totals["fnorm"].mean(0), "mean ‖f(x)‖ (layers, heads)")}, self.ranks, str(self.rank_file))
        stats["freq_token_count"] = Statistic(count, "(V,) occurrences of each vocabulary id")
        return stats


def mask_tokens(batch: HostBatch, mask_token_id: int, rate: float, seed: int) -> np.ndarray:
    """Replace max(1, ⌊rate·m⌋) of the m real non-special tokens of each row by [MASK]
    (Kobayashi et al. 2021's code). Generator seeded by (seed, corpus index). -> input_ids (b, n)"""
    ids = batch.input_ids.copy()
    for r in range(ids.shape[0]):
        if batch.example[r] < 0:
            continue
        cands = np.flatnonzero((batch.attention_mask[r] > 0) & (batch.token_class[r] != CLS)
                               & (batch.token_class[r] != SEP))
        if len(cands):
            k = max(1, int(rate * len(cands)))
            ids[r, np.random.default_rng([seed, int(batch.example[r])]).choice(cands, k, replace=False)] = mask_token_id
    return ids


@dataclasses.dataclass(frozen=True)
class MixingRatio(Method):
    """Mixing ratios of Attn-W, Attn-N, AttnRes-W, AttnRes-N, AttnResLn-N (Kobayashi et al. 2021)."""

    model: dataclasses.InitVar[object]
    _: dataclasses.KW_ONLY
    mask_rate: dataclasses.InitVar[float] = 0.12
    seed: int = 0
    rank_file: Path
    mask_id: int = dataclasses.field(init=False)
    eps: float = dataclasses.field(init=False)
    vocab: int = dataclasses.field(init=False)
    rate: float = dataclasses.field(init=False)
    ranks: np.ndarray = dataclasses.field(init=False, repr=False, compare=False)
    name = "mixing"
    internals = ()  # its own forward on the masked input, each layer's ratios computed inside the layer loop

    def __post_init__(self, model, mask_rate):
        if model.config.norm_position != "post":
            raise ValueError("the mixing method's AttnResLn-N ratio is a post-LN block's (the LayerNorm after the "
                             "residual sum); this model's blocks are pre-LN, where it is undefined (docs/METHODS.md). "
                             "Fix: jattn.norms(model, examples, residual=True) gives the AttnRes-N ratios of a pre-LN "
                             "model; the alti method its contributions")
        for k, v in dict(mask_id=model.tokenizer.mask_token_id, eps=model.config.layer_norm_eps,
                         vocab=model.config.vocab_size, rate=mask_rate, rank_file=Path(self.rank_file)).items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "ranks", read_ranks(self.rank_file, self.vocab))

    def prepare(self, batch: HostBatch) -> dict:
        if self.rate == 0:
            return {"input_ids": batch.input_ids}
        return {"input_ids": mask_tokens(batch, self.mask_id, self.rate, self.seed)}

    def reduce(self, ctx: StepContext) -> dict:
        ids = ctx.features["input_ids"]  # (b, n)
        mask = ctx.batch["attention_mask"]  # (b, n)
        real = (mask > 0).astype(jnp.float32)  # (b, n)

        def ratios(layer, view, take):  # a chunk of one layer's internals (b', ...) -> its mixing ratios (b', n)
            r = residual_norms(layer, view, take(mask), self.eps)
            return {f"mixing_{k}": r[f"mixing_{k}"] for k in MIXING}

        outputs, _ = ctx.forward(input_ids=ids, internals=None, layer_rows=ratios)
        r = outputs["layer_rows"]  # mixing_* (L, b, n)
        out = {"tokens": real.sum()}
        for k in MIXING:
            ratio_ = r[f"mixing_{k}"]  # (L, b, n)
            out[k] = jnp.einsum("lbn,bn->l", ratio_, real)  # (L,)
            if k in ("attnres_n", "attnresln_n"):
                out[f"{k}_by_id"] = _per_id(self.vocab, ids, ratio_.mean(0), real)
        out["count"] = _per_id(self.vocab, ids, jnp.ones_like(real), real)
        return out

    def finalize(self, totals, meta):
        n = max(float(totals["tokens"]), 1.0)
        stats = {}
        for k in MIXING:
            stats[f"mixing_{k}"] = Statistic(totals[k] / n, f"(L,) mean {k} mixing ratio over real tokens, per "
                                             f"layer (Kobayashi et al. 2021; {self.rate:.0%} masked)")
            stats[f"mixing_{k}_mean"] = Statistic(np.array(totals[k].sum() / (n * len(totals[k]))),
                                                  f"() mean {k} mixing ratio over real tokens and layers")
        stats.update(_frequency_stats(totals["count"], {
            f"mixing_{k}": (totals[f"{k}_by_id"], f"mean {k} mixing ratio (over layers)")
            for k in ("attnres_n", "attnresln_n")}, self.ranks, str(self.rank_file)))
        return stats


register("norms", "weight- vs norm-based (‖αf‖) attention to token classes, ‖f(x)‖ per class "
         "(Kobayashi et al. 2020)",
         lambda model, options: NormClassAttention())
register("norm-freq", "mean received α and ‖f(x)‖ per token id, Spearman vs frequency rank (needs --rank-file; "
         "Kobayashi et al. 2020)",
         lambda model, options: NormFrequency(model.config.vocab_size, require_rank_file(options, "norm-freq")))
register("mixing", "mixing ratios Attn-W/N, AttnRes-W/N, AttnResLn-N, 12% masked (needs --rank-file; "
         "Kobayashi et al. 2021)",
         lambda model, options: MixingRatio(model, rank_file=require_rank_file(options, "mixing")))
