"""Head gates in Hugging Face PyTorch models by forward pre-hooks (transformers v5 dropped
``head_mask``): the gate multiplies each head's slice of the input of the attention output
projection, i.e. the head's context before W_O (Michel et al. 2019's ξ_h). The oracle of
tests/test_importance.py and the baseline of benchmarks/bench_importance.py."""

from __future__ import annotations

import contextlib


def output_projections(hf_model) -> dict[str, list]:
    """The attention output projections per attention type: {"encoder": [...]} for BERT/RoBERTa,
    {"encoder", "decoder", "cross"} for Marian."""
    if hasattr(hf_model, "model") and hasattr(hf_model.model, "decoder"):  # MarianMTModel
        enc, dec = hf_model.model.encoder.layers, hf_model.model.decoder.layers
        return {"encoder": [layer.self_attn.out_proj for layer in enc],
                "decoder": [layer.self_attn.out_proj for layer in dec],
                "cross": [layer.encoder_attn.out_proj for layer in dec]}
    base = getattr(hf_model, hf_model.base_model_prefix, hf_model)
    return {"encoder": [value_and_output(layer)[1] for layer in base.encoder.layer]}


def value_and_output(layer):
    """An encoder layer's value projection and attention output projection: BERT's layout
    (RoBERTa, ELECTRA: ``attention.self.value``, ``attention.output.dense``) or MPNet's
    (``attention.attn.v``, ``attention.attn.o``)."""
    if hasattr(layer.attention, "attn"):
        return layer.attention.attn.v, layer.attention.attn.o
    return layer.attention.self.value, layer.attention.output.dense


@contextlib.contextmanager
def gated(hf_model, gates: dict):
    """Run ``hf_model`` with head gates {kind: tensor (L, H), (L, b, H) or (L, b, H, q)}."""
    handles = []
    for kind, projections in output_projections(hf_model).items():
        if kind not in gates:
            continue
        for layer, proj in enumerate(projections):
            g = gates[kind][layer]  # (H,), (b, H) or (b, H, q)

            def hook(module, args, g=g):
                x = args[0]  # (b, q, H·d_h)
                b, q, D = x.shape
                H = g.shape[-1] if g.dim() < 3 else g.shape[1]
                per = (g.view(1, 1, H) if g.dim() == 1 else g.view(b, 1, H) if g.dim() == 2
                       else g.permute(0, 2, 1))  # (1 or b, 1 or q, H)
                return ((x.view(b, q, H, D // H) * per[..., None]).view(b, q, D),)

            handles.append(proj.register_forward_pre_hook(hook))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def disabled(hf_model, heads):
    """Run an encoder ``hf_model`` (``value_and_output`` layouts) with the heads in ``heads`` (L, H) bool disabled as
    Kovaleva et al. (2019) disable them: uniform attention over the sequence's real tokens, so
    the head's context is the mean of its value vectors over real keys, Σ_j m_j v_j / Σ_j m_j.
    Hooks: the model's forward pre-hook reads ``attention_mask``; each layer's value projection
    leaves its output v (b, n, H·d_h); the output projection's pre-hook replaces the disabled
    heads' slices of the context. The oracle of tests/test_disable.py and the original study's
    loop in benchmarks/bench_disable.py."""
    import torch

    base = getattr(hf_model, hf_model.base_model_prefix, hf_model)
    seen = {}

    def read_mask(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        seen["mask"] = (torch.ones(ids.shape, dtype=torch.float32) if mask is None else mask.float())  # (b, n)

    handles = [base.register_forward_pre_hook(read_mask, with_kwargs=True)]
    for layer, block in enumerate(base.encoder.layer):
        off = torch.as_tensor(heads[layer], dtype=torch.bool)  # (H,)
        if not off.any():
            continue

        def keep_values(module, args, out, layer=layer):
            seen[layer] = out  # (b, n, H·d_h)

        def uniform(module, args, layer=layer, off=off):
            x = args[0]  # (b, q, H·d_h)
            b, q, D = x.shape
            H = off.shape[0]
            m = seen["mask"]  # (b, n)
            mean = torch.einsum("bn,bnd->bd", m, seen[layer]) / m.sum(1, keepdim=True)  # (b, H·d_h)
            x = x.view(b, q, H, D // H)
            x = torch.where(off[None, None, :, None], mean.view(b, 1, H, D // H), x)  # (b, q, H, d_h)
            return (x.reshape(b, q, D),)

        value, output = value_and_output(block)
        handles.append(value.register_forward_hook(keep_values))
        handles.append(output.register_forward_pre_hook(uniform))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()
