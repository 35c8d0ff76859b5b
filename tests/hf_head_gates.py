"""Head gates in Hugging Face PyTorch models by forward pre-hooks (transformers v5 dropped
``head_mask``): the gate multiplies each head's slice of the input of the attention output
projection, i.e. the head's context before W_O (Michel et al. 2019's ξ_h). The oracle of
tests/test_importance.py and the baseline of benchmarks/bench_importance.py. Also by hooks: heads
disabled as Kovaleva et al. (2019) disable them (``disabled``), and activation and path patching's
oracles (``hf_patch_loop``, ``sender_pass``).

A module shared by several layers (ALBERT's one layer, run L times) is hooked once; its hook
counts its calls, one per layer in order, and acts as the layer of that call."""

from __future__ import annotations

import contextlib
import itertools


def output_projections(hf_model) -> dict[str, list]:
    """The attention output projections per attention type: {"encoder": [...]} for BERT/RoBERTa,
    {"encoder", "decoder", "cross"} for Marian."""
    if hasattr(hf_model, "model") and hasattr(hf_model.model, "decoder"):  # MarianMTModel
        enc, dec = hf_model.model.encoder.layers, hf_model.model.decoder.layers
        return {"encoder": [layer.self_attn.out_proj for layer in enc],
                "decoder": [layer.self_attn.out_proj for layer in dec],
                "cross": [layer.encoder_attn.out_proj for layer in dec]}
    if hasattr(hf_model, "decoder") and hasattr(hf_model.decoder, "block"):  # T5 / mT5: ``block[i].layer[j]...o``
        enc, dec = hf_model.encoder.block, hf_model.decoder.block
        return {"encoder": [block.layer[0].SelfAttention.o for block in enc],
                "decoder": [block.layer[0].SelfAttention.o for block in dec],
                "cross": [block.layer[1].EncDecAttention.o for block in dec]}
    return {"encoder": [value_and_output(layer)[1] for layer in encoder_layers(hf_model)]}


def encoder_layers(hf_model) -> list:
    """The block each encoder layer runs, in order (L entries): ``encoder.layer`` (BERT, RoBERTa,
    ELECTRA, MPNet), ``transformer.layer`` (DistilBERT) or ALBERT's group of layer i,
    ``encoder.albert_layer_groups[⌊i / (L / G)⌋].albert_layers[0]`` (one block L times when G = 1)."""
    base = getattr(hf_model, hf_model.base_model_prefix, hf_model)
    if hasattr(base, "transformer"):
        return list(base.transformer.layer)
    if hasattr(base, "h"):  # GPT-2: ``h``
        return list(base.h)
    if not hasattr(base, "encoder") and hasattr(base, "layers"):  # ModernBERT: ``layers``
        return list(base.layers)
    if hasattr(base.encoder, "albert_layer_groups"):
        L, G = base.config.num_hidden_layers, base.config.num_hidden_groups
        return [base.encoder.albert_layer_groups[int(i / (L / G))].albert_layers[0] for i in range(L)]
    return list(base.encoder.layer)


def value_and_output(layer):
    """An encoder layer's value projection and attention output projection: BERT's layout
    (RoBERTa, ELECTRA: ``attention.self.value``, ``attention.output.dense``), MPNet's
    (``attention.attn.v``, ``attention.attn.o``), DistilBERT's (``attention.v_lin``,
    ``attention.out_lin``) or ALBERT's (``attention.value``, ``attention.dense``)."""
    if hasattr(layer, "self_attn"):  # Llama, Qwen2: ``self_attn.v_proj`` (H_kv heads), ``self_attn.o_proj``
        return layer.self_attn.v_proj, layer.self_attn.o_proj
    if hasattr(getattr(layer, "attn", None), "c_attn"):  # GPT-2: fused Conv1D ``attn.c_attn`` (values last), ``c_proj``
        return layer.attn.c_attn, layer.attn.c_proj
    if not hasattr(layer, "attention"):  # ModernBERT: fused ``attn.Wqkv`` (its values the last third), ``attn.Wo``
        return layer.attn.Wqkv, layer.attn.Wo
    if hasattr(layer.attention, "attn"):
        return layer.attention.attn.v, layer.attention.attn.o
    if hasattr(layer.attention, "v_lin"):
        return layer.attention.v_lin, layer.attention.out_lin
    if hasattr(layer.attention, "dense"):
        return layer.attention.value, layer.attention.dense
    if hasattr(layer.attention.self, "value_proj"):  # DeBERTa-v2
        return layer.attention.self.value_proj, layer.attention.output.dense
    return layer.attention.self.value, layer.attention.output.dense


