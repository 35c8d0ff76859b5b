"""T5 / mT5 teacher-forced forward vs Hugging Face PyTorch (``attn_implementation="eager"``) on padded
batches, three layouts (T5 v1.0: ReLU, tied and scaled output; T5 v1.1: gated GELU, untied
``lm_head``; mT5): logits, hidden states and every attention weight of the three attention types;
the relative-position buckets (both directions) against HF's ``_relative_position_bucket``; the
pre-RMSNorm internals; head gates and disabled heads per attention type against HF with hooks;
``inputs_embeds``; refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flax import nnx

import jattn
import seq2seq_family_parity as parity
from tiny_seq2seq import padded_batch
from tiny_t5 import CONFIGS, UNTIED, hf_model, save_tiny
from tolerance import assert_close


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, folder, jattn.load(folder, use_cache=False), hf_model(folder, request.param)


HERE = "tests/families/t5/test_t5_parity.py::"


def v11_only(test: str):
    """``tiny``'s cases with t5-v1.0 and mt5 slow, their fast twin the same test on t5-v1.1: all three run the same
    pre-RMSNorm layers with the relative bias and the same interventions; t5-v1.0 differs in its ReLU FFN and tied,
    scaled output, mt5 in sizes and model_type only, which their teacher-forced parity tests check fast."""
    slow = pytest.mark.slow(twin=f"{HERE}{test}[t5-v1.1]")
    return pytest.mark.parametrize("tiny", [pytest.param("mt5", marks=slow), pytest.param("t5-v1.0", marks=slow),
                                            "t5-v1.1"], indirect=True)


def test_config_layout(tiny):
    kind, _, model, hf = tiny
    c = model.config
    assert (c.norm_position, c.final_norm, c.norm, c.positions, c.linear_bias, c.score_scale) == ("pre", True, "rms",
                                                                                                 "none", False, 1.0)
    assert c.encoder_head_dim == CONFIGS[kind]["d_kv"] != c.d_model // c.encoder_heads  # H·d_kv ≠ D
    assert c.gated_ffn == (CONFIGS[kind]["feed_forward_proj"] == "gated-gelu")
    assert c.tie_output == (not UNTIED[kind]) and c.shared_embeddings and not c.final_logits_bias
    scaled = kind == "t5-v1.0"  # HF 5: T5 scales unless tie_word_embeddings is false; mT5 never
    assert c.output_scale == (c.d_model ** -0.5 if scaled else 1.0)
    assert getattr(hf.config, "scale_decoder_outputs", False) == scaled
    assert c.decoder_start_token_id == c.pad_token_id == 0 and c.decoder_mask == "all"


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_hf(bidirectional):
    """``jattn.nn.relative.relative_position_bucket`` = HF's ``T5Attention._relative_position_bucket``
    for signed distances in [−300, 300), both directions, several bucket counts and distances."""
    import jax.numpy as jnp
    from transformers.models.t5.modeling_t5 import T5Attention

    from jattn.nn.relative import relative_position_bucket

    rel = np.arange(-300, 300)
    for buckets, distance in ((32, 128), (8, 20), (6, 10), (16, 7), (10, 7)):
        ref = T5Attention._relative_position_bucket(torch.tensor(rel), bidirectional=bidirectional,
                                                    num_buckets=buckets, max_distance=distance).numpy()
        got = np.asarray(relative_position_bucket(jnp.asarray(rel), buckets, distance, bidirectional))
        np.testing.assert_array_equal(got, ref, err_msg=f"{buckets} buckets, max distance {distance}")


def test_parity_teacher_forced_padded(tiny):
    _, _, model, hf = tiny
    parity.check_parity(model, hf)


def test_default_decoder_mask_matches_hf(tiny):
    _, _, model, hf = tiny
    parity.check_default_decoder_mask(model, hf)


def test_hidden_states_equal_hf(tiny):
    """The unscaled token embeddings in, each stack's final RMSNorm's output out."""
    _, _, model, hf = tiny
    parity.check_hidden_states(model, hf)


def _rms(x, scale, eps):
    """RMSNorm over the last axis in float64: x / sqrt(mean(x²) + eps) · γ."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.square(x).mean(-1, keepdims=True) + eps) * np.asarray(scale, np.float64)


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_pre_rms_internals")
def test_pre_rms_internals(tiny):
    """The internals of the pre-RMSNorm blocks keep their literal meanings: ``pre_ln`` = ``residual``
    x, ``attention_ln_out`` RMSNorm(x), ``output`` Σ_h Σ_j α f_h(x_j) (Kobayashi et al. 2020, Eq. 5;
    no b_O), the FFN's ``ffn_pre_ln`` x + output, the next layer's input h + ``ffn_output``, and each
    stack's output the final RMSNorm of the last layer's."""
    _, _, model, _ = tiny
    c = model.config
    batch = padded_batch(c, b=2)
    out = model.forward(batch)
    ints, params = out.internals, nnx.to_pure_dict(model.params)
    T = parity.terms(model, batch)
    for kind in parity.KINDS:
        it, view = ints[kind], model.module.view(kind)
        np.testing.assert_array_equal(it["pre_ln"], it["residual"], err_msg=kind)
        assert not np.asarray(view["ln_bias"]).any() and not np.asarray(view["out_bias"]).any()
        ln = _rms(it["residual"], np.asarray(view["ln_scale"])[:, None, None], c.layer_norm_eps)
        assert_close(it["attention_ln_out"], ln, terms=2 * c.d_model, err_msg=kind)
        f = np.einsum("lbhkd,lhde->lbhke", it["values"], view["out_kernel"])
        y = np.einsum("lbhqk,lbhke->lbqe", it["weights"], f)
        assert_close(y, it["output"], terms=f.shape[-2] + view["out_kernel"].shape[-2] + c.d_model, err_msg=kind)
    enc, dec, cross = ints["encoder"], ints["decoder"], ints["cross"]
    h = np.asarray(enc["residual"]) + np.asarray(enc["output"])
    assert_close(enc["ffn_pre_ln"], h, terms=2)
    assert_close(enc["residual"][1:], (h + np.asarray(enc["ffn_output"]))[:-1], terms=2)
    assert_close(cross["residual"], np.asarray(dec["residual"]) + np.asarray(dec["output"]), terms=2)
    last = {"encoder": enc["ffn_pre_ln"][-1] + enc["ffn_output"][-1],
            "decoder": cross["ffn_pre_ln"][-1] + cross["ffn_output"][-1]}
    for side, got in (("encoder", out.encoder_last_hidden_state), ("decoder", out.decoder_last_hidden_state)):
        assert_close(got, _rms(last[side], params[side]["final_ln"]["scale"], c.layer_norm_eps), terms=T,
                     err_msg=side)


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_relative_bias_changes_only_alpha")
def test_relative_bias_changes_only_alpha(tiny):
    """With the stacks' relative bias tables zeroed, α is softmax(q·k) alone: it differs from the
    model's, the values do not (the bias enters the scores only)."""
    _, _, model, _ = tiny
    batch = padded_batch(model.config, b=2)
    params = nnx.to_pure_dict(model.params)
    for side in ("encoder", "decoder"):
        params[side]["relative_bias"] = np.zeros_like(params[side]["relative_bias"])
    from jattn.nn import seq2seq

    _, flat = seq2seq.forward(params, model.config, {k: np.asarray(v) for k, v in batch.items()})
    base = model.forward(batch).internals
    assert_close(flat["encoder"]["values"][0], base["encoder"]["values"][0], terms=model.config.d_model)
    assert np.abs(np.asarray(flat["encoder"]["weights"]) - np.asarray(base["encoder"]["weights"])).max() > 1e-3


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_head_gates_equal_hf_hooks")
def test_head_gates_equal_hf_hooks(tiny):
    _, _, model, hf = tiny
    parity.check_gates(model, hf)


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_disabled_heads_equal_hf_hooks")
def test_disabled_heads_equal_hf_hooks(tiny):
    """Disabled heads (uniform over the keys a query may see) in each attention type vs HF T5 with hooks."""
    _, _, model, hf = tiny
    parity.check_disabled(model, hf)


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_inputs_embeds_equal_hf")
def test_inputs_embeds_equal_hf(tiny):
    """T5's ``inputs_embeds`` are the (unscaled) token embeddings, as jattn's ``word_embeddings``."""
    _, _, model, hf = tiny
    parity.check_inputs_embeds(model, hf)


