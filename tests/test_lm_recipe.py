"""The induction language models' recipe (``jattn.artefacts.induction``, ``jattn.training.lm``):
the exported folder reads alike in HF and jattn, an attention-only model's feed-forward blocks stay
exactly zero, a run stopped and resumed ends where an uninterrupted one does, the in-context
measure against a loop, and ``jattn models make`` on a recipe of kind ``language_model``."""

from __future__ import annotations

import json

import numpy as np
import pytest

TINY = dict(layers=2, heads=2, d_model=16, ffn=32, context=24, vocab_size=300, batch_size=4, steps=6, warmup=1,
            limit_text=300, max_segment=8)


def _train(root, data_dir, **fields):
    from jattn.artefacts.induction import InductionLMConfig, train_lm

    c = InductionLMConfig(**{**TINY, **fields})
    return train_lm(root / "out", root / "work", c, data_dir=data_dir, progress=False)


@pytest.fixture(scope="module")
def attention_only(tmp_path_factory, data_set):
    root = tmp_path_factory.mktemp("lm")
    return root / "out", _train(root, data_set("multi30k").parent, attention_only=True)


def test_folder_reads_alike_in_hf_and_jattn(attention_only):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import jattn
    from tolerance import assert_close, model_terms

    out, result = attention_only
    assert (out / "DONE").is_file() and json.loads((out / "training.json").read_text())["steps"] == TINY["steps"]
    assert len(result["curve"]) == 1 and set(result["curve"][0]) >= {"in_context_drop", "val_text_loss"}
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = np.asarray([[tok.bos_token_id] + tok("Two dogs run on the grass.")["input_ids"]], np.int32)
    model = jattn.load(out)
    ours = np.asarray(model.forward({"input_ids": ids, "attention_mask": np.ones_like(ids)},
                                    internals=None).logits)
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(str(out)).eval()(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    assert_close(ours, ref, terms=model_terms(model.config, ids.shape[1]))


def test_attention_only_feed_forward_blocks_stay_zero(attention_only):
    from safetensors.numpy import load_file

    state = load_file(str(attention_only[0] / "model.safetensors"))
    mlp = {k: v for k, v in state.items() if ".mlp." in k}
    assert mlp and all(not v.any() for v in mlp.values())
    assert any(state[k].any() for k in state if ".attn.c_attn" in k)  # the attention did train


def test_stop_and_resume_ends_where_one_run_does(tmp_path):
    """SIGINT while step 3's batch is drawn: the step finishes, a checkpoint is saved and
    KeyboardInterrupt raised; a new Trainer on the folder resumes and ends bit-equal to one run."""
    import os
    import signal

    import jax

    from jattn.artefacts.induction import InductionLMConfig, Sampler, model_config, train_tokenizer
    from jattn.training.lm import LMTrainConfig, Trainer

    c = InductionLMConfig(**TINY)
    tok = train_tokenizer(["a dog runs", "two cats sit on a mat", "the man walks"], tmp_path / "tok", 280)
    config = model_config(c, tok)
    sample = Sampler(np.arange(3, 200) % len(tok), c, config.bos_token_id, config.vocab_size)
    tc = LMTrainConfig(steps=6, warmup_steps=1, eval_every=2)
    once = Trainer(config, tc, tmp_path / "once")
    once.fit(sample, progress=False)

    def interrupting(step):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return sample(step)

    with pytest.raises(KeyboardInterrupt):
        Trainer(config, tc, tmp_path / "twice").fit(interrupting, progress=False)
    again = Trainer(config, tc, tmp_path / "twice")
    assert again.meta["step"] == 4
    again.fit(sample, progress=False)
    flat = lambda t: np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)])  # noqa: E731
    np.testing.assert_array_equal(flat(once.state["params"]), flat(again.state["params"]))
    assert [p["train_loss"] for p in once.meta["curve"]] == [p["train_loss"] for p in again.meta["curve"]]


def test_warm_up_longer_than_training_is_refused():
    from jattn.training.lm import LMTrainConfig

    with pytest.raises(ValueError, match=r"warmup_steps=10 must lie in \[0, steps=5\).*Fix"):
        LMTrainConfig(steps=5, warmup_steps=10)


def test_repeat_losses_equal_a_loop(attention_only):
    """The in-context measure: per sequence the mean next-token loss over the first copy's tokens
    2..T and the second copy's, against −log softmax read position by position."""
    import jax

    import jattn
    from jattn.analyses.lm_heads import repeated_tokens
    from jattn.training.lm import repeat_losses

    model = jattn.load(attention_only[0], tokenizer=False)
    T = 5
    ids = repeated_tokens(model.config.vocab_size, T, 3, seed=1, first=model.config.bos_token_id)  # (3, 11)
    got = repeat_losses(model.params, model.config, ids, T, offset=1)
    logits = np.asarray(model.forward({"input_ids": ids, "attention_mask": np.ones_like(ids)},
                                      internals=None).logits, np.float64)  # (3, 11, V)
    logp = np.asarray(jax.nn.log_softmax(logits, -1))
    for r in range(3):
        nll = [-logp[r, t, ids[r, t + 1]] for t in range(ids.shape[1] - 1)]
        first, second = np.mean(nll[1:T]), np.mean(nll[1 + T:2 * T])
        assert got["first"][r] == pytest.approx(first, abs=1e-4)
        assert got["second"][r] == pytest.approx(second, abs=1e-4)
        assert got["drop"][r] == pytest.approx(first - second, abs=1e-4)


def test_models_make_runs_a_language_model_recipe(tmp_path, data_set, monkeypatch):
    """A recipe of kind ``language_model`` made by ``jattn.artefacts.making.make`` into a cache:
    the folder with DONE, its training time recorded, the work folder gone, ``jattn.load`` by name."""
    import jattn
    from jattn import artefacts
    from jattn.artefacts.induction import make as train
    from jattn.artefacts.making import make, training_seconds
    from jattn.io.artefacts import work_folder

    monkeypatch.setenv("JATTN_DATA", str(data_set("multi30k").parent))
    recipe = artefacts.Recipe("tiny-induction-test", "a tiny induction LM", "seconds", kind="language_model",
                              maker=train, options=tuple(TINY.items()), needs=("multi30k",))
    monkeypatch.setitem(artefacts.RECIPES, recipe.name, recipe)
    folder = make(recipe.name, cache_dir=tmp_path, progress=False, log=None)
    assert (folder / "DONE").is_file() and not work_folder(recipe.name, tmp_path).exists()
    assert training_seconds(recipe.name, tmp_path) > 0
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path))
    assert jattn.load(recipe.name).config.causal
