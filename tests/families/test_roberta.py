"""RoBERTa's positions (``jattn/families/roberta``): numbered from ``padding_idx + 1``, skipping padding."""

from __future__ import annotations

import numpy as np

from conformance_table import FAMILIES
from family_pairs import pair_fixture
from jattn.nn.embeddings import position_ids

pair = pair_fixture("roberta")


def test_positions_after_padding(pair):
    """Real tokens at pad + 1, pad + 2, …; padding at the pad id; HF's own numbering agrees."""
    import torch
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    model, _, batch = pair
    ids = batch["input_ids"]
    ours = np.asarray(position_ids(model.config, ids))
    want = np.where(batch["attention_mask"] == 1, np.cumsum(batch["attention_mask"], 1) + 1, 1)
    np.testing.assert_array_equal(ours, want)
    hf = RobertaEmbeddings.create_position_ids_from_input_ids(torch.tensor(ids, dtype=torch.long), 1).numpy()
    np.testing.assert_array_equal(ours, hf)
    assert model.config.max_length == FAMILIES["roberta"].fields["max_position_embeddings"] - 2
