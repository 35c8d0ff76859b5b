"""The analysis checks the encoder–decoder families' tests (BART, mBART, M2M100, T5) run on a tiny
random checkpoint: ``jattn.norms`` against αf formed explicitly, ``jattn analyze`` on (source,
target) pairs, and ``jattn.patch_heads`` against one HF forward per head (``hf_head_gates``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import jattn
from hf_head_gates import hf_patch_loop, torch_inputs
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms, tolerance


def pairs(n: int = 5) -> list[tuple[str, str]]:
    from tiny_seq2seq import sentences

    return list(zip(sentences(n, 1), sentences(n, 2)))


def attention_norms(weights, values, out_kernel, q_mask, k_mask) -> dict:
    """One layer's attention-only norms formed explicitly in float64 (Kobayashi et al. 2020, Eq. 5)
    from α (b, H, q, k), the values (b, H, k, d_h) and W_O (H, d_h, D), the query and key masks
    (b, q), (b, k): ‖f(x_j)‖, the masked α, ‖α f(x_j)‖ per head and ‖Σ_h α f(x_j)‖."""
    weights, values, out_kernel = (np.asarray(x, np.float64) for x in (weights, values, out_kernel))
    a = weights * (q_mask[:, None, :, None] * k_mask[:, None, None, :])
    f = np.einsum("bhnd,hde->bhne", values, out_kernel)  # (b, H, k, D)
    af = a[..., None] * f[:, :, None]  # (b, H, q, k, D)
    return {"f_norm": np.linalg.norm(f, axis=-1) * k_mask[:, None], "weights": a,
            "weighted_norm": np.linalg.norm(af, axis=-1), "summed_norm": np.linalg.norm(af.sum(1), axis=-1)}


def check_norms(model) -> None:
    """``jattn.norms`` on every attention type (padded both sides) vs αf formed explicitly in
    float64 (``attention_norms``): the attention-only norms, which do not depend on where the
    LayerNorms sit."""
    batch = padded_batch(model.config)
    got = jattn.norms(model, batch)
    internals = model.forward(batch).internals
    src, tgt = batch["attention_mask"], batch["decoder_attention_mask"]
    T = model_terms(model.config, src.shape[1], tgt.shape[1])
    for kind, (q_mask, k_mask) in {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}.items():
        view = model.module.view(kind)
        for layer in range(internals[kind]["weights"].shape[0]):
            want = attention_norms(internals[kind]["weights"][layer], internals[kind]["values"][layer],
                                   view["out_kernel"][layer], q_mask, k_mask)
            for key, value in want.items():
                assert_close(got[kind][key][layer], value, terms=T, err_msg=f"{kind} {key} layer {layer}")


def check_analyze_cli(model, folder, out: Path) -> dict:
    """``jattn analyze --methods weights,entropy,norms,alti,alti-plus`` on (source, target) pairs:
    the statistics' shapes per attention type, ALTI's and ALTI+'s finite, the weight statistics equal
    to the corpus runner's. -> results.json."""
    from jattn.analyses.weights import ClassAttention
    from jattn.cli import main
    from jattn.runner import run_corpus

    one = out.parent / "pairs.txt"
    one.write_text("".join(f"{a} ||| {b}\n" for a, b in pairs()))
    main(["analyze", "--model", str(folder), "--format", "parallel", "--input", str(one), "--methods",
          "weights,entropy,norms,alti,alti-plus", "--max-length", "32", "--batch-size", "2", "--out", str(out)])
    doc = json.loads((out / "results.json").read_text())
    c = model.config
    assert doc["meta"]["segments"] == 5
    assert doc["encoder_attn_to_sep"]["shape"] == [c.encoder_layers, c.encoder_heads]
    assert doc["decoder_entropy"]["shape"] == [c.decoder_layers, c.decoder_heads]
    assert doc["cross_norm_to_sep"]["shape"] == [c.decoder_layers, c.decoder_heads]
    alti = [k for k in doc if "alti" in k]
    assert "cross_alti_plus_source" in alti and any(k.startswith("encoder_alti") for k in alti), alti
    for key in alti:
        assert np.isfinite(np.asarray(doc[key]["value"], np.float64)).all(), key
    direct = run_corpus(model, pairs(), [ClassAttention()], batch_size=2, max_length=32, progress=False).statistics
    assert_close(doc["cross_attn_to_sep"]["value"], direct["cross_attn_to_sep"].value,
                 terms=model_terms(c, 32, 32) + 32 * 5)
    return doc


def clean_and_corrupted(model) -> tuple[dict, dict]:
    """A padded clean batch and a corrupted copy: other tokens at a few real positions, same lengths."""
    clean = padded_batch(model.config, seed=1)
    corrupted = {k: v.copy() for k, v in clean.items()}
    rng = np.random.default_rng(2)
    for key, mask, vocab in (("input_ids", "attention_mask", model.config.src_vocab_size),
                             ("decoder_input_ids", "decoder_attention_mask", model.config.tgt_vocab_size)):
        for r in range(len(clean[key])):
            real = np.nonzero(clean[mask][r])[0][1:]  # keep the decoder's start token
            pos = rng.choice(real, size=min(2, len(real)), replace=False)
            corrupted[key][r, pos] = rng.integers(4, vocab - 1, size=len(pos))
    return clean, corrupted


def check_patch_heads(model, hf) -> None:
    """``jattn.patch_heads`` on every head of every attention type (metric: a logit difference at
    target position 1) against one HF forward per head with the clean head written in by hooks, in
    float64 (``hf_head_gates.hf_patch_loop``): the patched layers' suffix runs through the final
    norms where the model has them."""
    from jattn.sweeps.patching import patch_heads

    clean, corrupted = clean_and_corrupted(model)
    got = patch_heads(model, clean, corrupted, lambda out: out["logits"][:, 1, 5] - out["logits"][:, 1, 6])
    hf = hf.double()
    c = model.config
    want = hf_patch_loop(hf, torch_inputs(clean), torch_inputs(corrupted),
                         lambda out: out.logits[:, 1, 5] - out.logits[:, 1, 6],
                         {"encoder": c.encoder_heads, "decoder": c.decoder_heads, "cross": c.decoder_heads})
    with torch.no_grad():
        scale = float(hf(**torch_inputs(corrupted)).logits[:, 1].abs().max())  # the logits the difference cancels
    T = 2 * (model_terms(c, clean["input_ids"].shape[1], clean["decoder_input_ids"].shape[1]) + c.tgt_vocab_size)
    for kind in want:
        assert_close(got[kind], want[kind], terms=T, scale=scale, err_msg=kind)
        assert np.abs(want[kind]).max() > 20 * tolerance(scale, T), kind
