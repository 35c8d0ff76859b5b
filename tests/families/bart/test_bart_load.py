"""Loading BART folders with their byte-level BPE tokenizer (tokenizer.json, or vocab.json +
merges.txt), the export HF -> jattn -> HF (state dict and config.json that
``BartForConditionalGeneration`` loads), and the pruned export (``jattn.sweeps.pruning``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from flax import nnx

import jattn
from jattn import Interventions
from jattn.io.hf import read_state_dict
from jattn.nn.config import ConfigError
from tiny_bart import hf_model, save_tiny
from tiny_seq2seq import padded_batch
from tolerance import assert_close, model_terms

TOKENIZER_ONLY = ("tokenizer.json", "tokenizer_config.json")
BPE_ONLY = ("vocab.json", "merges.txt")
TEXTS = ["un homme court sur la plage.", "the dog, a ball"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("bart") / "model", "bart")


@pytest.fixture(scope="module")
def model(folder):
    return jattn.load(folder, use_cache=False)


def copy_without(folder, target, drop):
    shutil.copytree(folder, target)
    for name in drop:
        (target / name).unlink()
    return target


@pytest.mark.parametrize("drop", [(), BPE_ONLY, TOKENIZER_ONLY], ids=["all", "tokenizer.json", "vocab+merges"])
def test_load_with_tokenizer(folder, tmp_path, drop):
    """Either tokenizer form loads and tokenizes as HF's AutoTokenizer: <s> … </s>, on both sides."""
    from transformers import AutoTokenizer

    here = copy_without(folder, tmp_path / "m", drop)
    model = jattn.load(here, use_cache=False)
    hf_tok = AutoTokenizer.from_pretrained(str(here))
    c = model.config
    for text in TEXTS:
        ids = model.tokenizer(text)["input_ids"]
        assert ids == hf_tok(text)["input_ids"] and ids[0] == model.tokenizer.bos_token_id and ids[-1] == c.eos_token_id
        assert model.tokenizer(text_target=text)["input_ids"] == ids
    assert (model.tokenizer.pad_token_id, c.decoder_start_token_id) == (c.pad_token_id, c.eos_token_id)
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_missing_or_foreign_tokenizer_refused(folder, tmp_path):
    bare = copy_without(folder, tmp_path / "none", BPE_ONLY + TOKENIZER_ONLY)
    with pytest.raises(ConfigError, match="tokenizer.json or vocab.json \\+ merges.txt"):
        jattn.load(bare, use_cache=False)
    wrong = tmp_path / "wrong"
    shutil.copytree(folder, wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps(dict(cfg, pad_token_id=3)))
    with pytest.raises(ConfigError, match="pad_token_id 1 but config.json says 3"):
        jattn.load(wrong, use_cache=False)


def test_state_dict_round_trip(folder, model):
    """HF -> jattn -> HF returns every tensor HF saved, bit for bit."""
    spec = jattn.families.get("bart")
    state = read_state_dict(folder)
    back = spec.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config)
    assert set(back) == set(state)
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)


def test_export_loads_in_hf(folder, model, tmp_path):
    """A BART folder written from jattn (to_hf_config + to_hf_state_dict + the tokenizer files) is
    read by BartForConditionalGeneration and by jattn.load, with the same logits as the source."""
    from safetensors.numpy import save_file

    spec = jattn.families.get("bart")
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(spec.to_hf_config(model.config)))
    save_file(spec.to_hf_state_dict(nnx.to_pure_dict(model.params), model.config),
              str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in BPE_ONLY + TOKENIZER_ONLY + ("generation_config.json",):
        shutil.copy(folder / name, out / name)
    batch = padded_batch(model.config, seed=7)
    T = model_terms(model.config, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])
    with torch.no_grad():
        ref = hf_model(out)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False).logits.numpy()
    assert_close(model.forward(batch).logits, ref, terms=T)
    again = jattn.load(out, use_cache=False)
    assert again.config == model.config
    np.testing.assert_array_equal(again.forward(batch).logits, model.forward(batch).logits)


KEEP = {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]],
        "cross": [[0, 1], [1, 0], [1, 1]]}  # the "bart" case: encoder 2 x 4 heads, decoder 3 x 2


# > 30 s: the same export runs fast in the mBART folder and on Marian (tests/test_pruning.py)
@pytest.mark.slow
def test_pruned_export_equals_masked(model, tmp_path):
    """export_pruned writes each layer's kept heads only; jattn.load of it gives the masked
    model's outputs and, with fewer decoder slots, the masked model's greedy and beam ids."""
    from jattn.sweeps.pruning import check_keep, export_pruned

    keep = {k: np.array(v, bool) for k, v in KEEP.items()}
    pruned_folder = export_pruned(model, keep, tmp_path / "pruned")
    assert (pruned_folder / "model.safetensors").stat().st_size < (Path(model.source) / "model.safetensors").stat().st_size
    loaded = jattn.load(pruned_folder, use_cache=False)
    full = check_keep(model.config, keep)
    assert [p.counts for p in loaded.config.pruned] == [tuple(full[k].sum(1)) for k in ("encoder", "decoder", "cross")]
    masked = {k: Interventions(head_gates=m.astype(np.float32)) for k, m in full.items()}
    batch = padded_batch(model.config, seed=2)
    ref, out = model.forward(batch, masked, internals=None), loaded.forward(batch, internals=None)
    T = model_terms(model.config, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])
    assert_close(out.logits, ref.logits, terms=T)  # fewer heads: other shapes, other float32 orders
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for beams in (1, 4):
        np.testing.assert_array_equal(loaded.generate(ids, mask, num_beams=beams, max_length=8),
                                      model.generate(ids, mask, num_beams=beams, max_length=8, interventions=masked))
