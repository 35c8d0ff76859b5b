"""ELECTRA's discriminator (``jattn/families/electra``) against Hugging Face's ``ElectraModel`` on
tiny random configs, with embeddings narrower than the model (``embeddings_project``) and as wide:
outputs and every attention weight, head gates per head / example / token, disabled heads,
pruning, the ``ElectraForPreTraining`` layout, the HF round trip. Padded sentence pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
from encoder_family_parity import (check_disabled, check_gates, check_outputs, check_pruned, load_pair, new_hf,
                                   pair_batch, save_random)
from tiny_encoders import hf_model, hf_run

SHAPE = dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=48, hidden_act="gelu", type_vocab_size=2, layer_norm_eps=1e-12)
LENGTHS = [13, 8, 3, 13]


def save_electra(folder, embedding_size=16, pretraining=False, seed=0):
    cls = "ElectraForPreTraining" if pretraining else "ElectraModel"
    return save_random(new_hf("ElectraConfig", cls, {**SHAPE, "embedding_size": embedding_size}, seed), folder, seed)


@pytest.fixture(scope="module", params=[16, 32], ids=["project-16-to-32", "no-projection"])
def pair(request, tmp_path_factory):
    return load_pair(save_electra(tmp_path_factory.mktemp("electra"), embedding_size=request.param))


@pytest.fixture(scope="module")
def batch(pair):
    return pair_batch(pair[0].config, LENGTHS, seed=2)


def test_config(pair):
    model, oracle = pair
    E = oracle.config.embedding_size
    assert model.config.embedding_size == (None if E == 32 else E)
    assert ("project" in model.params["embeddings"]) == (E != 32) and not model.config.with_pooler


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch)


# the same post-LN layers and gate code as RoBERTa's (ELECTRA differs in embeddings)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch)


# the same post-LN layers and disabling code as RoBERTa's (ELECTRA differs in embeddings)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch)


# the same post-LN layers and head removal code as RoBERTa's (ELECTRA differs in embeddings)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_pruned")
def test_pruned(pair, batch):
    check_pruned(pair[0], batch)


def test_pretraining_checkpoint(tmp_path, batch):
    """ElectraForPreTraining: the encoder under ``electra.``, the discriminator head ignored."""
    folder = save_electra(tmp_path, pretraining=True)
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    oracle = hf_model(folder)  # AutoModel: the ElectraModel inside
    check_outputs(model, oracle, batch)


def test_hf_round_trip(pair, tmp_path, batch):
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays

    model, oracle = pair
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    original = read_state_dict(model.source)
    assert set(state) == {k for k in original if "position_ids" not in k and "token_type_ids" not in k}
    for k, v in state.items():
        np.testing.assert_array_equal(v, original[k], err_msg=k)
    (tmp_path / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(tmp_path / "model.safetensors"))
    np.testing.assert_array_equal(hf_run(hf_model(tmp_path), batch).last_hidden_state.numpy(),
                                  hf_run(oracle, batch).last_hidden_state.numpy())


# ---- the generator (ElectraForMaskedLM) ---------------------------------------------------------

E = "tests/families/electra/test_electra.py::"


def save_generator(folder, embedding_size=16, seed=0, **kw):
    fields = {**SHAPE, **kw, "embedding_size": embedding_size}
    return save_random(new_hf("ElectraConfig", "ElectraForMaskedLM", fields, seed), folder, seed)


# no-projection: the same masked-LM head code (E = D, the transform's kernel square) as project-16-tied; unprojected
# embeddings run fast in test_outputs_and_attention[no-projection]
@pytest.mark.parametrize("embedding_size,tied", [
    (16, True), (16, False),
    pytest.param(32, True, marks=pytest.mark.slow(twin=E + "test_generator[project-16-tied]"))],
    ids=["project-16-tied", "project-16-untied", "no-projection"])
def test_generator(tmp_path, embedding_size, tied):
    """ElectraForMaskedLM: the encoder under ``electra.`` and the masked-LM head D -> E (GELU,
    LayerNorm(E)) -> V, its matrix the word embeddings (V, E) or its own: outputs, attention and
    the logits against HF's; exported as ``ElectraForMaskedLM`` and read back."""
    from encoder_family_smoke import check_mlm_logits, check_round_trip

    folder = save_generator(tmp_path / "src", embedding_size, tie_word_embeddings=tied)
    model, oracle = load_pair(folder, head="mlm")
    batch = pair_batch(model.config, LENGTHS, seed=2)
    c = model.config
    assert c.with_mlm_head and c.tied_mlm_decoder == tied and c.mlm_activation == "gelu"
    assert model.params["mlm_head"]["transform"]["kernel"][...].shape == (32, embedding_size)  # D -> E
    check_outputs(model, hf_model(folder), batch)  # AutoModel: the ElectraModel inside
    check_mlm_logits(model, oracle, batch)
    assert model.family.to_hf_config(c)["architectures"] == ["ElectraForMaskedLM"]
    check_round_trip(model, oracle, "mlm", batch, tmp_path / "exported")


# fast twin: XLM-R's test_analyze_cli_and_patch_heads, the same post-LN layers (ELECTRA differs in embeddings)
@pytest.mark.slow
def test_generator_analyze_cli_and_patch_heads(tmp_path, monkeypatch):
    """A complete generator folder (MiniLM's WordPiece tokenizer): ``jattn analyze`` and ``patch_heads``."""
    from encoder_family_smoke import POSITIONS, check_analyze_cli, check_patch_heads, wordpiece_tokenizer

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = save_generator(tmp_path / "model", vocab_size=30522, max_position_embeddings=POSITIONS)
    wordpiece_tokenizer(folder)
    check_analyze_cli(folder, tmp_path / "out", layers=2, heads=4)
    check_patch_heads(jattn.load(folder, use_cache=False))
