"""Rollout, attention flow, GlobEnc and ALTI vs loop implementations of the papers' equations,
on internals captured from Hugging Face PyTorch with forward hooks (each example unpadded)."""

from __future__ import annotations

import numpy as np
import pytest
from norms_testing import SENTENCES, assert_close, terms, tiny_bert

import jattn
from jattn.analyses import attribution as A


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_bert_attr")
    model = tiny_bert(path)
    batch = model.tokenize(SENTENCES)
    return (
        model,
        batch,
        jattn.attributions(model, batch)["encoder"],
        [hf_reference(path, batch, k) for k in range(len(SENTENCES))],
    )


def hf_reference(path, batch, k: int) -> dict:
    """Example k alone through HF BertModel with hooks, then the papers' equations in float64 loops."""
    import torch
    from transformers import BertModel

    hf = BertModel.from_pretrained(str(path), attn_implementation="eager").eval()
    cap = {}

    def keep(name, which):
        def hook(mod, inp, out):
            cap[name] = (inp[0] if which == "in" else out).detach().double().numpy()[0]
        return hook

    for l, layer in enumerate(hf.encoder.layer):
        layer.attention.self.value.register_forward_hook(keep(f"v{l}", "out"))
        layer.attention.output.LayerNorm.register_forward_hook(keep(f"pre1_{l}", "in"))
        layer.attention.output.LayerNorm.register_forward_hook(keep(f"ln1_{l}", "out"))
        layer.output.LayerNorm.register_forward_hook(keep(f"pre2_{l}", "in"))
    n = int(batch.attention_mask[k].sum())
    ids = {key: torch.tensor(getattr(batch, key)[k:k + 1, :n], dtype=torch.long)
           for key in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        out = hf(**ids, output_attentions=True, output_hidden_states=True)
    cfg = hf.config
    H, D, eps = cfg.num_attention_heads, cfg.hidden_size, cfg.layer_norm_eps
    d = D // H
    ref = {"residual_attention": [], "globenc_layers": [], "alti_layers": []}
    cancel = 0.0  # ALTI's two L1 norms per unit of its normalised map: float32 rounds relative to them
    for l, layer in enumerate(hf.encoder.layer):
        alpha = out.attentions[l][0].double().numpy()  # (H, n, n)
        v = cap[f"v{l}"].reshape(n, H, d)  # (n, H, d)
        w_o = layer.attention.output.dense.weight.detach().double().numpy().T.reshape(H, d, D)
        g1 = layer.attention.output.LayerNorm.weight.detach().double().numpy()
        g2 = layer.output.LayerNorm.weight.detach().double().numpy()
        x = out.hidden_states[l][0].double().numpy()  # (n, D)
        s1 = np.sqrt(cap[f"pre1_{l}"].var(-1) + eps)  # (n,)
        s2 = np.sqrt(cap[f"pre2_{l}"].var(-1) + eps)  # (n,)
        y = cap[f"ln1_{l}"]  # (n, D)
        res, glob, alti, sizes = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                r = sum(alpha[h, i, j] * v[j, h] @ w_o[h] for h in range(H)) + (x[i] if i == j else 0)
                z = g1 * (r - r.mean()) / s1[i]  # AttnResLn (Kobayashi et al. 2021)
                glob[i, j] = np.linalg.norm(g2 * (z - z.mean()) / s2[i])  # N_Enc (Modarressi et al.)
                alti[i, j] = max(0.0, np.abs(y[i]).sum() - np.abs(y[i] - z).sum())  # Ferrando et al.
                sizes[i, j] = np.abs(y[i]).sum() + np.abs(y[i] - z).sum()
                res[i, j] = 0.5 * alpha[:, i, j].mean() + 0.5 * (i == j)  # Abnar & Zuidema
        ref["residual_attention"].append(res)
        ref["globenc_layers"].append(glob / glob.sum(1, keepdims=True))
        ref["alti_layers"].append(alti / alti.sum(1, keepdims=True))
        cancel = max(cancel, float((sizes.max(1) / alti.sum(1)).max()))
    for key in list(ref):
        joint, rolled = None, []
        for m in ref[key]:
            joint = m if joint is None else m @ joint
            rolled.append(joint)
        out_key = {"residual_attention": "rollout", "globenc_layers": "globenc", "alti_layers": "alti"}[key]
        ref[out_key] = np.stack(rolled)
        ref[key] = np.stack(ref[key])
    ref["alti_scale"] = cancel
    return ref


@pytest.mark.parametrize("key", ["residual_attention", "rollout", "globenc_layers", "globenc",
                                 "alti_layers", "alti"])
def test_against_hf_loops(setup, key):
    model, batch, got, refs = setup
    for k, ref in enumerate(refs):
        n = int(batch.attention_mask[k].sum())
        scale = ref["alti_scale"] if key.startswith("alti") else None  # ALTI: a difference of two sums
        assert_close(got[key][:, k, :n, :n], ref[key], terms(model, got[key].shape[-1]), scale=scale,
                     name=f"{key} example {k}")
        assert not got[key][:, k, n:].any() and not got[key][:, k, :, n:].any(), "padding must be 0"


def test_rows_are_distributions(setup):
    model, batch, got, _ = setup
    real = batch.attention_mask.astype(bool)
    for key in ("rollout", "globenc", "alti"):
        sums = got[key].sum(-1)[:, real]  # exactly 1 in real arithmetic; float32 rows of L products of n terms
        assert_close(sums, np.ones_like(sums), model.config.num_layers * got[key].shape[-1], name=key)
        assert (got[key] >= 0).all()


def test_flow_single_layer_is_the_map():
    """With one layer the only path i → j is the edge itself: flow = the (row-stochastic) map."""
    rng = np.random.default_rng(0)
    m = rng.random((1, 5, 5))
    m /= m.sum(-1, keepdims=True)
    np.testing.assert_allclose(A.attention_flow(m), m[0], rtol=1e-12)


def test_flow_against_networkx():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(1)
    L, n = 3, 4
    maps = rng.random((L, n, n))
    maps /= maps.sum(-1, keepdims=True)
    g = nx.DiGraph()
    for l in range(1, L + 1):
        for i in range(n):
            for j in range(n):
                g.add_edge((l, i), (l - 1, j), capacity=maps[l - 1, i, j])
    want = np.array([[nx.maximum_flow_value(g, (L, i), (0, j)) for j in range(n)] for i in range(n)])
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(A.attention_flow(maps), want, rtol=1e-9)


def test_flow_bad_input():
    with pytest.raises(ValueError, match=r"\(L, n, n\)"):
        A.attention_flow(np.ones((2, 1, 3, 3)))


def test_attributions_bad_model():
    with pytest.raises(TypeError, match="a model from jattn.load"):
        A.attributions(object(), None)
