"""Attention-weight statistics of Clark et al. 2019, "What Does BERT Look At?" (§3, §4.1).

Definitions and constants: ``METHODS.md`` §1. Every statistic is per (layer, head): for each
sequence the mean over its real query rows, then the mean over sequences (equal weight per
sequence). Padding never enters: padded rows are not averaged, padded keys carry α = 0 and are
excluded from smoothing and entropies.

``level="word"`` applies the same statistics to the word-level map (Clark §4.2): attention
TO a word is the sum over its subword columns, attention FROM a word the mean over its subword
rows (the paper's choice), special tokens being their own units. Names get a ``word_`` prefix.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from jattn.nn.token_classes import CLASS_NAMES, CLS, SEP
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.base import class_sums, ratio, segment_mean
from jattn.analyses.registry import register

__all__ = ["ClassAttention", "Entropy", "word_level"]

ENTROPY_SMOOTHING = 1e-4  # A' = (1 - 1e-4) A + 1e-4 / n  (Clark's released code)


@dataclasses.dataclass
class View:
    """An attention map with its real-row and allowed-key masks and token classes, token- or
    word-level; rows are queries, columns keys (q = k but for cross-attention)."""

    weights: jax.Array  # (L, b, H, q, k) rows sum to 1 over allowed keys
    real: jax.Array  # (b, q) bool real query rows
    allowed: jax.Array  # (b, q, k) bool keys each real row may attend (causal in a decoder)
    query_class: jax.Array  # (b, q) int, -1 on padding
    key_class: jax.Array  # (b, k) int, -1 on padding


def word_level(weights: jax.Array, unit_ids: jax.Array) -> jax.Array:
    """Token -> word-level map (Clark et al. 2019, §4.2): sum TO a unit over its columns,
    mean FROM a unit over its rows. weights (L, b, H, n, n), unit_ids (b, n) -> (L, b, H, n, n),
    unit u in row/column u (units ≤ tokens); rows of real units still sum to 1."""
    n = unit_ids.shape[1]
    member = (unit_ids[:, None, :] == jnp.arange(n)[None, :, None]).astype(weights.dtype)  # (b, u, n)
    size = member.sum(-1, keepdims=True)  # (b, u, 1)
    to_units = jnp.einsum("lbhij,buj->lbhiu", weights, member)  # (L, b, H, n, u)
    return jnp.einsum("bvi,lbhiu->lbhvu", member / jnp.maximum(size, 1.0), to_units)  # (L, b, H, u, u)


def view(ctx: StepContext, level: str) -> View:
    """The token-level map of ``ctx.kind``, or the encoder's word-level aggregation (needs ``unit_ids``)."""
    weights = ctx.internals["weights"]  # (L, b, H, q, k)
    if level == "token":
        return View(weights, ctx.batch["query_mask"] > 0, ctx.batch["allowed"], ctx.batch["query_class"],
                    ctx.batch["key_class"])
    real = ctx.batch["attention_mask"] > 0  # (b, n)
    units = ctx.batch["unit_ids"]  # (b, n)
    n = units.shape[1]
    first = (units[:, :, None] == jnp.arange(n)[None, None, :]) & real[:, :, None]  # (b, t, u)
    # a unit's class is its first token's class (a word "." is punctuation, "U.S." is not)
    is_first = first & (jnp.cumsum(first, axis=1) == 1)  # (b, t, u)
    unit_class = jnp.where(is_first.any(1), jnp.einsum("btu,bt->bu", is_first.astype(jnp.int32),
                                                               ctx.batch["token_class"]),
                           -1)  # (b, u)
    unit = unit_class >= 0  # (b, u)
    return View(word_level(weights, units), unit, unit[:, :, None] & unit[:, None, :], unit_class, unit_class)


def _check_level(level: str) -> str:
    if level not in ("token", "word"):
        raise ValueError(f"level must be 'token' or 'word', got {level!r}")
    return "" if level == "token" else "word_"


