"""Head confidence (Voita et al. 2019, §4.1): the mean over tokens of a head's maximum attention
weight, query rows of EOS / [SEP] excluded (the paper excludes EOS, where most heads park their
attention). Per (layer, head): Σ over sequences of the mean over that sequence's scored rows, then
divided by the number of sequences with a scored row (``per_example``), as Clark's statistics are.

Padding never enters: padded query rows are not scored, padded keys carry α = 0. On a translation
model it runs for each attention type (``encoder`` self, ``decoder`` self, ``cross``); EOS is
``</s>`` there (``SEP`` class), and the decoder's start token rows are kept.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jattn.nn.token_classes import SEP
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.registry import register

__all__ = ["HeadConfidence", "per_example"]


def scored_rows(batch: dict) -> jax.Array:
    """(b, q) the query rows confidence reads: real, not EOS."""
    return (batch["query_mask"] > 0) & (batch["query_class"] != SEP)


def per_example(weights: jax.Array, rows: jax.Array) -> jax.Array:
    """Each sequence's confidence: weights (L, b, H, q, k), rows (b, q) -> (L, b, H), the mean over
    its scored rows of the max weight (0 without one); ``HeadConfidence`` sums these over sequences."""
    rows = rows.astype(weights.dtype)  # (b, q)
    total = jnp.einsum("lbhq,bq->lbh", weights.max(-1), rows)  # (L, b, H)
    return total / jnp.maximum(rows.sum(-1), 1.0)[None, :, None]


@dataclasses.dataclass(frozen=True)
class HeadConfidence(Method):
    name = "confidence"
    layerwise = True  # each layer from that layer alone: reduced inside the scan
    families = ("encoder", "seq2seq", "decoder")

    def reduce(self, ctx: StepContext) -> dict:
        weights = ctx.internals["weights"]  # (L, b, H, q, k)
        rows = scored_rows(ctx.batch)  # (b, q)
        return {"sum": per_example(weights, rows).sum(1), "n": rows.any(-1).sum().astype(weights.dtype)}  # (L, H), ()

    def finalize(self, totals, meta):
        return {"confidence": Statistic(totals["sum"] / max(float(totals["n"]), 1.0),
                                        "(L, H) mean over non-EOS tokens of the head's max attention weight")}


register("confidence", "head confidence: mean max attention weight over non-EOS tokens (Voita et al. 2019)",
         lambda model, options: HeadConfidence())
