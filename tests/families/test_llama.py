"""Grouped-query attention in Llama and Qwen2 (``jattn/families/llama``, ``jattn/families/qwen2``; 4 query heads,
2 key/value heads): the values per query head, pruning refused; Llama tied and with biases (one key/value head);
Gemma 2's sublayer post-norms refusing the residual decompositions. The rest: the conformance table."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from family_pairs import lm_fixture, save_lm
from lm_family_parity import check_lm_outputs, lm_batch, load_lm_pair

pair = lm_fixture("llama", "qwen2")
gemma = lm_fixture("gemma2")
# Qwen2 runs Llama's layers; its only difference, the q/k/v biases, is in the forward the table checks
LLAMA_ONLY = pytest.mark.parametrize("pair", ["llama", pytest.param("qwen2", marks=pytest.mark.slow(
    twin="tests/families/test_llama.py::test_values_are_per_query_head[llama]"))], indirect=True)


@LLAMA_ONLY
def test_values_are_per_query_head(pair):
    """The ``values`` internal (L, b, H, n, d_h): query heads of one group read the same values."""
    model, _, batch = pair
    v = np.asarray(model.forward(batch, internals=("values",)).internals["values"])
    np.testing.assert_array_equal(v[:, :, 0], v[:, :, 1])
    assert not np.allclose(v[:, :, 1], v[:, :, 2])


def test_pruning_refuses_grouped_query_attention(pair):
    """Physical pruning under GQA (a key/value head serving several query heads) is refused, naming gates."""
    from jattn.sweeps.pruning import remove_heads

    model = pair[0]
    with pytest.raises(ValueError, match="grouped-query attention.*Fix: gate the heads"):
        remove_heads(model, np.ones((model.config.num_layers, model.config.num_heads), bool))


def test_tied_with_biases(tmp_path):
    model, oracle = load_lm_pair(save_lm(tmp_path, "llama", tie_word_embeddings=True, attention_bias=True,
                                         mlp_bias=True, num_key_value_heads=1))
    assert model.config.tied_lm_head and model.config.kv_head == (0, 0, 0, 0)
    check_lm_outputs(model, oracle, lm_batch(model.config, [11, 6, 3, 11], seed=4))


def test_gemma2_refuses_the_residual_decomposition(gemma):
    """Sublayer post-norms put Gemma 2's blocks outside both decomposable forms (docs/METHODS.md):
    AttnRes-N and ALTI are refused with the applicable alternatives named; the attention-only norms
    and value zeroing run."""
    from jattn.analyses.context_mixing import value_zeroing

    model, _, batch = gemma
    for call in (lambda: jattn.norms(model, batch, residual=True), lambda: jattn.attributions(model, batch)):
        with pytest.raises(ValueError, match="sublayer post-norms.*Fix: the attention-only norms"):
            call()
    assert np.isfinite(jattn.norms(model, batch)["encoder"]["summed_norm"]).all()
    assert np.isfinite(value_zeroing(model, batch)["value_zeroing"]).all()