@dataclasses.dataclass(frozen=True)
class LevelStatistic(Method):
    """A Clark et al. statistic at token level or on the word-level map (``level="word"``,
    encoders only): its CLI name and statistic names get the ``word-`` / ``word_`` prefix."""

    level: str = "token"
    layerwise = True  # each layer's statistics from that layer alone: reduced inside the scan
    families = ("encoder", "seq2seq")
    base_name: ClassVar[str]

    def __post_init__(self):
        _check_level(self.level)

    @property
    def prefix(self) -> str:
        return _check_level(self.level)

    @property
    def name(self) -> str:
        return self.prefix.replace("_", "-") + self.base_name


@dataclasses.dataclass(frozen=True)
class ClassAttention(LevelStatistic):
    """Attention to [CLS], [SEP], punctuation ("." ","), other; [SEP]→[SEP], non-[SEP]→[SEP];
    previous/self/next token (Clark et al. 2019, Fig. 1-2, §3.1-3.2).

    On a translation model, per attention type (``jattn.runner.protocol``): [SEP] is ``</s>``,
    [CLS] the decoder's start token; cross-attention (target rows, source keys) has the class
    statistics only, prev/self/next being positions of one sequence.

    attn_to_c = mean_s mean_{i real} Σ_{j∈c} α[h,i,j]. sep_to_sep / nonsep_to_sep average
    Σ_{j∈SEP} α[h,i,j] over [SEP] rows / other real rows. attn_prev = mean over real rows i ≥ 1
    of α[h,i,i-1]; attn_next over real rows whose i+1 is real, α[h,i,i+1] ("next" = key i+1;
    Clark's released plot swaps the labels); attn_self = α[h,i,i].
    """

    base_name = "weights"
    needs = ("[CLS] and [SEP] tokens and a next token to attend, which a causal LM, whose query i sees keys "
             "j ≤ i only, lacks")

    def reduce(self, ctx: StepContext) -> dict:
        v = view(ctx, self.level)
        A, real = v.weights, v.real  # (L, b, H, q, k), (b, q)
        out = {}
        to_class = dict(enumerate(class_sums(A, v.key_class)))  # class -> (L, b, H, q)
        for c, name in enumerate(CLASS_NAMES):
            out[f"attn_to_{name}"], out[f"attn_to_{name}_n"] = segment_mean(to_class[c], real)
        is_sep = v.query_class == SEP  # (b, q)
        out["sep_to_sep"], out["sep_to_sep_n"] = segment_mean(to_class[SEP], real & is_sep)
        out["nonsep_to_sep"], out["nonsep_to_sep_n"] = segment_mean(to_class[SEP], real & ~is_sep)
        if ctx.kind == "cross":
            return out
        prev = jnp.diagonal(A, offset=-1, axis1=-2, axis2=-1)  # (L, b, H, n-1) α[i+1, i]
        nxt = jnp.diagonal(A, offset=1, axis1=-2, axis2=-1)  # (L, b, H, n-1) α[i, i+1]
        both = real[:, 1:] & real[:, :-1]  # (b, n-1) rows whose neighbour is real
        out["attn_prev"], out["attn_prev_n"] = segment_mean(prev, both)
        out["attn_next"], out["attn_next_n"] = segment_mean(nxt, both)
        out["attn_self"], out["attn_self_n"] = segment_mean(jnp.diagonal(A, axis1=-2, axis2=-1), real)
        return out

    def finalize(self, totals, meta):
        p, w = self.prefix, ("word-level " if self.prefix else "")
        desc = {
            **{f"attn_to_{c}": f"(L, H) mean {w}attention from a real query to {label} keys"
               for c, label in zip(CLASS_NAMES, ("[CLS]", "[SEP]", 'punctuation ("." or ",")',
                                                "all other"))},
            "sep_to_sep": f"(L, H) mean {w}attention from [SEP] rows to [SEP] keys",
            "nonsep_to_sep": f"(L, H) mean {w}attention from non-[SEP] rows to [SEP] keys",
            "attn_prev": f"(L, H) mean {w}α[i, i-1] (previous token) over rows i ≥ 1",
            "attn_self": f"(L, H) mean {w}α[i, i] (the token itself)",
            "attn_next": f"(L, H) mean {w}α[i, i+1] (next token) over rows with a next token",
        }
        if meta.get("kind") == "cross":
            desc = {k: d for k, d in desc.items() if not k.startswith(("attn_prev", "attn_self", "attn_next"))}
        return {p + k: Statistic(ratio(totals, k), d + "; per sequence over real rows, then over "
                                 "sequences (Clark et al. 2019)") for k, d in desc.items()}