def by_module(modules: list) -> dict:
    """{module: the layers that run it, in order} of a per-layer list of modules."""
    layers: dict = {}
    for layer, module in enumerate(modules):
        layers.setdefault(module, []).append(layer)
    return layers


def per_call(layers: list[int], fn):
    """A hook for a module run by ``layers`` (in order): ``fn(layer, module, *hook args)``, the
    layer being the one whose turn it is (the module's calls counted, one per layer)."""
    calls = itertools.count()

    def hook(module, *args):
        return fn(layers[next(calls) % len(layers)], module, *args)

    return hook


@contextlib.contextmanager
def gated(hf_model, gates: dict):
    """Run ``hf_model`` with head gates {kind: tensor (L, H), (L, b, H) or (L, b, H, q)}."""
    handles = []
    for kind, projections in output_projections(hf_model).items():
        if kind not in gates:
            continue
        for proj, layers in by_module(projections).items():

            def hook(layer, module, args, g=gates[kind]):
                g = g[layer]  # (H,), (b, H) or (b, H, q)
                x = args[0]  # (b, q, H·d_h)
                b, q, D = x.shape
                H = g.shape[-1] if g.dim() < 3 else g.shape[1]
                per = (g.view(1, 1, H) if g.dim() == 1 else g.view(b, 1, H) if g.dim() == 2
                       else g.permute(0, 2, 1))  # (1 or b, 1 or q, H)
                return ((x.view(b, q, H, D // H) * per[..., None]).view(b, q, D),)

            handles.append(proj.register_forward_pre_hook(per_call(layers, hook)))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def disabled(hf_model, heads, radius=()):
    """Run an encoder ``hf_model`` (``value_and_output`` layouts) with the heads in ``heads`` (L, H) bool disabled as
    Kovaleva et al. (2019) disable them: uniform attention over the sequence's real tokens, so
    the head's context is the mean of its value vectors over real keys, Σ_j m_j v_j / Σ_j m_j; in a local
    layer (``radius[l]`` > 0: ModernBERT's) over the real keys with |i − j| ≤ radius[l] (none: a zero context).
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
    blocks = encoder_layers(hf_model)

    def keep_values(layer, module, args, out):
        seen[layer] = out  # (b, n, H·d_h)

    def uniform(layer, module, args):
        off = torch.as_tensor(heads[layer], dtype=torch.bool)  # (H,)
        if not off.any():
            return None
        x = args[0]  # (b, q, H·d_h)
        b, q, D = x.shape
        H = off.shape[0]
        m, v = seen["mask"], seen[layer]  # (b, n), (b, n, H·d_h)
        if v.shape[-1] == 3 * D:  # a fused query/key/value projection (ModernBERT's Wqkv): the values last
            v = v[..., 2 * D:]
        if radius and radius[layer]:  # a local layer: the keys within the window
            i = torch.arange(q)
            m = m[:, None, :] * ((i[:, None] - i[None]).abs() <= radius[layer])[None].float()  # (b, q, k)
            mean = torch.einsum("bqk,bkd->bqd", m, v) / m.sum(-1, keepdim=True).clamp(min=1)  # (b, q, H·d_h)
        else:
            mean = (torch.einsum("bn,bnd->bd", m, v) / m.sum(1, keepdim=True))[:, None]  # (b, 1, H·d_h)
        x = x.view(b, q, H, D // H)
        x = torch.where(off[None, None, :, None], mean.view(b, -1, H, D // H), x)  # (b, q, H, d_h)
        return (x.reshape(b, q, D),)

    for value, layers in by_module([value_and_output(block)[0] for block in blocks]).items():
        handles.append(value.register_forward_hook(per_call(layers, keep_values)))
    for output, layers in by_module([value_and_output(block)[1] for block in blocks]).items():
        handles.append(output.register_forward_pre_hook(per_call(layers, uniform)))
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()


def hf_patch_loop(hf, clean: dict, corrupted: dict, metric, heads: dict) -> dict:
    """{kind: (L, H)} mean over examples of metric(corrupted, head ← clean) − metric(corrupted),
    one HF forward per head; ``heads`` {kind: H}. One forward on the clean input records each
    attention output projection's input (the heads' contexts, concatenated); each corrupted forward
    then writes the clean slice of one head into its projection's input by a pre-hook."""
    import numpy as np
    import torch

    projections = output_projections(hf)
    recorded, handles = {}, []
    for kind, projs in projections.items():
        for l, proj in enumerate(projs):
            handles.append(proj.register_forward_pre_hook(
                lambda module, args, key=(kind, l): recorded.__setitem__(key, args[0].detach().clone())))
    with torch.no_grad():
        hf(**clean)
    for h in handles:
        h.remove()
    with torch.no_grad():
        base = metric(hf(**corrupted))  # (b,)
    out = {}
    for kind, projs in projections.items():
        H = heads[kind]
        out[kind] = np.zeros((len(projs), H))
        for l, proj in enumerate(projs):
            d = recorded[(kind, l)].shape[-1] // H
            for h in range(H):
                def replace(module, args, src=recorded[(kind, l)], s=slice(h * d, (h + 1) * d)):
                    x = args[0].clone()  # (b, q, H·d_h)
                    x[..., s] = src[..., s]
                    return (x,)

                handle = proj.register_forward_pre_hook(replace)
                with torch.no_grad():
                    out[kind][l, h] = float((metric(hf(**corrupted)) - base).mean())
                handle.remove()
    return out


def torch_inputs(batch: dict) -> dict:
    """A batch of ids and masks as HF's inputs: int64 tensors."""
    import numpy as np
    import torch

    return {k: torch.tensor(np.asarray(v), dtype=torch.long) for k, v in batch.items()}


def sender_pass(hf, projections, clean: dict, corrupted: dict, sender: tuple[int, int], heads: int):
    """Path patching's sender pass with HF hooks (Wang et al. 2022): record every head's output (the
    input of each layer's output projection in ``projections``) on the clean and the corrupted
    inputs, then run the corrupted input with every head frozen to its corrupted output except the
    ``sender`` (layer, head), which takes its clean one. -> HF's output with hidden states."""
    import torch

    def contexts(inputs):
        got, handles = {}, []
        for l, proj in enumerate(projections):
            handles.append(proj.register_forward_pre_hook(lambda m, a, l=l: got.__setitem__(l, a[0].detach().clone())))
        with torch.no_grad():
            hf(**inputs)
        for h in handles:
            h.remove()
        return got

    clean_ctx, corr_ctx = contexts(clean), contexts(corrupted)
    sl, sh = sender
    handles = []
    for l, proj in enumerate(projections):
        def freeze(m, a, l=l):
            x = corr_ctx[l].clone()  # (b, n, H·d_h)
            if l == sl:
                d = x.shape[-1] // heads
                x[..., sh * d:(sh + 1) * d] = clean_ctx[l][..., sh * d:(sh + 1) * d]
            return (x,)
        handles.append(proj.register_forward_pre_hook(freeze))
    with torch.no_grad():
        out = hf(**corrupted, output_hidden_states=True)
    for h in handles:
        h.remove()
    return out
