"""The parity checks the pre-LayerNorm encoder–decoder families' tests (mBART, M2M100) run against
Hugging Face PyTorch (the oracle), on a tiny random checkpoint whose HF model has BART's layout
(``model.encoder.layers[i].self_attn``, ``decoder.layers[i].encoder_attn``): logits, hidden
states and every attention weight of the three attention types on padded batches; the embedding
pipeline; the pre-LN block identities of the internals; head gates (``hf_head_gates``) and disabled
heads (``hf_bart_hooks``) per attention type; ``inputs_embeds``; greedy and beam search against
``generate`` (with a forced first token, also given per call); the KV-cache step against teacher
forcing; the exporter (state dict round trip, an exported folder HF loads, the pruned export)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent / "families" / "bart"))  # hf_bart_hooks: BART's HF hooks

import jattn  # noqa: E402
from hf_bart_hooks import disabled  # noqa: E402
from hf_head_gates import gated  # noqa: E402
from jattn import Interventions  # noqa: E402
from tiny_seq2seq import padded_batch  # noqa: E402
from tolerance import assert_close, model_terms  # noqa: E402

KINDS = ("encoder", "decoder", "cross")
ISSUE_BOUND = 1e-5  # the largest |α_jattn - α_HF| a family must reach on random configs (issue 29)


def terms(model, batch) -> int:
    return model_terms(model.config, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])


def hf_forward(hf, batch, **kw):
    with torch.no_grad():
        return hf(**{k: torch.tensor(v) for k, v in batch.items()}, output_attentions=True, use_cache=False, **kw)


def shapes(c) -> dict:
    return {"encoder": (c.encoder_layers, c.encoder_heads), "decoder": (c.decoder_layers, c.decoder_heads),
            "cross": (c.decoder_layers, c.decoder_heads)}


def allowed(batch) -> dict:
    """The (query, key) pairs each attention type may see, (b, q, k) bool."""
    src, tgt = torch.tensor(batch["attention_mask"]).bool(), torch.tensor(batch["decoder_attention_mask"]).bool()
    t = tgt.shape[1]
    return {"encoder": src[:, None, :].expand(-1, src.shape[1], -1),
            "decoder": torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & tgt[:, None, :],
            "cross": src[:, None, :].expand(-1, t, -1)}


def compare(ours, ref, batch, T, weights=True) -> float:
    """Logits and encoder states on real positions; every α on real query rows. -> the largest
    |α_jattn − α_HF|."""
    enc_mask, dec_mask = batch["attention_mask"].astype(bool), batch["decoder_attention_mask"].astype(bool)
    assert_close(np.asarray(ours.encoder_last_hidden_state)[enc_mask], ref.encoder_last_hidden_state.numpy()[enc_mask],
                 terms=T)
    assert_close(np.asarray(ours.logits)[dec_mask], ref.logits.numpy()[dec_mask], terms=T)
    worst = 0.0
    for kind, theirs in (("encoder", ref.encoder_attentions), ("decoder", ref.decoder_attentions),
                         ("cross", ref.cross_attentions)):
        theirs = np.stack([a.numpy() for a in theirs])  # (L, b, H, q, k)
        mine = np.asarray(ours.internals[kind]["weights"])
        assert mine.shape == theirs.shape, kind
        q_mask = enc_mask if kind == "encoder" else dec_mask  # (b, q)
        mine, theirs = mine.transpose(1, 3, 0, 2, 4)[q_mask], theirs.transpose(1, 3, 0, 2, 4)[q_mask]
        if weights:
            assert_close(mine, theirs, terms=T, err_msg=kind)
        worst = max(worst, float(np.abs(mine - theirs).max()))
    return worst


def check_parity(model, hf) -> None:
    """Teacher-forced forward on a padded batch; α within the issue's bound."""
    batch = padded_batch(model.config)
    assert compare(model.forward(batch), hf_forward(hf, batch), batch, terms(model, batch)) <= ISSUE_BOUND


def check_default_decoder_mask(model, hf) -> None:
    """Without decoder_attention_mask HF attends to every target position, pads included."""
    batch = padded_batch(model.config, seed=5)
    real = batch.pop("decoder_attention_mask").astype(bool)
    ours, ref = model.forward(batch), hf_forward(hf, batch)
    assert_close(np.asarray(ours.logits)[real], ref.logits.numpy()[real], terms=terms(model, batch))
    assert_close(np.asarray(ours.decoder_attentions), np.stack([a.numpy() for a in ref.decoder_attentions]),
                 terms=terms(model, batch))