@dataclasses.dataclass(frozen=True)
class Entropy(LevelStatistic):
    """Mean row entropy of the smoothed map, all rows and the [CLS] row (Clark et al. 2019,
    Fig. 4): A' = 0.9999·A + 0.0001/n over the n real keys, H_i = −Σ_j A'_ij log A'_ij (nats).
    Uniform reference: mean over sequences of log n. On a translation model per attention type
    and on a causal LM, n the keys row i may attend (i + 1 in a causal decoder; the uniform
    reference then the per-sequence mean of log n_i over rows); a causal LM has no [CLS] row."""

    base_name = "entropy"
    families = ("encoder", "seq2seq", "decoder")

    def reduce(self, ctx: StepContext) -> dict:
        v = view(ctx, self.level)
        A, real = v.weights, v.real  # (L, b, H, q, k), (b, q)
        n = jnp.maximum(v.allowed.sum(-1), 1).astype(A.dtype)  # (b, q) keys a row may attend
        keys = v.allowed[None, :, None]  # (1, b, 1, q, k)
        smooth = (1 - ENTROPY_SMOOTHING) * A + ENTROPY_SMOOTHING / n[None, :, None, :, None]
        plogp = jnp.where(keys, smooth * jnp.log(jnp.where(keys, smooth, 1.0)), 0.0)  # (L, b, H, q, k)
        row_entropy = -plogp.sum(-1)  # (L, b, H, q)
        out = {}
        out["entropy"], out["entropy_n"] = segment_mean(row_entropy, real)
        if not getattr(ctx.config, "causal", False):  # a causal LM has no [CLS]
            out["entropy_cls"], out["entropy_cls_n"] = segment_mean(row_entropy, real & (v.query_class == CLS))
        uniform, out["entropy_uniform_n"] = segment_mean(jnp.log(n)[None, :, None], real)  # (1, 1), ()
        out["entropy_uniform"] = uniform.reshape(())
        return out

    def finalize(self, totals, meta):
        p, w = self.prefix, ("word-level " if self.prefix else "")
        tail = "; smoothing 0.9999·A + 0.0001/n, nats (Clark et al. 2019)"
        stats = {
            p + "entropy": Statistic(ratio(totals, "entropy"),
                                     f"(L, H) mean {w}row entropy over real rows, then sequences" + tail),
            p + "entropy_cls": Statistic(ratio(totals, "entropy_cls"),
                                         "(L, H) mean entropy of the [CLS] row over sequences" + tail)
            if "entropy_cls" in totals else None,
            p + "entropy_uniform": Statistic(ratio(totals, "entropy_uniform"),
                                             f"() uniform reference: mean over sequences of the mean over real rows "
                                             f"of log n, n = real {'units' if p else 'tokens'} the row may attend"),
        }
        return {k: s for k, s in stats.items() if s is not None}


register("weights", "attention to [CLS]/[SEP]/punctuation/other, SEP->SEP, prev/self/next (Clark et al. 2019)",
         lambda model, options: ClassAttention())
register("entropy", "mean row entropy, [CLS]-row entropy, uniform reference (Clark et al. 2019)",
         lambda model, options: Entropy())
register("word-weights", "'weights' on the word-level map (needs --format conllu)",
         lambda model, options: ClassAttention("word"))
register("word-entropy", "'entropy' on the word-level map (needs --format conllu)",
         lambda model, options: Entropy("word"))
