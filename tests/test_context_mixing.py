"""Value zeroing (Mohebbi et al. 2023) and ALTI+ (Ferrando et al. 2022b) against slow references
written here: value zeroing by one Hugging Face PyTorch forward per (layer, token) with a hook that
zeroes the token's value rows; ALTI+ by loops over the papers' equations in float64 numpy on
internals captured from HF Marian with hooks. Each example is run unpadded in the references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_head_gates import value_and_output
from norms_testing import SENTENCES, tiny_bert

import jattn
import tiny_seq2seq
from jattn.analyses.context_mixing import value_zeroing
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("vz")
    model = tiny_bert(path)
    from transformers import BertModel

    return model, BertModel.from_pretrained(str(path), attn_implementation="eager").eval().double()


def hf_value_zeroing(hf, ids: dict) -> np.ndarray:
    """(L, n, n) row-normalised 1 − cos(x̃_i^{¬j}, x̃_i), one HF forward per layer and token."""
    with torch.no_grad():
        keep = hf(**ids, output_hidden_states=True).hidden_states
    L, n = len(hf.encoder.layer), ids["input_ids"].shape[1]
    out = np.zeros((L, n, n))
    for l, layer in enumerate(hf.encoder.layer):
        for j in range(n):
            def zero(module, args, output, j=j):
                output = output.clone()
                output[:, j] = 0.0  # token j's values, every head
                return output

            handle = value_and_output(layer)[0].register_forward_hook(zero)  # BERT's or MPNet's value projection
            with torch.no_grad():
                changed = hf(**ids, output_hidden_states=True).hidden_states[l + 1][0].numpy()  # (n, D)
            handle.remove()
            kept = keep[l + 1][0].numpy()
            for i in range(n):
                out[l, i, j] = 1 - changed[i] @ kept[i] / (np.linalg.norm(changed[i]) * np.linalg.norm(kept[i]))
    return out / out.sum(-1, keepdims=True)


def test_value_zeroing_equals_hf_loop(bert):
    model, hf = bert
    batch = model.tokenize(SENTENCES)
    got = value_zeroing(model, batch)
    for k in range(len(SENTENCES)):
        n = int(batch.attention_mask[k].sum())
        ids = {key: torch.tensor(getattr(batch, key)[k:k + 1, :n]) for key in ("input_ids", "attention_mask",
                                                                                "token_type_ids")}
        want = hf_value_zeroing(hf, ids)
        # each score is a cosine distance of float32 layer outputs (errors ~ EPS·sqrt(terms)), then a
        # normalisation by the row sum: relative to the row's scores
        scale = want.max(-1, keepdims=True)  # float32 rounding relative to the row's largest score
        layer_terms = model_terms(model.config, n)
        assert_close(got["value_zeroing_layers"][:, k, :n, :n], want, terms=layer_terms, ulps=64, scale=scale,
                     err_msg=f"example {k}")
        assert (got["value_zeroing_layers"][:, k, n:] == 0).all() and (
            got["value_zeroing_layers"][:, k, :, n:] == 0
        ).all()
        rolled = want[0]
        for l in range(1, len(want)):
            rolled = want[l] @ rolled
        assert_close(got["value_zeroing"][-1, k, :n, :n], rolled, terms=layer_terms, ulps=64)


def ln_map(v, gamma, sigma):
    return gamma * (v - v.mean(-1, keepdims=True)) / sigma


def alti_row(y, parts):
    """ALTI contributions of the vectors ``parts`` to y (Ferrando et al. 2022a, Eq. 7-9), normalised."""
    c = np.array([max(0.0, np.abs(y).sum() - np.abs(y - z).sum()) for z in parts])
    return c / c.sum()


def hf_alti_plus(hf, ids: dict) -> np.ndarray:
    """ALTI+ for one unpadded pair, (L_dec, t, s + t), by loops in float64."""
    cap = {}

    def keep(name, which):
        def hook(mod, inp, out):
            cap[name] = (inp[0] if which == "in" else out).detach().numpy()[0]
        return hook

    m = hf.model
    for side, layers in (("e", m.encoder.layers), ("d", m.decoder.layers)):
        for l, layer in enumerate(layers):
            layer.self_attn.v_proj.register_forward_hook(keep(f"{side}v{l}", "out"))
            layer.self_attn_layer_norm.register_forward_hook(keep(f"{side}pre{l}", "in"))
            layer.self_attn_layer_norm.register_forward_hook(keep(f"{side}y{l}", "out"))
            if side == "d":
                layer.encoder_attn.v_proj.register_forward_hook(keep(f"cv{l}", "out"))
                layer.encoder_attn_layer_norm.register_forward_hook(keep(f"cpre{l}", "in"))
                layer.encoder_attn_layer_norm.register_forward_hook(keep(f"cy{l}", "out"))
    with torch.no_grad():
        out = hf(**ids, output_attentions=True, output_hidden_states=True)
    eps = m.encoder.layers[0].self_attn_layer_norm.eps

    def alti_map(attn_module, ln, alpha, v, x, pre, y):
        H, n, k = alpha.shape
        D = x.shape[-1]
        w_o = attn_module.out_proj.weight.detach().numpy().T.reshape(H, D // H, D)
        v = v.reshape(k, H, D // H)
        gamma, sigma = ln.weight.detach().numpy(), np.sqrt(pre.var(-1) + eps)
        rows = []
        for i in range(n):
            parts = [ln_map(sum(alpha[h, i, j] * v[j, h] @ w_o[h] for h in range(H)) + (x[i] if j == i else 0),
                            gamma, sigma[i]) for j in range(k)]
            rows.append(alti_row(y[i], parts))
        return np.array(rows)

    s, t = ids["input_ids"].shape[1], ids["decoder_input_ids"].shape[1]
    enc = np.eye(s)
    for l, layer in enumerate(m.encoder.layers):
        a = alti_map(layer.self_attn, layer.self_attn_layer_norm, out.encoder_attentions[l][0].numpy(), cap[f"ev{l}"],
                     out.encoder_hidden_states[l][0].numpy(), cap[f"epre{l}"], cap[f"ey{l}"])
        enc = a @ enc
    acc = np.concatenate([np.zeros((t, s)), np.eye(t)], 1)  # contributions of [encoder outputs; target embeddings]
    result = []
    for l, layer in enumerate(m.decoder.layers):
        S = alti_map(layer.self_attn, layer.self_attn_layer_norm, out.decoder_attentions[l][0].numpy(), cap[f"dv{l}"],
                     out.decoder_hidden_states[l][0].numpy(), cap[f"dpre{l}"], cap[f"dy{l}"])  # (t, t)
        alpha, H = out.cross_attentions[l][0].numpy(), hf.config.decoder_attention_heads
        D = cap[f"dy{l}"].shape[-1]
        w_o = layer.encoder_attn.out_proj.weight.detach().numpy().T.reshape(H, D // H, D)
        v = cap[f"cv{l}"].reshape(s, H, D // H)
        gamma = layer.encoder_attn_layer_norm.weight.detach().numpy()
        sigma = np.sqrt(cap[f"cpre{l}"].var(-1) + eps)
        new = np.zeros((t, s + t))
        for i in range(t):
            parts = [ln_map(cap[f"dy{l}"][i], gamma, sigma[i])]  # the residual: the self-attention output
            parts += [
                ln_map(sum(alpha[h, i, j] * v[j, h] @ w_o[h] for h in range(H)), gamma, sigma[i]) for j in range(s)
            ]
            c = alti_row(cap[f"cy{l}"][i], parts)
            new[i, :s] = c[1:]
            new[i] += c[0] * (S[i] @ acc)
        acc = new
        result.append(np.concatenate([acc[:, :s] @ enc, acc[:, s:]], 1))
    return np.array(result)


def test_alti_plus_equals_loops(tiny_marian_folder):
    model = jattn.load(str(tiny_marian_folder), use_cache=False)
    hf = tiny_seq2seq.hf_model(tiny_marian_folder, "marian").double()
    batch = tiny_seq2seq.padded_batch(model.config, seed=3)
    maps = jattn.attributions(model, batch)
    got = maps["decoder"]["alti_plus"]  # (L, b, t, s + t)
    S = batch["input_ids"].shape[1]
    for k in range(len(batch["input_ids"])):
        s, t = int(batch["attention_mask"][k].sum()), int(batch["decoder_attention_mask"][k].sum())
        ids = {"input_ids": torch.tensor(batch["input_ids"][k:k + 1, :s]),
               "attention_mask": torch.tensor(batch["attention_mask"][k:k + 1, :s]),
               "decoder_input_ids": torch.tensor(batch["decoder_input_ids"][k:k + 1, :t]),
               "decoder_attention_mask": torch.tensor(batch["decoder_attention_mask"][k:k + 1, :t])}
        want = hf_alti_plus(hf, ids)  # (L, t, s + t)
        mine = np.concatenate([got[:, k, :t, :s], got[:, k, :t, S:S + t]], -1)
        # ALTI's L1 differences cancel: rounding relative to the L1 norms (~ D · the largest row entry)
        assert_close(mine, want, terms=model_terms(model.config, s, t), ulps=64, scale=1.0, err_msg=f"example {k}")
        assert_close(mine.sum(-1), 1.0, terms=s + t)
        assert (got[:, k, t:] == 0).all() and (got[:, k, :, s:S] == 0).all()
    # the encoder's part is an encoder's ALTI: per-layer maps rolled out, rows summing to 1 on real tokens
    enc = maps["encoder"]
    assert enc["alti_layers"].shape == enc["alti"].shape == (model.config.encoder_layers, *batch["input_ids"].shape,
                                                             batch["input_ids"].shape[1])
    real = batch["attention_mask"].astype(bool)  # (b, s)
    assert_close(enc["alti"].sum(-1)[:, real], 1.0, terms=S)
    assert_close(enc["alti"][1], np.einsum("bij,bjk->bik", enc["alti_layers"][1], enc["alti_layers"][0]), terms=S)
