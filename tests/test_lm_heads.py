"""Induction / previous-token / first-token head scores (Olsson et al. 2022) and the logit lens
(``jattn.analyses.lm_heads``) against loops over Hugging Face GPT-2's own attention weights and
hidden states (float64), and the score function against loops on constructed weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
from encoder_family_parity import save_random
from jattn.analyses.lm_heads import head_scores, induction_scores, logit_lens, repeated_tokens
from tolerance import assert_close, model_terms

LENGTH, COUNT = 6, 5


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=4, n_positions=32, n_inner=24, bos_token_id=0,
                        eos_token_id=0, initializer_range=0.3)
    folder = save_random(GPT2LMHeadModel(config), tmp_path_factory.mktemp("gpt2"))
    hf = GPT2LMHeadModel.from_pretrained(str(folder), attn_implementation="eager").eval().double()
    return jattn.load(folder, tokenizer=False, use_cache=False), hf


def loop_scores(alpha: np.ndarray, length: int, offset: int) -> dict:
    """Olsson et al.'s scores of one sequence's weights (L, H, n, n), written out."""
    L, H, n, _ = alpha.shape
    out = {k: np.zeros((L, H)) for k in ("induction", "previous_token", "first_token")}
    for l in range(L):
        for h in range(H):
            out["induction"][l, h] = np.mean([alpha[l, h, i, i - length + 1] for i in range(offset + length, n)])
            out["previous_token"][l, h] = np.mean([alpha[l, h, i, i - 1] for i in range(1, n)])
            out["first_token"][l, h] = np.mean([alpha[l, h, i, 0] for i in range(1, n)])
    return out


def test_repeated_tokens():
    ids = repeated_tokens(50, LENGTH, COUNT, seed=3, low=2, first=0)
    assert ids.shape == (COUNT, 1 + 2 * LENGTH) and (ids[:, 0] == 0).all() and ids[:, 1:].min() >= 2
    np.testing.assert_array_equal(ids[:, 1:1 + LENGTH], ids[:, 1 + LENGTH:])
    with pytest.raises(ValueError, match="length >= 2"):
        repeated_tokens(50, 1, COUNT)


def test_scores_equal_loops_and_find_a_planted_induction_head():
    rng = np.random.default_rng(0)
    L, b, H, offset = 2, 3, 2, 1
    n = offset + 2 * LENGTH
    w = rng.random((L, b, H, n, n))
    w /= w.sum(-1, keepdims=True)
    w[1, :, 0] = 0.0  # layer 1, head 0: attends exactly to the token after the previous occurrence
    for i in range(n):
        w[1, :, 0, i, i - LENGTH + 1 if i >= offset + LENGTH else 0] = 1.0
    got = {k: np.asarray(v) for k, v in head_scores(w, LENGTH, offset).items()}  # each (b, L, H)
    for s in range(b):
        want = loop_scores(w[:, s], LENGTH, offset)
        for k in want:
            np.testing.assert_allclose(got[k][s], want[k], rtol=1e-6, err_msg=k)
    assert np.allclose(got["induction"][:, 1, 0], 1.0)
    with pytest.raises(ValueError, match="offset 0 \\+ 2 × length"):
        head_scores(w, LENGTH)


def test_induction_scores_equal_loops_over_hf_attention(gpt2):
    model, hf = gpt2
    got = induction_scores(model, length=LENGTH, count=COUNT, seed=1, batch_size=2)
    ids = repeated_tokens(model.config.vocab_size, LENGTH, COUNT, seed=1, first=0)
    with torch.no_grad():
        att = hf(torch.tensor(ids, dtype=torch.long), output_attentions=True).attentions
    alpha = torch.stack(att, 1).numpy()  # (N, L, H, n, n)
    terms = model_terms(model.config, ids.shape[1])
    for s in range(COUNT):
        want = loop_scores(alpha[s], LENGTH, 1)
        for k in want:
            assert_close(got[k][s], want[k], terms=terms, err_msg=f"{k}, sequence {s}")


def test_logit_lens_equals_hf(gpt2):
    model, hf = gpt2
    ids = repeated_tokens(model.config.vocab_size, LENGTH, 2, seed=2, first=0)
    mask = np.ones_like(ids)
    mask[1, -3:] = 0  # a padded row
    lens = logit_lens(model, {"input_ids": ids, "attention_mask": mask})  # (L+1, b, n, V)
    with torch.no_grad():
        out = hf(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask), output_hidden_states=True)
        want = [hf.lm_head(hf.transformer.ln_f(h)).numpy() for h in out.hidden_states[:-1]] + [out.logits.numpy()]
    real = mask.astype(bool)
    terms = model_terms(model.config, ids.shape[1]) + model.config.hidden_size
    for l, w in enumerate(want):
        assert_close(lens[l][real], w[real], terms=terms, err_msg=f"lens row {l}")


def test_bidirectional_models_are_refused(tmp_path):
    from tiny_encoders import save_tiny

    bert = jattn.load(save_tiny(tmp_path, "bert-2x4"), use_cache=False)
    with pytest.raises(ValueError, match="causal.*Fix: load a causal"):
        induction_scores(bert)
    with pytest.raises(ValueError, match="Fix: load a causal"):
        logit_lens(bert, {"input_ids": np.ones((1, 3), np.int32), "attention_mask": np.ones((1, 3), np.int32)})
