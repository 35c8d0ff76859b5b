"""Parity of jattn's encoder with Hugging Face PyTorch (the oracle): outputs and attention weights."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from tiny_encoders import CONFIGS, hf_model, hf_run, random_batch, save_tiny
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param)
    return jattn.load(folder, use_cache=False), hf_model(folder)


def _max_err(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@pytest.mark.parametrize("pairs", [False, True])
def test_tiny_parity_with_padding(tiny, pairs):
    model, oracle = tiny
    batch = random_batch(model.config, [11, 7, 3, 11], seed=1, pairs=pairs)
    ours, ref = model.forward(batch), hf_run(oracle, batch)
    terms = model_terms(model.config, batch["input_ids"].shape[1])  # jattn vs PyTorch: other float32 kernels
    assert_close(ours.last_hidden_state, ref.last_hidden_state, terms=terms)
    for l, att in enumerate(ref.attentions):
        assert_close(ours.attentions[l], att, terms=terms, err_msg=f"layer {l}")
    for l, h in enumerate(ref.hidden_states):
        assert_close(ours.hidden_states[l], h, terms=terms, err_msg=f"hidden state {l}")
    if ref.pooler_output is not None:
        assert_close(ours.pooler_output, ref.pooler_output, terms=terms)


@pytest.mark.parametrize("name", ["bert-2x4", "roberta-2x4"])
def test_mlm_head_parity(tmp_path, name):
    from jattn.nn.encoder import mlm_logits

    folder = save_tiny(tmp_path, name, head="mlm")
    model, oracle = jattn.load(folder, use_cache=False), hf_model(folder, head="mlm")
    batch = random_batch(model.config, [9, 5], seed=2)
    logits = mlm_logits(model.params, model.config, model.forward(batch).last_hidden_state)
    terms = model_terms(model.config, 9) + model.config.hidden_size  # the MLM transform: one more sum over D
    assert_close(logits, hf_run(oracle, batch).logits, terms=terms)


@pytest.mark.parametrize("name", ["bert-2x4", "roberta-2x4"])
def test_classification_head_parity_and_export(tmp_path, name):
    """A converted HF sequence-classification head gives HF's logits; exported back, HF reads the
    folder and agrees again (the fine-tuned models' round trip)."""
    from jattn.training.finetune import save_classifier

    folder = save_tiny(tmp_path / "hf", name, head="cls")
    model, oracle = jattn.load(folder, use_cache=False), hf_model(folder, head="cls")
    assert model.config.num_labels == 3
    batch = random_batch(model.config, [9, 5, 2], seed=3)
    logits = model.forward(batch).logits  # (b, 3)
    terms = model_terms(model.config, 9)  # jattn vs PyTorch: other float32 kernels
    assert_close(logits, hf_run(oracle, batch).logits, terms=terms)
    out = save_classifier(model, tmp_path / "exported")
    again, oracle2 = jattn.load(out, use_cache=False), hf_model(out, head="cls")
    assert _max_err(again.forward(batch).logits, logits) == 0.0
    assert_close(hf_run(oracle2, batch).logits, logits, terms=terms)


def test_pytorch_bin_checkpoint(tmp_path):
    folder = save_tiny(tmp_path, "bert-2x4", safe=False)
    assert (folder / "pytorch_model.bin").is_file() and not (folder / "model.safetensors").exists()
    model, oracle = jattn.load(folder, use_cache=False), hf_model(folder)
    batch = random_batch(model.config, [6, 4])
    assert_close(model.forward(batch).last_hidden_state, hf_run(oracle, batch).last_hidden_state,
                 terms=model_terms(model.config, 6))


def test_minilm_parity_real_sentences(minilm, minilm_path):
    from jattn.cli.demo import sample_sentences

    sents = sample_sentences()[:16]
    oracle = hf_model(minilm_path)
    for examples in (sents, list(zip(sents[:8], sents[8:]))):
        batch = minilm.tokenize(examples)
        assert batch.attention_mask.min() == 0  # the batch is padded
        ours, ref = minilm.forward(batch), hf_run(oracle, batch.inputs())
        terms = model_terms(minilm.config, batch.input_ids.shape[1])  # 6 layers of D = 384, FFN 1536
        assert_close(ours.last_hidden_state, ref.last_hidden_state, terms=terms)
        for l, att in enumerate(ref.attentions):
            assert_close(ours.attentions[l], att, terms=terms, err_msg=f"layer {l}")
