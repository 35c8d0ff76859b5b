"""Clark et al. 2019 statistics from the runner vs brute-force numpy loops over HF PyTorch maps."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from analysis_helpers import (SENTENCES, WORDS, brute_class_attention, brute_entropy, brute_js, reference_maps,
                              tiny_bert, torch_model, word_maps)
from jattn.nn.token_classes import OTHER
from jattn.analyses.distance import JSDistance
from jattn.analyses.grad import AttentionGradient
from jattn.analyses.weights import ClassAttention, Entropy
from jattn.runner import run_corpus, token_classes

from tolerance import assert_close, model_terms



def close(got, want, terms):
    """float32 ``got`` vs float64 loops within the float32 rounding of ``terms`` reductions,
    relative to the largest reference magnitude (tests/tolerance.py)."""
    assert_close(got, want, terms=terms)


def corpus_terms(model, tokens: int) -> int:
    """The runner's padded batches vs HF one example alone (forward and backward, ≤ 64 tokens),
    then the sums over the corpus's token rows."""
    return 2 * model_terms(model.config, 64) + tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tiny_bert(tmp_path_factory.mktemp("tiny"), mlm=True, layers=2, heads=3)
    return folder, jattn.load(folder, use_cache=False), torch_model(folder, mlm=True)


def test_token_level_statistics_match_loops(tiny):
    folder, model, tmodel = tiny
    res = run_corpus(model, SENTENCES, [ClassAttention(), Entropy(), JSDistance()], batch_size=3, progress=False)
    refs = reference_maps(model, tmodel, SENTENCES)
    terms = corpus_terms(model, res.meta["tokens"])
    for name, want in {**brute_class_attention(refs), **brute_entropy(refs)}.items():
        close(res.statistics[name].value, want, terms)
    close(res.statistics["js_distance"].value, brute_js(refs), terms)
    assert res.statistics["js_mds"].value.shape == (6, 2)
    assert res.meta["segments"] == len(SENTENCES)
    assert res.meta["tokens"] == sum(len(r["ids"]) for r in refs)


def test_word_level_statistics_match_loops(tiny):
    folder, model, tmodel = tiny
    res = run_corpus(model, WORDS, [ClassAttention("word"), Entropy("word")], batch_size=2, progress=False)
    refs = []
    for r in reference_maps(model, tmodel, WORDS):
        maps, classes = word_maps(r)
        assert np.allclose(maps.sum(-1), 1.0)  # rows of the word-level map still sum to 1
        refs.append({"maps": maps, "classes": classes})
    for name, want in {**brute_class_attention(refs), **brute_entropy(refs)}.items():
        close(res.statistics["word_" + name].value, want, corpus_terms(model, res.meta["tokens"]))


# The "cls_norm" loss: the squared norm of the [CLS] state's first units. Over all D units it is
# D·σ²/(σ² + ε) under LayerNorm with γ = 1, β = 0 (this model): a constant, whose gradient is rounding.
CLS_UNITS = 4


def _torch_grads(model, tmodel, example, index, loss_kind):
    """|∂L/∂α| per layer from PyTorch autograd on the attention probabilities HF returns."""
    import torch

    batch = model.tokenize([example])
    n = int(batch.attention_mask.sum())
    ids, types = batch.input_ids[:, :n], batch.token_type_ids[:, :n]
    classes = token_classes(model.tokenizer, ids, np.ones_like(ids))
    if loss_kind == "mlm":  # the masking rule written out again (not jattn's mask_tokens): ⌊0.15·m⌉ ≥ 1 of
        # the m non-special tokens, drawn by a generator seeded by (seed 0, corpus index), replaced by [MASK]
        cands = np.flatnonzero(~np.isin(ids[0], [model.tokenizer.cls_token_id, model.tokenizer.sep_token_id]))
        k = max(1, int(round(0.15 * len(cands))))
        chosen = np.sort(np.random.default_rng([0, index]).choice(cands, k, replace=False))
        labels = np.full(ids.shape, -100)
        labels[0, chosen] = ids[0, chosen]
        ids, classes = ids.copy(), classes.copy()
        ids[0, chosen], classes[0, chosen] = model.tokenizer.mask_token_id, OTHER
    out = tmodel(input_ids=torch.tensor(ids, dtype=torch.long), token_type_ids=torch.tensor(types, dtype=torch.long),
                 labels=torch.tensor(labels) if loss_kind == "mlm" else None, output_attentions=True,
                 output_hidden_states=True)
    for a in out.attentions:
        a.retain_grad()
    loss = out.loss if loss_kind == "mlm" else (out.hidden_states[-1][0, 0, :CLS_UNITS] ** 2).sum()
    loss.backward()
    g = np.stack([a.grad[0].double().numpy() for a in out.attentions])  # (L, H, n, n)
    return np.abs(g), classes[0]


@pytest.mark.parametrize("loss_kind", ["mlm", "cls_norm"])
def test_attention_gradient_matches_torch_autograd(tiny, loss_kind):
    folder, model, tmodel = tiny
    examples = SENTENCES[:5]
    loss = None if loss_kind == "mlm" else \
        (lambda p, c, outputs, batch: (outputs["last_hidden_state"][:, 0, :CLS_UNITS] ** 2).sum(-1))
    res = run_corpus(model, examples, [AttentionGradient(model, loss)], batch_size=2, progress=False)
    want = np.zeros((4, 2, 3))
    for index, ex in enumerate(examples):
        g, classes = _torch_grads(model, tmodel, ex, index, loss_kind)
        for c in range(4):
            for l in range(2):
                for h in range(3):
                    rows = [sum(g[l, h, i, j] for j in range(len(classes)) if classes[j] == c)
                            for i in range(len(classes))]
                    want[c, l, h] += np.mean(rows) / len(examples)
    for c, name in enumerate(("cls", "sep", "punct", "other")):
        close(res.statistics[f"grad_to_{name}"].value, want[c], corpus_terms(model, res.meta["tokens"]))


def test_grad_without_mlm_head_needs_a_loss(tmp_path):
    model = jattn.load(tiny_bert(tmp_path, mlm=False, layers=1, heads=2), use_cache=False)
    with pytest.raises(ValueError, match="no masked-LM head"):
        AttentionGradient(model)


def test_js_blocks_equal_brute_force_for_any_block_size():
    """The cache blocking of pairwise_js (rows padded to a block multiple, sequences grouped by
    gcd(b, 8)) changes only the summation order: brute-force loops agree for every block size."""
    import jax
    import jax.numpy as jnp

    from jattn.analyses.distance import pairwise_js

    rng = np.random.default_rng(0)
    L, H, n = 2, 3, 10
    for b in (16, 6, 1):
        weights = rng.random((L, b, H, n, n)) ** 4
        lengths = rng.integers(1, n + 1, b)
        real = np.arange(n)[None] < lengths[:, None]  # (b, n) ragged lengths
        weights = weights * real[None, :, None, None, :]
        weights /= weights.sum(-1, keepdims=True)
        refs = [{"maps": weights[:, s, :, :lengths[s], :lengths[s]]} for s in range(b)]
        expected = brute_js(refs)
        for block_rows in (1, 3, 16, 64):
            stacked = jnp.asarray(weights, jnp.float32)  # (L, b, H, n, n)
            got = pairwise_js(lambda l: stacked[l], L, jnp.asarray(real), block_rows=block_rows)
            close(jax.device_get(got), expected, b * n * n)  # float32 sums over rows and keys, any blocking

