"""Bad input, round 4 (the API): every public analysis and sweep takes a tokenized batch wherever it
takes examples, and gives the numbers the examples give (the same padded batches run: compared
exactly); a model loaded without a tokenizer takes token ids; a dict of the wrong form is refused
by name. Fine-tuning refuses a causal LM; a patch value of the wrong width is refused with the
expected shape; a tokenizer without a pad token and the default length are handled clearly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import jattn
from tolerance import assert_close, model_terms
from analysis_helpers import tiny_bert
from tiny_encoders import save_tiny
from tiny_lm import save_tiny_gpt2

TEXTS = ["the cat sat on the mat .", "a dog ran home", "birds sing in the early morning light ."]
LABELLED = list(zip(TEXTS, [0, 2, 1]))
PAIRS = [("ein hund läuft", "a dog runs"), ("die katze sitzt", "the cat sits"), ("vögel singen", "birds sing")]
LM_TEXTS = ["the cat sat on the mat .", "alice met bob , then left .", "short ."]


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory):
    return save_tiny_gpt2(tmp_path_factory.mktemp("r4_lm") / "model")


@pytest.fixture(scope="module")
def lm(lm_folder):
    return jattn.load(str(lm_folder), use_cache=False)


@pytest.fixture(scope="module")
def lm_ids_only(lm_folder, tmp_path_factory):
    """The same LM loaded from a copy of its folder without the tokenizer files."""
    bare = tmp_path_factory.mktemp("r4_lm_bare") / "model"
    shutil.copytree(lm_folder, bare)
    for f in bare.iterdir():
        if "token" in f.name or f.name in ("vocab.json", "merges.txt"):
            f.unlink()
    return jattn.load(str(bare), tokenizer=False, use_cache=False)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return jattn.load(str(save_tiny(tmp_path_factory.mktemp("r4_cls") / "model", "bert-2x4", head="cls")),
                      use_cache=False)


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    return jattn.load(str(tiny_bert(tmp_path_factory.mktemp("r4_mlm") / "model", mlm=True, layers=2, heads=2)),
                      use_cache=False)


def labelled_batch(model, examples) -> dict:
    """(text, label) examples as one tokenized batch with Hugging Face's ``labels`` (b,)."""
    return {**model.batch([x for x, _ in examples]), "labels": np.array([y for _, y in examples])}


