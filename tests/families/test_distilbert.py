"""DistilBERT's quirks (``jattn/families/distilbert``; Sanh et al. 2019): the sinusoidal position table as
stored, a head jattn does not read refused. The rest of DistilBERT's checks: the conformance table."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from encoder_family_parity import check_outputs, load_pair, new_hf, save_random
from family_pairs import batch_of, save
from conformance_table import FAMILIES
from jattn.io.hf import ConversionError


def test_sinusoidal_positions(tmp_path):
    """``sinusoidal_pos_embds``: the checkpoint stores the sinusoids; jattn reads them as stored
    (equal to HF's loaded table and to Vaswani et al.'s formula) and agrees with HF."""
    model, oracle = load_pair(save(tmp_path, "distilbert", sinusoidal_pos_embds=True, activation="relu"))
    table = np.asarray(model.params["embeddings"]["position"][...])
    np.testing.assert_array_equal(table, oracle.embeddings.position_embeddings.weight.detach().numpy())
    P, D = table.shape
    angle = np.arange(P)[:, None] / np.power(10000, 2 * (np.arange(D) // 2) / D)[None]  # (P, D)
    want = np.where(np.arange(D) % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)
    np.testing.assert_array_equal(table, want)
    assert model.config.hidden_act == "relu"
    check_outputs(model, oracle, batch_of(model, "distilbert"), types=False)


def test_question_answering_refused(tmp_path):
    hf = new_hf("DistilBertConfig", "DistilBertForQuestionAnswering", FAMILIES["distilbert"].fields)
    with pytest.raises(ConversionError, match="DistilBertForQuestionAnswering.*Fix"):
        jattn.load(save_random(hf, tmp_path / "qa"), tokenizer=False, use_cache=False)
