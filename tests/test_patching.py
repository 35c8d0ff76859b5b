"""Activation and attribution patching (jattn.sweeps.patching) against an independent loop of
Hugging Face PyTorch forward hooks in float64: one forward on the clean input records each
attention output projection's input (the heads' contexts, concatenated), then one corrupted
forward per head whose pre-hook writes the clean slice of that head into the projection's input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jattn
import seq2seq_family_analyses as analyses
import tiny_seq2seq
from hf_head_gates import hf_patch_loop, output_projections, sender_pass, torch_inputs
from jattn.nn.interventions import Interventions
from jattn.sweeps.patching import agreement, attribution_patch_heads, paired_inputs, patch_heads
from tiny_encoders import hf_model
from tolerance import assert_close, model_terms, tolerance

CLEAN = ["John gave the book to Mary because she asked.", "The keys to the cabinet are on the table.",
         "Anna thanked Tom after he helped."]
CORRUPTED = ["Mary gave the book to John because she asked.", "The key to the cabinets is on the table.",
             "Tom thanked Anna after he helped."]


def test_patch_heads_equals_hf_hooks(tiny_bert, tiny_direction):
    """Every head of a random BERT (3 layers × 2 heads, larger weights than HF's init; MiniLM's
    tokenizer and encoder code path), metric = the [CLS] hidden state's projection on a unit
    direction."""
    model, hf = tiny_bert
    w32 = tiny_direction.astype(np.float32)
    got = patch_heads(model, CLEAN, CORRUPTED, lambda out: out["last_hidden_state"][:, 0] @ w32,
                      heads_per_step=4)["encoder"]  # 6 heads: a full step and a filled one
    clean, corrupted = paired_inputs(model, CLEAN, CORRUPTED)
    w64 = torch.tensor(tiny_direction)
    want = hf_patch_loop(hf, torch_inputs(clean), torch_inputs(corrupted),
                         lambda out: out.last_hidden_state[:, 0] @ w64, {"encoder": model.config.num_heads})
    n = clean["input_ids"].shape[1]
    # the effect is a difference of two float32 metrics, each an O(1) coordinate of a LayerNorm output
    terms = 2 * model_terms(model.config, n)
    assert_close(got, want["encoder"], terms=terms, scale=1.0)
    print("max |jattn − HF|", np.abs(got - want["encoder"]).max(), "tolerance", tolerance(1.0, terms))
    assert np.abs(want["encoder"]).max() > 20 * tolerance(1.0, terms)  # effects well above the tolerance


def test_translation_patch_heads_equals_hf_hooks(tiny_marian_folder):
    """Every head of every attention type of a random Marian model; metric = a logit difference
    at target position 1."""
    model = jattn.load(str(tiny_marian_folder), use_cache=False)
    analyses.check_patch_heads(model, tiny_seq2seq.hf_model(tiny_marian_folder, "marian"))


def test_per_position_patching_sums_to_a_forward_per_position(tiny_bert, tiny_direction):
    """Per (head, position) effects equal full forwards with that one cell patched (the random
    3 × 2 BERT)."""
    model = tiny_bert[0]
    w32 = tiny_direction.astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w32  # noqa: E731
    got = patch_heads(model, CLEAN[1:], CORRUPTED[1:], metric, per_position=True)["encoder"]  # (L, H, n)
    clean, corrupted = paired_inputs(model, CLEAN[1:], CORRUPTED[1:])
    context = model.forward(clean, internals=("context",)).internals["context"]  # (L, b, H, n, d_h)
    base = np.asarray(metric({"last_hidden_state": model.forward(corrupted).last_hidden_state}))
    L, H, n = got.shape
    lengths = corrupted["attention_mask"].sum(1)
    assert lengths.min() < lengths.max()  # a padded row
    for l, h, i in [(0, 1, 1), (2, 0, 0), (1, 1, int(lengths.min()) - 1), (2, 1, int(lengths.max()) - 1)]:
        where = np.zeros((L, 1, H, n), bool)
        where[l, 0, h, i] = True
        out = model.forward(corrupted, Interventions(patch={"context": (context, where)}))
        delta = np.asarray(metric({"last_hidden_state": out.last_hidden_state})) - base  # (b,)
        real = i < lengths
        assert_close(got[l, h, i], delta[real].mean(), terms=2 * model_terms(model.config, n), scale=1.0)
    assert np.isnan(got[..., int(lengths.max()):]).all()


def test_attribution_patching_tracks_exact_patching(tiny_bert, tiny_direction):
    """On the random 3 × 2 BERT (Pearson 0.997 over its 6 heads)."""
    model = tiny_bert[0]
    w32 = tiny_direction.astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ w32  # noqa: E731
    exact = patch_heads(model, CLEAN, CORRUPTED, metric)["encoder"]
    approx = attribution_patch_heads(model, CLEAN, CORRUPTED, metric)["encoder"]
    assert approx.shape == exact.shape
    assert agreement(approx, exact)["pearson"] > 0.5  # a first-order estimate, not noise


def test_attribution_patching_is_the_directional_derivative(tiny_marian_folder):
    """∂metric/∂t at t = 0 against central finite differences of the blended patch, per attention type."""
    model = jattn.load(str(tiny_marian_folder), use_cache=False)
    clean, corrupted = analyses.clean_and_corrupted(model)
    metric = lambda out: out["logits"][:, 1, 5] - out["logits"][:, 1, 6]  # noqa: E731
    got = attribution_patch_heads(model, clean, corrupted, metric)
    contexts = model.forward(clean, internals=("context",)).internals
    eps = 1e-2
    for kind, (l, h) in {"encoder": (1, 2), "decoder": (2, 1), "cross": (0, 0)}.items():
        ctx = contexts[kind]["context"]  # (L, b, H, q, d_h)
        values = []
        for t in (eps, -eps):
            where = np.zeros((*ctx.shape[:3], 1), np.float32)
            where[l, :, h] = t
            out = model.forward(corrupted, {kind: Interventions(patch={"context": (ctx, where)})})
            values.append(np.asarray(metric({"logits": out.logits}), np.float64))
        fd = ((values[0] - values[1]) / (2 * eps)).mean()
        assert abs(got[kind][l, h] - fd) <= 1e-2 * max(1.0, abs(fd)), kind  # O(eps²) truncation


def test_unequal_lengths_are_refused(minilm):
    with pytest.raises(ValueError, match="example 1 tokenizes to .* tokens clean and .* corrupted.*equal lengths"):
        patch_heads(minilm, ["a cat sat", "a dog ran"], ["a cat sat", "an extraordinarily long dog ran"],
                    lambda out: out["last_hidden_state"][:, 0, 0])
    with pytest.raises(ValueError, match="one number per example"):
        patch_heads(minilm, ["a cat sat"], ["a dog sat"], lambda out: out["last_hidden_state"][:, 0])


def test_per_example_effects_with_a_metric_of_per_example_rows(tiny_bert, tiny_direction):
    """``metric(outputs, rows)`` with ``metric_inputs`` (a position per example) and ``per_example``:
    each example's row equals that example patched alone with its position fixed in the metric,
    and their mean is the default result; exact and attribution patching alike (the random 3 × 2
    BERT)."""
    import jax.numpy as jnp

    model = tiny_bert[0]
    w32 = tiny_direction.astype(np.float32)
    positions = np.array([2, 5, 1])
    metric = lambda out, rows: (out["last_hidden_state"][jnp.arange(len(rows["at"])), rows["at"]] @ w32)  # noqa: E731
    for sweep in (patch_heads, attribution_patch_heads):
        each = sweep(model, CLEAN, CORRUPTED, metric, batch_size=2, metric_inputs={"at": positions},
                     per_example=True)["encoder"]  # (N, L, H); the second batch is one real row and one filler
        assert each.shape == (3, model.config.num_layers, model.config.num_heads)
        mean = sweep(model, CLEAN, CORRUPTED, metric, batch_size=2, metric_inputs={"at": positions})["encoder"]
        assert_close(mean, each.mean(0), terms=2, scale=float(np.abs(each).max()))
        n = paired_inputs(model, CLEAN, CORRUPTED)[0]["input_ids"].shape[1]
        for i in (0, 2):  # a row of a full batch, the real row of the filled one
            p = positions[i]
            alone = sweep(model, CLEAN[i:i + 1], CORRUPTED[i:i + 1],
                          lambda out, p=int(p): out["last_hidden_state"][:, p] @ w32)["encoder"]  # (L, H)
            assert_close(each[i], alone, terms=2 * model_terms(model.config, n), scale=1.0, err_msg=sweep.__name__)
        assert np.abs(each[0] - each[1]).max() > 20 * tolerance(1.0, 2 * model_terms(model.config, n))


def test_every_sweep_refuses_a_metric_of_another_shape(minilm):
    """One number per example, or an error naming the shape, in exact, attribution and path patching."""
    from jattn.sweeps.path_patching import path_patch

    wide = lambda out: out["last_hidden_state"][:, :, 0]  # noqa: E731  (b, n): one number per token
    for sweep in (patch_heads, attribution_patch_heads, lambda *a: path_patch(*a, [(1, 0, "k")])):
        with pytest.raises(ValueError, match=r"one number per example, shape \(16,\); got shape \(16, \d+\)"):
            sweep(minilm, CLEAN, CORRUPTED, wide)


def test_a_metric_that_leaves_jax_is_named(minilm):
    import numpy

    leaves = lambda out: numpy.asarray(out["last_hidden_state"])[:, 0, 0]  # noqa: E731
    with pytest.raises(ValueError, match="metric is called inside jax.jit.*left JAX.*Fix: write it with jax.numpy"):
        patch_heads(minilm, CLEAN, CORRUPTED, leaves)


def test_metric_inputs_and_per_example_are_checked(minilm):
    metric = lambda out, rows: out["last_hidden_state"][:, 0, 0]  # noqa: E731
    with pytest.raises(ValueError, match=r"metric_inputs\['at'\] has shape \(2,\).*one row per example \(3\)"):
        patch_heads(minilm, CLEAN, CORRUPTED, metric, metric_inputs={"at": np.array([1, 2])})
    with pytest.raises(ValueError, match="per_position=True is not combined"):
        patch_heads(minilm, CLEAN, CORRUPTED, metric, metric_inputs={"at": np.arange(3)}, per_example=True,
                    per_position=True)


# ---------------------------------------------------------------- path patching

def hf_path_patch(hf, clean: dict, corrupted: dict, metric, sender, receivers, heads: int) -> np.ndarray:
    """The three-pass definition with HF hooks (per example, (b,)): record the clean and corrupted
    head outputs; the sender pass freezes every head's output to the corrupted one except the
    sender's (clean) and keeps every layer's input; the receiver pass computes each receiver's
    q/k/v slice from the sender pass's input of its layer. ``receivers`` "output" or [(l, h, roles)]."""
    base = getattr(hf, hf.base_model_prefix, hf)
    sender_out = sender_pass(hf, output_projections(hf)["encoder"], clean, corrupted, sender, heads)
    if receivers == "output":
        return metric(sender_out).numpy()
    handles = []
    for l, h, roles in receivers:
        attention = base.encoder.layer[l].attention.self
        for role in roles:
            linear = {"q": attention.query, "k": attention.key, "v": attention.value}[role]

            def swap(m, a, out, h=h, x=sender_out.hidden_states[l]):
                d = out.shape[-1] // heads
                out = out.clone()
                out[..., h * d:(h + 1) * d] = m.forward(x)[..., h * d:(h + 1) * d].detach()  # q/k/v from the stream
                return out
            handles.append(linear.register_forward_hook(swap))
    with torch.no_grad():
        result = metric(hf(**corrupted)).numpy()
    for handle in handles:
        handle.remove()
    return result


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from tiny_encoders import save_tiny

    folder = save_tiny(tmp_path_factory.mktemp("path"), "bert-3x2-gelu_new")
    hf = hf_model(folder).double()
    with torch.no_grad():  # larger random weights than HF's init, so that attention is not uniform
        for name, p in hf.named_parameters():
            if p.dim() == 2 and "embeddings" not in name:
                p.normal_(0, 0.3)
    hf.save_pretrained(str(folder))
    return jattn.load(str(folder), use_cache=False), hf


