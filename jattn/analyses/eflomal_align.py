"""A statistical word aligner as a baseline and silver standard: eflomal (Östling & Tiedemann
2016, "Efficient word alignment with Markov Chain Monte Carlo", PBML 106; PyPI ``eflomal``),
a Bayesian IBM1 → HMM → HMM+fertility model fitted by Gibbs sampling, run in both directions
and symmetrised with ``jattn.analyses.alignment.grow_diag_final_and``.

Unsupervised: it is trained on the very sentences it aligns (usually with extra parallel text
for better statistics). Its sampler seeds itself from /dev/urandom, so two runs differ slightly;
``tests/test_alignment.py`` and the alignment experiment therefore compare runs, never fixed
links. Needs the optional package: ``pip install eflomal`` (in the ``test`` extra).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from jattn.analyses.alignment import Links, grow_diag_final_and, parse_links

__all__ = ["eflomal_align"]


def _eflomal():
    try:
        import eflomal
    except ImportError:
        raise ImportError("the eflomal baseline needs the eflomal package. Fix: pip install eflomal "
                          "(or pip install -e '.[test]')") from None
    return eflomal


def eflomal_align(source: Sequence[Sequence[str]], target: Sequence[Sequence[str]], *, n_samplers: int = 3,
                  rel_iterations: float = 1.0) -> tuple[list[Links], list[Links], list[Links]]:
    """Align pre-split sentence pairs with eflomal. -> (forward, reverse, symmetrised), one set of
    0-based (source word, target word) links per pair; symmetrised = grow-diag-final-and.
    eflomal lowercases words itself. Every sentence needs at least one word and no word may
    contain whitespace."""
    if len(source) != len(target):
        raise ValueError(f"{len(source)} source sentences for {len(target)} target sentences")
    for side, sents in (("source", source), ("target", target)):
        for k, words in enumerate(sents):
            if not words:
                raise ValueError(f"{side} sentence {k} is empty: eflomal needs at least one word per side. "
                                 "Fix: drop the pair")
            if any(not w or w != "".join(w.split()) for w in words):
                raise ValueError(f"{side} sentence {k} has an empty word or one containing whitespace: {words!r}")
    aligner = _eflomal().Aligner(n_samplers=n_samplers, rel_iterations=rel_iterations)
    with tempfile.TemporaryDirectory(prefix="eflomal-") as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        aligner.align([" ".join(w) + "\n" for w in source], [" ".join(w) + "\n" for w in target],
                      links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True)
        forward = [parse_links(line, one_based=False)[0] for line in fwd.read_text().splitlines()]
        reverse = [parse_links(line, one_based=False)[0] for line in rev.read_text().splitlines()]
    if len(forward) != len(source) or len(reverse) != len(source):
        raise RuntimeError(f"eflomal returned {len(forward)}/{len(reverse)} alignments for {len(source)} pairs")
    for k, (f, r) in enumerate(zip(forward, reverse)):
        for i, j in f | r:
            if i >= len(source[k]) or j >= len(target[k]):
                raise RuntimeError(f"eflomal link {i}-{j} outside pair {k} ({len(source[k])} × {len(target[k])} "
                                   "words)")
    return forward, reverse, [grow_diag_final_and(f, r) for f, r in zip(forward, reverse)]
