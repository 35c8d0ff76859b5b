"""Every analysis that runs on the Marian model, on BART: the corpus runner's statistics per
attention type against per-example loops over HF PyTorch's attention maps (Clark's weights and
entropy, JS distances, Kobayashi's norm statistics, Voita's confidence), ``jattn.norms`` against
the explicit αf tensor, head importance against HF with hooked gates in float64, pruning curves
and the BLEU metric, L0 gates folded and exported, LRP conservation, the attention viewer and
``jattn analyze``."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jattn
import seq2seq_family_analyses as analyses
import seq2seq_family_parity as parity
from jattn import Interventions
from jattn.runner.protocol import Method
from jattn.analyses.confidence import HeadConfidence
from jattn.analyses.distance import JSDistance
from jattn.analyses.norm_stats import NormClassAttention
from jattn.analyses.weights import ClassAttention, Entropy
from jattn.runner import run_corpus
from test_run_translation import corpus_terms, pair_ids, pairs
from tiny_bart import hf_model, save_tiny
from tiny_seq2seq import padded_batch, sentences
from tolerance import assert_close, model_terms

folder, model = parity.one_case(save_tiny, "bart")


def padded(model, ids):
    s, t = max(len(x) for x, _, _ in ids), max(len(y) for _, y, _ in ids)
    batch = {k: np.zeros((len(ids), n), np.int64) for k, n in (("input_ids", s), ("attention_mask", s),
                                                              ("decoder_input_ids", t), ("decoder_attention_mask", t))}
    batch["input_ids"][:] = model.config.pad_token_id
    for r, (x, y, dec) in enumerate(ids):
        batch["input_ids"][r, :len(x)], batch["attention_mask"][r, :len(x)] = x, 1
        batch["decoder_input_ids"][r, :len(y)], batch["decoder_attention_mask"][r, :len(y)] = dec, 1
    return batch


def reference(model, folder, data):
    """Per pair: α of each type from HF PyTorch (eager, unpadded), ‖α f‖ from one padded
    ``jattn.norms`` call (tested against the explicit tensor below), and which keys and queries
    are </s> (the decoder's start token </s> counts as the start, not as EOS)."""
    hf = hf_model(folder)
    ids = [pair_ids(model, a, b) for a, b in data]
    norms = jattn.norms(model, padded(model, ids))
    eos_id = model.config.eos_token_id
    out = []
    for r, (x, y, dec) in enumerate(ids):
        with torch.no_grad():
            o = hf(input_ids=torch.tensor(x[None]), decoder_input_ids=torch.tensor(dec[None]), output_attentions=True)
        maps = {"encoder": o.encoder_attentions, "decoder": o.decoder_attentions, "cross": o.cross_attentions}
        weights = {k: np.stack([a[0].double().numpy() for a in v]) for k, v in maps.items()}  # (L, H, q, k)
        q = {"encoder": len(x), "decoder": len(y), "cross": len(y)}
        k = {"encoder": len(x), "decoder": len(y), "cross": len(x)}
        weighted = {kind: np.asarray(norms[kind]["weighted_norm"], np.float64)[:, r, :, :q[kind], :k[kind]]
                    for kind in parity.KINDS}  # (L, H, q, k)
        dec_eos = (dec == eos_id) & (np.arange(len(dec)) > 0)
        eos = {"encoder": x == eos_id, "decoder": dec_eos, "cross": x == eos_id}  # keys
        query_eos = {"encoder": x == eos_id, "decoder": dec_eos, "cross": dec_eos}
        out.append((weights, weighted, eos, query_eos))
    return out


# post-LN as Marian (BART differs in embeddings only), fast twin: test_run_translation.py, same name
@pytest.mark.slow
def test_translation_statistics_equal_per_example_loops(model, folder):
    data = pairs()
    got = run_corpus(model, data, [ClassAttention(), Entropy(), NormClassAttention(), JSDistance(), HeadConfidence()],
                     batch_size=4, max_length=32, progress=False).statistics
    to_sep, norm_to_sep, entropy, confidence = ({k: [] for k in parity.KINDS} for _ in range(4))
    js = {k: 0.0 for k in parity.KINDS}
    prev = []
    for weights, weighted, eos, query_eos in reference(model, folder, data):
        for k in parity.KINDS:
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
                s = (0.999 * A[..., i, :m] + 0.001 / m).reshape(L * H, m)
                mid = 0.5 * (s[:, None] + s[None])
                kl = lambda a, b: (a * np.log(a / b)).sum(-1)  # noqa: E731
                js[k] = js[k] + 0.5 * (kl(s[:, None], mid) + kl(s[None], mid))
            entropy[k].append(rows.mean(-1))
        A = weights["decoder"]
        prev.append(np.mean([A[..., i, i - 1] for i in range(1, A.shape[2])], 0))
    terms = corpus_terms(model, len(data))
    for k in parity.KINDS:
        assert_close(got[f"{k}_attn_to_sep"].value, np.mean(to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_norm_to_sep"].value, np.mean(norm_to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_entropy"].value, np.mean(entropy[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_js_distance"].value, js[k], terms=terms, err_msg=k)
        assert_close(got[f"{k}_confidence"].value, np.mean(confidence[k], 0), terms=terms, err_msg=k)
    assert_close(got["decoder_attn_prev"].value, np.mean(prev, 0), terms=terms)
    c = model.config
    assert got["encoder_attn_to_sep"].value.shape == (c.encoder_layers, c.encoder_heads)
    assert got["cross_attn_to_sep"].value.shape == (c.decoder_layers, c.decoder_heads)


# post-LN as FSMT (BART differs in embeddings only), fast twin: test_norms.py::test_seq2seq_all_*
@pytest.mark.slow
def test_norms_against_explicit_tensor(model):
    """jattn.norms on every attention type (padded both sides) vs αf formed explicitly."""
    from norms_testing import brute_force

    batch = padded_batch(model.config)
    got = jattn.norms(model, batch, residual=True)
    internals = model.forward(batch).internals
    src, tgt = batch["attention_mask"], batch["decoder_attention_mask"]
    T = model_terms(model.config, src.shape[1], tgt.shape[1])
    for kind, (q_mask, k_mask) in {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}.items():
        view = model.module.view(kind)
        for layer in range(internals[kind]["weights"].shape[0]):
            it = {k: np.asarray(v[layer], np.float64) for k, v in {**internals[kind], **view}.items()}
            if kind == "cross":
                want = analyses.attention_norms(it["weights"], it["values"], it["out_kernel"], q_mask, k_mask)
            else:
                want = brute_force(it, q_mask, model.config.layer_norm_eps)
            keys = [k for k in got[kind] if k in want]
            assert len(keys) >= 4, kind
            for key in keys:
                assert_close(got[kind][key][layer], want[key], terms=T, err_msg=f"{kind} {key} layer {layer}")


# post-LN as Marian (BART differs in embeddings only), fast twin: test_importance.py::test_translation_importance_*
@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["token"])
def test_importance_equals_hf(model, folder, estimator):
    """Michel et al.'s head importance of all three attention types vs HF in float64 with gates
    inserted by hooks (tests/test_importance.py's oracle). The token estimator (the studies'):
    the estimators differ in code no family touches, tested on every estimator with Marian."""
    from test_importance import grad_terms, reference as importance_reference, translation_cases, translation_loss

    from jattn.sweeps.importance import importance

    hf = hf_model(folder).double()
    data = list(zip(sentences(4, 1), sentences(4, 2)))
    cases = translation_cases(model, data)
    shapes = parity.shapes(model.config)
    mask = {"cross": np.ones(shapes["cross"], np.float32)}
    mask["cross"][1, 0] = 0.0
    got = importance(model, data, estimator=estimator, normalize=False, mask=mask, batch_size=4, progress=False)
    sums = importance_reference(hf, cases, translation_loss, shapes, estimator, mask)
    for kind in shapes:
        count = sum(case[2][kind] for case in cases) if estimator == "token" else len(cases)
        assert_close(got[kind], sums[kind] / count, terms=grad_terms(model, len(cases)), err_msg=kind)
    assert got["cross"][1, 0] == 0.0


# post-LN as Marian (BART differs in embeddings only), fast twin: test_importance.py::test_translation_curve_*, *bleu*
@pytest.mark.slow
def test_pruning_curve_and_bleu_metric(model):
    """The BLEU metric equals sentence-by-sentence decoding with the mask; the pruning curve
    ranks the heads of all three types together."""
    import sacrebleu

    from jattn.sweeps.pruning_curve import bleu_metric, prune

    data = list(zip(sentences(3, 3), sentences(3, 4)))
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
    history, seen = [], []
    metric = lambda m: seen.append({k: np.array(v) for k, v in m.items()}) or 0.0  # noqa: E731
    prune(model, data, metric, estimator="token", step=0.1, history=history, batch_size=4)
    flat = np.concatenate([history[0][k].ravel() for k in parity.KINDS])
    k = max(1, round(0.1 * len(flat)))
    first = np.argsort(flat, kind="stable")[:k]
    masks = np.stack([np.concatenate([m[kind].ravel() for kind in parity.KINDS]) for m in seen])
    assert masks[1].sum() == len(flat) - k and (masks[1][first] == 0).all()


# post-LN as Marian (BART differs in embeddings only), fast twin: test_gates.py::test_fold_gates_*_seq2seq + export
@pytest.mark.slow
def test_l0_gates_fold_and_export(model, tmp_path):
    """Voita et al.'s L0 gates: folded into W_O they equal the gated forward; the pruned export
    of the folded model equals the gated evaluation."""
    from jattn.nn import gates as G
    from jattn.nn import seq2seq
    from jattn.sweeps.pruning import export_pruned
    from jattn.training import l0

    shapes = l0.gate_shapes(model.config)
    rng = np.random.default_rng(1)
    values = {k: np.asarray(G.deterministic(jnp.asarray(rng.normal(0.5, 3.0, s), jnp.float32)))
              for k, s in shapes.items()}
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
    pruned = jattn.load(export_pruned(gated, {k: v > 0 for k, v in values.items()}, tmp_path / "pruned"),
                        use_cache=False)
    assert_close(pruned.forward(batch).logits, ref["logits"], terms=T)


# post-LN as Marian (BART differs in embeddings only), fast twin: test_lrp.py::test_conservation_translation_model
@pytest.mark.slow
def test_lrp_conservation(model):
    from jattn.analyses import lrp

    raw = padded_batch(model.config, seed=2, b=3, s=7, t=5)
    batch = {k: jnp.asarray(v) for k, v in model.check_batch(raw).items()}
    batch["target_mask"] = jnp.asarray(raw["decoder_attention_mask"])
    out = jax.tree.map(np.asarray, lrp.head_relevance(model.params, model.config, batch))
    c = model.config
    assert out["heads"].shape == (3, c.encoder_layers, c.encoder_heads)
    predictions = np.asarray(raw["decoder_attention_mask"]).sum(1)  # one unit per explained target position
    want = np.broadcast_to(predictions[:, None], out["residual"].shape)
    from test_lrp import relprop_terms

    terms = relprop_terms(c.encoder_layers, 7, c.d_model) + 5
    assert_close(out["layer_input"], want, terms=terms)
    assert_close(out["heads"].sum(-1) + out["residual"], want, terms=terms)


# post-LN as Marian (BART differs in embeddings only), fast twin: test_view.py::test_translation_page_*
@pytest.mark.slow
def test_view_translation_page(model):
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


# > 30 s: the command on a post-LN translation model runs fast in tests/test_analyze_cli.py (Marian), on
# pre-LN ones in the mBART and T5 folders
@pytest.mark.slow
def test_analyze_cli(model, folder, tmp_path, monkeypatch):
    from jattn.cli import main

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    one = tmp_path / "p.txt"
    one.write_text("".join(f"{a} ||| {b}\n" for a, b in pairs(5)))
    out = tmp_path / "out"
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


def test_encoder_only_method_refused(model):
    class EncoderOnly(Method):
        name = "encoder-only"

    with pytest.raises(ValueError, match="reads encoder models.*translation"):
        run_corpus(model, pairs(), [EncoderOnly()], max_length=32, progress=False)
