"""ModernBERT (``jattn/families/modernbert``) against Hugging Face's ``ModernBertModel`` (eager
attention) on tiny random configs with local and global layers, a window (|i − j| ≤ 2) smaller
than the padded length, rotary positions with different bases per layer type, GeGLU, bias-free
layers and LayerNorms, layer 0 without its attention LayerNorm: outputs and every attention
weight (padding rows too, where a local layer's padding query may see no key at all), head gates
per head / example / token, disabled heads, the classification head with ``classify`` and the
disabling sweep's suffix, the masked-LM head and export. Padded batches."""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
import numpy as np
import pytest

from encoder_family_parity import (check_classifier, check_gates, check_outputs, load_pair, new_hf, pair_fixtures,
                                   save_random)
from jattn import Interventions
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=80, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=24,
             max_position_embeddings=64, hidden_activation="gelu", pad_token_id=1, bos_token_id=0, eos_token_id=2,
             cls_token_id=0, sep_token_id=2, local_attention=4, global_attn_every_n_layers=2,
             global_rope_theta=160_000.0, local_rope_theta=10.0, norm_eps=1e-5)
LENGTHS = [15, 9, 4, 15]


def save_modernbert(folder, head="base", seed=0, **fields):
    cls = {"cls": "ModernBertForSequenceClassification", "mlm": "ModernBertForMaskedLM"}.get(head, "ModernBertModel")
    return save_random(new_hf("ModernBertConfig", cls, {**SHAPE, **fields, "num_labels": 3}, seed), folder, seed)


pair, batch = pair_fixtures(save_modernbert, LENGTHS, seed=3, types=False)


def test_config(pair):
    c = pair[0].config
    assert (c.norm_position, c.final_norm, c.first_attention_norm, c.gated_ffn) == ("pre", True, False, True)
    assert c.attention_radius == (0, 2, 0, 2) and (c.rotary_theta, c.local_rotary_theta) == (160_000.0, 10.0)
    assert not (c.attention_bias or c.ffn_bias or c.norm_bias or c.position_embeddings)


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


def test_local_layers_mask_beyond_the_window(pair, batch):
    """A local layer's α is 0 beyond |i − j| = 2 (real queries); a global layer's is not."""
    w = np.asarray(pair[0].forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)
    i = np.arange(w.shape[-1])
    far = np.abs(i[:, None] - i[None]) > 2
    assert np.all(w[1][0][:, far] == 0) and np.all(w[3][0][:, far] == 0)
    assert np.any(w[0][0][:, far] > 0)


def test_biases_and_first_norm(tmp_path, batch):
    """With biases everywhere (attention, FFN, LayerNorm β), still HF's numbers."""
    model, oracle = load_pair(save_modernbert(tmp_path, attention_bias=True, mlp_bias=True, norm_bias=True))
    check_outputs(model, oracle, batch, types=False)


