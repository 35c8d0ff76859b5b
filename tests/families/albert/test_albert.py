"""ALBERT (``jattn/families/albert``; Lan et al. 2020) against Hugging Face's ``AlbertModel`` on
tiny random configs: factorised embeddings (E = 16 < D = 32, projected by
``embedding_hidden_mapping_in``) and one layer shared by all L layers (held as L equal copies);
outputs and every attention weight, head gates per head / example / token and disabled heads
(HF's shared modules hooked once, acting per call: ``hf_head_gates``), pruning, the pooler's
classifier with ``classify`` and the disabling sweep's suffix, the masked-LM head D -> E -> V
(tied and untied), ``num_hidden_groups`` = L, the export (one group per layer, so that untied
copies export too), what is refused, ``jattn analyze`` and ``jattn.patch_heads`` on a folder with
a SentencePiece-style tokenizer. Padded sentence pairs."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import jattn
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_fixtures, save_random)
from encoder_family_smoke import (POSITIONS, check_analyze_cli, check_mlm_logits, check_new_classifier_export,
                                  check_patch_heads, check_round_trip, unigram_tokenizer)
from jattn.nn.config import ConfigError
from tiny_encoders import hf_model, hf_run
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=90, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=40, type_vocab_size=2)
LENGTHS = [13, 8, 3, 13]
HEADS = {"base": "AlbertModel", "mlm": "AlbertForMaskedLM", "cls": "AlbertForSequenceClassification",
         "pretraining": "AlbertForPreTraining"}


def save_albert(folder, head="base", seed=0, **kw):
    return save_random(new_hf("AlbertConfig", HEADS[head], {**SHAPE, **kw, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_albert, LENGTHS, seed=6)


def test_config_and_shared_copies(pair):
    """gelu_new by default, E -> D projection, the pooler; the L layers hold equal copies."""
    model, _ = pair
    c = model.config
    assert (c.hidden_act, c.embedding_size, c.classifier, c.with_pooler) == ("gelu_new", 16, "pooler", True)
    assert model.params["embeddings"]["word"][...].shape == (90, 16)
    for path, leaf in jax.tree_util.tree_leaves_with_path(model.params["layers"]):
        leaf = np.asarray(leaf[...])
        assert leaf.shape[0] == 3, path
        for layer in range(1, 3):
            np.testing.assert_array_equal(leaf[layer], leaf[0], err_msg=str(path))


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch)


# the same post-LN layers and gate code as RoBERTa's (ALBERT differs in embeddings and layer copies)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch)


# the same post-LN layers and disabling code as RoBERTa's (ALBERT differs in embeddings and layer copies)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch)


# the same post-LN layers and head removal code as RoBERTa's (ALBERT differs in embeddings and layer copies)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_pruned")
def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


def test_groups_per_layer(tmp_path, batch):
    """``num_hidden_groups`` = L (a layer of its own per layer), converted and exported key for key."""
    model, oracle = load_pair(save_albert(tmp_path / "src", num_hidden_groups=3))
    check_outputs(model, oracle, batch)
    check_round_trip(model, oracle, "base", batch, tmp_path / "exported")


# classify and the disabling suffix run the same post-LN layers as RoBERTa's; ALBERT's pooler head against HF's
# runs fast in the twin (a new head exported, read by AutoModelForSequenceClassification) and test_hf_round_trip[cls]
@pytest.mark.slow(twin="tests/families/albert/test_albert.py::test_new_classifier_export")
def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_albert(tmp_path, head="cls"), head="cls")
    assert model.config.num_labels == 3 and model.config.classifier_dropout == 0.1  # classifier_dropout_prob
    check_classifier(model, oracle, batch)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_mlm_head(tmp_path, batch, tied):
    model, oracle = load_pair(save_albert(tmp_path, head="mlm", tie_word_embeddings=tied), head="mlm")
    assert model.config.tied_mlm_decoder == tied
    assert model.params["mlm_head"]["transform"]["kernel"][...].shape == (32, 16)  # D -> E
    check_mlm_logits(model, oracle, batch)


def test_pretraining_checkpoint(tmp_path, batch):
    """AlbertForPreTraining: the sentence-order head ignored, the masked-LM head and pooler read."""
    folder = save_albert(tmp_path, head="pretraining")
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    assert model.config.with_mlm_head and model.config.with_pooler
    check_mlm_logits(model, hf_model(folder, "mlm"), batch)


@pytest.mark.parametrize("head", ["base", "cls", "mlm"])
def test_hf_round_trip(tmp_path, batch, head):
    """A shared-layer checkpoint exports as L equal groups: HF computes the same, bit for bit."""
    model, oracle = load_pair(save_albert(tmp_path / "src", head=head), head=head)
    config = model.family.to_hf_config(model.config)
    assert (config["num_hidden_groups"], config["inner_group_num"], config["architectures"]) == (3, 1, [HEADS[head]])
    check_round_trip(model, oracle, head, batch, tmp_path / "exported", same_keys=False)


def test_untied_layers_export(pair, batch, tmp_path):
    """Copies that diverged (as fine-tuning makes them) export as one group per layer, and HF's
    ALBERT reads the folder and computes what jattn computes."""
    from safetensors.numpy import save_file

    from jattn.nn.state import from_arrays, to_arrays

    model, _ = pair
    arrays = to_arrays(model.params)
    kernel = arrays["layers"]["ffn_in"]["kernel"]  # (L, D, F)
    arrays["layers"]["ffn_in"]["kernel"] = kernel * np.array([1.0, 0.5, -1.0], np.float32)[:, None, None]
    state = model.family.to_hf_state_dict(arrays, model.config)
    np.testing.assert_array_equal(state["encoder.albert_layer_groups.2.albert_layers.0.ffn.weight"],
                                  -kernel[2].T)
    (tmp_path / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    untied = type(model)(model.config, from_arrays(model.config, arrays), None, None)
    ours = untied.forward(batch, internals=None).last_hidden_state
    assert_close(ours, hf_run(hf_model(tmp_path), batch).last_hidden_state,
                 terms=model_terms(model.config, max(LENGTHS)))


def test_refused(tmp_path, pair):
    spec = jattn.families.get("albert")
    hf = {"model_type": "albert", **SHAPE}
    for field, value in (("inner_group_num", 2), ("num_hidden_groups", 4), ("embedding_size", 32),
                         ("pruned_heads", {"0": [1]})):
        with pytest.raises(ConfigError, match=field):
            spec.config_from_hf({**hf, field: value})
    from jattn.sweeps.pruning import export_pruned

    keep = np.ones((3, 4), bool)
    keep[0, 1] = False
    with pytest.raises(ValueError, match="pruned ALBERT"):
        export_pruned(pair[0], keep, tmp_path / "pruned")


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    """A complete folder (a tiny Unigram tokenizer of ALBERT's class)."""
    folder = tmp_path_factory.mktemp("albert_text")
    size = unigram_tokenizer(folder, "albert")
    save_albert(folder, vocab_size=size, max_position_embeddings=POSITIONS)
    return folder


# fast twin: XLM-R's test of the same name, the same post-LN layers (ALBERT differs in embeddings and layer copies)
@pytest.mark.slow
def test_analyze_cli_and_patch_heads(text_folder, tmp_path, monkeypatch):
    """``jattn analyze`` and ``patch_heads`` on the complete folder."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    check_analyze_cli(text_folder, tmp_path / "out", layers=3, heads=4)
    check_patch_heads(jattn.load(text_folder, use_cache=False))


def test_new_classifier_export(text_folder, tmp_path, monkeypatch):
    """A new head of ALBERT's kind (on the pooler) exported for HF."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    check_new_classifier_export(jattn.load(text_folder, use_cache=False), tmp_path / "classifier")