def check_hidden_states(model, hf) -> None:
    """Layer 0's input on each side is HF's embedding output (``hidden_states[0]``, padded
    positions included); each stack's output is HF's last hidden state, after its final LayerNorm."""
    batch = padded_batch(model.config, seed=1)
    ours = model.forward(batch)
    ref = hf_forward(hf, batch, output_hidden_states=True)
    D = model.config.d_model
    assert_close(ours.internals["encoder"]["residual"][0], ref.encoder_hidden_states[0].numpy(), terms=2 * D)
    assert_close(ours.internals["decoder"]["residual"][0], ref.decoder_hidden_states[0].numpy(), terms=2 * D)
    enc, dec = batch["attention_mask"].astype(bool), batch["decoder_attention_mask"].astype(bool)
    T = terms(model, batch)
    assert_close(np.asarray(ours.encoder_last_hidden_state)[enc], ref.encoder_hidden_states[-1].numpy()[enc], terms=T)
    assert_close(np.asarray(ours.decoder_last_hidden_state)[dec], ref.decoder_hidden_states[-1].numpy()[dec], terms=T)


def _ln(x, scale, bias, eps):
    """LayerNorm over the last axis in float64: (x − μ) / sqrt(σ² + eps) · γ + β."""
    x = np.asarray(x, np.float64)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * np.asarray(scale, np.float64) + np.asarray(bias, np.float64)


def check_pre_ln_internals(model) -> None:
    """The internals of a pre-LN stack keep their names with literal meanings (Xiong et al. 2020):
    ``pre_ln`` is the block input x = ``residual``, ``attention_ln_out`` LN(x), ``output`` Σ_h Σ_j
    α f_h(x_j) + b_O (Kobayashi et al. 2020, Eq. 5), the FFN's ``ffn_pre_ln`` h = x + output (a
    decoder layer's cross-attention reads h of its self-attention), the next layer's input h +
    ``ffn_output``, and each stack's output the final LayerNorm of the last layer's."""
    c = model.config
    batch = padded_batch(c, b=2)
    out = model.forward(batch)
    ints, params = out.internals, nnx.to_pure_dict(model.params)
    T = terms(model, batch)
    for kind, (L, H) in shapes(c).items():
        it, view = ints[kind], model.module.view(kind)
        for key in ("weights", "values", "context", "output", "residual", "pre_ln", "attention_ln_out"):
            assert it[key].shape[0] == L, (kind, key)
        assert it["weights"].shape[:3] == (L, 2, H)
        np.testing.assert_array_equal(it["pre_ln"], it["residual"], err_msg=kind)
        scale, bias = (np.asarray(view[k])[:, None, None] for k in ("ln_scale", "ln_bias"))  # (L, 1, 1, D)
        ln = _ln(it["residual"], scale, bias, c.layer_norm_eps)
        assert_close(it["attention_ln_out"], ln, terms=2 * c.d_model, err_msg=kind)
        f = np.einsum("lbhkd,lhde->lbhke", it["values"], view["out_kernel"])
        y = np.einsum("lbhqk,lbhke->lbqe", it["weights"], f) + np.asarray(view["out_bias"])[:, None, None]
        assert_close(y, it["output"], terms=f.shape[-2] + view["out_kernel"].shape[-2] + c.d_model, err_msg=kind)
    enc, dec, cross = ints["encoder"], ints["decoder"], ints["cross"]
    h = np.asarray(enc["residual"]) + np.asarray(enc["output"])  # (L, b, s, D)
    assert_close(enc["ffn_pre_ln"], h, terms=2, err_msg="encoder ffn_pre_ln")
    assert_close(enc["residual"][1:], (h + np.asarray(enc["ffn_output"]))[:-1], terms=2, err_msg="encoder layer output")
    assert_close(cross["residual"], np.asarray(dec["residual"]) + np.asarray(dec["output"]), terms=2)
    h = np.asarray(cross["residual"]) + np.asarray(cross["output"])
    assert_close(cross["ffn_pre_ln"], h, terms=2, err_msg="decoder ffn_pre_ln")
    assert_close(dec["residual"][1:], (h + np.asarray(cross["ffn_output"]))[:-1], terms=2,
                 err_msg="decoder layer output")
    last = {"encoder": enc["ffn_pre_ln"][-1] + enc["ffn_output"][-1],
            "decoder": cross["ffn_pre_ln"][-1] + cross["ffn_output"][-1]}  # (b, n, D) each stack's last layer output
    for side, got in (("encoder", out.encoder_last_hidden_state), ("decoder", out.decoder_last_hidden_state)):
        final = params[side]["final_ln"]
        assert_close(got, _ln(last[side], final["scale"], final["bias"], c.layer_norm_eps), terms=T, err_msg=side)


