"""The analysis checks the encoder–decoder families' conformance tests (tests/families) and the Marian tests run
on a tiny random checkpoint: ``jattn.norms`` against αf formed explicitly, ``jattn analyze`` on (source, target)
pairs, ``jattn.patch_heads`` against one HF forward per head (``hf_head_gates``); the corpus runner's statistics
against per-example loops over HF's attention maps, head importance against HF with hooked gates, the pruning
curve and the BLEU metric, L0 gates folded and exported, LRP conservation, the viewer, the rest of the public
API per attention type."""

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


def check_encoder_only_method_refused(model, data) -> None:
    """A method that reads encoder models alone (the default families) is refused on a translation model."""
    import pytest

    from jattn.runner.protocol import Method
    from jattn.runner import run_corpus

    class EncoderOnly(Method):  # the default families: ("encoder",)
        name = "encoder-only"

    with pytest.raises(ValueError, match="reads encoder models.*translation"):
        run_corpus(model, data, [EncoderOnly()], max_length=32, progress=False)


def pair_ids(model, src: str, tgt: str):
    """Source ids, target ids and teacher-forced decoder input of one pair, as the runner builds them."""
    x = np.asarray(model.tokenizer([src])["input_ids"][0])
    y = np.asarray(model.tokenizer(text_target=[tgt])["input_ids"][0])
    return x, y, np.concatenate([[model.config.decoder_start_token_id], y[:-1]])


def corpus_terms(model, pairs: int) -> int:
    """The float32 reductions behind a statistic: the model on ≤ 32 tokens a side, then the sums
    over the corpus's rows (tests/tolerance.py)."""
    return model_terms(model.config, 32, 32) + 32 * pairs


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


def check_norms(model, residual: bool = False) -> None:
    """``jattn.norms`` on every attention type (padded both sides) vs αf formed explicitly in
    float64 (``attention_norms``): the attention-only norms, which do not depend on where the
    LayerNorms sit; with ``residual`` (a post-LN model) also the residual norms of the self-attentions
    (``norms_testing.brute_force``)."""
    from norms_testing import brute_force

    batch = padded_batch(model.config)
    got = jattn.norms(model, batch, residual=residual)
    internals = model.forward(batch).internals
    src, tgt = batch["attention_mask"], batch["decoder_attention_mask"]
    T = model_terms(model.config, src.shape[1], tgt.shape[1])
    for kind, (q_mask, k_mask) in {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}.items():
        view = model.module.view(kind)
        for layer in range(internals[kind]["weights"].shape[0]):
            it = {k: np.asarray(v[layer], np.float64) for k, v in {**internals[kind], **view}.items()}
            if residual and kind != "cross":
                want = brute_force(it, q_mask, model.config.layer_norm_eps)
            else:
                want = attention_norms(it["weights"], it["values"], it["out_kernel"], q_mask, k_mask)
            keys = [k for k in got[kind] if k in want] if residual else list(want)
            assert len(keys) >= 4, kind
            for key in keys:
                assert_close(got[kind][key][layer], want[key], terms=T, err_msg=f"{kind} {key} layer {layer}")


