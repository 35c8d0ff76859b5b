"""DistilBERT (``jattn/families/distilbert``; Sanh et al. 2019) against Hugging Face's
``DistilBertModel`` on tiny random configs: no token types, LayerNorm eps 1e-12, learned and
sinusoidal position tables; outputs and every attention weight, head gates per head / example /
token, disabled heads, pruning, the dense–ReLU classification head with ``classify`` and the
disabling sweep's suffix, the masked-LM head (tied and untied), the HF round trip, ``jattn
analyze`` and ``jattn.patch_heads`` on a folder with a tokenizer. Padded sentence pairs."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_batch, pair_fixtures, save_random)
from encoder_family_smoke import (POSITIONS, check_analyze_cli, check_mlm_logits, check_new_classifier_export,
                                  check_patch_heads, check_round_trip, wordpiece_tokenizer)
from jattn.io.hf import ConversionError
from jattn.nn.config import ConfigError
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=90, dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=40,
             activation="gelu")
LENGTHS = [14, 9, 3, 14]
HEADS = {"base": "DistilBertModel", "mlm": "DistilBertForMaskedLM", "cls": "DistilBertForSequenceClassification"}


def save_distilbert(folder, head="base", seed=0, **kw):
    return save_random(new_hf("DistilBertConfig", HEADS[head], {**SHAPE, **kw, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_distilbert, LENGTHS, seed=4, types=False)


def test_config(pair):
    c = pair[0].config
    assert (c.type_vocab_size, c.layer_norm_eps, c.classifier, c.positions) == (0, 1e-12, "dense_relu", "absolute")
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size) == (32, 2, 4, 48)
    assert "token_type" not in pair[0].params["embeddings"] and not c.with_pooler
    assert c.classifier_dropout == 0.2  # seq_classif_dropout


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


# the same post-LN layers and gate code as RoBERTa's (DistilBERT differs in embeddings and key names)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


# the same post-LN layers and disabling code as RoBERTa's (DistilBERT differs in embeddings and key names)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch, types=False)


# the same post-LN layers and head removal code as RoBERTa's (DistilBERT differs in embeddings and key names)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_pruned")
def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


def test_pruned_export(pair, batch, tmp_path):
    """``export_pruned`` writes each layer's kept heads under DistilBERT's keys and ``pruned_heads``
    in config.json; the folder loads back as the model with the dropped heads gated to 0."""
    from jattn.sweeps.pruning import export_pruned

    model, _ = pair
    keep = np.array([[1, 0, 0, 1], [0, 1, 1, 1]], bool)
    folder = export_pruned(model, keep, tmp_path / "pruned")
    assert json.loads((folder / "config.json").read_text())["pruned_heads"] == {"0": [1, 2], "1": [0]}
    again = jattn.load(folder, tokenizer=False, use_cache=False)
    masked = model.forward(batch, Interventions(head_gates=jnp.asarray(keep, jnp.float32)), internals=None)
    assert_close(again.forward(batch, internals=None).last_hidden_state, masked.last_hidden_state,
                 terms=model_terms(model.config, max(LENGTHS)))


def test_token_types_ignored(pair, batch):
    """No token-type table: segment ids change nothing (HF's forward takes none)."""
    model, _ = pair
    typed = pair_batch(model.config, LENGTHS, seed=4, types=True)
    np.testing.assert_array_equal(model.forward(typed, internals=None).last_hidden_state,
                                  model.forward(batch, internals=None).last_hidden_state)


def test_sinusoidal_positions(tmp_path, batch):
    """``sinusoidal_pos_embds``: the checkpoint stores the sinusoids; jattn reads them as stored
    (equal to HF's loaded table and to Vaswani et al.'s formula) and agrees with HF."""
    model, oracle = load_pair(save_distilbert(tmp_path, sinusoidal_pos_embds=True, activation="relu"))
    table = np.asarray(model.params["embeddings"]["position"][...])
    np.testing.assert_array_equal(table, oracle.embeddings.position_embeddings.weight.detach().numpy())
    P, D = table.shape
    angle = np.arange(P)[:, None] / np.power(10000, 2 * (np.arange(D) // 2) / D)[None]  # (P, D)
    want = np.where(np.arange(D) % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)
    np.testing.assert_array_equal(table, want)
    assert model.config.hidden_act == "relu"
    check_outputs(model, oracle, batch, types=False)


# classify and the disabling suffix run the same post-LN layers as RoBERTa's; DistilBERT's dense–ReLU head against
# HF's runs fast in the twin (a new head exported, read by AutoModelForSequenceClassification)
@pytest.mark.slow(twin="tests/families/distilbert/test_distilbert.py::test_new_classifier_export")
def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_distilbert(tmp_path, head="cls"), head="cls")
    assert model.config.num_labels == 3 and set(model.params["classifier"]) == {"dense", "out"}
    check_classifier(model, oracle, batch, types=False)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_mlm_head(tmp_path, batch, tied):
    model, oracle = load_pair(save_distilbert(tmp_path, head="mlm", tie_word_embeddings=tied), head="mlm")
    assert model.config.with_mlm_head and model.config.tied_mlm_decoder == tied
    check_mlm_logits(model, oracle, batch, types=False)


@pytest.mark.parametrize("head", ["base", "cls", "mlm"])
def test_hf_round_trip(tmp_path, batch, head):
    model, oracle = load_pair(save_distilbert(tmp_path / "src", head=head), head=head)
    check_round_trip(model, oracle, head, batch, tmp_path / "exported", types=False)


def test_refused(tmp_path):
    folder = save_random(new_hf("DistilBertConfig", "DistilBertForQuestionAnswering", SHAPE), tmp_path / "qa")
    with pytest.raises(ConversionError, match="DistilBertForQuestionAnswering.*Fix"):
        jattn.load(folder, tokenizer=False, use_cache=False)
    spec = jattn.families.get("distilbert")
    with pytest.raises(ConfigError, match='activation is "tanh"'):
        spec.config_from_hf({"model_type": "distilbert", **SHAPE, "activation": "tanh"})
    with pytest.raises(ConfigError, match="dim=32 is not divisible by n_heads=5"):
        spec.config_from_hf({"model_type": "distilbert", **SHAPE, "n_heads": 5})


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    """A complete folder (MiniLM's WordPiece tokenizer)."""
    folder = save_distilbert(tmp_path_factory.mktemp("distilbert_text"), vocab_size=30522,
                             max_position_embeddings=POSITIONS)
    wordpiece_tokenizer(folder)
    return folder


# fast twin: XLM-R's test of the same name, the same post-LN layers (DistilBERT differs in embeddings and tokenizer)
@pytest.mark.slow
def test_analyze_cli_and_patch_heads(text_folder, tmp_path, monkeypatch):
    """``jattn analyze`` and ``patch_heads`` on the complete folder."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    check_analyze_cli(text_folder, tmp_path / "out", layers=2, heads=4)
    check_patch_heads(jattn.load(text_folder, use_cache=False))


def test_new_classifier_export(text_folder, tmp_path, monkeypatch):
    """A new head of DistilBERT's kind (pre_classifier, ReLU) exported for HF."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    check_new_classifier_export(jattn.load(text_folder, use_cache=False), tmp_path / "classifier")
