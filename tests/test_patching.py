"""Activation and attribution patching (jattn.sweeps.patching) against an independent loop of
Hugging Face PyTorch forward hooks in float64: one forward on the clean input records each
attention output projection's input (the heads' contexts, concatenated), then one corrupted
forward per head whose pre-hook writes the clean slice of that head into the projection's input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
import tiny_seq2seq
from hf_head_gates import output_projections
from jattn.nn.interventions import Interventions
from jattn.sweeps.patching import agreement, attribution_patch_heads, paired_inputs, patch_heads
from tiny_encoders import hf_model
from tolerance import assert_close, model_terms, tolerance

CLEAN = ["John gave the book to Mary because she asked.", "The keys to the cabinet are on the table.",
         "Anna thanked Tom after he helped."]
CORRUPTED = ["Mary gave the book to John because she asked.", "The key to the cabinets is on the table.",
             "Tom thanked Anna after he helped."]


def hf_patch_loop(hf, clean: dict, corrupted: dict, metric, heads: dict) -> dict:
    """{kind: (L, H)} mean over examples of metric(corrupted, head ← clean) − metric(corrupted),
    one HF forward per head; ``heads`` {kind: H}."""
    projections = output_projections(hf)
    recorded, handles = {}, []
    for kind, projs in projections.items():
        for l, proj in enumerate(projs):
            handles.append(proj.register_forward_pre_hook(
                lambda module, args, key=(kind, l): recorded.__setitem__(key, args[0].detach().clone())))
    with torch.no_grad():
        hf(**clean)
    for h in handles:
        h.remove()
    with torch.no_grad():
        base = metric(hf(**corrupted))  # (b,)
    out = {}
    for kind, projs in projections.items():
        H = heads[kind]
        out[kind] = np.zeros((len(projs), H))
        for l, proj in enumerate(projs):
            d = recorded[(kind, l)].shape[-1] // H
            for h in range(H):
                def replace(module, args, src=recorded[(kind, l)], s=slice(h * d, (h + 1) * d)):
                    x = args[0].clone()  # (b, q, H·d_h)
                    x[..., s] = src[..., s]
                    return (x,)

                handle = proj.register_forward_pre_hook(replace)
                with torch.no_grad():
                    out[kind][l, h] = float((metric(hf(**corrupted)) - base).mean())
                handle.remove()
    return out


def torch_inputs(batch: dict) -> dict:
    return {k: torch.tensor(np.asarray(v), dtype=torch.long) for k, v in batch.items()}


@pytest.fixture(scope="module")
def direction(minilm):
    w = np.random.default_rng(0).normal(size=minilm.config.hidden_size)
    return w / np.linalg.norm(w)  # a unit direction: the metric is one coordinate of the hidden state


def test_minilm_patch_heads_equals_hf_hooks(minilm, minilm_path, direction):
    """Every head of MiniLM, metric = the [CLS] hidden state's projection on a unit direction."""
    w32 = direction.astype(np.float32)
    got = patch_heads(minilm, CLEAN, CORRUPTED, lambda out: out["last_hidden_state"][:, 0] @ w32, heads_per_step=5)
    clean, corrupted = paired_inputs(minilm, CLEAN, CORRUPTED)
    w64 = torch.tensor(direction)
    hf = hf_model(minilm_path).double()
    want = hf_patch_loop(hf, torch_inputs(clean), torch_inputs(corrupted),
                         lambda out: out.last_hidden_state[:, 0] @ w64, {"encoder": minilm.config.num_heads})
    n = clean["input_ids"].shape[1]
    # the effect is a difference of two float32 metrics, each an O(1) coordinate of a LayerNorm output
    terms = 2 * model_terms(minilm.config, n)
    assert_close(got, want["encoder"], terms=terms, scale=1.0)
    print("max |jattn − HF|", np.abs(got - want["encoder"]).max(), "tolerance", tolerance(1.0, terms))
    assert np.abs(want["encoder"]).max() > 20 * tolerance(1.0, terms)  # effects well above the tolerance


def marian_pair(model):
    """A padded clean batch and a corrupted copy: other tokens at a few real positions, same lengths."""
    clean = tiny_seq2seq.padded_batch(model.config, seed=1)
    corrupted = {k: v.copy() for k, v in clean.items()}
    rng = np.random.default_rng(2)
    for key, mask, vocab in (("input_ids", "attention_mask", model.config.src_vocab_size),
                             ("decoder_input_ids", "decoder_attention_mask", model.config.tgt_vocab_size)):
        for r in range(len(clean[key])):
            real = np.nonzero(clean[mask][r])[0][1:]  # keep the decoder's start token
            pos = rng.choice(real, size=min(2, len(real)), replace=False)
            corrupted[key][r, pos] = rng.integers(4, vocab - 1, size=len(pos))
    return clean, corrupted


