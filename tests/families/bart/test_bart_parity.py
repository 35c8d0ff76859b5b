"""BART teacher-forced forward vs Hugging Face PyTorch: logits, hidden states, the embedding
pipeline and every attention weight of the three attention types; head gates and disabled heads
per attention type against HF with hooks; conversion of bare ``BartModel`` checkpoints; refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import jattn
from hf_bart_hooks import disabled
from hf_head_gates import gated
from jattn import Interventions
from tiny_bart import CONFIGS, hf_model, save_tiny
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms

KINDS = ("encoder", "decoder", "cross")
ISSUE_BOUND = 1e-5  # the largest |α_jattn - α_HF| the family must reach on random configs (issue 29)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param)
    return folder, jattn.load(folder, use_cache=False), hf_model(folder)


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


def compare(ours, ref, batch, T, weights=True):
    """Logits and encoder states on real positions; every α on real query rows."""
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


def test_parity_teacher_forced_padded(tiny):
    _, model, hf = tiny
    batch = padded_batch(model.config)
    assert compare(model.forward(batch), hf_forward(hf, batch), batch, terms(model, batch)) <= ISSUE_BOUND


def test_default_decoder_mask_matches_hf(tiny):
    """Without decoder_attention_mask HF's BART attends to every target position, pads included."""
    _, model, hf = tiny
    batch = padded_batch(model.config, seed=5)
    real = batch.pop("decoder_attention_mask").astype(bool)
    ours, ref = model.forward(batch), hf_forward(hf, batch)
    assert_close(np.asarray(ours.logits)[real], ref.logits.numpy()[real], terms=terms(model, batch))
    assert_close(np.asarray(ours.decoder_attentions), np.stack([a.numpy() for a in ref.decoder_attentions]),
                 terms=terms(model, batch))


def test_embeddings_equal_hf(tiny):
    """Layer 0's input on each side is HF's embedding output: LayerNorm(scale · token + position
    row p + 2) (``hidden_states[0]``), padded positions included."""
    _, model, hf = tiny
    batch = padded_batch(model.config, seed=1)
    ours = model.forward(batch)
    ref = hf_forward(hf, batch, output_hidden_states=True)
    D = model.config.d_model
    assert_close(ours.internals["encoder"]["residual"][0], ref.encoder_hidden_states[0].numpy(), terms=2 * D)
    assert_close(ours.internals["decoder"]["residual"][0], ref.decoder_hidden_states[0].numpy(), terms=2 * D)


# the same post-LN Seq2SeqLayer internals and Kobayashi decomposition as Marian's and FSMT's (BART differs in
# embeddings only)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_internals_complete")
def test_internals_complete(tiny):
    _, model, _ = tiny
    batch = padded_batch(model.config, b=2)
    ours = model.forward(batch)
    c = model.config
    for kind, (L, H) in shapes(c).items():
        internals, view = ours.internals[kind], model.module.view(kind)
        for key in ("weights", "values", "context", "output", "residual", "pre_ln", "attention_ln_out"):
            assert internals[key].shape[0] == L, (kind, key)
        assert internals["weights"].shape[:3] == (L, 2, H)
        # The block output is Σ_h Σ_j α f_h(x_j) + b_O (Kobayashi et al. 2020, Eq. 5).
        f = np.einsum("lbhkd,lhde->lbhke", internals["values"], view["out_kernel"])
        y = np.einsum("lbhqk,lbhke->lbqe", internals["weights"], f) + np.asarray(view["out_bias"])[:, None, None]
        assert_close(y, internals["output"], terms=f.shape[-2] + view["out_kernel"].shape[-2] + c.d_model, err_msg=kind)


# gates act in MultiHeadAttention inside the same post-LN layers as Marian's (BART differs in embeddings only): the
# twin gates and disables heads in every attention type of Marian and FSMT; against HF hooks on mBART (same attention)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_interventions_per_kind")
def test_head_gates_equal_hf_hooks(tiny):
    """Gates ξ (L, H) in every attention type at once and one type at a time, against HF with the
    gates applied to each head's context by hooks."""
    _, model, hf = tiny
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


# disabling acts in MultiHeadAttention inside the same post-LN layers as Marian's (BART differs in embeddings only):
# the twin disables heads in Marian and FSMT; against HF hooks on mBART (same attention)
@pytest.mark.slow(twin="tests/test_seq2seq.py::test_interventions_per_kind")
def test_disabled_heads_equal_hf_hooks(tiny):
    """Disabled heads (uniform over the keys a query may see: real source keys, the causal
    prefix of real target keys) in each attention type, against HF with hooks."""
    _, model, hf = tiny
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


def test_bare_model_checkpoint(tmp_path):
    """A ``BartModel`` folder (no ``model.`` prefix, no final_logits_bias) loads; its states equal
    HF's BartModel and its logits h · E^T equal BartForConditionalGeneration loaded from it."""
    folder = save_tiny(tmp_path / "bare", "bart", bare=True)
    model = jattn.load(folder, use_cache=False)
    batch = padded_batch(model.config, seed=4)
    ours = model.forward(batch)
    with torch.no_grad():
        ref = hf_model(folder, bare=True)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False)
    dec_mask = batch["decoder_attention_mask"].astype(bool)
    T = terms(model, batch)
    assert_close(np.asarray(ours.decoder_last_hidden_state)[dec_mask], ref.last_hidden_state.numpy()[dec_mask], terms=T)
    compare(ours, hf_forward(hf_model(folder), batch), batch, T)


def test_refused_configs(tiny):
    from jattn.nn.config import ConfigError

    folder, _, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get("bart")
    for change, match in (({"normalize_before": True}, "normalize_before"),
                          ({"add_final_layer_norm": True}, "add_final_layer_norm"),
                          ({"static_position_embeddings": True}, "static_position_embeddings"),
                          ({"extra_pos_embeddings": 0}, "extra_pos_embeddings"),
                          ({"tie_word_embeddings": False}, "tie_word_embeddings"),
                          ({"activation_function": "glu"}, "activation_function"),
                          ({"forced_bos_token_id": [0, 1]}, "forced_bos_token_id")):
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))
    # the older layout fields, as transformers 3/4 wrote them for BART, are accepted
    legacy = dict(cfg, normalize_before=False, add_final_layer_norm=False, normalize_embedding=True,
                  static_position_embeddings=False, extra_pos_embeddings=2)
    assert spec.config_from_hf(legacy) == spec.config_from_hf(cfg)


def test_conversion_reports_all_problems(tiny):
    from jattn.io.hf import ConversionError, read_state_dict

    folder, model, _ = tiny
    state = read_state_dict(folder)
    gone = ("model.decoder.layernorm_embedding.bias", "model.encoder.embed_positions.weight")
    for key in gone:
        state.pop(key)
    state["model.encoder.extra.weight"] = np.zeros(3)
    with pytest.raises(ConversionError) as err:
        jattn.families.get("bart").convert(state, model.config)
    assert all(k in str(err.value) for k in (*gone, "model.encoder.extra.weight"))