def check_analyze_cli(model, folder, out: Path) -> dict:
    """``jattn analyze --methods weights,entropy,norms,alti,alti-plus`` on (source, target) pairs:
    the statistics' shapes per attention type, ALTI's, ALTI+'s and the norms' finite, the weight statistics equal
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
    norms = [k for k in doc if "norm" in k and isinstance(doc[k], dict) and "value" in doc[k]]
    assert any(k.startswith("cross_norm") for k in norms), norms
    for key in norms:  # a statistic with no events in the corpus (no punctuation here) is None, not a number
        value = np.asarray(doc[key]["value"], object)
        assert all(np.isfinite(v) for v in value.ravel() if v is not None), key
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


KINDS = ("encoder", "decoder", "cross")


def statistics_reference(model, hf, data):
    """Per pair: α of each type from HF PyTorch (eager, unpadded; the oracle), ‖α f‖ from one padded
    ``jattn.norms`` call (itself tested against HF), and which keys and queries are </s> (a decoder
    start token </s>, BART's, counts as the start, not as EOS)."""
    ids = [pair_ids(model, a, b) for a, b in data]
    s, t = max(len(x) for x, _, _ in ids), max(len(y) for _, y, _ in ids)
    batch = {k: np.zeros((len(ids), n), np.int64) for k, n in (("input_ids", s), ("attention_mask", s),
                                                              ("decoder_input_ids", t), ("decoder_attention_mask", t))}
    batch["input_ids"][:] = model.config.pad_token_id
    for r, (x, y, dec) in enumerate(ids):
        batch["input_ids"][r, :len(x)], batch["attention_mask"][r, :len(x)] = x, 1
        batch["decoder_input_ids"][r, :len(y)], batch["decoder_attention_mask"][r, :len(y)] = dec, 1
    norms = jattn.norms(model, batch)
    eos_id, out = model.config.eos_token_id, []
    for r, (x, y, dec) in enumerate(ids):
        with torch.no_grad():
            o = hf(input_ids=torch.tensor(x[None]), decoder_input_ids=torch.tensor(dec[None]), output_attentions=True)
        maps = {"encoder": o.encoder_attentions, "decoder": o.decoder_attentions, "cross": o.cross_attentions}
        weights = {k: np.stack([a[0].double().numpy() for a in v]) for k, v in maps.items()}  # (L, H, q, k)
        q = {"encoder": len(x), "decoder": len(y), "cross": len(y)}
        k = {"encoder": len(x), "decoder": len(y), "cross": len(x)}
        weighted = {kind: np.asarray(norms[kind]["weighted_norm"], np.float64)[:, r, :, :q[kind], :k[kind]]
                    for kind in KINDS}  # (L, H, q, k)
        dec_eos = (dec == eos_id) & (np.arange(len(dec)) > 0)
        eos = {"encoder": x == eos_id, "decoder": dec_eos, "cross": x == eos_id}  # keys
        query_eos = {"encoder": x == eos_id, "decoder": dec_eos, "cross": dec_eos}
        out.append((weights, weighted, eos, query_eos))
    return out


def check_statistics(model, hf, data) -> dict:
    """The corpus runner's statistics per attention type (Clark et al.'s weights and entropy, JS distances
    between heads, Kobayashi et al.'s norm statistics, Voita et al.'s confidence) against per-example loops
    over HF PyTorch's attention maps (``statistics_reference``). -> the statistics."""
    from jattn.analyses.confidence import HeadConfidence
    from jattn.analyses.distance import JSDistance
    from jattn.analyses.norm_stats import NormClassAttention
    from jattn.analyses.weights import ClassAttention, Entropy
    from jattn.runner import run_corpus

    got = run_corpus(model, data, [ClassAttention(), Entropy(), NormClassAttention(), JSDistance(), HeadConfidence()],
                     batch_size=4, max_length=32, progress=False).statistics
    to_sep, norm_to_sep, entropy, confidence = ({k: [] for k in KINDS} for _ in range(4))
    js, prev = {k: 0.0 for k in KINDS}, []
    for weights, weighted, eos, query_eos in statistics_reference(model, hf, data):
        for k in KINDS:
            A = weights[k]  # (L, H, q, k)
            L, H, q, n = A.shape
            to_sep[k].append(A[..., eos[k]].sum(-1).mean(-1))
            norm_to_sep[k].append(weighted[k][..., eos[k]].sum(-1).mean(-1))
            confidence[k].append(A.max(-1)[..., ~query_eos[k]].mean(-1))
            rows = np.zeros((L, H, q))
            for i in range(q):
                m = i + 1 if k == "decoder" else n  # keys row i may attend
                p = 0.9999 * A[..., i, :m] + 0.0001 / m
                rows[..., i] = -(p * np.log(p)).sum(-1)
                # JS between every pair of heads on this row, smoothing 0.999 / 0.001 over the m keys
                s = (0.999 * A[..., i, :m] + 0.001 / m).reshape(L * H, m)
                mid = 0.5 * (s[:, None] + s[None])
                kl = lambda a, b: (a * np.log(a / b)).sum(-1)  # noqa: E731
                js[k] = js[k] + 0.5 * (kl(s[:, None], mid) + kl(s[None], mid))
            entropy[k].append(rows.mean(-1))
        A = weights["decoder"]
        prev.append(np.mean([A[..., i, i - 1] for i in range(1, A.shape[2])], 0))
    terms = corpus_terms(model, len(data))  # batches of 4 vs HF (and one jattn.norms batch) alone
    for k in KINDS:
        assert_close(got[f"{k}_attn_to_sep"].value, np.mean(to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_norm_to_sep"].value, np.mean(norm_to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_entropy"].value, np.mean(entropy[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_js_distance"].value, js[k], terms=terms, err_msg=k)
        assert_close(got[f"{k}_confidence"].value, np.mean(confidence[k], 0), terms=terms, err_msg=k)
    assert_close(got["decoder_attn_prev"].value, np.mean(prev, 0), terms=terms)
    c = model.config
    assert got["encoder_attn_to_sep"].value.shape == (c.encoder_layers, c.encoder_heads)
    assert got["cross_attn_to_sep"].value.shape == (c.decoder_layers, c.decoder_heads)
    return got


def check_importance(model, hf, estimator: str = "token") -> None:
    """Michel et al.'s head importance of all three attention types vs HF in float64 with gates
    inserted by hooks (tests/test_importance.py's oracle), a masked cross-attention head 0. ``hf`` goes float64."""
    from test_importance import grad_terms, reference, translation_cases, translation_loss

    from jattn.sweeps.importance import importance
    from tiny_seq2seq import sentences

    hf = hf.double()
    data = list(zip(sentences(4, 1), sentences(4, 2)))
    cases = translation_cases(model, data)
    shapes = {"encoder": (model.config.encoder_layers, model.config.encoder_heads),
              "decoder": (model.config.decoder_layers, model.config.decoder_heads),
              "cross": (model.config.decoder_layers, model.config.decoder_heads)}
    mask = {"cross": np.ones(shapes["cross"], np.float32)}
    mask["cross"][1, 0] = 0.0
    got = importance(model, data, estimator=estimator, normalize=False, mask=mask, batch_size=4, progress=False)
    sums = reference(hf, cases, translation_loss, shapes, estimator, mask)
    for kind in shapes:
        count = sum(case[2][kind] for case in cases) if estimator == "token" else len(cases)
        assert_close(got[kind], sums[kind] / count, terms=grad_terms(model, len(cases)), err_msg=kind)
    assert got["cross"][1, 0] == 0.0


def check_pruning_curve(model, data) -> None:
    """The pruning curve ranks the heads of all three types together: the first step masks the
    lowest-scored tenth of them all."""
    from jattn.sweeps.pruning_curve import prune

    history, seen = [], []
    metric = lambda m: seen.append({k: np.array(v) for k, v in m.items()}) or 0.0  # noqa: E731
    prune(model, data, metric, estimator="token", step=0.1, history=history, batch_size=4)
    flat = np.concatenate([history[0][k].ravel() for k in KINDS])
    k = max(1, round(0.1 * len(flat)))
    first = np.argsort(flat, kind="stable")[:k]
    masks = np.stack([np.concatenate([m[kind].ravel() for kind in KINDS]) for m in seen])
    assert masks[1].sum() == len(flat) - k and (masks[1][first] == 0).all()


def check_bleu_metric(model, data) -> None:
    """The BLEU metric of a head mask equals sentence-by-sentence decoding with the mask (sacrebleu)."""
    import pytest
    import sacrebleu

    from jattn import Interventions
    from jattn.sweeps.pruning_curve import bleu_metric

    c = model.config
    rng = np.random.default_rng(0)
    mask = {"encoder": rng.integers(0, 2, (c.encoder_layers, c.encoder_heads)).astype(np.float32),
            "decoder": np.ones((c.decoder_layers, c.decoder_heads), np.float32),
            "cross": rng.integers(0, 2, (c.decoder_layers, c.decoder_heads)).astype(np.float32)}
    got = bleu_metric(model, data, batch_size=2, max_length=12)(mask)
    iv = {k: Interventions(head_gates=v) for k, v in mask.items()}
    hyps = []
    for src, _ in data:
        enc = model.tokenizer([src], return_tensors="np")
        out = model.generate(enc["input_ids"], enc["attention_mask"], max_length=12, interventions=iv).sequences
        hyps += model.tokenizer.batch_decode(out.tolist(), skip_special_tokens=True)
    assert got == pytest.approx(sacrebleu.corpus_bleu(hyps, [[t for _, t in data]]).score, abs=1e-9)


def check_l0_fold_and_export(model, out: Path) -> None:
    """Voita et al.'s L0 gates: folded into W_O they equal the gated forward; the pruned export
    of the folded model equals the gated evaluation."""
    import jax.numpy as jnp
    from flax import nnx

    from jattn.nn import gates as G
    from jattn.nn import seq2seq
    from jattn.sweeps.pruning import export_pruned
    from jattn.training import l0

    rng = np.random.default_rng(1)
    values = {k: np.asarray(G.deterministic(jnp.asarray(rng.normal(0.5, 3.0, s), jnp.float32)))
              for k, s in l0.gate_shapes(model.config).items()}
    assert any((v == 0).any() for v in values.values()) and any(((v > 0) & (v < 1)).any() for v in values.values())
    batch = model.check_batch(padded_batch(model.config, seed=2))
    params = nnx.to_pure_dict(model.params)
    T = model_terms(model.config, 9, 7)
    ref, _ = seq2seq.forward(params, model.config, batch,
                             G.interventions({k: jnp.asarray(v) for k, v in values.items()}), internals=None)
    folded = l0.fold_gates(params, model.config, values)
    got, _ = seq2seq.forward(folded, model.config, batch, internals=None)
    assert_close(got["logits"], ref["logits"], terms=T)
    gated = type(model)(model.config, folded, model.tokenizer, model.source)
    pruned = jattn.load(export_pruned(gated, {k: v > 0 for k, v in values.items()}, out), use_cache=False)
    assert_close(pruned.forward(batch).logits, ref["logits"], terms=T)


def check_lrp_conservation(model) -> None:
    """LRP's head relevance (post-LN translation models) conserves one unit per explained target position."""
    import jax
    import jax.numpy as jnp
    from test_lrp import relprop_terms

    from jattn.analyses import lrp

    raw = padded_batch(model.config, seed=2, b=3, s=7, t=5)
    batch = {k: jnp.asarray(v) for k, v in model.check_batch(raw).items()}
    batch["target_mask"] = jnp.asarray(raw["decoder_attention_mask"])
    out = jax.tree.map(np.asarray, lrp.head_relevance(model.params, model.config, batch))
    c = model.config
    assert out["heads"].shape == (3, c.encoder_layers, c.encoder_heads)
    predictions = np.asarray(raw["decoder_attention_mask"]).sum(1)  # one unit per explained target position
    want = np.broadcast_to(predictions[:, None], out["residual"].shape)
    terms = relprop_terms(c.encoder_layers, 7, c.d_model) + 5
    assert_close(out["layer_input"], want, terms=terms)
    assert_close(out["heads"].sum(-1) + out["residual"], want, terms=terms)


def check_view_page(model) -> None:
    """The viewer's translation page stores the model's α of each attention type and its tokens, teacher-forced
    and on its own beam-search translation."""
    from test_view import assert_stored

    from jattn.viz.view import read_page

    source, target = "un homme court sur la plage", "the man runs on the beach"
    data = read_page(jattn.view(model, source, target=target))
    src = np.asarray(model.tokenizer([source])["input_ids"])  # (1, s)
    tgt = model.tokenizer(text_target=[target])["input_ids"][0]
    dec = np.asarray([[model.config.decoder_start_token_id] + tgt])  # (1, t)
    batch = {"input_ids": src, "attention_mask": np.ones_like(src), "decoder_input_ids": dec,
             "decoder_attention_mask": np.ones_like(dec)}
    out = model.forward(batch)
    assert data["tokens"]["source"] == model.tokenizer.convert_ids_to_tokens(src[0].tolist())
    assert data["tokens"]["target"] == model.tokenizer.convert_ids_to_tokens(dec[0].tolist())
    for kind, alpha in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                        ("cross", out.cross_attentions)):
        assert_stored(data["views"][kind]["measures"]["alpha"], np.asarray(alpha)[:, 0])
    generated = read_page(jattn.view(model, source, num_beams=2))
    assert generated["generated"] and generated["tokens"]["target"][0] == "</s>"


def check_analyze_cli_post_ln(model, folder, out: Path) -> None:
    """``jattn analyze --methods weights,entropy,norms,confidence,js`` on (source, target) pairs: the
    statistics' shapes per attention type, the weight statistics equal to the corpus runner's, the figures."""
    from jattn.analyses.weights import ClassAttention
    from jattn.cli import main
    from jattn.runner import run_corpus

    one = out.parent / "p.txt"
    one.write_text("".join(f"{a} ||| {b}\n" for a, b in pairs(5)))
    main(["analyze", "--model", str(folder), "--format", "parallel", "--input", str(one), "--methods",
          "weights,entropy,norms,confidence,js", "--max-length", "32", "--batch-size", "2", "--out", str(out)])
    doc = json.loads((out / "results.json").read_text())
    c = model.config
    assert doc["encoder_attn_to_sep"]["shape"] == [c.encoder_layers, c.encoder_heads]
    assert doc["decoder_attn_prev"]["shape"] == [c.decoder_layers, c.decoder_heads]
    assert doc["cross_norm_to_sep"]["shape"] == [c.decoder_layers, c.decoder_heads] and doc["meta"]["segments"] == 5
    direct = run_corpus(model, pairs(5), [ClassAttention()], batch_size=2, max_length=32, progress=False).statistics
    assert_close(doc["cross_attn_to_sep"]["value"], direct["cross_attn_to_sep"].value, terms=corpus_terms(model, 5))
    assert (out / "figures" / "cross").is_dir()


API_PAIRS = [("un homme court sur la plage", "the man runs on the beach"), ("le chien", "the dog"),
             ("deux enfants jouent dans le parc", "two children play in the park")]


def check_public_api(model) -> None:
    """The rest of the public API on a translation model answers per attention type with finite numbers: the
    pre-LN attributions (ALTI's per-layer maps), gradient importance with a masked head (0 there),
    attribution patching, the pruning curve's per-type masks, the viewer page; the classifier-only
    ``disable`` and LRP (of a pre-LN model) refuse by name."""
    import pytest

    from jattn.analyses.lrp import head_relevance

    types = KINDS
    assert tuple(model.head_shapes) == types
    maps = jattn.attributions(model, API_PAIRS)
    assert "encoder" in maps and all(np.isfinite(np.asarray(v)).all() for a in maps.values() for v in a.values())
    mask = {k: np.ones(s, np.float32) for k, s in model.head_shapes.items()}
    mask["cross"][0, 0] = 0
    imp = jattn.importance(model, API_PAIRS, mask=mask, batch_size=2, progress=False)
    assert tuple(imp) == types and imp["cross"][0, 0] == 0
    assert all(imp[k].shape == model.head_shapes[k] and np.isfinite(imp[k]).all() and imp[k].any() for k in types)
    clean = model.batch(API_PAIRS)
    corrupted = {k: v.copy() for k, v in clean.items()}
    corrupted["input_ids"][:, 1] = clean["input_ids"][::-1, 1]
    approx = jattn.attribution_patch_heads(model, clean, corrupted, lambda out: out["logits"][:, 1, 5], batch_size=2)
    assert all(approx[k].shape == model.head_shapes[k] and np.isfinite(approx[k]).all() for k in types)
    curve = jattn.prune(model, API_PAIRS, lambda m: float(sum(v.sum() for v in m.values())), scores=imp, step=0.5)
    assert curve[-1][0] == 1.0
    page = jattn.view(model, API_PAIRS[0][0], target=API_PAIRS[0][1])
    assert isinstance(page, str) and "<html" in page.lower()
    with pytest.raises(ValueError, match="classif"):
        jattn.disable(model, [(x, 0) for x in API_PAIRS], progress=False)
    with pytest.raises(ValueError, match="pre-LN"):
        head_relevance(model.params, model.config, clean)
