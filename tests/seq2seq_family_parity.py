"""The parity checks the encoder–decoder families' conformance tests (tests/families) run against
Hugging Face PyTorch (the oracle), on a tiny random checkpoint (``tests/tiny_<family>.py``):
logits, hidden states and every attention weight of the three attention types on padded batches;
the embedding pipeline; the block identities of the internals (pre-LN ones too); head gates
(``hf_head_gates``) and disabled heads (``hf_seq2seq_hooks``) per attention type; ``inputs_embeds``;
bare checkpoints; conversion errors; the exporter (state dict round trip, an exported folder HF
loads, the pruned export). Generation: ``seq2seq_family_generate``; the analyses: ``seq2seq_family_analyses``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jattn
from hf_head_gates import gated
from hf_seq2seq_hooks import disabled
from jattn import Interventions
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms

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


def check_embeddings(model, hf) -> tuple[dict, object, object]:
    """Layer 0's input on each side is HF's embedding output (``hidden_states[0]``, padded
    positions included). -> (batch, jattn's output, HF's output with hidden states)."""
    batch = padded_batch(model.config, seed=1)
    ours = model.forward(batch)
    ref = hf_forward(hf, batch, output_hidden_states=True)
    D = model.config.d_model
    assert_close(ours.internals["encoder"]["residual"][0], ref.encoder_hidden_states[0].numpy(), terms=2 * D)
    assert_close(ours.internals["decoder"]["residual"][0], ref.decoder_hidden_states[0].numpy(), terms=2 * D)
    return batch, ours, ref


def check_hidden_states(model, hf) -> None:
    """The embeddings (``check_embeddings``); each stack's output is HF's last hidden state, after
    its final LayerNorm."""
    batch, ours, ref = check_embeddings(model, hf)
    enc, dec = batch["attention_mask"].astype(bool), batch["decoder_attention_mask"].astype(bool)
    T = terms(model, batch)
    assert_close(np.asarray(ours.encoder_last_hidden_state)[enc], ref.encoder_hidden_states[-1].numpy()[enc], terms=T)
    assert_close(np.asarray(ours.decoder_last_hidden_state)[dec], ref.decoder_hidden_states[-1].numpy()[dec], terms=T)


def _ln(x, scale, bias, eps):
    """LayerNorm over the last axis in float64: (x − μ) / sqrt(σ² + eps) · γ + β."""
    x = np.asarray(x, np.float64)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * np.asarray(scale, np.float64) + np.asarray(bias, np.float64)


def _norm(c, x, scale, bias):
    """The config's norm in float64: LayerNorm (``_ln``) or T5's RMSNorm x / sqrt(mean(x²) + eps) · γ (no β)."""
    if c.norm == "rms":
        x = np.asarray(x, np.float64)
        return x / np.sqrt(np.square(x).mean(-1, keepdims=True) + c.layer_norm_eps) * np.asarray(scale, np.float64)
    return _ln(x, scale, bias, c.layer_norm_eps)


def check_internals(model) -> tuple[dict, object]:
    """Every attention type's internals, one row per layer, (L, b, H, …) weights, and the block output
    ``output`` Σ_h Σ_j α f_h(x_j) + b_O (Kobayashi et al. 2020, Eq. 5). -> (batch, the output)."""
    c = model.config
    batch = padded_batch(c, b=2)
    out = model.forward(batch)
    for kind, (L, H) in shapes(c).items():
        it, view = out.internals[kind], model.module.view(kind)
        for key in ("weights", "values", "context", "output", "residual", "pre_ln", "attention_ln_out"):
            assert it[key].shape[0] == L, (kind, key)
        assert it["weights"].shape[:3] == (L, 2, H)
        f = np.einsum("lbhkd,lhde->lbhke", it["values"], view["out_kernel"])
        y = np.einsum("lbhqk,lbhke->lbqe", it["weights"], f) + np.asarray(view["out_bias"])[:, None, None]
        assert_close(y, it["output"], terms=f.shape[-2] + view["out_kernel"].shape[-2] + c.d_model, err_msg=kind)
    return batch, out


def check_pre_ln_internals(model) -> None:
    """The internals of a pre-LN stack keep their names with literal meanings (Xiong et al. 2020):
    ``check_internals``; ``pre_ln`` is the block input x = ``residual``, ``attention_ln_out``
    LN(x), the FFN's ``ffn_pre_ln`` h = x + output (a decoder layer's cross-attention reads h of its
    self-attention), the next layer's input h + ``ffn_output``, and each stack's output the final
    LayerNorm of the last layer's. RMSNorm blocks (T5) alike, with no β and no b_O."""
    c = model.config
    batch, out = check_internals(model)
    ints, params = out.internals, nnx.to_pure_dict(model.params)
    T = terms(model, batch)
    for kind in KINDS:
        it, view = ints[kind], model.module.view(kind)
        np.testing.assert_array_equal(it["pre_ln"], it["residual"], err_msg=kind)
        scale, bias = (np.asarray(view[k])[:, None, None] for k in ("ln_scale", "ln_bias"))  # (L, 1, 1, D)
        assert c.norm != "rms" or not (bias.any() or np.asarray(view["out_bias"]).any()), kind
        ln = _norm(c, it["residual"], scale, bias)
        assert_close(it["attention_ln_out"], ln, terms=2 * c.d_model, err_msg=kind)
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
        assert_close(got, _norm(c, last[side], final["scale"], final.get("bias")), terms=T, err_msg=side)


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


