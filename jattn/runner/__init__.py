"""The runner: one batcher (``batcher``) and one corpus loop (``loop``) for every family and
attention type; a translation model's step per attention type is in ``translation``; the
protocol of the methods it calls (``Method``, ``Statistic``) in ``protocol``."""

from jattn.runner.batcher import buckets, model_batches, pad_rows, round_up, token_batches, token_classes, unit_ids
from jattn.runner.loop import RunResult, run_corpus
from jattn.runner.protocol import Method, Statistic

__all__ = ["buckets", "Method", "model_batches", "pad_rows", "round_up", "run_corpus", "RunResult", "Statistic",
           "token_batches", "token_classes", "unit_ids"]
