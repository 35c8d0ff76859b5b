"""The norm-based decomposition and ALTI of pre-LN blocks (``docs/METHODS.md``, "Pre-LN blocks")
against the papers' equations written as float64 loops over tokens, on internals captured from
Hugging Face's ``RobertaPreLayerNormModel`` with forward hooks (each example alone, unpadded):
AttnRes-N ‖R_ij‖ with R_ij = Σ_h α f_h(x_j) + δ_ij x_i, f_h(x_j) = (LN(x_j) W_V^h + b_V^h) W_O^h
(Kobayashi et al. 2021 for a pre-LN block), its mixing ratios, ALTI with T_i(x_j) = R_ij and
y_i = x_i + Attn(LN(x))_i (Ferrando et al. 2022a, §3) and its rollout. The reference also checks
that R decomposes HF's block output exactly. The terms undefined for a pre-LN block
(AttnResLn-N, GlobEnc) are absent, and the ``mixing`` method refuses the model."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from encoder_family_parity import load_pair, pair_batch, save_random
from norms_testing import assert_close, terms

LENGTHS = [9, 6, 3]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import torch
    from transformers import RobertaPreLayerNormConfig, RobertaPreLayerNormModel

    torch.manual_seed(1)
    hf = RobertaPreLayerNormModel(RobertaPreLayerNormConfig(
        vocab_size=60, hidden_size=24, num_hidden_layers=3, num_attention_heads=2, intermediate_size=40,
        max_position_embeddings=32, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5))
    model, oracle = load_pair(save_random(hf, tmp_path_factory.mktemp("preln_methods"), seed=1))
    batch = pair_batch(model.config, LENGTHS, seed=5, types=False)
    got = {**jattn.norms(model, batch, residual=True)["encoder"], **jattn.attributions(model, batch)["encoder"]}
    return model, batch, got, [reference(oracle, batch, k) for k in range(len(LENGTHS))]


def reference(hf, batch, k: int) -> dict:
    """Example k alone through HF with hooks, then the equations in float64 loops."""
    import torch

    cap = {}

    def keep(name):
        def hook(module, inputs, out):
            cap[name] = (out[0] if isinstance(out, tuple) else out).detach().double().numpy()[0]
        return hook

    for l, layer in enumerate(hf.encoder.layer):
        layer.attention.self.value.register_forward_hook(keep(f"v{l}"))
        layer.attention.register_forward_hook(keep(f"h{l}"))  # x + Attn(LN(x)): the block's output
    n = LENGTHS[k]
    ids = {key: torch.tensor(batch[key][k:k + 1, :n], dtype=torch.long) for key in ("input_ids", "attention_mask")}
    with torch.no_grad():
        out = hf(**ids, output_attentions=True, output_hidden_states=True)
    H, D = hf.config.num_attention_heads, hf.config.hidden_size
    d = D // H
    ref = {key: [] for key in ("attnres_norm", "mixing_attn_n", "mixing_attnres_n", "alti_layers")}
    worst = 0.0  # the largest ‖y_i − R_ij‖₁ + ‖y_i‖₁ per unit of ALTI's row sum: what float32 rounds relative to
    for l, layer in enumerate(hf.encoder.layer):
        alpha = out.attentions[l][0].double().numpy()  # (H, n, n)
        v = cap[f"v{l}"].reshape(n, H, d)  # (n, H, d_h)  LN(x_j) W_V + b_V
        w_o = layer.attention.output.dense.weight.detach().double().numpy().T.reshape(H, d, D)  # (H, d_h, D)
        b_o = layer.attention.output.dense.bias.detach().double().numpy()  # (D,)
        x = out.hidden_states[l][0].double().numpy()  # (n, D) the block's input
        y = cap[f"h{l}"]  # (n, D)
        R = np.array([[sum(alpha[h, i, j] * v[j, h] @ w_o[h] for h in range(H)) + (x[i] if i == j else 0)
                       for j in range(n)] for i in range(n)])  # (n, n, D)
        np.testing.assert_allclose(R.sum(1) + b_o, y, atol=1e-5 * np.abs(y).max())  # the decomposition is exact
        ref["attnres_norm"].append(np.linalg.norm(R, axis=-1))
        off = R.sum(1) - R[np.arange(n), np.arange(n)]  # (n, D) Σ_{j≠i} R_ij
        s_ii = R[np.arange(n), np.arange(n)] - x  # (n, D)
        ratio = lambda own: np.linalg.norm(off, axis=-1) / (np.linalg.norm(off, axis=-1) + np.linalg.norm(own, axis=-1))
        ref["mixing_attn_n"].append(ratio(s_ii))
        ref["mixing_attnres_n"].append(ratio(R[np.arange(n), np.arange(n)]))
        c = np.maximum(0.0, np.abs(y).sum(-1)[:, None] - np.abs(y[:, None] - R).sum(-1))  # (n, n)
        worst = max(worst, float(((np.abs(y).sum(-1)[:, None] + np.abs(y[:, None] - R).sum(-1)).max(1)
                                  / c.sum(1)).max()))
        ref["alti_layers"].append(c / c.sum(1, keepdims=True))
    ref = {key: np.stack(v) for key, v in ref.items()}
    joint, rolled = None, []
    for m in ref["alti_layers"]:
        joint = m if joint is None else m @ joint
        rolled.append(joint)
    return {**ref, "alti": np.stack(rolled), "alti_scale": worst}


@pytest.mark.parametrize("key", ["attnres_norm", "mixing_attn_n", "mixing_attnres_n", "alti_layers", "alti"])
def test_against_hf_loops(setup, key):
    model, batch, got, refs = setup
    for k, ref in enumerate(refs):
        n = LENGTHS[k]
        scale = ref["alti_scale"] if key.startswith("alti") else None  # ALTI: a difference of two sums
        part = got[key][:, k, :n, :n] if got[key].ndim == 4 else got[key][:, k, :n]
        assert_close(part, ref[key], terms(model, got[key].shape[-1]), scale=scale, name=f"{key} example {k}")
        assert not got[key][:, k, n:].any(), "padding must be 0"


def test_undefined_terms_are_absent(setup):
    """No LayerNorm follows a pre-LN block's residual sum: AttnResLn-N and GlobEnc do not exist."""
    _, _, got, _ = setup
    assert not {"attnresln_norm", "mixing_attnresln_n", "globenc", "globenc_layers"} & set(got)


def test_mixing_method_refuses_a_pre_ln_model(setup, tmp_path):
    from jattn.analyses.norm_stats import MixingRatio

    ranks = tmp_path / "ranks.txt"
    ranks.write_text("")
    with pytest.raises(ValueError, match="pre-LN.*Fix: jattn.norms"):
        MixingRatio(setup[0], rank_file=ranks)


def test_lrp_refuses_a_pre_ln_model(setup):
    """LRP's relprop steps are a post-LN block's: a pre-LN model is refused, naming the alternative."""
    from jattn.analyses.lrp import head_relevance

    model, batch, _, _ = setup
    with pytest.raises(ValueError, match="pre-LN.*Fix: head_gradient_x_input"):
        head_relevance(model.params, model.config, batch)
