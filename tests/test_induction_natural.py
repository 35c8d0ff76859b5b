"""The induction LMs trained on natural text only (``jattn.families.gpt2.recipes``: the
``induction-natural-*`` recipes): they register with nothing planted, every training sequence is a
window of the documents' running text (the check fails on a planted mixture), copies between
documents are dropped while repeats inside one stay, and an unknown text is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.families.gpt2.train import TEXTS, InductionLMConfig, Sampler, distinct_documents, documents

NAMES = [f"induction-natural-{kind}{f'-s{s}' if s else ''}" for kind in ("attn-only", "gpt2") for s in range(5)]


def test_natural_recipes_register_with_nothing_planted():
    from jattn.io import artefacts

    for name in NAMES:
        r = artefacts.recipe(name)
        c = InductionLMConfig(**dict(r.options))
        assert r.kind == "language_model" and c.random_share == 0 and c.distinct and set(r.needs) == set(c.text)
        assert c.text == tuple(TEXTS) and (c.layers, c.heads, c.d_model) == (2, 8, 128)  # the existing LMs' shape
        assert c.attention_only == ("attn-only" in name) and c.seed == (int(name[-1]) if "-s" in name else 0)


def _is_window(row: np.ndarray, stream: np.ndarray) -> bool:
    """``row`` occurs as one contiguous run of ``stream``."""
    starts = np.nonzero(stream[: len(stream) - len(row) + 1] == row[0])[0]
    return any((stream[s: s + len(row)] == row).all() for s in starts)


@pytest.mark.parametrize("share, windows", [(0.0, True), (0.5, False)])
def test_every_natural_sequence_is_a_window_of_the_text(data_set, tmp_path, share, windows):
    """With ``random_share=0`` each row after BOS is a run of the documents' token stream, so no
    sequence holds a planted repeated segment; a planted mixture (0.5) fails the same check."""
    from jattn.families.gpt2.train import _stream, train_tokenizer

    for name in TEXTS:
        data_set(name)
    c = InductionLMConfig(text=tuple(TEXTS), distinct=True, random_share=share, limit_text=40, context=48,
                          batch_size=16, vocab_size=400)
    docs = documents(c)
    assert len(docs) > 100 and all(d.strip() for d in docs)
    tok = train_tokenizer(docs, tmp_path, c.vocab_size)
    bos = tok.convert_tokens_to_ids("<|endoftext|>")
    stream = _stream(tok, docs, bos)  # (tokens,)
    sample = Sampler(stream, c, bos, len(tok))
    rows = np.concatenate([sample(step) for step in range(4)])  # (64, context)
    assert (rows[:, 0] == bos).all()
    assert all(_is_window(r[1:], stream) for r in rows) is windows


def test_distinct_documents_drops_copies_and_keeps_repeats_inside_one():
    run = "one two three four five six seven eight nine ten eleven twelve"
    docs = [f"{run} and more", "short one", f"{run} {run}", f"a {run} b", "short one", "other words entirely"]
    assert distinct_documents(docs) == [f"{run} and more", "short one", "other words entirely"]
    assert distinct_documents([f"{run} {run}"]) == [f"{run} {run}"]  # a repeat inside a document is natural text


def test_unknown_text_is_refused_by_name():
    with pytest.raises(ValueError, match=r"text=\('multi30k', 'wiki'\): unknown data set\(s\) 'wiki'.*Fix: name"):
        InductionLMConfig(text=("multi30k", "wiki"))
    with pytest.raises(ValueError, match="no data set"):
        InductionLMConfig(text=())
