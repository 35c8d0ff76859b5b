"""BART's ``inputs_embeds`` / ``decoder_inputs_embeds`` against Hugging Face PyTorch: for BART both
are the scaled token embeddings (HF's ``BartScaledWordEmbedding`` output), as jattn defines them
(``jattn.nn.seq2seq.word_embeddings``), with and without ``scale_embedding``; padded batches."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_bart import CONFIGS, hf_model, save_tiny


# the same seq2seq.forward with given embeddings (scaled token rows, learned positions from offset 2, the embedding
# LayerNorm) as mBART's, which runs the same check fast
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_parity.py::test_inputs_embeds_equal_hf")
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_inputs_embeds_equal_hf(tmp_path, kind):
    folder = save_tiny(tmp_path, kind)
    parity.check_inputs_embeds(jattn.load(folder, use_cache=False), hf_model(folder))
