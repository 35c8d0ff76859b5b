"""Loading mBART folders with their tokenizer (tokenizer.json; both language-code layouts), the
export HF -> jattn -> HF (state dict and config.json that ``MBartForConditionalGeneration``
loads), and the pruned export (``jattn.sweeps.pruning``)."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_mbart import CONFIGS, SRC_LANG, TGT_LANG, hf_model, save_tiny

TEXTS = ["un homme court sur la plage.", "the dog, a ball"]
# the "mbart-cc25" case: encoder 2 x 4 heads, decoder 3 x 2
KEEP = {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]], "cross": [[0, 1], [1, 0], [1, 1]]}

folder, model = parity.one_case(save_tiny, "mbart-cc25")


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_load_with_tokenizer(tmp_path, kind):
    """The folder's tokenizer tokenizes as HF's AutoTokenizer, the language codes where the
    layout puts them: cc25 ``X </s> lang``, mBART-50 ``lang X </s>``; translate() runs."""
    from transformers import AutoTokenizer

    here = save_tiny(tmp_path / kind, kind)
    model = jattn.load(here, use_cache=False)
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


def test_missing_tokenizer_refused(folder, tmp_path):
    parity.check_missing_tokenizer(folder, tmp_path / "none", "tokenizer.json or sentencepiece.bpe.model")


def test_state_dict_round_trip(folder, model):
    parity.check_state_dict_round_trip(folder, model)


def test_export_loads_in_hf(folder, model, tmp_path):
    parity.check_export(folder, model, tmp_path / "export", hf_model)


def test_export_refuses_other_families(model):
    import dataclasses

    with pytest.raises(ValueError, match="only mBART configs"):
        model.family.to_hf_config(dataclasses.replace(model.config, model_type="bart"))


def test_pruned_export_equals_masked(model, tmp_path):
    parity.check_pruned_export(model, KEEP, tmp_path / "pruned")