def test_translation_patch_heads_equals_hf_hooks(tiny_marian_folder):
    """Every head of every attention type of a random Marian model; metric = a logit difference
    at target position 1."""
    model = jattn.load(str(tiny_marian_folder), use_cache=False)
    clean, corrupted = marian_pair(model)
    got = patch_heads(model, clean, corrupted, lambda out: out["logits"][:, 1, 5] - out["logits"][:, 1, 6])
    hf = tiny_seq2seq.hf_model(tiny_marian_folder, "marian").double()
    c = model.config
    want = hf_patch_loop(hf, torch_inputs(clean), torch_inputs(corrupted),
                         lambda out: out.logits[:, 1, 5] - out.logits[:, 1, 6],
                         {"encoder": c.encoder_heads, "decoder": c.decoder_heads, "cross": c.decoder_heads})
    with torch.no_grad():
        scale = float(hf(**torch_inputs(corrupted)).logits[:, 1].abs().max())  # the logits the difference cancels
    s, t = clean["input_ids"].shape[1], clean["decoder_input_ids"].shape[1]
    for kind in want:
        assert_close(got[kind], want[kind], terms=2 * (model_terms(c, s, t) + c.tgt_vocab_size), scale=scale,
                     err_msg=kind)
        print(kind, "max |jattn − HF|", np.abs(got[kind] - want[kind]).max())
        assert np.abs(want[kind]).max() > 20 * tolerance(scale, 2 * (model_terms(c, s, t) + c.tgt_vocab_size)), kind


def test_per_position_patching_sums_to_a_forward_per_position(minilm, direction):
    """Per (head, position) effects equal full forwards with that one cell patched."""
    w32 = direction.astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w32  # noqa: E731
    got = patch_heads(minilm, CLEAN[:2], CORRUPTED[:2], metric, per_position=True)  # (L, H, n)
    clean, corrupted = paired_inputs(minilm, CLEAN[:2], CORRUPTED[:2])
    context = minilm.forward(clean, internals=("context",)).internals["context"]  # (L, b, H, n, d_h)
    base = np.asarray(metric({"last_hidden_state": minilm.forward(corrupted).last_hidden_state}))
    L, H, n = got.shape
    lengths = corrupted["attention_mask"].sum(1)
    for l, h, i in [(0, 3, 1), (2, 7, 0), (5, 0, int(lengths.min()) - 1), (4, 11, int(lengths.max()) - 1)]:
        where = np.zeros((L, 1, H, n), bool)
        where[l, 0, h, i] = True
        out = minilm.forward(corrupted, Interventions(patch={"context": (context, where)}))
        delta = np.asarray(metric({"last_hidden_state": out.last_hidden_state})) - base  # (b,)
        real = i < lengths
        assert_close(got[l, h, i], delta[real].mean(), terms=2 * model_terms(minilm.config, n), scale=1.0)
    assert np.isnan(got[..., int(lengths.max()):]).all()


def test_attribution_patching_tracks_exact_patching(minilm, direction):
    w32 = direction.astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w32  # noqa: E731
    exact = patch_heads(minilm, CLEAN, CORRUPTED, metric)
    approx = attribution_patch_heads(minilm, CLEAN, CORRUPTED, metric)
    assert approx.shape == exact.shape
    assert agreement(approx, exact)["pearson"] > 0.5  # a first-order estimate, not noise


def test_attribution_patching_is_the_directional_derivative(tiny_marian_folder):
    """∂metric/∂t at t = 0 against central finite differences of the blended patch, per attention type."""
    model = jattn.load(str(tiny_marian_folder), use_cache=False)
    clean, corrupted = marian_pair(model)
    metric = lambda out: out["logits"][:, 1, 5] - out["logits"][:, 1, 6]  # noqa: E731
    got = attribution_patch_heads(model, clean, corrupted, metric)
    contexts = model.forward(clean, internals=("context",)).internals
    eps = 1e-2
    for kind, (l, h) in {"encoder": (1, 2), "decoder": (2, 1), "cross": (0, 0)}.items():
        ctx = contexts[kind]["context"]  # (L, b, H, q, d_h)
        values = []
        for t in (eps, -eps):
            where = np.zeros((*ctx.shape[:3], 1), np.float32)
            where[l, :, h] = t
            out = model.forward(corrupted, {kind: Interventions(patch={"context": (ctx, where)})})
            values.append(np.asarray(metric({"logits": out.logits}), np.float64))
        fd = ((values[0] - values[1]) / (2 * eps)).mean()
        assert abs(got[kind][l, h] - fd) <= 1e-2 * max(1.0, abs(fd)), kind  # O(eps²) truncation


def test_unequal_lengths_are_refused(minilm):
    with pytest.raises(ValueError, match="example 1 tokenizes to .* tokens clean and .* corrupted.*equal lengths"):
        patch_heads(minilm, ["a cat sat", "a dog ran"], ["a cat sat", "an extraordinarily long dog ran"],
                    lambda out: out["last_hidden_state"][:, 0, 0])
    with pytest.raises(ValueError, match="one number per example"):
        patch_heads(minilm, ["a cat sat"], ["a dog sat"], lambda out: out["last_hidden_state"][:, 0])
