"""MPNet's quirk (``jattn/families/mpnet``): the relative-position bias shared by the layers, which every
analysis rerunning layers must add: Kobayashi et al.'s decomposition, activation patching's suffix and value
zeroing, against HF in float64. The rest of MPNet's checks (sequences long enough to reach the logarithmic
buckets): the conformance table; its real weights: test_mpnet_real.py."""

from __future__ import annotations

import numpy as np

import jattn
from conformance_table import FAMILIES
from family_pairs import pair_fixture
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms, tolerance

pair = pair_fixture("mpnet")
LENGTHS = FAMILIES["mpnet"].lengths


def test_kobayashi_decomposition_with_bias(pair):
    """y_i − b_O = Σ_j ‖·‖-decomposed Σ_h α f_h(x_j) with the bias in α: jattn's ``summed_norm``
    against the vectors formed in float64 from HF's α, HF's value projection and HF's W_O."""
    import torch

    model, oracle, batch = pair
    values = []
    layer0 = oracle.encoder.layer[0].attention.attn
    handle = layer0.v.register_forward_hook(lambda m, a, out: values.append(out))
    try:
        ref = hf_run(oracle, batch)
    finally:
        handle.remove()
    alpha = ref.attentions[0].double().numpy()  # (b, H, n, n)
    b, H, n, _ = alpha.shape
    v = values[0].double().numpy().reshape(b, n, H, -1)  # (b, n, H, d_h)
    w_o = layer0.o.weight.detach().double().numpy().T.reshape(H, -1, model.config.hidden_size)  # (H, d_h, D)
    f = np.einsum("bjhd,hde->bhje", v, w_o)  # (b, H, n, D)
    mask = batch["attention_mask"].astype(bool)
    summed = np.einsum("bhij,bhje->bije", alpha, f)  # (b, n, n, D)
    want = np.linalg.norm(summed, axis=-1) * (mask[:, :, None] & mask[:, None, :])  # (b, n, n)
    got = jattn.norms(model, batch)["encoder"]["summed_norm"][0]
    terms = model_terms(model.config, n)
    assert_close(got, want, terms=terms)
    with torch.no_grad():  # Σ_j of the decomposition plus b_O is HF's attention output
        out = layer0.o(values[0].new_tensor(np.einsum("bhij,bjhd->bihd", alpha, v).reshape(b, n, -1)))
    assert_close(summed.sum(2) + layer0.o.bias.detach().numpy(), out.numpy(), terms=terms)


def test_patch_heads_reads_the_score_bias(pair):
    """Activation patching's prefix reuse runs the layers above the patched one itself: on MPNet
    it must add the relative-position bias there too. Every head against HF hook loops (float64)."""
    import torch

    from hf_head_gates import hf_patch_loop
    from jattn.sweeps.patching import patch_heads

    model, hf, batch = pair
    corrupted = dict(batch, input_ids=np.where(batch["attention_mask"] > 0, np.roll(batch["input_ids"], 1, 0),
                                               batch["input_ids"]))  # other tokens, the same lengths
    corrupted["input_ids"][:, 0] = batch["input_ids"][:, 0]
    w = np.random.default_rng(2).normal(size=model.config.hidden_size)
    w /= np.linalg.norm(w)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w.astype(np.float32)  # noqa: E731
    got = patch_heads(model, batch, corrupted, metric)["encoder"]
    as_torch = lambda b: {k: torch.tensor(np.asarray(b[k]), dtype=torch.long)  # noqa: E731
                          for k in ("input_ids", "attention_mask")}
    want = hf_patch_loop(hf.double(), as_torch(batch), as_torch(corrupted),
                         lambda out: out.last_hidden_state[:, 0] @ torch.tensor(w), {"encoder": model.config.num_heads})
    terms = 2 * model_terms(model.config, batch["input_ids"].shape[1])
    assert_close(got, want["encoder"], terms=terms, scale=1.0)
    bias = hf.encoder.relative_attention_bias.weight
    kept = bias.detach().clone()
    try:  # without the bias the effects differ by several tolerances: a jattn suffix that dropped
        with torch.no_grad():  # the bias would fail the comparison above
            bias.zero_()
        unbiased = hf_patch_loop(hf, as_torch(batch), as_torch(corrupted), lambda out: out.last_hidden_state[:, 0]
                                 @ torch.tensor(w), {"encoder": model.config.num_heads})
    finally:  # the oracle is shared by the module's tests
        with torch.no_grad():
            bias.copy_(kept)
        hf.float()
    assert np.abs(unbiased["encoder"] - want["encoder"]).max() > 3 * tolerance(1.0, terms)


def test_value_zeroing_reads_the_score_bias(pair):
    """Value zeroing reruns every layer with a token's values zeroed: on MPNet with the layer's
    relative-position bias. Against one HF forward per layer and token, each example unpadded."""
    import torch

    from jattn.analyses.context_mixing import value_zeroing
    from test_context_mixing import hf_value_zeroing

    model, hf, batch = pair
    got = value_zeroing(model, batch)["value_zeroing_layers"]  # (L, b, n, n)
    for k in range(len(LENGTHS)):
        n = LENGTHS[k]
        ids = {key: torch.tensor(np.asarray(batch[key])[k:k + 1, :n], dtype=torch.long)
               for key in ("input_ids", "attention_mask")}
        try:  # 1 − cos near 0 cancels in float32: the reference runs in float64
            want = hf_value_zeroing(hf.double(), ids)
        finally:
            hf.float()
        scale = want.max(-1, keepdims=True)  # row-normalised cosine distances: relative to the row's largest
        assert_close(got[:, k, :n, :n], want, terms=model_terms(model.config, n), ulps=64, scale=scale,
                     err_msg=f"example {k}")
