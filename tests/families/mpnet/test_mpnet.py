"""MPNet (``jattn/families/mpnet``) against Hugging Face's ``MPNetModel`` on tiny random configs:
outputs, every attention weight (the shared relative-position bias included), head gates per
head / example / token, disabled heads, the classification and masked-LM heads, the [CLS]-only
path and the disabling sweep's suffix, pruning (in memory and exported), the HF round trip, and
Kobayashi et al.'s decomposition with the bias. Padded sentence pairs, sequences long enough to
reach the logarithmic buckets (distances ≥ 8)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, new_hf, pair_batch, pair_fixtures, save_random)
from jattn.nn.config import ConfigError
from tiny_encoders import hf_model, hf_run
from tolerance import assert_close, model_terms, tolerance

LENGTHS = [37, 20, 9, 37]  # padded pairs; distances up to 36: exact and log-spaced buckets
SHAPE = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-5)


def save_mpnet(folder, head="base", seed=0, **kw):
    import torch

    cls = {"mlm": "MPNetForMaskedLM", "cls": "MPNetForSequenceClassification"}.get(head, "MPNetModel")
    model = new_hf("MPNetConfig", cls, {**SHAPE, **kw, "num_labels": 3}, seed)
    base = getattr(model, "mpnet", model)
    with torch.no_grad():  # a bias of the size of the scores, so that it moves α
        base.encoder.relative_attention_bias.weight.normal_(0, 1.0)
    return save_random(model, folder, seed)


pair, batch = pair_fixtures(save_mpnet, LENGTHS, seed=1, types=False)


def test_config(pair):
    model, _ = pair
    c = model.config
    assert (c.relative_position_buckets, c.relative_position_max_distance, c.type_vocab_size) == (32, 128, 0)
    assert c.positions == "after_padding" and c.pad_token_id == 1 and c.max_length == 62
    assert model.params["relative_bias"].shape == (32, 4) and model.config.with_pooler


def test_outputs_and_attention(pair, batch):
    check_outputs(*pair, batch, types=False)


# the same post-LN layers and gate code as RoBERTa's (MPNet differs in embeddings and the score bias, which
# test_outputs_and_attention checks)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_head_gates")
def test_head_gates(pair, batch):
    check_gates(*pair, batch, types=False)


# the same post-LN layers and disabling code as RoBERTa's (MPNet differs in embeddings and the score bias, which
# test_outputs_and_attention checks)
@pytest.mark.slow(twin="tests/families/roberta/test_roberta.py::test_disabled_heads")
def test_disabled_heads(pair, batch):
    check_disabled(*pair, batch, types=False)


def test_token_types_ignored(pair, batch):
    """MPNet has no token types: ids of segment B change nothing (HF ignores them too)."""
    model, _ = pair
    typed = pair_batch(model.config, LENGTHS, seed=1, types=True)
    np.testing.assert_array_equal(model.forward(typed, internals=None).last_hidden_state,
                                  model.forward(batch, internals=None).last_hidden_state)


def test_kobayashi_decomposition_with_bias(pair, batch):
    """y_i − b_O = Σ_j ‖·‖-decomposed Σ_h α f_h(x_j) with the bias in α: jattn's ``summed_norm``
    against the vectors formed in float64 from HF's α, HF's value projection and HF's W_O."""
    import torch

    model, oracle = pair
    values = []
    layer0 = oracle.encoder.layer[0].attention.attn
    handle = layer0.v.register_forward_hook(lambda m, a, out: values.append(out))
    try:
        ref = hf_run(oracle, batch)
    finally:
        handle.remove()
    alpha = ref.attentions[0].double().numpy()  # (b, H, n, n)
    b, H, n, _ = alpha.shape
    v = values[0].double().numpy().reshape(b, n, H, -1)  # (b, n, H, d_h)
    w_o = layer0.o.weight.detach().double().numpy().T.reshape(H, -1, model.config.hidden_size)  # (H, d_h, D)
    f = np.einsum("bjhd,hde->bhje", v, w_o)  # (b, H, n, D)
    mask = batch["attention_mask"].astype(bool)
    summed = np.einsum("bhij,bhje->bije", alpha, f)  # (b, n, n, D)
    want = np.linalg.norm(summed, axis=-1) * (mask[:, :, None] & mask[:, None, :])  # (b, n, n)
    got = jattn.norms(model, batch)["encoder"]["summed_norm"][0]
    terms = model_terms(model.config, n)
    assert_close(got, want, terms=terms)
    with torch.no_grad():  # Σ_j of the decomposition plus b_O is HF's attention output
        out = layer0.o(values[0].new_tensor(np.einsum("bhij,bjhd->bihd", alpha, v).reshape(b, n, -1)))
    assert_close(summed.sum(2) + layer0.o.bias.detach().numpy(), out.numpy(), terms=terms)


def test_classifier_head(tmp_path, batch):
    model, oracle = load_pair(save_mpnet(tmp_path, head="cls"), head="cls")
    assert model.config.num_labels == 3 and not model.config.with_pooler
    check_classifier(model, oracle, batch, types=False)


def test_mlm_head(tmp_path, batch):
    from jattn.nn.encoder import mlm_logits

    model, oracle = load_pair(save_mpnet(tmp_path, head="mlm"), head="mlm")
    logits = mlm_logits(model.params, model.config, model.forward(batch, internals=None).last_hidden_state)
    terms = model_terms(model.config, LENGTHS[0]) + model.config.hidden_size  # the transform's sum over D
    assert_close(logits, hf_run(oracle, batch).logits, terms=terms)


