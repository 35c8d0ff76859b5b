"""Tokenization: padding, pairs, word -> subword maps, and no silent truncation."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.io.tokenize import SequenceTooLongError


def test_pairs_and_padding(minilm):
    batch = minilm.tokenize([("The cat sat.", "It was tired."), ("Hi.", "Bye.")])
    tok = minilm.tokenizer
    ids = batch.input_ids[1][: batch.lengths[1]].tolist()
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", "hi", ".", "[SEP]", "bye", ".", "[SEP]"]
    assert batch.token_type_ids[1][: batch.lengths[1]].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert (batch.input_ids[1][batch.lengths[1]:] == tok.pad_token_id).all()
    assert batch.attention_mask.dtype == np.int32 and batch.word_ids is None


def test_word_ids_for_pre_split_words(minilm):
    words = [["Unbelievable", "jurists", "ran", "."], ["Hi"]]
    batch = minilm.tokenize(words)
    tokens = minilm.tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
    for t, w in enumerate(batch.word_ids[0]):
        if w >= 0:  # every subword piece belongs to its word
            piece = tokens[t].removeprefix("##")
            assert piece in words[0][w].lower()
        else:
            assert tokens[t] in ("[CLS]", "[SEP]", "[PAD]")
    assert sorted(set(batch.word_ids[0]) - {-1}) == [0, 1, 2, 3]
    assert batch.word_ids[1].tolist()[:3] == [-1, 0, -1]


def test_word_ids_continue_into_segment_b(minilm):
    batch = minilm.tokenize([(["a", "cat"], ["it", "ran"])])
    assert [w for w in batch.word_ids[0] if w >= 0] == [0, 1, 2, 3]


def test_too_long_is_an_error_unless_truncation_is_asked(minilm):
    long = " ".join(["word"] * 40)
    with pytest.raises(SequenceTooLongError, match="example 1 has 42 tokens.*max_length=16"):
        minilm.tokenize(["short", long], max_length=16)
    batch = minilm.tokenize(["short", long], max_length=16, truncate=True)
    assert batch.input_ids.shape == (2, 16) and batch.lengths.tolist() == [3, 16]


def test_pad_to_and_bad_input(minilm):
    assert minilm.tokenize(["a b c"], pad_to=12).input_ids.shape == (1, 12)
    with pytest.raises(ValueError, match="pad_to"):
        minilm.tokenize(["a b c d e f"], pad_to=3)
    with pytest.raises(TypeError, match="list"):
        minilm.tokenize("not a list")
    with pytest.raises(TypeError, match="mixed"):
        minilm.tokenize(["a", ["b"]])
    with pytest.raises(ValueError, match="positions"):
        minilm.tokenize(["a"], max_length=1000)


def test_character_offsets(minilm):
    texts = [("The unbelievable cat.", "It sat."), "Hi"]
    batch = minilm.tokenize(texts)
    tokens = minilm.tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
    for t, (start, end) in enumerate(batch.offsets[0]):
        if tokens[t] in ("[CLS]", "[SEP]", "[PAD]"):
            assert (start, end) == (-1, -1)
            continue
        text = texts[0][batch.token_type_ids[0, t]]
        assert text[start:end].lower() == tokens[t].removeprefix("##")  # the span spells the piece
    assert (batch.offsets[1, batch.lengths[1]:] == -1).all() and batch.offsets.shape == (2, batch.input_ids.shape[1], 2)
    words = minilm.tokenize([["Jurists", "tokenization"]])  # jurist ##s token ##ization: spans within each word
    assert words.offsets[0, 1:5].tolist() == [[0, 6], [6, 7], [0, 5], [5, 12]]
