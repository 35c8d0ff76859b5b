"""A synthetic translation task that needs the encoder's self-attention: parallel text generated
deterministically (no download), trained and scored by the same path as Multi30k
(``jattn.artefacts.translation``).

The source language is a sequence of clauses, each a head noun, one to five dependents and a
clause marker::

    source   HEAD d_1 d_2 ... d_k MARK        (MARK: "ta" keeps the order, "ru" reverses it)
    target   d_1[c] d_2[c] ... d_k[c] HEAD'   (ta)
             d_k[c] ... d_2[c] d_1[c] HEAD'   (ru)

where ``c`` is the head's noun class (one of four, not visible in its spelling) and ``d[c]`` the
dependent's target form for that class (its own word: four forms per dependent). The head comes
last in the target, the marker is not translated. So a target word is a function of three source
tokens at positions set by the content: its own dependent, the head at the start of its clause
(the nearest noun to its left) and the marker at the end (the nearest marker to its right), and
its target position depends on the marker too. An encoder with self-attention can put the class
and the order into each dependent's vector; without it each of them must be looked up again by
the decoder's cross-attention from keys that know only a token and its position (``test_synthetic_
translation.py`` shows one dependent at one position with different target forms).

The words are pseudo-words drawn once from a fixed seed (``WORD_SEED``), so every split of every
task is the same on every machine; a split is drawn from its own seed, so the test set does not
depend on the size of the training set. Private: the corpus is read through
``jattn.artefacts.translation.splits``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

WORD_SEED = 20190528  # the words of the language (Voita et al. 2019's arXiv date)
SPLIT_SEEDS = {"train": 1, "val": 2, "test": 3}
CLASSES = 4
MARKERS = {"ta": False, "ru": True}  # marker -> the clause's dependents reversed in the target
CLAUSE = "clause"  # the relation of a dependent to its clause's head noun (``SyntheticTask.structure``)


@dataclasses.dataclass(frozen=True)
class SyntheticTask:
    """A clause language: ``nouns`` head nouns (``CLASSES`` classes), ``dependents`` dependent
    words, clauses of 1..``max_dependents`` dependents, sentences of ``min_len``..``max_len``
    source tokens; ``sizes`` the pairs of the train, val and test splits."""

    nouns: int = 24
    dependents: int = 32
    max_dependents: int = 5
    min_len: int = 10
    max_len: int = 40
    sizes: tuple[tuple[str, int], ...] = (("train", 40000), ("val", 1000), ("test", 1000))

    def lexicon(self) -> dict:
        """The words: source nouns, their classes and target forms, source dependents and the
        target form of each (dependent, class); all distinct."""
        rng = np.random.default_rng(WORD_SEED)
        syllables = [o + v + c for o in "bdfgklmnprstvz" for v in "aeiou" for c in ("", "n", "r", "s", "l")]
        words = [str(w) for w in rng.permutation(syllables) if w not in MARKERS]  # one syllable: ~1.7 pieces
        need = 2 * self.nouns + self.dependents * (1 + CLASSES)
        if len(words) < need:
            raise ValueError(f"the language needs {need} words, {len(words)} syllables: fewer nouns or dependents")
        it = iter(words)
        nouns = [next(it) for _ in range(self.nouns)]
        return {"nouns": nouns, "class": {n: i % CLASSES for i, n in enumerate(nouns)},
                "noun_target": {n: next(it) for n in nouns},
                "dependents": (deps := [next(it) for _ in range(self.dependents)]),
                "form": {(d, c): next(it) for d in deps for c in range(CLASSES)}}

    def translate(self, source: list[str], lexicon: dict | None = None) -> list[str]:
        """The target words of ``source`` words (the rule of the module docstring)."""
        lex = lexicon or self.lexicon()
        out, clause = [], []
        for word in source:
            if word not in MARKERS:
                clause.append(word)
                continue
            head, deps = clause[0], clause[1:]
            c = lex["class"][head]
            out += [lex["form"][d, c] for d in (deps[::-1] if MARKERS[word] else deps)] + [lex["noun_target"][head]]
            clause = []
        if clause:
            raise ValueError(f"{' '.join(source)!r} ends inside a clause: every clause ends with a marker")
        return out

    def structure(self, source: list[str]) -> tuple[list[int], list[str]]:
        """The gold structure of ``source`` words, as a dependency parse gives it (Voita et al. 2019,
        §4.2 read syntactic heads against one): per word its head (1-based word index, 0 none) and
        relation. A dependent's head is its clause's head noun (relation ``CLAUSE``), the word its
        target form depends on; the head noun ("root") and the marker ("mark") have none."""
        heads, relations, start = [], [], None
        for i, word in enumerate(source):
            if word in MARKERS:
                heads.append(0)
                relations.append("mark")
                start = None
            elif start is None:
                heads.append(0)
                relations.append("root")
                start = i
            else:
                heads.append(start + 1)
                relations.append(CLAUSE)
        if start is not None:
            raise ValueError(f"{' '.join(source)!r} ends inside a clause: every clause ends with a marker")
        return heads, relations

    def sentence(self, rng: np.random.Generator, lex: dict) -> list[str]:
        """One source sentence: clauses until its length lies in ``min_len``..``max_len``."""
        nouns, deps, marks = lex["nouns"], lex["dependents"], list(MARKERS)
        while True:
            words: list[str] = []
            for _ in range(int(rng.integers(2, 8))):
                k = int(rng.integers(1, self.max_dependents + 1))
                words += [nouns[rng.integers(len(nouns))], *(deps[i] for i in rng.integers(len(deps), size=k)),
                          marks[rng.integers(len(marks))]]
            if self.min_len <= len(words) <= self.max_len:
                return words

    def split(self, name: str) -> tuple[list[str], list[str]]:
        """Split ``name`` (train, val, test): source and target sentences, one string each."""
        lex, n = self.lexicon(), dict(self.sizes)[name]
        rng = np.random.default_rng([WORD_SEED, SPLIT_SEEDS[name]])
        src = [self.sentence(rng, lex) for _ in range(n)]
        return [" ".join(s) for s in src], [" ".join(self.translate(s, lex)) for s in src]


TASKS = {"clauses": SyntheticTask()}  # name (TranslationConfig.corpus) -> task


def splits(name: str) -> dict[str, tuple[list[str], list[str]]]:
    """Task ``name``'s train, val and test splits: {split: (sources, targets)}."""
    if name not in TASKS:
        raise ValueError(f"unknown synthetic corpus {name!r}; known: {', '.join(TASKS)}")
    return {s: TASKS[name].split(s) for s, _ in TASKS[name].sizes}