def test_pruned_and_exported(pair, batch, tmp_path):
    """Pruning keeps each kept head's column of the shared table; the export loads back."""
    from jattn.sweeps.pruning import export_pruned

    model, _ = pair
    check_pruned(model, batch)
    keep = np.array([[1, 0, 0, 1], [0, 1, 1, 1]], bool)
    folder = export_pruned(model, keep, tmp_path / "pruned")
    assert json.loads((folder / "config.json").read_text())["pruned_heads"] == {"0": [1, 2], "1": [0]}
    again = jattn.load(folder, tokenizer=False, use_cache=False)
    from jattn import Interventions

    masked = model.forward(batch, Interventions(head_gates=jnp.asarray(keep, jnp.float32)), internals=None)
    assert_close(again.forward(batch, internals=None).last_hidden_state, masked.last_hidden_state,
                 terms=model_terms(model.config, LENGTHS[0]))


@pytest.mark.parametrize("head", ["base", "cls"])
def test_hf_round_trip(tmp_path, head, batch):
    """to_hf_state_dict ∘ convert is the identity on the checkpoint's tensors, and HF builds a
    model from to_hf_config that agrees with the source."""
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays

    src = save_mpnet(tmp_path / "src", head=head)
    model = jattn.load(src, tokenizer=False, use_cache=False)
    spec = model.family
    state = spec.to_hf_state_dict(to_arrays(model.params), model.config)
    original = {k: v for k, v in read_state_dict(src).items() if "position_ids" not in k and "decoder" not in k}
    assert set(state) == set(original)
    for k, v in original.items():
        np.testing.assert_array_equal(state[k], v, err_msg=k)
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(spec.to_hf_config(model.config)))
    save_file(state, str(out / "model.safetensors"))
    ref = hf_run(hf_model(src, head), batch)
    again = hf_run(hf_model(out, head), batch)
    key = "logits" if head == "cls" else "last_hidden_state"
    np.testing.assert_array_equal(getattr(again, key).numpy(), getattr(ref, key).numpy())


@pytest.mark.parametrize("field,value", [("pad_token_id", 0), ("relative_attention_num_buckets", 64)])
def test_refused_configs(tmp_path, field, value):
    folder = save_mpnet(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=f"{field}={value}.*Fix: set {field}"):
        jattn.load(folder, tokenizer=False, use_cache=False)


def test_patch_heads_reads_the_score_bias(pair, batch):
    """Activation patching's prefix reuse runs the layers above the patched one itself: on MPNet
    it must add the relative-position bias there too. Every head against HF hook loops (float64)."""
    import torch

    from hf_head_gates import hf_patch_loop
    from jattn.sweeps.patching import patch_heads

    model, hf = pair
    corrupted = dict(batch, input_ids=np.where(batch["attention_mask"] > 0, np.roll(batch["input_ids"], 1, 0),
                                               batch["input_ids"]))  # other tokens, the same lengths
    corrupted["input_ids"][:, 0] = batch["input_ids"][:, 0]
    w = np.random.default_rng(2).normal(size=model.config.hidden_size)
    w /= np.linalg.norm(w)
    got = patch_heads(model, batch, corrupted, lambda out: out["last_hidden_state"][:, 0] @ w.astype(np.float32))["encoder"]
    as_torch = lambda b: {k: torch.tensor(np.asarray(b[k]), dtype=torch.long)  # noqa: E731
                          for k in ("input_ids", "attention_mask")}
    want = hf_patch_loop(hf.double(), as_torch(batch), as_torch(corrupted),
                         lambda out: out.last_hidden_state[:, 0] @ torch.tensor(w), {"encoder": model.config.num_heads})
    terms = 2 * model_terms(model.config, batch["input_ids"].shape[1])
    assert_close(got, want["encoder"], terms=terms, scale=1.0)
    bias = hf.encoder.relative_attention_bias.weight
    kept = bias.detach().clone()
    try:  # without the bias the effects differ by several tolerances: a jattn suffix that dropped
        with torch.no_grad():  # the bias would fail the comparison above
            bias.zero_()
        unbiased = hf_patch_loop(hf, as_torch(batch), as_torch(corrupted), lambda out: out.last_hidden_state[:, 0]
                                 @ torch.tensor(w), {"encoder": model.config.num_heads})
    finally:  # the oracle is shared by the module's tests
        with torch.no_grad():
            bias.copy_(kept)
        hf.float()
    assert np.abs(unbiased["encoder"] - want["encoder"]).max() > 3 * tolerance(1.0, terms)


def test_value_zeroing_reads_the_score_bias(pair, batch):
    """Value zeroing reruns every layer with a token's values zeroed: on MPNet with the layer's
    relative-position bias. Against one HF forward per layer and token, each example unpadded."""
    import torch

    from jattn.analyses.context_mixing import value_zeroing
    from test_context_mixing import hf_value_zeroing

    model, hf = pair
    got = value_zeroing(model, batch)["value_zeroing_layers"]  # (L, b, n, n)
    for k in range(len(LENGTHS)):
        n = LENGTHS[k]
        ids = {key: torch.tensor(np.asarray(batch[key])[k:k + 1, :n], dtype=torch.long)
               for key in ("input_ids", "attention_mask")}
        try:  # 1 − cos near 0 cancels in float32: the reference runs in float64
            want = hf_value_zeroing(hf.double(), ids)
        finally:
            hf.float()
        scale = want.max(-1, keepdims=True)  # row-normalised cosine distances: relative to the row's largest
        assert_close(got[:, k, :n, :n], want, terms=model_terms(model.config, n), ulps=64, scale=scale,
                     err_msg=f"example {k}")
