"""Loading T5 / mT5 folders with their tokenizer (``T5Tokenizer``'s tokenizer.json), the export
HF -> jattn -> HF (state dict, gated ``wi_0`` / ``wi_1`` split again, and a config.json that
``T5ForConditionalGeneration`` / ``MT5ForConditionalGeneration`` loads)."""

from __future__ import annotations

import dataclasses

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_t5 import CONFIGS, hf_model, save_tiny

TEXTS = ["un homme court sur la plage.", "the dog, a ball"]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param) / "model", request.param)
    return request.param, folder, jattn.load(folder, use_cache=False)


# t5-v1.0, mt5: the same T5Tokenizer files and translate() as t5-v1.1, fast twin [t5-v1.1]
@pytest.mark.parametrize("tiny", [pytest.param(kind, marks=pytest.mark.slow(
    twin="tests/families/t5/test_t5_load.py::test_load_with_tokenizer[t5-v1.1]")) if kind != "t5-v1.1" else kind
    for kind in sorted(CONFIGS)], indirect=True)
def test_load_with_tokenizer(tiny):
    """The folder's tokenizer tokenizes as HF's AutoTokenizer (``X </s>``); translate() runs."""
    from transformers import AutoTokenizer

    _, folder, model = tiny
    hf_tok = AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        ids = model.tokenizer(text)["input_ids"]
        assert ids == hf_tok(text)["input_ids"] and ids[-1] == model.config.eos_token_id
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_missing_tokenizer_refused(tiny, tmp_path):
    _, folder, _ = tiny
    parity.check_missing_tokenizer(folder, tmp_path / "none", "tokenizer.json or spiece.model")


def test_state_dict_round_trip(tiny):
    _, folder, model = tiny
    parity.check_state_dict_round_trip(folder, model)


def test_export_loads_in_hf(tiny, tmp_path):
    kind, folder, model = tiny
    parity.check_export(folder, model, tmp_path / "export", lambda f: hf_model(f, kind))


def test_export_refuses_other_families(tiny):
    _, _, model = tiny
    with pytest.raises(ValueError, match="only T5 / mT5 configs"):
        model.family.to_hf_config(dataclasses.replace(model.config, model_type="bart"))


def test_pruning_refused(tiny, tmp_path):
    """Physically removing heads is refused (the relative bias's head columns would not follow the
    heads): in memory and as an export, naming the fix (gates)."""
    import numpy as np

    from jattn.sweeps.pruning import export_pruned, remove_heads

    _, _, model = tiny
    c = model.config
    keep = {"encoder": np.ones((c.encoder_layers, c.encoder_heads), bool),
            "decoder": np.ones((c.decoder_layers, c.decoder_heads), bool),
            "cross": np.ones((c.decoder_layers, c.decoder_heads), bool)}
    keep["encoder"][0, 0] = False
    with pytest.raises(ValueError, match="relative-position bias.*head_gates"):
        remove_heads(model, keep)
    with pytest.raises(ValueError, match="relative-position bias.*head_gates"):
        export_pruned(model, keep, tmp_path / "pruned")