def check_gates(model, hf) -> None:
    """Gates ξ (L, H) in every attention type at once and one type at a time, against HF with the
    gates applied to each head's context by hooks."""
    c = model.config
    batch = padded_batch(c, seed=2)
    rng = np.random.default_rng(0)
    gates = {k: rng.uniform(0, 2, s).astype(np.float32) for k, s in shapes(c).items()}
    for given in (gates, *({k: g} for k, g in gates.items())):
        ours = model.forward(batch, {k: Interventions(head_gates=g) for k, g in given.items()})
        with gated(hf, {k: torch.tensor(g) for k, g in given.items()}):
            ref = hf_forward(hf, batch)
        compare(ours, ref, batch, terms(model, batch))
    base = model.forward(batch)
    assert np.abs(np.asarray(ours.logits) - np.asarray(base.logits)).max() > 1e-3  # the gates matter


def check_disabled(model, hf) -> None:
    """Disabled heads (uniform over the keys a query may see: real source keys, the causal prefix
    of real target keys) in each attention type, against HF with hooks."""
    c = model.config
    batch = padded_batch(c, seed=3)
    rng = np.random.default_rng(1)
    for kind, s in shapes(c).items():
        off = rng.uniform(size=s) < 0.4
        off[0, 0] = True
        ours = model.forward(batch, {kind: Interventions(disabled_heads=off)})
        with disabled(hf, {kind: off}, allowed(batch)):
            ref = hf_forward(hf, batch)
        compare(ours, ref, batch, terms(model, batch), weights=False)  # HF's α are the unmodified ones
        mine = np.asarray(ours.internals[kind]["weights"])[0, :, 0]  # (b, q, k)
        uniform = allowed(batch)[kind].numpy().astype(np.float64)
        uniform /= uniform.sum(-1, keepdims=True)
        q_mask = (batch["attention_mask"] if kind == "encoder" else batch["decoder_attention_mask"]).astype(bool)
        assert_close(mine[q_mask], uniform[q_mask], err_msg=kind)


def check_inputs_embeds(model, hf) -> None:
    """``inputs_embeds`` (a random point, no table row) and ``decoder_inputs_embeds`` (the scaled
    token embeddings, ``jattn.nn.seq2seq.word_embeddings``) equal HF's on real positions."""
    from jattn.nn import seq2seq

    c = model.config
    batch = padded_batch(c, seed=4)
    src = np.random.default_rng(0).normal(0, 0.5, (*batch["input_ids"].shape, c.d_model)).astype(np.float32)
    tgt = seq2seq.word_embeddings(model.params, c, jnp.asarray(batch["decoder_input_ids"]), "target")
    given = {"inputs_embeds": src, "attention_mask": batch["attention_mask"], "decoder_inputs_embeds": np.asarray(tgt),
             "decoder_attention_mask": batch["decoder_attention_mask"]}
    ours, _ = seq2seq.forward(model.params, c, {k: jnp.asarray(v) for k, v in given.items()}, internals=None)
    with torch.no_grad():
        ref = hf(**{k: torch.tensor(v) for k, v in given.items()}, use_cache=False)
    enc, dec = batch["attention_mask"].astype(bool), batch["decoder_attention_mask"].astype(bool)
    T = terms(model, batch)
    assert_close(np.asarray(ours["encoder_last_hidden_state"])[enc], ref.encoder_last_hidden_state.numpy()[enc],
                 terms=T)
    assert_close(np.asarray(ours["logits"])[dec], ref.logits.numpy()[dec], terms=T)


def hf_generate(hf, batch, **kw) -> np.ndarray:
    with torch.no_grad():
        return hf.generate(input_ids=torch.tensor(batch["input_ids"]),
                           attention_mask=torch.tensor(batch["attention_mask"]), do_sample=False,
                           early_stopping=False, **kw).numpy()


