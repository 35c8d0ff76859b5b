"""One API shape: every public analysis is called the same way on an encoder and on a translation
model (the model and its examples, or a tokenized batch) and returns its numbers per attention
type; what is given per attention type (head masks, scores, ``Interventions``) takes one form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jattn
from analysis_helpers import tiny_bert
from jattn.nn.interventions import Interventions

TEXTS = ["the cat sat on the mat .", "a dog ran home", "birds sing in the early morning light ."]
PAIRS = [("ein hund läuft", "a dog runs"), ("die katze sitzt", "the cat sits"), ("vögel singen", "birds sing")]


@pytest.fixture(scope="module", params=["encoder", "translation"])
def case(request, tmp_path_factory, tiny_marian):
    """(model, examples, the attention types the model must report)."""
    if request.param == "encoder":
        folder = tiny_bert(tmp_path_factory.mktemp("api_mlm") / "model", mlm=True, layers=2, heads=2)
        return jattn.load(str(folder), use_cache=False), TEXTS, ("encoder",)
    return tiny_marian, PAIRS, ("encoder", "decoder", "cross")


def first_output(out) -> np.ndarray:
    """A number per example from either kind of output dict: the first position's first feature
    of the last hidden state (encoder) or of the logits (translation model)."""
    key = "logits" if "logits" in out else "last_hidden_state"
    return out[key][:, 0, 0]  # (b,)


def test_model_lists_its_attention_types(case):
    model, _, types = case
    assert tuple(model.head_shapes) == types
    assert all(isinstance(L, int) and isinstance(H, int) for L, H in model.head_shapes.values())


def test_norms_and_attributions_take_examples_or_a_batch_and_answer_per_type(case):
    model, examples, types = case
    batch = model.batch(examples)
    from_examples, from_batch = jattn.norms(model, examples), jattn.norms(model, batch)
    assert tuple(from_examples) == types
    for kind, (L, H) in model.head_shapes.items():
        f = from_examples[kind]["f_norm"]
        assert f.shape[:3] == (L, len(examples), H)
        np.testing.assert_array_equal(f, from_batch[kind]["f_norm"])  # the same batch, the same program
    maps = jattn.attributions(model, examples)
    assert set(maps) <= set(types) and "encoder" in maps
    for kind, arrays in maps.items():
        assert arrays and all(v.shape[0] == model.head_shapes[kind][0] for v in arrays.values())


def test_importance_masks_and_scores_per_type(case):
    model, examples, types = case
    imp = jattn.importance(model, examples, batch_size=4, progress=False)
    assert tuple(imp) == types and all(imp[k].shape == model.head_shapes[k] for k in types)
    # a head mask in the per-type form: the masked head gets 0, the others a finite importance
    mask = {k: np.ones(s, np.float32) for k, s in model.head_shapes.items()}
    mask["encoder"][0, 0] = 0
    masked = jattn.importance(model, examples, mask=mask, batch_size=4, progress=False)
    assert masked["encoder"][0, 0] == 0 and all(np.isfinite(v).all() for v in masked.values())
    with pytest.raises(ValueError, match="attention types"):
        jattn.importance(model, examples, mask={"nope": mask["encoder"]}, progress=False)


def test_prune_hands_the_metric_a_mask_per_type(case):
    model, examples, types = case
    seen = []

    def metric(mask):
        seen.append(mask)
        return float(sum(m.sum() for m in mask.values()))

    scores = {k: np.arange(L * H, dtype=float).reshape(L, H) for k, (L, H) in model.head_shapes.items()}
    curve = jattn.prune(model, examples, metric, scores=scores, step=0.5)
    assert all(tuple(m) == types and all(m[k].shape == model.head_shapes[k] for k in types) for m in seen)
    total = sum(L * H for L, H in model.head_shapes.values())
    assert curve[0] == [0.0, total] and curve[-1][0] == 1.0


# the translation model's exact and attribution patching answer per type (encoder, decoder, cross) in
# test_patching.py, which indexes each type's (L, H) result: test_translation_patch_heads_equals_hf_hooks
# (exact, against HF hooks) and test_attribution_patching_is_the_directional_derivative
@pytest.mark.parametrize("case", ["encoder", pytest.param("translation", marks=pytest.mark.slow(
    twin="tests/test_patching.py::test_translation_patch_heads_equals_hf_hooks"))], indirect=True)
def test_patching_answers_per_type(case):
    model, examples, types = case
    clean = model.batch(examples)
    corrupted = {k: v.copy() for k, v in clean.items()}
    corrupted["input_ids"][:, 1] = clean["input_ids"][::-1, 1]  # another example's token at position 1
    exact = jattn.patch_heads(model, clean, corrupted, first_output, batch_size=4)
    approx = jattn.attribution_patch_heads(model, clean, corrupted, first_output, batch_size=4)
    for result in (exact, approx):
        assert tuple(result) == types and all(result[k].shape == model.head_shapes[k] for k in types)


def test_interventions_take_the_per_type_form(case):
    model, examples, types = case
    batch = model.batch(examples)
    L, H = model.head_shapes["encoder"]
    off = {"encoder": Interventions(head_gates=np.zeros((L, H), np.float32))}
    gated, plain = model.forward(batch, off, internals=None), model.forward(batch, internals=None)
    hidden = "encoder_last_hidden_state" if len(types) > 1 else "last_hidden_state"
    assert not np.allclose(getattr(gated, hidden), getattr(plain, hidden))
    if len(types) == 1:  # a model with one attention type also takes the bare value
        bare = model.forward(batch, off["encoder"], internals=None)
        np.testing.assert_array_equal(bare.last_hidden_state, gated.last_hidden_state)
    else:
        with pytest.raises(ValueError, match="attention types"):
            model.per_type(np.ones((L, H)), "mask")


def test_disable_is_for_classifiers_and_says_so(case):
    """Kovaleva et al.'s disabling measures a classifier's metric: any other model is refused by name."""
    model, examples, _ = case
    with pytest.raises(ValueError, match="classif"):
        jattn.disable(model, [(x, 0) for x in examples], progress=False)


def test_old_names_warn_and_still_work():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jattn.disable_sweep is jattn.disable and jattn.pruning_curve is jattn.prune
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    with pytest.raises(AttributeError):
        jattn.no_such_function  # noqa: B018
