"""BART's quirks (``jattn/families/bart``): its byte-level BPE tokenizer (tokenizer.json, or vocab.json +
merges.txt), refused when missing or foreign. The rest of BART's checks (the analyses that run on the Marian
model among them): the conformance table."""

from __future__ import annotations

import json
import shutil

import pytest

import jattn
from family_pairs import tiny_fixture
from jattn.nn.config import ConfigError

TOKENIZER_ONLY = ("tokenizer.json", "tokenizer_config.json")
BPE_ONLY = ("vocab.json", "merges.txt")
TEXTS = ["un homme court sur la plage.", "the dog, a ball"]
tiny = tiny_fixture("bart", "bart")


@pytest.fixture(scope="module")
def folder(tiny):
    return tiny[1]


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
