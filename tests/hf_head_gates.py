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
    return {"encoder": [layer.attention.output.dense for layer in base.encoder.layer]}


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