# gates scale each head's context in MultiHeadAttention, the same code in ModernBERT's pre-LN layers as in
# RoBERTa-PreLayerNorm's (the rotary scores and window act before, checked by test_outputs_and_attention): fast twin
@pytest.mark.slow(twin="tests/families/roberta_prelayernorm/test_roberta_prelayernorm.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


@contextlib.contextmanager
def _disabled(hf_model, heads, radius):
    """HF ModernBERT with the heads in ``heads`` (L, H) disabled: uniform over the keys a query may
    see (real, and within |i − j| ≤ radius[l] in a local layer; none: a zero context), from the
    value third of ``attn.Wqkv``'s output, put in place of the heads' slices of ``attn.Wo``'s input."""
    import torch

    seen, handles = {}, []
    handles.append(hf_model.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("mask", kw["attention_mask"].float()), with_kwargs=True))
    for l, layer in enumerate(hf_model.layers):
        off = torch.as_tensor(heads[l])

        def keep(m, a, out, l=l):
            seen[l] = out[..., 2 * out.shape[-1] // 3:]  # (b, n, H·d_h) the values

        def uniform(m, args, l=l, off=off):
            x = args[0]  # (b, q, H·d_h)
            b, q, D = x.shape
            H = off.shape[0]
            i = torch.arange(q)
            near = (i[:, None] - i[None]).abs() <= radius[l] if radius[l] else torch.ones(q, q, dtype=torch.bool)
            m = seen["mask"][:, None, :] * near[None].float()  # (b, q, k)
            mean = torch.einsum("bqk,bkd->bqd", m, seen[l]) / m.sum(-1, keepdim=True).clamp(min=1)  # (b, q, H·d_h)
            x = torch.where(off[None, None, :, None], mean.view(b, q, H, D // H), x.view(b, q, H, D // H))
            return (x.reshape(b, q, D),)

        handles += [layer.attn.Wqkv.register_forward_hook(keep), layer.attn.Wo.register_forward_pre_hook(uniform)]
    try:
        yield hf_model
    finally:
        for h in handles:
            h.remove()


def test_disabled_heads(pair, batch):
    model, oracle = pair
    heads = np.random.default_rng(1).random((model.config.num_layers, model.config.num_heads)) < 0.5
    heads[0, 0] = heads[1, 0] = True
    ours = model.forward(batch, Interventions(disabled_heads=jnp.asarray(heads)), internals=None)
    with _disabled(oracle, heads, model.config.attention_radius):
        ref = hf_run(oracle, batch)
    terms = model_terms(model.config, batch["input_ids"].shape[1])
    assert_close(ours.last_hidden_state, ref.last_hidden_state, terms=terms)


def test_classifier_head(tmp_path, batch):
    """Two layers (one global, one local: both kinds of rotary table and window in the disabling suffix) so that the
    suffix runs from two layers, not four."""
    model, oracle = load_pair(save_modernbert(tmp_path, head="cls", num_hidden_layers=2), head="cls")
    assert model.config.attention_radius == (0, 2)
    assert model.config.num_labels == 3 and model.config.classifier == "dense_act_norm"
    check_classifier(model, oracle, batch, types=False)


def test_mean_pooling_is_refused(tmp_path):
    import jattn
    from jattn.nn.config import ConfigError

    with pytest.raises(ConfigError, match="classifier_pooling"):
        jattn.load(save_modernbert(tmp_path, head="cls", classifier_pooling="mean"), tokenizer=False)


def test_mlm_head_and_export(tmp_path, batch):
    """The masked-LM logits; the exported state dict is the one loaded (Wqkv joined, no layer-0
    attention LayerNorm), and HF reads the exported folder back to the same logits."""
    import json

    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays
    from tiny_encoders import hf_model

    model, oracle = load_pair(save_modernbert(tmp_path, head="mlm"), head="mlm")
    ours = model.forward(batch, internals=None, heads=("mlm_logits",)).mlm_logits
    want = hf_run(oracle, batch).logits
    assert_close(ours, want, terms=model_terms(model.config, batch["input_ids"].shape[1]))
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    original = read_state_dict(model.source)
    assert set(state) == {k for k in original if k != "decoder.weight"}
    for k, v in state.items():
        np.testing.assert_array_equal(v, original[k], err_msg=k)
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(out / "model.safetensors"))
    np.testing.assert_array_equal(hf_run(hf_model(out, "mlm"), batch).logits.numpy(), want.numpy())


def test_rotary_scores_depend_on_the_offset_only():
    """RoFormer Eq. 16: ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩, so shifting both positions keeps the score."""
    from jattn.nn.rotary import rotate, tables

    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 8)).astype(np.float32)
    cos, sin = tables(10.0, 12, 8)  # (12, 8)
    score = lambda m, n: float(rotate(jnp.asarray(q)[None], cos[m:m + 1], sin[m:m + 1])[0]
                               @ rotate(jnp.asarray(k)[None], cos[n:n + 1], sin[n:n + 1])[0])
    np.testing.assert_allclose(score(2, 5), score(6, 9), rtol=1e-5)
    np.testing.assert_allclose(score(0, 0), float(q @ k), rtol=1e-5)
    assert abs(score(2, 5) - score(2, 6)) > 1e-3
