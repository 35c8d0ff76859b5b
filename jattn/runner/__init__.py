"""The runner: one batcher (``batcher``) and one corpus loop (``loop``) for every family and
attention type; a translation model's step per attention type is in ``translation``."""

from jattn.runner.batcher import buckets, model_batches, pad_rows, round_up, token_batches, token_classes, unit_ids
from jattn.runner.loop import RunResult, run_corpus

__all__ = ["buckets", "model_batches", "pad_rows", "round_up", "run_corpus", "RunResult", "token_batches",
           "token_classes", "unit_ids"]
