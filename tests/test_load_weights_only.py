"""``jattn.load(folder, tokenizer=False)``: a weights-only folder (``save_pretrained`` of a bare
model, no tokenizer files) loads for callers that pass token ids; the default still requires the
tokenizer, with its error; any use of the missing tokenizer says what happened and the fix."""

from __future__ import annotations

import pytest

import jattn
from jattn.nn.config import ConfigError
from tiny_encoders import TOKENIZER_FILES, hf_model, hf_run, random_batch, save_tiny
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def weights_only(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("bare"), "bert-2x4")
    for f in TOKENIZER_FILES:
        (folder / f).unlink()
    return folder


def test_default_requires_the_tokenizer(weights_only):
    with pytest.raises(ConfigError, match="no tokenizer files"):
        jattn.load(weights_only, use_cache=False)


def test_weights_only_forward_equals_hugging_face(weights_only):
    model = jattn.load(weights_only, tokenizer=False, use_cache=False)
    batch = random_batch(model.config, [8, 5], seed=4, pairs=True)
    ref = hf_run(hf_model(weights_only), batch)
    terms = model_terms(model.config, 8)
    out = model.forward(batch)
    assert_close(out.last_hidden_state, ref.last_hidden_state, terms=terms)
    for layer, att in enumerate(ref.attentions):
        assert_close(out.attentions[layer], att, terms=terms, err_msg=f"layer {layer}")
    for use in (lambda: model.tokenize(["a sentence"], max_length=16), lambda: model.tokenizer.pad_token_id):
        with pytest.raises(ValueError, match=r"without a tokenizer \(jattn.load\(\.\.\., tokenizer=False\)\).*Fix"):
            use()


def test_weights_only_translation_model(tmp_path):
    from tiny_seq2seq import save_tiny as save_seq2seq

    folder = save_seq2seq(tmp_path / "marian", "marian")
    for f in folder.iterdir():
        if f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            f.unlink()
    model = jattn.load(folder, tokenizer=False, use_cache=False)
    assert model.config.encoder_layers > 0
    with pytest.raises(ValueError, match="without a tokenizer"):
        model.translate(["ein Satz"])
