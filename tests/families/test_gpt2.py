"""GPT-2's quirks as jattn's first causal LM (``jattn/families/gpt2``): ``classify`` refused, ``generate``
refusing right padding and returning attention weights, head gates during generation against HF ``generate``
with hooks. The rest of GPT-2's checks: the conformance table."""

from __future__ import annotations

import numpy as np
import pytest

from family_pairs import lm_fixture
from jattn import Interventions
from lm_family_parity import left_padded

pair = lm_fixture("gpt2")


def test_classify_is_refused(pair):
    model, _, batch = pair
    with pytest.raises(ValueError, match="causal language model"):
        model.classify(batch)


def test_generate_refuses_right_padding_and_returns_attentions(pair):
    model = pair[0]
    ids, mask = left_padded(model.config, [5, 3])
    with pytest.raises(ValueError, match="left-padded"):
        model.generate(ids, mask[:, ::-1].copy(), max_new_tokens=3)
    gen = model.generate(ids, mask, max_new_tokens=3, return_attentions=True)
    out, att = gen.sequences, gen.attentions
    assert out.shape[1] <= ids.shape[1] + 3 and att.shape == (3, 2, 4, out.shape[1], out.shape[1])
    # the generated tokens' attention rows sum to 1 over the real keys at or before them
    np.testing.assert_allclose(np.asarray(att)[..., ids.shape[1]:, :].sum(-1), 1.0, rtol=1e-5)


def test_generate_with_gates_equals_hf_hooks(pair):
    """Head gates during generation: HF ``generate`` with the same (L, H) gates hooked in."""
    import torch

    from hf_head_gates import gated

    model, oracle, _ = pair
    ids, mask = left_padded(model.config, [6, 4])
    g = np.random.default_rng(5).uniform(0, 1.5, (model.config.num_layers, model.config.num_heads)).astype(np.float32)
    with gated(oracle, {"encoder": torch.tensor(g)}), torch.no_grad():
        want = oracle.generate(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                               do_sample=False, max_new_tokens=6, pad_token_id=model.config.pad_token_id).numpy()
    got = model.generate(ids, mask, max_new_tokens=6, interventions=Interventions(head_gates=g)).sequences
    np.testing.assert_array_equal(got, want)
