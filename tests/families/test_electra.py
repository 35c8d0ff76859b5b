"""ELECTRA's quirks (``jattn/families/electra``): the ``ElectraForPreTraining`` layout and the generator
(``ElectraForMaskedLM``, its masked-LM head D -> E -> V). The rest of ELECTRA's checks: the conformance table."""

from __future__ import annotations

import pytest

import jattn
from encoder_family_parity import check_outputs, load_pair
from encoder_family_smoke import check_mlm_logits, check_round_trip
from family_pairs import batch_of, save
from tiny_encoders import hf_model

HERE = "tests/families/test_electra.py::"


def test_pretraining_checkpoint(tmp_path):
    """ElectraForPreTraining: the encoder under ``electra.``, the discriminator head ignored."""
    folder = save(tmp_path, "electra", head="pretraining")
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    check_outputs(model, hf_model(folder), batch_of(model, "electra"))  # AutoModel: the ElectraModel inside


# no-projection: the same masked-LM head code (E = D, the transform's kernel square) as project-16-tied; unprojected
# embeddings run fast in the conformance table's test_outputs_and_attention[electra-no-projection]
@pytest.mark.parametrize("embedding_size,tied", [
    (16, True), (16, False),
    pytest.param(32, True, marks=pytest.mark.slow(twin=HERE + "test_generator[project-16-tied]"))],
    ids=["project-16-tied", "project-16-untied", "no-projection"])
def test_generator(tmp_path, embedding_size, tied):
    """ElectraForMaskedLM: the encoder under ``electra.`` and the masked-LM head D -> E (GELU,
    LayerNorm(E)) -> V, its matrix the word embeddings (V, E) or its own: outputs, attention and
    the logits against HF's; exported as ``ElectraForMaskedLM`` and read back."""
    folder = save(tmp_path / "src", "electra", head="mlm", embedding_size=embedding_size, tie_word_embeddings=tied)
    model, oracle = load_pair(folder, head="mlm")
    batch = batch_of(model, "electra")
    c = model.config
    assert c.with_mlm_head and c.tied_mlm_decoder == tied and c.mlm_activation == "gelu"
    assert model.params["mlm_head"]["transform"]["kernel"][...].shape == (32, embedding_size)  # D -> E
    check_outputs(model, hf_model(folder), batch)  # AutoModel: the ElectraModel inside
    check_mlm_logits(model, oracle, batch)
    assert model.family.to_hf_config(c)["architectures"] == ["ElectraForMaskedLM"]
    check_round_trip(model, oracle, "mlm", batch, tmp_path / "exported")