def check_bare_model(folder, hf_model) -> None:
    """A bare checkpoint in ``folder`` (``*Model``: no ``model.`` prefix, no output projection) loads;
    its decoder states equal HF's bare model's (``hf_model(folder, bare=True)``) and its logits h · E^T
    those of ``hf_model(folder)``, the ``*ForConditionalGeneration`` HF loads from it."""
    model = jattn.load(folder, use_cache=False)
    batch = padded_batch(model.config, seed=4)
    ours = model.forward(batch)
    with torch.no_grad():
        ref = hf_model(folder, bare=True)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False)
    dec_mask = batch["decoder_attention_mask"].astype(bool)
    T = terms(model, batch)
    assert_close(np.asarray(ours.decoder_last_hidden_state)[dec_mask], ref.last_hidden_state.numpy()[dec_mask], terms=T)
    compare(ours, hf_forward(hf_model(folder), batch), batch, T)


def check_conversion_problems(family: str, config, state: dict, gone: tuple) -> str:
    """Family ``family``'s conversion of ``state`` without the keys ``gone`` and with an unknown one
    fails, naming them all at once. -> the error's text."""
    from jattn.io.hf import ConversionError

    for key in gone:
        state.pop(key)
    state["model.encoder.extra.weight"] = np.zeros(3)
    with pytest.raises(ConversionError) as err:
        jattn.families.get(family).convert(state, config)
    assert all(k in str(err.value) for k in (*gone, "model.encoder.extra.weight"))
    return str(err.value)


def check_missing_tokenizer(folder, bare: Path, match: str) -> None:
    """``folder`` copied to ``bare`` without tokenizer.json and tokenizer_config.json is refused by
    jattn.load, saying (``match``) which files it reads."""
    from jattn.nn.config import ConfigError

    shutil.copytree(folder, bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    with pytest.raises(ConfigError, match=match):
        jattn.load(bare, use_cache=False)


def check_state_dict_round_trip(folder, model) -> None:
    """HF -> jattn -> HF returns every tensor HF saved, bit for bit."""
    from jattn.io.hf import read_state_dict

    state = read_state_dict(folder)
    back = model.family.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config)
    assert set(back) == set(state)
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)


def check_export(folder, model, out: Path, hf_model,
                 tokenizer_files: tuple = ("tokenizer.json", "tokenizer_config.json")) -> None:
    """A folder written from jattn (to_hf_config + to_hf_state_dict + the tokenizer files) is read
    by HF (``hf_model(folder)``) and by jattn.load, with the same logits as the source."""
    from safetensors.numpy import save_file

    spec = model.family
    out.mkdir()
    (out / "config.json").write_text(json.dumps(spec.to_hf_config(model.config)))
    save_file(spec.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config),
              str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in (*tokenizer_files, "generation_config.json"):
        shutil.copy(folder / name, out / name)
    batch = padded_batch(model.config, seed=7)
    with torch.no_grad():
        ref = hf_model(out)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False).logits.numpy()
    assert_close(model.forward(batch).logits, ref, terms=terms(model, batch))
    again = jattn.load(out, use_cache=False)
    assert again.config == model.config
    np.testing.assert_array_equal(again.forward(batch).logits, model.forward(batch).logits)


def check_pruned_export(model, keep: dict, out: Path) -> Path:
    """export_pruned writes each layer's kept heads only; jattn.load of it gives the masked
    model's outputs and its greedy and beam ids. -> the exported folder."""
    from jattn.sweeps.pruning import check_keep, export_pruned

    keep = {k: np.array(v, bool) for k, v in keep.items()}
    pruned = export_pruned(model, keep, out)
    loaded = jattn.load(pruned, use_cache=False)
    full = check_keep(model.config, keep)
    assert [p.counts for p in loaded.config.pruned] == [tuple(full[k].sum(1)) for k in KINDS]
    masked = {k: Interventions(head_gates=m.astype(np.float32)) for k, m in full.items()}
    batch = padded_batch(model.config, seed=2)
    ref, got = model.forward(batch, masked, internals=None), loaded.forward(batch, internals=None)
    assert_close(got.logits, ref.logits, terms=terms(model, batch))  # fewer heads: other float32 orders
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for beams in (1, 4):
        np.testing.assert_array_equal(
            loaded.generate(ids, mask, num_beams=beams, max_length=8).sequences,
            model.generate(ids, mask, num_beams=beams, max_length=8, interventions=masked).sequences,
        )
    return pruned
