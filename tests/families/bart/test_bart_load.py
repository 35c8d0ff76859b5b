"""Loading BART folders with their byte-level BPE tokenizer (tokenizer.json, or vocab.json +
merges.txt), the export HF -> jattn -> HF (state dict and config.json that
``BartForConditionalGeneration`` loads), and the pruned export (``jattn.sweeps.pruning``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import jattn
import seq2seq_family_parity as parity
from jattn.nn.config import ConfigError
from tiny_bart import hf_model, save_tiny

TOKENIZER_ONLY = ("tokenizer.json", "tokenizer_config.json")
BPE_ONLY = ("vocab.json", "merges.txt")
TEXTS = ["un homme court sur la plage.", "the dog, a ball"]

folder, model = parity.one_case(save_tiny, "bart")


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
    parity.check_state_dict_round_trip(folder, model)


def test_export_loads_in_hf(folder, model, tmp_path):
    """Also the BPE files (vocab.json + merges.txt) copied beside tokenizer.json."""
    parity.check_export(folder, model, tmp_path / "export", hf_model, BPE_ONLY + TOKENIZER_ONLY)


KEEP = {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]],
        "cross": [[0, 1], [1, 0], [1, 1]]}  # the "bart" case: encoder 2 x 4 heads, decoder 3 x 2


# > 30 s: the same export runs fast in the mBART folder and on Marian (tests/test_pruning.py)
@pytest.mark.slow
def test_pruned_export_equals_masked(model, tmp_path):
    """Also: the pruned folder's weights are smaller than the source's."""
    pruned = parity.check_pruned_export(model, KEEP, tmp_path / "pruned")
    assert (pruned / "model.safetensors").stat().st_size < (Path(model.source) / "model.safetensors").stat().st_size
