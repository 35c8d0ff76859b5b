"""Kobayashi et al. (2020, 2021) norms vs the original formulation with an explicit αf tensor."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from norms_testing import SENTENCES, assert_close, brute_force, internals_np, terms, tiny_bert

import jattn
from jattn.analyses import norms as N
from jattn.nn.attention import transformed_vectors
from tolerance import layer_terms, model_terms

KEYS_2020 = ("f_norm", "weighted_norm", "summed_norm", "weights")
PAIR_KEYS = ("weighted_norm", "summed_norm", "weights", "attnres_norm", "attnresln_norm")
KEYS_2021 = ("attnres_norm", "attnresln_norm", "mixing_attn_w", "mixing_attnres_w",
             "mixing_attn_n", "mixing_attnres_n", "mixing_attnresln_n")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="module")
def batch(model):
    return model.tokenize(SENTENCES)  # padded: three different lengths


@pytest.fixture(scope="module")
def result(model, batch):
    return jattn.norms(model, batch, residual=True)["encoder"]


@pytest.fixture(scope="module")
def reference(model, batch):
    return [brute_force(internals_np(model, batch, layer), batch.attention_mask, model.config.layer_norm_eps)
            for layer in range(model.config.num_layers)]


def test_shapes(model, result, batch):
    L, H = model.config.num_layers, model.config.num_heads
    b, n = batch.input_ids.shape
    assert result["f_norm"].shape == (L, b, H, n)
    assert result["weighted_norm"].shape == result["weights"].shape == (L, b, H, n, n)
    assert result["summed_norm"].shape == (L, b, n, n)
    assert result["attnresln_norm"].shape == (L, b, n, n)
    assert result["mixing_attnres_n"].shape == (L, b, n)


@pytest.mark.parametrize("key", KEYS_2020 + KEYS_2021)
def test_matches_explicit_tensor(model, batch, result, reference, key):
    n = batch.input_ids.shape[1]
    for layer, want in enumerate(reference):  # jattn's padded batch vs HF's internals in float64
        assert_close(result[key][layer], want[key], terms(model, n), name=f"{key} layer {layer}")


def test_vector_identities(model, batch, reference):
    """Σ_j Σ_h α f_h(x_j) + b_O is the attention output, and Σ_j Z_ij + γ⊙C(b_O)/σ + β is the
    attention LayerNorm's output: the decompositions are exact, as vectors."""
    real = batch.attention_mask.astype(bool)
    c, n = model.config, batch.input_ids.shape[1]
    for layer in range(model.config.num_layers):
        it, bf = internals_np(model, batch, layer), reference[layer]
        f = np.asarray(transformed_vectors(jnp.asarray(it["values"], jnp.float32),
                                           jnp.asarray(it["out_kernel"], jnp.float32)))
        assert_close(f, bf["f"], c.hidden_size // c.num_heads, name="f")  # one float32 product over d_h
        y = bf["s"].sum(2) + it["out_bias"]  # (b, n, D)
        # HF's float32 context over n keys and projection over D
        assert_close(y[real], it["output"][real], n + c.hidden_size, name="Σ_j S_ij + b_O")
        sigma = np.sqrt(it["pre_ln"].var(-1, keepdims=True) + model.config.layer_norm_eps)
        b_o = it["ln_scale"] * (it["out_bias"] - it["out_bias"].mean()) / sigma
        ln = bf["z"].sum(2) + b_o + it["ln_bias"]
        assert_close(ln[real], it["attention_ln_out"][real], n + 3 * c.hidden_size,  # and HF's LayerNorm
                     name="Σ_j Z_ij + LN(b_O) + β")


def test_padding_does_not_change_real_tokens(model, batch, result):
    alone = jattn.norms(model, model.tokenize(SENTENCES[1:2]), residual=True)["encoder"]
    n = int(batch.attention_mask[1].sum())
    for key in KEYS_2020 + KEYS_2021:
        got = result[key][:, 1]
        got = got[..., :n, :n] if key in PAIR_KEYS else got[..., :n]
        assert_close(got, alone[key][:, 0], terms(model, n), name=key)  # padded vs alone: other float32 orders
    assert not result["summed_norm"][:, 1, n:].any() and not result["summed_norm"][:, 1, :, n:].any()


def test_cross_attention_shapes_against_explicit_tensor():
    """attention_norms on a block with q ≠ k (cross-attention) against αf formed explicitly."""
    rng = np.random.default_rng(0)
    b, H, q, k, d, D = 2, 3, 5, 7, 4, 12
    scores = rng.normal(size=(b, H, q, k))
    alpha = (np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)).astype(np.float32)
    it = {"weights": alpha, "values": rng.normal(size=(b, H, k, d)).astype(np.float32)}
    view = {"out_kernel": rng.normal(size=(H, d, D)).astype(np.float32)}
    k_mask = np.array([[1] * 7, [1] * 5 + [0] * 2])
    q_mask = np.array([[1] * 5, [1] * 3 + [0] * 2])
    got = jax.jit(N.attention_norms)(it, view, q_mask, k_mask)
    a = np.asarray(alpha, np.float64) * (q_mask[:, None, :, None] * k_mask[:, None, None, :])
    f = np.einsum("bhnd,hde->bhne", np.asarray(it["values"], np.float64), np.asarray(view["out_kernel"], np.float64))
    af = a[..., None] * f[:, :, None]  # (b, H, q, k, D)
    assert_close(got["summed_norm"], np.linalg.norm(af.sum(1), axis=-1), d + H + D, name="summed")  # float32 sums
    assert_close(got["weighted_norm"], np.linalg.norm(af, axis=-1), d + D, name="weighted")
    with pytest.raises(ValueError, match="self-attention"):
        N.residual_norms(dict(it), view, q_mask, 1e-12)


