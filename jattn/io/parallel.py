"""Parallel text for translation: reading line-aligned files and encoding them (batching:
``jattn.runner.batcher``)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np

__all__ = ["encode"]


def normalize(line: str, lowercase: bool) -> str:
    """NFKC, collapsed whitespace, optionally lowercased."""
    line = " ".join(unicodedata.normalize("NFKC", line).split())
    return line.lower() if lowercase else line


def read_parallel(src_path, tgt_path, lowercase: bool = False) -> tuple[list[str], list[str]]:
    """Line-aligned source and target files -> two lists of normalised sentences."""
    src = Path(src_path).read_text(encoding="utf-8").splitlines()
    tgt = Path(tgt_path).read_text(encoding="utf-8").splitlines()
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel corpus")
    return [normalize(s, lowercase) for s in src], [normalize(t, lowercase) for t in tgt]


def encode(tokenizer, texts: list[str], max_tokens: int, target: bool = False, truncate: bool = False
           ) -> list[np.ndarray]:
    """Token ids (with the closing ``</s>``) per sentence. A sentence longer than ``max_tokens`` is
    an error naming how many are, unless ``truncate`` (then it is cut to ``max_tokens``)."""
    kw = {"text_target": texts} if target else {"text": texts}
    ids = tokenizer(**kw, truncation=truncate, max_length=max_tokens if truncate else None)["input_ids"]
    if too_long := [i for i, x in enumerate(ids) if len(x) > max_tokens]:
        side = "target" if target else "source"
        raise ValueError(f"{len(too_long)} {side} sentence(s) exceed {max_tokens} tokens (first: #{too_long[0]}, "
                         f"{len(ids[too_long[0]])} tokens). Fix: raise the maximum length (--max-length) or "
                         "shorten them; nothing is cut silently")
    return [np.asarray(x, np.int32) for x in ids]