def assert_same(a, b):
    """Equal nested results (dicts of arrays, arrays, floats), exactly: the same batches ran."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            assert_same(a[k], b[k])
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------- texts or the same texts tokenized

def test_importance_of_a_causal_lm_takes_its_batch(lm):
    texts = jattn.importance(lm, LM_TEXTS, batch_size=4, progress=False)
    assert_same(texts, jattn.importance(lm, lm.batch(LM_TEXTS), batch_size=4, progress=False))
    assert_same(texts, jattn.importance(lm, lm.tokenize(LM_TEXTS), batch_size=4, progress=False))  # a TokenBatch


def test_importance_of_an_mlm_and_a_classifier_take_their_batches(mlm, classifier):
    assert_same(jattn.importance(mlm, TEXTS, batch_size=4, progress=False),
                jattn.importance(mlm, mlm.batch(TEXTS), batch_size=4, progress=False))
    assert_same(jattn.importance(classifier, LABELLED, batch_size=4, progress=False),
                jattn.importance(classifier, labelled_batch(classifier, LABELLED), batch_size=4, progress=False))


def test_importance_and_run_corpus_of_a_translation_model_take_its_batch(tiny_marian):
    batch = tiny_marian.batch(PAIRS)
    assert_same(jattn.importance(tiny_marian, PAIRS, batch_size=4, progress=False),
                jattn.importance(tiny_marian, batch, batch_size=4, progress=False))
    from jattn.analyses import make_methods

    run = lambda x: jattn.run_corpus(tiny_marian, x, make_methods(tiny_marian, ["confidence"]), batch_size=4,  # noqa: E731
                                     progress=False).statistics
    texts, ids = run(PAIRS), run(batch)
    assert_same({k: v.value for k, v in texts.items()}, {k: v.value for k, v in ids.items()})


def test_run_corpus_takes_a_batch(mlm):
    from jattn.analyses import make_methods

    methods = make_methods(mlm, ["weights", "confidence"])
    a = jattn.run_corpus(mlm, TEXTS, methods, batch_size=2, progress=False)
    b = jattn.run_corpus(mlm, mlm.batch(TEXTS), methods, batch_size=2, progress=False)
    assert a.meta["segments"] == b.meta["segments"] == len(TEXTS) and a.meta["tokens"] == b.meta["tokens"]
    assert_same({k: s.value for k, s in a.statistics.items()}, {k: s.value for k, s in b.statistics.items()})


def test_norms_attributions_and_patching_take_a_batch(mlm):
    batch = mlm.batch(TEXTS)
    assert_same(jattn.norms(mlm, TEXTS), jattn.norms(mlm, batch))
    assert_same(jattn.attributions(mlm, TEXTS), jattn.attributions(mlm, batch))
    corrupted = ["the dog sat on the mat .", "a cat ran home", "birds sing in the early evening light ."]
    metric = lambda out: out["last_hidden_state"][:, 0, 0]  # noqa: E731
    for patch in (jattn.patch_heads, jattn.attribution_patch_heads):
        assert_same(patch(mlm, TEXTS, corrupted, metric), patch(mlm, batch, mlm.batch(corrupted), metric))
    from jattn.sweeps.path_patching import path_patch

    assert_same(path_patch(mlm, TEXTS, corrupted, metric, [(1, 0, "q")]),
                path_patch(mlm, batch, mlm.batch(corrupted), metric, [(1, 0, "q")]))


def test_disable_and_prune_take_a_labelled_batch(classifier):
    from jattn.sweeps.pruning_curve import classification_metric

    batch = labelled_batch(classifier, LABELLED)
    a = jattn.disable(classifier, LABELLED, mode="zero", unit="layer", batch_size=4, progress=False)
    b = jattn.disable(classifier, batch, mode="zero", unit="layer", batch_size=4, progress=False)
    assert a.baseline == b.baseline
    assert_same(a.metric, b.metric)
    assert_same(a.predictions, b.predictions)
    curve = lambda x: jattn.prune(classifier, x, classification_metric(classifier, x, batch_size=4),  # noqa: E731
                                  step=0.25, batch_size=4)
    assert curve(LABELLED) == curve(batch)
    from jattn.sweeps.disable import heads_metric

    assert heads_metric(classifier, LABELLED, "0:1,1:2") == heads_metric(classifier, batch, "0:1,1:2")
    with pytest.raises(ValueError, match="labels"):  # a sweep that scores against labels needs them
        jattn.disable(classifier, classifier.batch(TEXTS), progress=False)


# ---------------------------------------------------------------- a model loaded without a tokenizer

def test_a_model_without_a_tokenizer_takes_token_ids(lm, lm_ids_only):
    batch = lm.batch(LM_TEXTS)
    ids = {k: batch[k] for k in ("input_ids", "attention_mask")}
    assert not lm_ids_only.has_tokenizer
    assert_same(jattn.importance(lm, LM_TEXTS, batch_size=4, progress=False),
                jattn.importance(lm_ids_only, ids, batch_size=4, progress=False))
    from jattn.analyses import make_methods

    methods = make_methods(lm, ["lm-attention"])
    a = jattn.run_corpus(lm, LM_TEXTS, methods, batch_size=4, progress=False)
    b = jattn.run_corpus(lm_ids_only, ids, methods, batch_size=4, progress=False)
    assert_same({k: s.value for k, s in a.statistics.items()}, {k: s.value for k, s in b.statistics.items()})
    assert_same(jattn.norms(lm, LM_TEXTS), jattn.norms(lm_ids_only, ids))
    with pytest.raises(ValueError, match="without a tokenizer"):
        jattn.importance(lm_ids_only, LM_TEXTS, progress=False)


# ---------------------------------------------------------------- a dict of the wrong form

@pytest.mark.parametrize("change, named", [
    (lambda b: {**b, "input_id": b["input_ids"]}, "input_id"),  # a misspelt key
    (lambda b: {"input_ids": b["input_ids"]}, "attention_mask"),  # a missing mask
    (lambda b: {**b, "labels": np.zeros((2, 2), np.int64)}, "labels"),  # labels not one per row
    (lambda b: {**b, "attention_mask": np.array([[1, 0, 1] + [0] * (b["input_ids"].shape[1] - 3)] * 3)},
     "attention_mask row 0"),  # padding between real tokens
])
def test_a_malformed_batch_is_refused_by_name(mlm, change, named):
    bad = change(dict(mlm.batch(TEXTS)))
    for call in (lambda: jattn.importance(mlm, bad, progress=False),
                 lambda: jattn.run_corpus(mlm, bad, [], progress=False)):
        with pytest.raises(ValueError, match=named):
            call()


# ---------------------------------------------------------------- fine-tuning a causal LM

def test_finetuning_refuses_a_causal_lm_before_any_training(lm, lm_folder, tmp_path):
    from jattn.cli import main
    from jattn.training.finetune import finetune, with_classifier

    train = [("the cat sat", 0), ("a dog ran", 1)]
    with pytest.raises(ValueError, match="causal .decoder-only. LM") as e:
        finetune(lm, train, train, tmp_path / "out", progress=False)
    assert "base (--model)" in str(e.value) and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="causal"):
        with_classifier(lm, 2)
    data = tmp_path / "train.tsv"
    data.write_text("the cat sat\t0\na dog ran\t1\n")
    with pytest.raises(SystemExit, match="not a causal .decoder-only. LM"):
        main(["finetune", "--model", str(lm_folder), "--train", str(data), "--dev", str(data),
              "--out", str(tmp_path / "cli")])
    assert not (tmp_path / "cli").exists() and not (tmp_path / "cli-work").exists()


# ---------------------------------------------------------------- a patch value of the wrong width

def test_a_patch_value_of_the_wrong_width_is_refused_with_the_expected_shape(mlm):
    from hypothesis import HealthCheck, given, settings, strategies as st

    batch = mlm.batch(TEXTS[:2])
    (b, n), L, D = batch["input_ids"].shape, mlm.config.num_layers, mlm.config.hidden_size
    right = mlm.forward(batch)

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(site=st.sampled_from(["ffn_output", "ffn_residual", "layer_output", "residual"]),
           width=st.integers(1, 3 * D).filter(lambda w: w != D))
    def wrong(site, width):
        value = np.zeros((L, b, n, width), np.float32)
        iv = jattn.Interventions(patch={site: (value, np.ones((L, b, n), bool))})
        with pytest.raises(ValueError, match=rf"patch\['{site}'\].*\(L, {b}, {n}, {D}\).*last axis must be {D}, "
                                             rf"not {width}"):
            mlm.forward(batch, iv)

    wrong()
    same = np.asarray(right.internals["ffn_output"])  # the right width still patches: itself, nothing changes
    iv = jattn.Interventions(patch={"ffn_output": (same, np.ones((L, b, n), bool))})
    np.testing.assert_array_equal(np.asarray(mlm.forward(batch, iv).last_hidden_state),
                                  np.asarray(right.last_hidden_state))


@pytest.mark.parametrize("site", ["query_input", "key_input", "value_input"])
def test_a_receiver_input_of_the_wrong_width_is_refused_with_the_expected_shape(mlm, site):
    batch = mlm.batch(TEXTS[:2])
    (b, n), L, H, D = batch["input_ids"].shape, mlm.config.num_layers, mlm.config.num_heads, mlm.config.hidden_size
    where = np.zeros((L, b, H), bool)
    where[0, :, 0] = True
    wrong = jattn.Interventions(patch={site: (np.zeros((L, b, n, D + 3), np.float32), where)})
    with pytest.raises(
        ValueError, match=rf"patch\['{site}'\].*\(L, {b}, {n}, {D}\).*last axis must be {D}, not {D + 3}"
    ):
        mlm.forward(batch, wrong)
    plain = mlm.forward(batch)
    own = np.asarray(plain.hidden_states[:-1])  # (L, b, n, D): each layer's input, the block's own
    same = jattn.Interventions(patch={site: (own, where)})  # nothing changes
    assert_close(mlm.forward(batch, same).last_hidden_state, plain.last_hidden_state,
                 terms=model_terms(mlm.config, n))


# ---------------------------------------------------------------- no pad token, empty input; the default length

def test_an_lm_tokenizer_without_a_pad_token_on_an_empty_input(lm_folder, tmp_path):
    from jattn.cli import main

    lm = jattn.load(str(lm_folder), use_cache=False)
    lm.tokenizer.pad_token = None  # GPT-2's own tokenizer has none
    from jattn.analyses import make_methods

    for call in (lambda: jattn.importance(lm, [], progress=False),
                 lambda: jattn.run_corpus(lm, ["", "  "], make_methods(lm, ["lm-attention"]), progress=False)):
        with pytest.raises(ValueError, match="the corpus is empty"):
            call()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(SystemExit, match="empty"):
        main(["analyze", "--model", str(lm_folder), "--input", str(empty), "--methods", "lm-attention",
              "--out", str(tmp_path / "out")])


def test_the_default_length_comes_from_the_model(lm, lm_folder, tmp_path):
    from jattn.cli import main

    assert lm.config.max_length == 64
    assert lm.tokenize(LM_TEXTS).input_ids.shape[0] == 3  # no max_length: the model's 64, not 128
    from jattn.analyses import make_methods

    jattn.run_corpus(lm, LM_TEXTS, make_methods(lm, ["lm-attention"]), progress=False)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LM_TEXTS) + "\n")
    main(["analyze", "--model", str(lm_folder), "--input", str(corpus), "--methods", "lm-attention",
          "--out", str(tmp_path / "out")])
    assert (tmp_path / "out").is_dir()
    with pytest.raises(SystemExit, match="--max-length 128: expected at most .* 64 positions"):
        main(["analyze", "--model", str(lm_folder), "--input", str(corpus), "--methods", "lm-attention",
              "--max-length", "128", "--out", str(tmp_path / "out2")])
    with pytest.raises(ValueError, match="max_length=128 exceeds the model's 64 positions"):
        lm.tokenize(LM_TEXTS, max_length=128)
