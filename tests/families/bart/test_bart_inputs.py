"""BART's ``inputs_embeds`` / ``decoder_inputs_embeds`` against Hugging Face PyTorch: for BART both
are the scaled token embeddings (HF's ``BartScaledWordEmbedding`` output), as jattn defines them
(``jattn.nn.seq2seq.word_embeddings``), with and without ``scale_embedding``; padded batches."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jattn
from jattn.nn import seq2seq
from tiny_bart import CONFIGS, hf_model, save_tiny
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms


# the same seq2seq.forward with given embeddings (scaled token rows, learned positions from offset 2, the embedding
# LayerNorm) as mBART's, which runs the same check fast
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_parity.py::test_inputs_embeds_equal_hf")
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_inputs_embeds_equal_hf(tmp_path, kind):
    folder = save_tiny(tmp_path, kind)
    model, hf = jattn.load(folder, use_cache=False), hf_model(folder)
    c = model.config
    batch = padded_batch(c, seed=4)
    rng = np.random.default_rng(0)
    src = rng.normal(0, 0.5, (*batch["input_ids"].shape, c.d_model)).astype(np.float32)  # no table row
    tgt = seq2seq.word_embeddings(model.params, c, jnp.asarray(batch["decoder_input_ids"]), "target")
    given = {"inputs_embeds": src, "attention_mask": batch["attention_mask"], "decoder_inputs_embeds": np.asarray(tgt),
             "decoder_attention_mask": batch["decoder_attention_mask"]}
    ours, _ = seq2seq.forward(model.params, c, {k: jnp.asarray(v) for k, v in given.items()}, internals=None)
    with torch.no_grad():
        ref = hf(**{k: torch.tensor(v) for k, v in given.items()}, use_cache=False)
    T = model_terms(c, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])
    enc, dec = batch["attention_mask"].astype(bool), batch["decoder_attention_mask"].astype(bool)
    assert_close(np.asarray(ours["encoder_last_hidden_state"])[enc], ref.encoder_last_hidden_state.numpy()[enc],
                 terms=T)
    assert_close(np.asarray(ours["logits"])[dec], ref.logits.numpy()[dec], terms=T)
