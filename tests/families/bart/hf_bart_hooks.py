"""Disabled heads in a Hugging Face BART by hooks, the oracle for jattn's ``disabled_heads``
(Kovaleva et al. 2019): a disabled head attends uniformly to the keys its query may see, so its
context is Σ_j m_ij v_j / Σ_j m_ij with m the allowed (query, key) pairs of its attention type.
Each attention's value projection leaves v (b, k, H·d_h); the output projection's pre-hook
replaces the disabled heads' slices of the context (b, q, H·d_h)."""

from __future__ import annotations

import contextlib


def attentions(hf_model) -> dict[str, list]:
    """The attention modules per attention type."""
    base = getattr(hf_model, "model", hf_model)
    return {"encoder": [layer.self_attn for layer in base.encoder.layers],
            "decoder": [layer.self_attn for layer in base.decoder.layers],
            "cross": [layer.encoder_attn for layer in base.decoder.layers]}


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
                seen[key] = out  # (b, k, H·d_h)

            def uniform(module, args, key=(kind, layer), off=off):
                x = args[0]  # (b, q, H·d_h)
                b, q, D = x.shape
                H = off.shape[0]
                m = allowed[key[0]].to(x.dtype)  # (b, q, k)
                mean = torch.einsum("bqk,bkd->bqd", m / m.sum(-1, keepdim=True), seen[key])  # (b, q, H·d_h)
                x = torch.where(off[None, None, :, None], mean.view(b, q, H, D // H), x.view(b, q, H, D // H))
                return (x.reshape(b, q, D),)

            handles.append(attn.v_proj.register_forward_hook(keep_values))
            handles.append(attn.out_proj.register_forward_pre_hook(uniform))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()
