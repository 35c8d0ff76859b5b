"""The runner: one batcher (``batcher``) and one corpus loop (``loop``) for every family and
attention type; a translation model's step per attention type is in ``translation``."""

from jattn.runner.batcher import buckets, token_classes, unit_ids
from jattn.runner.loop import RunResult, run_corpus

__all__ = ["RunResult", "buckets", "run_corpus", "token_classes", "unit_ids"]
