"""Test helpers for the norm and attribution methods: a tiny random BERT saved locally, padded
batches, and the original formulations written out with explicit (b, H, n, n, D) tensors in
float64 numpy (Kobayashi et al. 2020/2021 as their released code does it)."""

from __future__ import annotations

import shutil

import numpy as np
from tolerance import assert_close as close, model_terms

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

SENTENCES = [
    "The cat sat on the mat, and the dog slept.",
    "Attention is not explanation.",
    "A much longer sentence, with commas, full stops. And a second clause here!",
]


def tiny_bert(tmp_path, **overrides):
    """A random HF BertModel (MiniLM's vocabulary) saved to tmp_path and loaded with jattn."""
    import torch
    from transformers import BertConfig, BertModel

    import jattn
    from jattn.models.load import default_model_path

    cfg = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
               intermediate_size=48, max_position_embeddings=128, hidden_act="gelu")
    cfg.update(overrides)
    torch.manual_seed(0)
    model = BertModel(BertConfig(**cfg), add_pooling_layer=False)
    with torch.no_grad():  # non-trivial LayerNorm parameters, so γ and β matter
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith("weight") else 0.0))
    model.save_pretrained(tmp_path)
    src = default_model_path()
    for f in TOKENIZER_FILES:
        if (src / f).exists():
            shutil.copy(src / f, tmp_path / f)
    return jattn.load(str(tmp_path), use_cache=False)


_HF = {}


def internals_np(model, batch, layer: int) -> dict:
    """One encoder layer's quantities taken from the Hugging Face PyTorch model (forward hooks),
    float64 numpy: ``weights`` α, ``values`` (value projection output, bias included),
    ``out_kernel`` W_O split by head (H, d_h, D), ``out_bias``, ``output`` (attention dense
    output), ``residual`` (the layer input), ``pre_ln`` (the attention LayerNorm's input),
    ``ln_scale`` γ, ``ln_bias`` β, ``attention_ln_out``. Nothing here comes from jattn, so the
    norms are checked against HF."""
    import torch
    from transformers import AutoModel

    if model.source not in _HF:
        _HF[model.source] = AutoModel.from_pretrained(model.source, attn_implementation="eager").eval()
    hf = _HF[model.source]
    block = hf.encoder.layer[layer]
    H = hf.config.num_attention_heads
    seen = {}
    hooks = [block.register_forward_pre_hook(lambda m, a: seen.__setitem__("residual", a[0])),
             block.attention.self.value.register_forward_hook(lambda m, a, o: seen.__setitem__("values", o)),
             block.attention.output.dense.register_forward_hook(lambda m, a, o: seen.__setitem__("output", o)),
             block.attention.output.LayerNorm.register_forward_pre_hook(lambda m, a: seen.__setitem__("pre_ln", a[0])),
             block.attention.output.LayerNorm.register_forward_hook(lambda m, a, o: seen.__setitem__("ln_out", o))]
    try:
        with torch.no_grad():
            out = hf(input_ids=torch.tensor(np.asarray(batch.input_ids)),
                     attention_mask=torch.tensor(np.asarray(batch.attention_mask)), output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    np64 = lambda t: t.detach().double().numpy()
    b, n, D = seen["values"].shape
    w = np64(block.attention.output.dense.weight)  # (D_out, D_in)
    return {"weights": np64(out.attentions[layer]),
            "values": np64(seen["values"]).reshape(b, n, H, D // H).transpose(0, 2, 1, 3),  # (b, H, n, d_h)
            "out_kernel": w.T.reshape(H, D // H, D), "out_bias": np64(block.attention.output.dense.bias),
            "output": np64(seen["output"]), "residual": np64(seen["residual"]), "pre_ln": np64(seen["pre_ln"]),
            "ln_scale": np64(block.attention.output.LayerNorm.weight),
            "ln_bias": np64(block.attention.output.LayerNorm.bias), "attention_ln_out": np64(seen["ln_out"])}


# ---------------------------------------------------------------- the original formulation

def brute_force(internals: dict, mask: np.ndarray, eps: float) -> dict:
    """Every Kobayashi quantity from an explicit αf (b, H, n, n, D) tensor, for one layer."""
    a = internals["weights"]  # (b, H, n, n)
    v = internals["values"]  # (b, H, n, d_h)
    w_o = internals["out_kernel"]  # (H, d_h, D)
    real = mask.astype(bool)
    pair = real[:, :, None] & real[:, None, :]
    a = a * pair[:, None]
    f = np.einsum("bhnd,hde->bhne", v, w_o)  # (b, H, n, D)
    af = a[..., None] * f[:, :, None, :, :]  # (b, H, n, n, D)
    s = af.sum(1)  # (b, n, n, D)
    n = a.shape[-1]
    eye = np.eye(n)
    r = s + eye[None, :, :, None] * internals["residual"][:, :, None, :]  # (b, n, n, D)
    pre = internals["pre_ln"]
    var = pre.var(-1)[:, :, None, None]  # (b, n, 1, 1)
    z = internals["ln_scale"] * (r - r.mean(-1, keepdims=True)) / np.sqrt(var + eps)  # (b, n, n, D)

    def ratio(t):
        pres = np.einsum("biid->bid", t)
        mix = t.sum(2) - pres
        m, p = np.linalg.norm(mix, axis=-1), np.linalg.norm(pres, axis=-1)
        return np.where(real, m / np.where(real, m + p, 1.0), 0.0)

    abar = np.einsum("bhii->bi", a) / a.shape[1]
    return {
        "f": f, "s": s, "z": z,
        "f_norm": np.linalg.norm(f, axis=-1) * real[:, None],
        "weighted_norm": np.linalg.norm(af, axis=-1),
        "summed_norm": np.linalg.norm(s, axis=-1),
        "weights": a,
        "attnres_norm": np.linalg.norm(r, axis=-1) * pair,
        "attnresln_norm": np.linalg.norm(z, axis=-1) * pair,
        "mixing_attn_w": (1 - abar) * real,
        "mixing_attnres_w": (1 - abar) / 2 * real,
        "mixing_attn_n": ratio(s),
        "mixing_attnres_n": ratio(r),
        "mixing_attnresln_n": ratio(z * pair[..., None]),
    }


def assert_close(got, want, terms: int, scale=None, name=""):
    """float32 ``got`` against ``want`` within the float32 rounding of ``terms`` reductions, relative
    to ``scale``, by default the reference's largest magnitude (tests/tolerance.py; relative error
    is meaningless where the true value is ~1e-9)."""
    close(got, want, terms=terms, scale=scale, err_msg=name)


def terms(model, n: int) -> int:
    """The float32 reductions behind a norm or attribution map of an encoder on ``n`` tokens: its
    forward (``tolerance.model_terms``), a norm over the width, products of L (n, n) maps."""
    c = model.config
    return model_terms(c, n) + c.hidden_size + c.num_layers * n