def check_generate(model, hf, num_beams: int, length_penalty: float, max_length: int, forced_bos: bool) -> None:
    """Greedy / beam ids equal HF ``generate``'s: the start token, the forced first token where the
    generation config has one, hypotheses of different lengths (EOS boosted at max_length 12)."""
    batch = padded_batch(model.config, seed=2, b=5)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], num_beams=num_beams, max_length=max_length,
                          length_penalty=length_penalty)
    ref = hf_generate(hf, batch, num_beams=num_beams, max_length=max_length, length_penalty=length_penalty)
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)
    c = model.config
    assert (ref[:, 0] == c.decoder_start_token_id).all()
    assert (c.forced_bos_token_id is not None) == forced_bos
    if forced_bos:
        assert (ref[:, 1] == c.forced_bos_token_id).all()
    if max_length == 12:
        ends = [(row[1:] == c.eos_token_id).argmax() for row in ref]
        assert len(set(ends)) > 1


def check_generate_language(model, hf, code: int) -> None:
    """A target language code forced per call (``jattn.nn.decode.generate(forced_bos_token_id=)``,
    the model's ``generate``) equals HF's ``generate(forced_bos_token_id=)``, greedy and beam."""
    from jattn.nn import decode

    batch = padded_batch(model.config, seed=7, b=3)
    for beams in (1, 3):
        ours = decode.generate(model.params, model.config, batch["input_ids"], batch["attention_mask"],
                               num_beams=beams, max_length=10, forced_bos_token_id=code)
        ref = hf_generate(hf, batch, num_beams=beams, max_length=10, forced_bos_token_id=code)
        np.testing.assert_array_equal(ours, ref)
        assert (ref[:, 1] == code).all()
        np.testing.assert_array_equal(model.generate(batch["input_ids"], batch["attention_mask"], num_beams=beams,
                                                     max_length=10, forced_bos_token_id=code), ref)  # the model's
    with pytest.raises(ValueError, match="forced_bos_token_id=.* is not a target token id"):
        decode.generate(model.params, model.config, batch["input_ids"], batch["attention_mask"], max_length=10,
                        forced_bos_token_id=model.config.tgt_vocab_size)


def check_cached_steps(model) -> None:
    """Step-by-step decoding with the KV cache (positions offset by the step, the same pre-LN
    sublayers, the decoder's final LayerNorm) gives the teacher-forced logits, with head gates and
    disabled heads in all three attention types."""
    from jattn.nn import decode, seq2seq

    c = model.config
    batch = padded_batch(c, seed=3, b=3)
    batch["decoder_attention_mask"][:] = 1
    batch["decoder_input_ids"][:, 1:][batch["decoder_input_ids"][:, 1:] == c.pad_token_id] = 5  # real tokens only
    rng = np.random.default_rng(0)
    given = {k: Interventions(head_gates=rng.uniform(0, 2, s).astype(np.float32),
                              disabled_heads=rng.uniform(size=s) < 0.3) for k, s in shapes(c).items()}
    full = np.asarray(model.forward(batch, given).logits)  # (b, t, V)
    iv = seq2seq.check_interventions(c, given)
    ids = jnp.asarray(batch["input_ids"], jnp.int32)
    mask = jnp.asarray(batch["attention_mask"], jnp.int32)
    t = batch["decoder_input_ids"].shape[1]
    cache = decode.init_state(model.params, c, ids, mask, iv, t, jnp.float32)
    for pos in range(t):
        tokens = jnp.asarray(batch["decoder_input_ids"][:, pos], jnp.int32)
        logits, cache = decode.decoder_step(model.params, c, tokens, pos, cache, mask, iv)
        assert_close(logits, full[:, pos], terms=model_terms(c, ids.shape[1], t), err_msg=str(pos))


def check_generate_gated(model, hf) -> None:
    """Greedy decoding with cross-attention head gates equals HF's generate with the same gates
    applied by hooks."""
    c = model.config
    batch = padded_batch(c, seed=6, b=4)
    gates = np.random.default_rng(2).uniform(0, 2, (c.decoder_layers, c.decoder_heads)).astype(np.float32)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], max_length=12,
                          interventions={"cross": Interventions(head_gates=gates)})
    with gated(hf, {"cross": torch.tensor(gates)}):
        ref = hf_generate(hf, batch, num_beams=1, max_length=12)
    np.testing.assert_array_equal(ours, ref)


def check_state_dict_round_trip(folder, model) -> None:
    """HF -> jattn -> HF returns every tensor HF saved, bit for bit."""
    from jattn.io.hf import read_state_dict

    state = read_state_dict(folder)
    back = model.family.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config)
    assert set(back) == set(state)
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)


