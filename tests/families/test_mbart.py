"""mBART's quirks (``jattn/families/mbart``): both language-code layouts of its tokenizer (mBART-cc25: ``X </s>
lang``, decoding from the target's code; mBART-50: ``lang X </s>``) and mbart-large-cc25's config.json without
``decoder_start_token_id``. The rest of mBART's checks: the conformance table."""

from __future__ import annotations

import json


import jattn
from family_pairs import tiny_fixture
from tiny_mbart import SRC_LANG, TGT_LANG

TEXTS = ["un homme court sur la plage.", "the dog, a ball"]
tiny = tiny_fixture("mbart")


def test_load_with_tokenizer(tiny):
    """The folder's tokenizer tokenizes as HF's AutoTokenizer, the language codes where the
    layout puts them: cc25 ``X </s> lang``, mBART-50 ``lang X </s>``; translate() runs."""
    from transformers import AutoTokenizer

    kind, here, model, _ = tiny
    hf_tok = AutoTokenizer.from_pretrained(str(here))
    c, tok = model.config, model.tokenizer
    src, tgt = tok.convert_tokens_to_ids(SRC_LANG), tok.convert_tokens_to_ids(TGT_LANG)
    for text in TEXTS:
        ids, target = tok(text)["input_ids"], tok(text_target=text)["input_ids"]
        assert ids == hf_tok(text)["input_ids"]
        if kind == "mbart-cc25":
            assert ids[-2:] == [c.eos_token_id, src] and target[-2:] == [c.eos_token_id, tgt]
        else:
            assert (ids[0], ids[-1], target[0], target[-1]) == (src, c.eos_token_id, tgt, c.eos_token_id)
    assert tok.pad_token_id == c.pad_token_id
    assert c.decoder_start_token_id == (tgt if kind == "mbart-cc25" else c.eos_token_id)
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_decoder_start_from_bos(tiny):
    """mbart-large-cc25 has no decoder_start_token_id: HF's generate starts from bos_token_id."""
    cfg = json.loads((tiny[1] / "config.json").read_text())
    spec = jattn.families.get("mbart")
    assert spec.config_from_hf(dict(cfg, decoder_start_token_id=None)).decoder_start_token_id == cfg["bos_token_id"]
