"""A researcher's first hour (issue #80): a quick, quiet command line; causal LMs with Hugging
Face's conventions (``logits`` by default, one ``generate``); public fine-tuning whose export
transformers loads with its head."""

from __future__ import annotations

import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

from tolerance import assert_close, model_terms

QUICK = [["--help"], ["data", "path", "sample"], ["data", "list"], ["data", "path"]]
# jattn models list|path read the recipes (jattn.artefacts): numpy, no JAX
MODELS = [["models", "list"], ["models", "path"]]


@pytest.mark.parametrize("argv, allowed", [(a, ()) for a in QUICK] + [(a, ("numpy",)) for a in MODELS],
                         ids=[" ".join(a) for a in QUICK + MODELS])
def test_quick_commands_import_no_jax(argv, allowed, tmp_path):
    """``jattn --help``, ``jattn data ...`` and ``jattn models list|path`` parse and answer without
    importing JAX (the README nests ``$(jattn data path sample)`` in other commands): only the
    chosen command's module is imported, and JAX only for a command that computes."""
    code = ("import sys, jattn.cli\nsys.argv = ['jattn'] + sys.argv[1:]\ntry:\n    jattn.cli.main()\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('imported:', sorted(m for m in ('jax', 'flax', 'transformers', 'numpy') if m in sys.modules))")
    env = {**os.environ, "JATTN_DATA": str(tmp_path), "JATTN_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"imported: {sorted(allowed)}", out.stdout


def test_help_says_what_a_user_does():
    """The top-level help is the user's text; the developer notes on signal handling stay in the code."""
    from jattn.cli import build_parser

    text = build_parser([])[0].format_help()
    for internal in ("_xla_gc_callback", "os._exit", "unraisablehook", "GRACE_S", "_dropped"):
        assert internal not in text, internal
    assert "jattn COMMAND --help" in text


def test_a_command_module_is_imported_only_when_run(monkeypatch):
    """``main`` builds the arguments of the command it runs alone; the listing still names every command."""
    import importlib

    import jattn.cli

    parser, modules = jattn.cli.build_parser(["data"])
    assert set(modules) == {"data"} and set(parser.commands) == set(jattn.cli.COMMANDS)
    assert parser.commands["demo"].format_help().count("--model") == 0  # not built
    assert jattn.cli.docstring("demo") == importlib.import_module("jattn.cli.demo").__doc__


INDUCTION = Path(__file__).resolve().parents[1] / "checkpoints" / "induction-attn-only"


@pytest.fixture(scope="module")
def induction():
    """The committed 2-layer attention-only GPT-2 (jattn) and the same folder in transformers."""
    from transformers import GPT2LMHeadModel

    import jattn

    return jattn.load(INDUCTION), GPT2LMHeadModel.from_pretrained(str(INDUCTION), attn_implementation="eager").eval()


def test_causal_lm_logits_by_default_equal_hf(induction):
    """``forward(batch).logits`` is the next-token logits (b, n, V) without asking, equal to HF's
    ``GPT2LMHeadModel(...).logits`` on the real tokens of a padded batch; ``heads=()`` skips them."""
    import torch

    model, hf = induction
    rng = np.random.default_rng(0)
    ids = rng.integers(1, model.config.vocab_size, (3, 12)).astype(np.int32)  # (b, n)
    mask = np.ones_like(ids)
    mask[1, 9:] = mask[2, 5:] = 0  # right padding
    out = model.forward({"input_ids": ids, "attention_mask": mask}, internals=None)
    assert out.logits.shape == (3, 12, model.config.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).logits.numpy()
    real = mask.astype(bool)
    assert_close(np.asarray(out.logits)[real], ref[real], terms=model_terms(model.config, ids.shape[1]))
    assert model.forward({"input_ids": ids, "attention_mask": mask}, internals=None, heads=()).logits is None


def test_one_generate_for_both_model_kinds(induction, tmp_path):
    """``generate`` takes ``max_new_tokens`` (or HF's ``max_length``, with HF's meaning) on a causal
    LM and on a translation model and returns a ``Generation`` from both, attentions when asked."""
    import jattn
    from jattn.models.seq2seq import Generation
    from tiny_seq2seq import padded_batch, save_tiny

    lm = induction[0]
    prompt = np.asarray([[0, 5, 9, 11]], np.int32)  # (1, s)
    gen = lm.generate(prompt, max_new_tokens=3)
    assert isinstance(gen, Generation) and gen.attentions is None and gen.sequences.shape[1] <= 4 + 3
    np.testing.assert_array_equal(gen.sequences, lm.generate(prompt, max_length=4 + 3).sequences)  # HF: prompt + new
    assert gen.attention_mask.shape == gen.sequences.shape
    gen = lm.generate(prompt, max_new_tokens=3, return_attentions=True)
    assert gen.attentions.shape[-2:] == (gen.sequences.shape[1],) * 2

    mt = jattn.load(save_tiny(tmp_path / "marian", "marian"), use_cache=False)
    batch = padded_batch(mt.config, b=2)
    gen = mt.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=5)
    assert isinstance(gen, Generation) and gen.cross_attentions is None and gen.sequences.shape[1] <= 1 + 5
    np.testing.assert_array_equal(gen.sequences, mt.generate(batch["input_ids"], batch["attention_mask"],
                                                             max_length=1 + 5).sequences)  # HF: start token + new
    gen = mt.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens=5, return_attentions=True)
    assert gen.cross_attentions.shape[-2] == gen.sequences.shape[1] - 1
    for model, ids in ((lm, prompt), (mt, batch["input_ids"])):
        with pytest.raises(ValueError, match="give one of them"):
            model.generate(ids, max_new_tokens=3, max_length=6)


