"""Disabled heads in a Hugging Face encoder–decoder by hooks, the oracle for jattn's ``disabled_heads``
(Kovaleva et al. 2019): a disabled head attends uniformly to the keys its query may see, so its
context is Σ_j m_ij v_j / Σ_j m_ij with m the allowed (query, key) pairs of its attention type.
Each attention's value projection leaves v (b, k, H·d_h); the output projection's pre-hook
replaces the disabled heads' slices of the context (b, q, H·d_h). BART's layout (mBART, M2M100)
and T5's (mT5), where H·d_h may differ from d_model."""

from __future__ import annotations

import contextlib


def projections(hf_model) -> dict[str, list[tuple]]:
    """(value projection, output projection) of each layer's attention, per attention type: T5's
    ``SelfAttention`` / ``EncDecAttention`` (``v``, ``o``) or BART's ``self_attn`` / ``encoder_attn``
    (``v_proj``, ``out_proj``; under ``model.`` or, in a bare model, at the top)."""
    if hasattr(hf_model, "decoder") and hasattr(hf_model.decoder, "block"):  # T5 / mT5
        enc, dec = hf_model.encoder.block, hf_model.decoder.block
        attentions = {"encoder": [b.layer[0].SelfAttention for b in enc],
                      "decoder": [b.layer[0].SelfAttention for b in dec],
                      "cross": [b.layer[1].EncDecAttention for b in dec]}
        return {kind: [(a.v, a.o) for a in modules] for kind, modules in attentions.items()}
    base = getattr(hf_model, "model", hf_model)
    attentions = {"encoder": [layer.self_attn for layer in base.encoder.layers],
                  "decoder": [layer.self_attn for layer in base.decoder.layers],
                  "cross": [layer.encoder_attn for layer in base.decoder.layers]}
    return {kind: [(a.v_proj, a.out_proj) for a in modules] for kind, modules in attentions.items()}


@contextlib.contextmanager
def disabled(hf_model, heads: dict, allowed: dict):
    """Run ``hf_model`` with heads[kind] (L, H) bool disabled; allowed[kind] (b, q, k) bool tensor."""
    import torch

    handles, seen = [], {}
    for kind, layers in projections(hf_model).items():
        if kind not in heads:
            continue
        for layer, (value, output) in enumerate(layers):
            off = torch.as_tensor(heads[kind][layer], dtype=torch.bool)  # (H,)
            if not off.any():
                continue

            def keep_values(module, args, out, key=(kind, layer)):
                seen[key] = out  # (b, k, H·d_h)

            def uniform(module, args, key=(kind, layer), off=off):
                x = args[0]  # (b, q, H·d_h)
                b, q, inner = x.shape
                H = off.shape[0]
                m = allowed[key[0]].to(x.dtype)  # (b, q, k)
                mean = torch.einsum("bqk,bkd->bqd", m / m.sum(-1, keepdim=True), seen[key])  # (b, q, H·d_h)
                x = torch.where(off[None, None, :, None], mean.view(b, q, H, inner // H), x.view(b, q, H, inner // H))
                return (x.reshape(b, q, inner),)

            handles.append(value.register_forward_hook(keep_values))
            handles.append(output.register_forward_pre_hook(uniform))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()
