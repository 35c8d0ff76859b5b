"""Loading M2M100 folders with either tokenizer: NLLB's (tokenizer.json) and M2M-100's
(vocab.json + sentencepiece.bpe.model, ``__xx__`` language codes); the export HF -> jattn -> HF
(state dict and config.json that ``M2M100ForConditionalGeneration`` loads), and the pruned export
(``jattn.sweeps.pruning``)."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_m2m_100 import SRC_LANG, TGT_LANG, hf_model, save_tiny

TEXTS = ["un homme court sur la plage.", "the dog, a ball"]
# the "m2m_100" case: encoder 2 x 4 heads, decoder 3 x 2
KEEP = {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]], "cross": [[0, 1], [1, 0], [1, 1]]}

folder, model = parity.one_case(save_tiny, "m2m_100")


@pytest.mark.parametrize("tokenizer,codes", [("nllb", (SRC_LANG, TGT_LANG)), ("m2m100", ("__de__", "__en__"))])
def test_load_with_tokenizer(tmp_path, tokenizer, codes):
    """The folder's tokenizer tokenizes as HF's AutoTokenizer, ``lang X </s>`` on both sides; the
    model's logits on a tokenized pair equal HF's; translate() runs."""
    import torch
    from transformers import AutoTokenizer

    here = save_tiny(tmp_path / tokenizer, "m2m_100", tokenizer=tokenizer)
    model = jattn.load(here, use_cache=False)
    hf_tok = AutoTokenizer.from_pretrained(str(here))
    c, tok = model.config, model.tokenizer
    src, tgt = (tok.convert_tokens_to_ids(code) for code in codes)
    for text in TEXTS:
        ids, target = tok(text)["input_ids"], tok(text_target=text)["input_ids"]
        assert ids == hf_tok(text)["input_ids"]
        assert (ids[0], ids[-1], target[0], target[-1]) == (src, c.eos_token_id, tgt, c.eos_token_id)
    assert tok.pad_token_id == c.pad_token_id
    assert (c.decoder_start_token_id, c.forced_bos_token_id) == (c.eos_token_id, tgt)
    x = np.asarray([tok(TEXTS[0])["input_ids"]])
    y = np.asarray([[c.decoder_start_token_id] + tok(text_target=TEXTS[1])["input_ids"][:-1]])
    batch = {"input_ids": x, "attention_mask": np.ones_like(x), "decoder_input_ids": y,
             "decoder_attention_mask": np.ones_like(y)}
    with torch.no_grad():
        ref = hf_model(here)(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False).logits.numpy()
    from tolerance import assert_close

    assert_close(model.forward(batch).logits, ref, terms=parity.terms(model, batch))
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_missing_tokenizer_refused(folder, tmp_path):
    parity.check_missing_tokenizer(folder, tmp_path / "none", "tokenizer.json or sentencepiece.bpe.model")


def test_state_dict_round_trip(folder, model):
    parity.check_state_dict_round_trip(folder, model)


def test_export_loads_in_hf(folder, model, tmp_path):
    """Also: the exported config.json keeps the LayerDrop rates read (0.0 here)."""
    parity.check_export(folder, model, tmp_path / "export", hf_model)
    cfg = model.family.to_hf_config(model.config)
    assert (cfg["encoder_layerdrop"], cfg["decoder_layerdrop"]) == (0.0, 0.0)


# head removal is jattn.sweeps.pruning's, the export this family's (test_export_loads_in_hf): fast twin mBART's
@pytest.mark.slow
def test_pruned_export_equals_masked(model, tmp_path):
    parity.check_pruned_export(model, KEEP, tmp_path / "pruned")
