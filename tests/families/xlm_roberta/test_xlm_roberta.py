"""XLM-RoBERTa (``jattn/families/xlm_roberta``; Conneau et al. 2020) against Hugging Face's
``XLMRobertaModel`` on tiny random configs: RoBERTa's keys under ``roberta.`` and its positions
(from ``pad_token_id + 1``, skipping padding), one token type; outputs and every attention
weight, head gates per head / example / token, disabled heads, pruning, the dense–tanh
classification head with ``classify`` and the disabling sweep's suffix, the masked-LM head, the HF
round trip (XLM-R's classes in config.json), ``jattn analyze`` and ``jattn.patch_heads`` on a
folder with a SentencePiece-style tokenizer. Padded sentence pairs."""

from __future__ import annotations

import pytest

import jattn
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_fixtures, save_random)
from encoder_family_smoke import (POSITIONS, check_analyze_cli, check_mlm_logits, check_new_classifier_export,
                                  check_patch_heads, check_round_trip, unigram_tokenizer)

SHAPE = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=40, hidden_act="gelu", type_vocab_size=1, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, layer_norm_eps=1e-5)
LENGTHS = [15, 9, 4, 15]
HEADS = {"base": "XLMRobertaModel", "mlm": "XLMRobertaForMaskedLM", "cls": "XLMRobertaForSequenceClassification"}


def save_xlmr(folder, head="base", seed=0, **kw):
    return save_random(new_hf("XLMRobertaConfig", HEADS[head], {**SHAPE, **kw, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_xlmr, LENGTHS, seed=5, types=False)


def test_config(pair):
    model, _ = pair
    c = model.config
    assert (c.model_type, c.positions, c.classifier, c.mlm_activation) == ("xlm-roberta", "after_padding",
                                                                         "dense_tanh", "gelu")
    assert c.max_length == SHAPE["max_position_embeddings"] - 2 and model.family.model_type == "xlm-roberta"


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


# the same post-LN layers and gate code as RoBERTa's (XLM-R differs in its checkpoint's key prefix and tokenizer
# only)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


# the same post-LN layers and disabling code as RoBERTa's (XLM-R differs in its checkpoint's key prefix and
# tokenizer only)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch, types=False)


# the same post-LN layers and head removal code as RoBERTa's (XLM-R differs in its checkpoint's key prefix and
# tokenizer only)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_pruned")
def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


# the same dense–tanh head, classify and disabling suffix over the same post-LN layers as RoBERTa's (XLM-R differs
# in its checkpoint's key prefix and tokenizer only), fast twin RoBERTa's
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_classifier_head")
def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_xlmr(tmp_path, head="cls", classifier_dropout=0.3), head="cls")
    assert model.config.num_labels == 3 and model.config.classifier_dropout == 0.3
    check_classifier(model, oracle, batch, types=False)


def test_mlm_head(tmp_path, batch):
    model, oracle = load_pair(save_xlmr(tmp_path, head="mlm"), head="mlm")
    check_mlm_logits(model, oracle, batch, types=False)


@pytest.mark.parametrize("head", ["base", "cls", "mlm"])
def test_hf_round_trip(tmp_path, batch, head):
    """The export keeps RoBERTa's keys (``roberta.``) and names XLM-R's classes."""
    model, oracle = load_pair(save_xlmr(tmp_path / "src", head=head), head=head)
    config = model.family.to_hf_config(model.config)
    assert config["model_type"] == "xlm-roberta" and config["architectures"] == [HEADS[head]]
    check_round_trip(model, oracle, head, batch, tmp_path / "exported", types=False)


def test_analyze_cli_and_patch_heads(tmp_path, monkeypatch):
    """A complete folder (a tiny Unigram tokenizer of XLM-R's class): ``jattn analyze`` and ``patch_heads``."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    size = unigram_tokenizer(folder, "xlm-roberta")
    save_xlmr(folder, vocab_size=size, max_position_embeddings=POSITIONS)
    check_analyze_cli(folder, tmp_path / "out", layers=2, heads=4)
    model = jattn.load(folder, use_cache=False)
    check_patch_heads(model)
    check_new_classifier_export(model, tmp_path / "classifier")