def test_no_nxnxD_intermediate(model, batch):
    """The traced norm analysis (with the scan/map bodies) never makes an array as large as one
    layer's αf summed over heads, (b, n, n, D): Gram matrices are (b, n, H, H). The largest
    arrays are the stacked outputs (L, b, H, n, n), smaller here since L·H < D."""
    assert model.config.num_layers * model.config.num_heads < model.config.hidden_size
    inputs = model.check_batch(batch)
    jaxpr = jax.make_jaxpr(lambda p, x: N.encoder_norms(p, model.config, x, True))(model.params, inputs)
    b, n = batch.input_ids.shape
    limit = b * n * n * model.config.hidden_size

    def sizes(jx):
        for eqn in jx.eqns:
            for v in eqn.outvars:
                yield int(np.prod(v.aval.shape))
            for p in eqn.params.values():
                inner = getattr(p, "jaxpr", None)
                if inner is not None:
                    yield from sizes(getattr(inner, "jaxpr", inner))

    assert max(sizes(jaxpr.jaxpr)) < limit


def test_bad_model():
    with pytest.raises(TypeError, match="model from jattn.load"):
        jattn.norms(object(), None)


def test_minilm_layer0_matches_explicit_tensor(minilm):
    batch = minilm.tokenize(["The norm of the transformed vector matters.", "Frequent words, small norms."])
    got = jattn.norms(minilm, batch)["encoder"]
    want = brute_force(internals_np(minilm, batch, 0), batch.attention_mask, minilm.config.layer_norm_eps)
    c = minilm.config
    for key in KEYS_2020:  # layer 0 of jattn vs HF: one layer's reductions, then the norm over D
        assert_close(got[key][0], want[key], layer_terms(1, c.hidden_size, batch.input_ids.shape[1],
                                                         c.intermediate_size) + c.hidden_size, name=key)


def test_seq2seq_all_attention_types_against_explicit_tensor(tmp_path):
    """jattn.norms on an encoder-decoder (tiny random FSMT, padded both sides): encoder self,
    decoder self (causal) and cross-attention vs αf formed explicitly; the 2021 extension on
    the two self-attention types."""
    from tiny_seq2seq import padded_batch, save_tiny

    model = jattn.load(save_tiny(tmp_path / "fsmt", "fsmt"), use_cache=False)
    batch = padded_batch(model.config)
    got = jattn.norms(model, batch, residual=True)
    internals = model.forward(batch).internals
    views = {kind: model.module.view(kind) for kind in ("encoder", "decoder", "cross")}  # W_O, γ from the params
    eps = model.config.layer_norm_eps
    src, tgt = batch["attention_mask"], batch["decoder_attention_mask"]
    for kind, (q_mask, k_mask) in {"encoder": (src, src), "decoder": (tgt, tgt), "cross": (tgt, src)}.items():
        for layer in range(internals[kind]["weights"].shape[0]):
            it = {k: np.asarray(v[layer], np.float64) for k, v in {**internals[kind], **views[kind]}.items()}
            if kind == "cross":
                a = it["weights"] * (q_mask[:, None, :, None] * k_mask[:, None, None, :])
                f = np.einsum("bhnd,hde->bhne", it["values"], it["out_kernel"])  # (b, H, s, D)
                af = a[..., None] * f[:, :, None]  # (b, H, t, s, D)
                want = {
                    "f_norm": np.linalg.norm(f, axis=-1) * k_mask[:, None],
                    "weighted_norm": np.linalg.norm(af, axis=-1),
                    "summed_norm": np.linalg.norm(af.sum(1), axis=-1),
                    "weights": a,
                }
            else:
                want = brute_force(it, q_mask, eps)
            for key in [k for k in got[kind] if k in want]:
                assert_close(got[kind][key][layer], want[key], model_terms(model.config, src.shape[1], tgt.shape[1]),
                             name=f"{kind} {key} layer {layer}")  # jattn.norms' program vs the forward's internals
    assert set(got["cross"]) == set(KEYS_2020) and set(KEYS_2021) <= set(got["decoder"])
