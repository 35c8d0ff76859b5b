"""Path patching on a causal pre-LN language model (GPT-2) against the three-pass definition with HF
hooks: the sender pass freezes every head's output (the input of ``attn.c_proj``) to the corrupted
run's except the sender's; the receiver pass computes the receiver head's q / k / v slice of
``attn.c_attn`` from ``ln_1`` of the sender pass's stream at its layer. The metric reads per-example
inputs (``metric_inputs``: a target token per row) and the effects come per example."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from hf_head_gates import sender_pass
from lm_family_parity import load_lm_pair, save_gpt2
from tolerance import assert_close, model_terms

ROLE_SLICE = {"q": 0, "k": 1, "v": 2}  # c_attn's columns: q, k, v


def hf_path_patch(hf, clean, corrupted, metric, sender, receivers, heads: int) -> np.ndarray:
    blocks = hf.transformer.h
    sender_out = sender_pass(hf, [block.attn.c_proj for block in blocks], {"input_ids": clean},
                             {"input_ids": corrupted}, sender, heads)
    handles = []
    for l, h, roles in receivers:
        block = blocks[l]

        def swap(m, a, out, h=h, roles=roles, x=sender_out.hidden_states[l], block=block):
            D = out.shape[-1] // 3
            d = D // heads
            new = m.forward(block.ln_1(x)).detach()  # (b, n, 3D) q, k, v from the sender pass's stream
            out = out.clone()
            for role in roles:
                s = slice(ROLE_SLICE[role] * D + h * d, ROLE_SLICE[role] * D + (h + 1) * d)
                out[..., s] = new[..., s]
            return out
        handles.append(block.attn.c_attn.register_forward_hook(swap))
    with torch.no_grad():
        result = metric(hf(input_ids=corrupted)).numpy()
    for handle in handles:
        handle.remove()
    return result


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    model, hf = load_lm_pair(save_gpt2(tmp_path_factory.mktemp("gpt2path"), seed=1))
    hf = hf.double()
    with torch.no_grad():  # larger weights than HF's init, so that attention is not uniform
        for name, p in hf.named_parameters():
            if p.dim() == 2 and "wte" not in name and "wpe" not in name:
                p.normal_(0, 0.3)
    folder = Path(tmp_path_factory.mktemp("gpt2path_big"))
    hf.float().save_pretrained(str(folder))
    model, _ = load_lm_pair(folder)
    return model, hf


@pytest.mark.parametrize("receivers", [
    # receivers1 patches q, k and v receivers in two layers: this case's k-only code path and more
    pytest.param([(2, 1, "k")], marks=pytest.mark.slow(
        twin="tests/test_lm_path_patching.py::test_path_patching_gpt2_equals_three_passes[receivers1]"),
        id="receivers0"),
    pytest.param([(1, 0, "q"), (2, 3, "kv")], id="receivers1")])
def test_path_patching_gpt2_equals_three_passes(pair, receivers):
    from jattn.sweeps.path_patching import path_patch

    model, hf = pair
    rng = np.random.default_rng(0)
    clean = rng.integers(3, model.config.vocab_size, size=(3, 9)).astype(np.int32)
    corrupted = clean.copy()
    corrupted[:, :4] = rng.integers(3, model.config.vocab_size, size=(3, 4))
    target = rng.integers(3, model.config.vocab_size, size=3)
    batch = lambda ids: {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # noqa: E731
    metric = lambda out, rows: jnp.take_along_axis(out["lm_logits"][:, -1], rows["target"][:, None], -1)[:, 0]  # noqa: E731
    got = path_patch(model, batch(clean), batch(corrupted), metric, receivers, batch_size=4,
                     metric_inputs={"target": target}, per_example=True)["encoder"]  # (N, L, H)
    t = torch.tensor(target)
    ref_metric = lambda out: out.logits[torch.arange(3), -1, t]  # noqa: E731
    a, b = torch.tensor(clean, dtype=torch.long), torch.tensor(corrupted, dtype=torch.long)
    with torch.no_grad():
        base = ref_metric(hf(input_ids=b)).numpy()
    L, H = model.config.num_layers, model.config.num_heads
    want = np.stack([np.stack([hf_path_patch(hf, a, b, ref_metric, (l, h), receivers, H) - base for h in range(H)], -1)
                     for l in range(L)], 1)  # (N, L, H)
    scale = np.abs(base).max()
    assert np.abs(want).max() > 1e-3 * scale  # the paths carry an effect
    assert_close(got, want, terms=4 * model_terms(model.config, 9), scale=scale)
    mean = path_patch(model, batch(clean), batch(corrupted), metric, receivers, batch_size=2,
                      metric_inputs={"target": target})["encoder"]
    np.testing.assert_allclose(mean, got.mean(0), atol=1e-9)