def check_export(folder, model, out: Path, hf_model) -> None:
    """A folder written from jattn (to_hf_config + to_hf_state_dict + the tokenizer files) is read
    by HF (``hf_model(folder)``) and by jattn.load, with the same logits as the source."""
    from safetensors.numpy import save_file

    spec = model.family
    out.mkdir()
    (out / "config.json").write_text(json.dumps(spec.to_hf_config(model.config)))
    save_file(spec.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config),
              str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(folder / name, out / name)
    batch = padded_batch(model.config, seed=7)
    with torch.no_grad():
        ref = hf_model(out)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False).logits.numpy()
    assert_close(model.forward(batch).logits, ref, terms=terms(model, batch))
    again = jattn.load(out, use_cache=False)
    assert again.config == model.config
    np.testing.assert_array_equal(again.forward(batch).logits, model.forward(batch).logits)


def check_pruned_export(model, keep: dict, out: Path) -> None:
    """export_pruned writes each layer's kept heads only; jattn.load of it gives the masked
    model's outputs and its greedy and beam ids."""
    from jattn.sweeps.pruning import check_keep, export_pruned

    keep = {k: np.array(v, bool) for k, v in keep.items()}
    loaded = jattn.load(export_pruned(model, keep, out), use_cache=False)
    full = check_keep(model.config, keep)
    assert [p.counts for p in loaded.config.pruned] == [tuple(full[k].sum(1)) for k in KINDS]
    masked = {k: Interventions(head_gates=m.astype(np.float32)) for k, m in full.items()}
    batch = padded_batch(model.config, seed=2)
    ref, got = model.forward(batch, masked, internals=None), loaded.forward(batch, internals=None)
    assert_close(got.logits, ref.logits, terms=terms(model, batch))  # fewer heads: other float32 orders
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for beams in (1, 4):
        np.testing.assert_array_equal(loaded.generate(ids, mask, num_beams=beams, max_length=8),
                                      model.generate(ids, mask, num_beams=beams, max_length=8, interventions=masked))


def pairs(n: int = 5) -> list[tuple[str, str]]:
    from tiny_seq2seq import sentences

    return list(zip(sentences(n, 1), sentences(n, 2)))


def check_norms(model) -> None:
    """``jattn.norms`` on every attention type (padded both sides) vs αf formed explicitly in
    float64 (Kobayashi et al. 2020, Eq. 5: ‖f(x_j)‖, ‖α f(x_j)‖ per head, ‖Σ_h α f(x_j)‖): the
    attention-only norms, which do not depend on where the LayerNorms sit."""
    batch = padded_batch(model.config)
    got = jattn.norms(model, batch)
    internals = model.forward(batch).internals
    src, tgt = batch["attention_mask"], batch["decoder_attention_mask"]
    T = model_terms(model.config, src.shape[1], tgt.shape[1])
    for kind, (q_mask, k_mask) in {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}.items():
        view = model.module.view(kind)
        for layer in range(internals[kind]["weights"].shape[0]):
            weights = np.asarray(internals[kind]["weights"][layer], np.float64)  # (b, H, q, k)
            values = np.asarray(internals[kind]["values"][layer], np.float64)  # (b, H, k, d_h)
            a = weights * (q_mask[:, None, :, None] * k_mask[:, None, None, :])
            f = np.einsum("bhnd,hde->bhne", values, np.asarray(view["out_kernel"][layer], np.float64))  # (b, H, k, D)
            af = a[..., None] * f[:, :, None]  # (b, H, q, k, D)
            want = {"f_norm": np.linalg.norm(f, axis=-1) * k_mask[:, None], "weights": a,
                    "weighted_norm": np.linalg.norm(af, axis=-1), "summed_norm": np.linalg.norm(af.sum(1), axis=-1)}
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


def check_patch_heads(model, hf) -> None:
    """``jattn.patch_heads`` on every head of every attention type (metric: a logit difference at
    target position 1) against one HF forward per head with the clean head written in by hooks, in
    float64 (tests/test_patching.py's oracle): the patched layers' suffix runs through the final
    LayerNorms."""
    from test_patching import hf_patch_loop, marian_pair, torch_inputs

    from jattn.sweeps.patching import patch_heads
    from tolerance import tolerance

    clean, corrupted = marian_pair(model)
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