def test_refused_configs(tiny):
    from jattn.nn.config import ConfigError

    _, folder, _, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get(cfg["model_type"])
    for change, match in (({"feed_forward_proj": "gated-glu"}, "feed_forward_proj"),
                          ({"feed_forward_proj": "swiglu-relu"}, "feed_forward_proj"),
                          ({"is_encoder_decoder": False}, "is_encoder_decoder"),
                          ({"relative_attention_num_buckets": 2}, "relative_attention_num_buckets"),
                          ({"jattn_pruned_heads": {"encoder": {"0": [0]}}}, "jattn_pruned_heads"),
                          ({"forced_bos_token_id": [0, 1]}, "forced_bos_token_id")):
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))


def test_tied_config_with_own_lm_head_refused(tmp_path):
    """A checkpoint whose ``lm_head.weight`` differs from ``shared.weight`` under a config that ties
    them (HF then unties them silently) is refused, naming the config field to set."""
    from jattn.io.hf import ConversionError

    folder = save_tiny(tmp_path / "m", "t5-v1.1")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, tie_word_embeddings=True)))
    with pytest.raises(ConversionError, match="tie_word_embeddings"):
        jattn.load(folder, use_cache=False)


def test_untied_config_without_lm_head_reads_shared(tmp_path):
    """``tie_word_embeddings: false`` with no ``lm_head.weight`` in the checkpoint: HF ties the output
    projection to the shared table, so does jattn (the logits equal HF's)."""
    from safetensors.numpy import load_file, save_file

    folder = save_tiny(tmp_path / "m", "mt5")
    state = load_file(str(folder / "model.safetensors"))
    state.pop("lm_head.weight")
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model = jattn.load(folder, use_cache=False)
    batch = padded_batch(model.config, seed=4)
    parity.compare(model.forward(batch), parity.hf_forward(hf_model(folder, "mt5"), batch), batch,
                   parity.terms(model, batch))