def test_public_finetune_exports_a_classifier_transformers_loads_with_its_head(tmp_path):
    """``jattn.finetune`` (public, the ``jattn finetune`` path) on a handful of labelled examples:
    the export loads in transformers as ``BertForSequenceClassification`` with its 3 labels' names,
    and gives jattn's logits; a task and own data together are refused before anything runs."""
    import torch
    from transformers import AutoModelForSequenceClassification

    import jattn
    from jattn.training.finetune import FinetuneConfig
    from tiny_encoders import save_tiny

    assert "finetune" in jattn.__all__
    base = jattn.load(save_tiny(tmp_path / "base", "bert-2x4"), use_cache=False)
    data = [("a good film", 0), ("a bad film", 1), ("a film", 2), ("good", 0), ("bad", 1), ("so so", 2)]
    with pytest.raises(ValueError, match="task= and train=/dev= both given"):
        jattn.finetune(base, data, data, out=tmp_path / "x", task="sst2")
    names = ["positive", "negative", "neutral"]
    jattn.finetune(base, data, data, out=tmp_path / "clf", label_names=names, progress=False,
                   fc=FinetuneConfig(epochs=1, batch_size=4, max_length=16))
    hf = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "clf")).eval()
    assert type(hf).__name__ == "BertForSequenceClassification" and hf.config.num_labels == 3
    assert hf.config.id2label == dict(enumerate(names))
    ours = jattn.load(tmp_path / "clf", use_cache=False)
    batch = ours.tokenize([t for t, _ in data]).inputs()
    with torch.no_grad():
        ref = hf(**{k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}).logits.numpy()
    got = np.asarray(ours.classify(batch))
    assert_close(got, ref, terms=model_terms(ours.config, batch["input_ids"].shape[1]))
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))


def test_finetune_refuses_a_family_exported_without_a_classifier_before_training(tmp_path):
    """A family whose export carries no classification head (ELECTRA's exporter writes
    ElectraModel) is refused by name before any training, and nothing is written at ``out``."""
    import jattn
    from encoder_family_parity import new_hf, save_random

    shape = dict(vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48,
                 max_position_embeddings=48, embedding_size=16)
    model = jattn.load(save_random(new_hf("ElectraConfig", "ElectraModel", shape, 0), tmp_path / "electra", 0),
                       tokenizer=False, use_cache=False)
    data = [("a", 0), ("b", 1)]
    with pytest.raises(ValueError, match="exported as ElectraModel, without a classification head"):
        jattn.finetune(model, data, data, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