@pytest.mark.parametrize("receivers", ["output", [(2, 1, "q")], [(1, 0, "kv"), (2, 1, "qkv")], [(2, 0, "v")]])
def test_path_patching_equals_three_passes(tiny_bert, receivers):
    from jattn.sweeps.path_patching import path_patch

    model, hf = tiny_bert
    clean = ["the cat sat on the mat", "a dog ran in the park today", "birds fly"]
    corrupted = ["the dog sat on the rug", "a cat ran in the yard today", "fish swim"]
    w = np.random.default_rng(1).normal(size=model.config.hidden_size)
    w /= np.linalg.norm(w)
    w32, w64 = w.astype(np.float32), torch.tensor(w)
    got = path_patch(model, clean, corrupted, lambda out: out["last_hidden_state"][:, 0] @ w32, receivers)["encoder"]
    a, b = (torch_inputs(x) for x in paired_inputs(model, clean, corrupted))
    metric = lambda out: out.last_hidden_state[:, 0] @ w64  # noqa: E731
    with torch.no_grad():
        base = metric(hf(**b)).numpy()
    L, H = model.config.num_layers, model.config.num_heads
    want = np.array([[(hf_path_patch(hf, a, b, metric, (l, h), receivers, H) - base).mean() for h in range(H)]
                     for l in range(L)])
    terms = 3 * model_terms(model.config, a["input_ids"].shape[1])  # three float32 forwards in a chain
    assert_close(got, want, terms=terms, scale=1.0)
    print(receivers, "max |jattn − HF|", np.abs(got - want).max(), "largest effect", np.abs(want).max())
    assert np.abs(want).max() > 5 * tolerance(1.0, terms)  # effects above the tolerance
    if receivers != "output":  # a sender at or above every receiver's layer reaches none of them
        top = max(l for l, _, _ in receivers)
        assert (want[top:] == 0).all()  # (jattn matches it within the tolerance above)


@pytest.fixture(scope="module")
def tiny_direction(tiny_bert):
    w = np.random.default_rng(0).normal(size=tiny_bert[0].config.hidden_size)
    return w / np.linalg.norm(w)  # a unit direction: the metric is one coordinate of the hidden state


def test_layer_views_follow_the_parameters(tiny_bert):
    """``Model.layer_views`` is made once, and made again when a parameter array is replaced, so
    attribution patching always reads the model's current weights."""
    import jax
    from flax import nnx

    model = jattn.load(str(tiny_bert[0].source), use_cache=False)
    views = model.layer_views()
    assert model.layer_views() is views
    kernel = views["layers"]["ffn_in"]["kernel"]  # [L arrays]
    nnx.update(model.module, jax.tree.map(lambda x: x * 2, model.params))
    fresh = model.layer_views()
    assert fresh is not views
    for l, old in enumerate(kernel):
        np.testing.assert_array_equal(np.asarray(fresh["layers"]["ffn_in"]["kernel"][l]), 2 * np.asarray(old))
