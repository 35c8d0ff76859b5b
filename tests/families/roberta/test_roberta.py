"""RoBERTa (``jattn/families/roberta``) against Hugging Face's ``RobertaModel`` on tiny random
configs: positions numbered from ``padding_idx + 1`` skipping padding, one token type (segment B
has no embedding of its own); outputs and every attention weight, head gates per head / example /
token, disabled heads, the dense–tanh classification head with ``classify`` and the disabling
sweep's suffix, pruning. Padded sentence pairs."""

from __future__ import annotations

import numpy as np

from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_fixtures, save_random)
from jattn.nn.embeddings import position_ids

SHAPE = dict(vocab_size=80, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40, hidden_act="gelu", type_vocab_size=1, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, layer_norm_eps=1e-5)
LENGTHS = [15, 9, 4, 15]


def save_roberta(folder, head="base", seed=0):
    cls = "RobertaForSequenceClassification" if head == "cls" else "RobertaModel"
    return save_random(new_hf("RobertaConfig", cls, {**SHAPE, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_roberta, LENGTHS, seed=3, types=False)


def test_positions_after_padding(pair, batch):
    """Real tokens at pad + 1, pad + 2, …; padding at the pad id; HF's own numbering agrees."""
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    model, _ = pair
    ids = batch["input_ids"]
    ours = np.asarray(position_ids(model.config, ids))
    want = np.where(batch["attention_mask"] == 1, np.cumsum(batch["attention_mask"], 1) + 1, 1)
    np.testing.assert_array_equal(ours, want)
    import torch

    hf = RobertaEmbeddings.create_position_ids_from_input_ids(torch.tensor(ids, dtype=torch.long), 1).numpy()
    np.testing.assert_array_equal(ours, hf)
    assert model.config.max_length == SHAPE["max_position_embeddings"] - 2


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch, types=False)


def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_roberta(tmp_path, head="cls"), head="cls")
    assert model.config.num_labels == 3 and model.config.classifier == "dense_tanh"
    check_classifier(model, oracle, batch, types=False)
