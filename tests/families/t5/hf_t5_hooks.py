"""Disabled heads in a Hugging Face T5 / mT5 by hooks, the oracle for jattn's ``disabled_heads``
(Kovaleva et al. 2019), as ``tests/families/bart/hf_bart_hooks.py`` for BART's names: a disabled
head's context is Σ_j m_ij v_j / Σ_j m_ij with m the allowed (query, key) pairs of its attention
type; each attention's ``v`` leaves v (b, k, H·d_kv), the ``o`` pre-hook replaces the disabled
heads' slices of the context (b, q, H·d_kv)."""

from __future__ import annotations

import contextlib


def attentions(hf_model) -> dict[str, list]:
    """The attention modules per attention type."""
    enc, dec = hf_model.encoder.block, hf_model.decoder.block
    return {"encoder": [b.layer[0].SelfAttention for b in enc], "decoder": [b.layer[0].SelfAttention for b in dec],
            "cross": [b.layer[1].EncDecAttention for b in dec]}


@contextlib.contextmanager
def disabled(hf_model, heads: dict, allowed: dict):
    """Run ``hf_model`` with heads[kind] (L, H) bool disabled; allowed[kind] (b, q, k) bool tensor."""
    import torch

    handles, seen = [], {}
    for kind, modules in attentions(hf_model).items():
        if kind not in heads:
            continue
        for layer, attn in enumerate(modules):
            off = torch.as_tensor(heads[kind][layer], dtype=torch.bool)  # (H,)
            if not off.any():
                continue

            def keep_values(module, args, out, key=(kind, layer)):
                seen[key] = out  # (b, k, H·d_kv)

            def uniform(module, args, key=(kind, layer), off=off):
                x = args[0]  # (b, q, H·d_kv)
                b, q, inner = x.shape
                H = off.shape[0]
                m = allowed[key[0]].to(x.dtype)  # (b, q, k)
                mean = torch.einsum("bqk,bkd->bqd", m / m.sum(-1, keepdim=True), seen[key])  # (b, q, H·d_kv)
                x = torch.where(off[None, None, :, None], mean.view(b, q, H, inner // H), x.view(b, q, H, inner // H))
                return (x.reshape(b, q, inner),)

            handles.append(attn.v.register_forward_hook(keep_values))
            handles.append(attn.o.register_forward_pre_hook(uniform))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()
