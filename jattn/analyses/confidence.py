"""Head confidence (Voita et al. 2019, §4.1): the mean over tokens of a head's maximum attention
weight, query rows of EOS / [SEP] excluded (the paper excludes EOS, where most heads park their
attention). Per (layer, head): Σ over sequences of the mean over that sequence's scored rows, then
divided by the number of sequences with a scored row (``segment_mean``), as Clark's statistics are.

Padding never enters: padded query rows are not scored, padded keys carry α = 0. On a translation
model it runs for each attention type (``encoder`` self, ``decoder`` self, ``cross``); EOS is
``</s>`` there (``SEP`` class), and the decoder's start token rows are kept.
"""

from __future__ import annotations

import dataclasses

from jattn.analyses.base import SEP, Method, Statistic, StepContext, segment_mean
from jattn.analyses.registry import register


@dataclasses.dataclass(frozen=True)
class HeadConfidence(Method):
    name = "confidence"
    layerwise = True  # each layer from that layer alone: reduced inside the scan
    families = ("encoder", "seq2seq")

    def reduce(self, ctx: StepContext) -> dict:
        weights = ctx.internals["weights"]  # (L, b, H, q, k)
        rows = (ctx.batch["query_mask"] > 0) & (ctx.batch["query_class"] != SEP)  # (b, q)
        total, count = segment_mean(weights.max(-1), rows)  # (L, H), ()
        return {"sum": total, "n": count}

    def finalize(self, totals, meta):
        return {"confidence": Statistic(totals["sum"] / max(float(totals["n"]), 1.0),
                                        "(L, H) mean over non-EOS tokens of the head's max attention weight")}


register("confidence", "head confidence: mean max attention weight over non-EOS tokens (Voita et al. 2019)",
         lambda model, options: HeadConfidence())
