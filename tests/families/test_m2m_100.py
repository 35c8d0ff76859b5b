"""M2M100 / NLLB's quirks (``jattn/families/m2m_100``): the sinusoid position table numbered from the padding
(HF's rows, the table older versions saved), M2M100Config's defaults (LayerDrop 0.05 kept, as HF evaluates),
either tokenizer: NLLB's (tokenizer.json) and M2M-100's (vocab.json + sentencepiece.bpe.model, ``__xx__``
codes). The rest of M2M100's checks: the conformance table."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
import seq2seq_family_parity as parity
from family_pairs import tiny_fixture
from jattn.io.hf import read_state_dict
from tiny_m2m_100 import SRC_LANG, TGT_LANG, hf_model, save_tiny
from tolerance import assert_close

TEXTS = ["un homme court sur la plage.", "the dog, a ball"]
tiny = tiny_fixture("m2m_100")


def test_position_table_equals_hf(tiny):
    """jattn's tensor2tensor table holds HF's ``M2M100SinusoidalPositionalEmbedding`` rows (HF's
    table has P + 2 rows, jattn's P + pad + 1), the pad row zero."""
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    from jattn.nn.seq2seq import sinusoid_table

    _, _, model, hf = tiny
    c = model.config
    ref = M2M100SinusoidalPositionalEmbedding(c.max_position_embeddings, c.d_model, c.pad_token_id).weights.numpy()
    ours = sinusoid_table(c)
    n = min(len(ours), len(ref))
    assert_close(ours[:n], ref[:n], terms=c.d_model)
    assert not ours[c.pad_token_id].any()


@pytest.mark.parametrize("width", [64, 512, 768, 1024])
def test_position_table_at_long_positions_is_hfs_to_the_ulp(width):
    """At 1,024 positions (NLLB's) an ulp of ω_i becomes p ulps of the angle: jattn's exp, sin and cos
    are rounded from float64, so an entry differs from HF's only where torch's float32 exp is an ulp
    off (by at most p ulp(ω_i), the float32 product's rounding ulp(p ω_i) and 2 ulp(1) of sin and
    cos), and nine in ten entries are bit-identical (numpy's
    float32 exp gave a third of the ω_i an ulp off: 6e-5 at row 783 of a 768-wide table, a drift
    of jattn's translation importance from HF's that grew with the length)."""
    from types import SimpleNamespace

    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    from jattn.nn.seq2seq import sinusoid_table

    c = SimpleNamespace(d_model=width, max_position_embeddings=1024, pad_token_id=1, positions="tensor2tensor")
    ours = sinusoid_table.__wrapped__(c)  # (P + 2, D)
    ref = M2M100SinusoidalPositionalEmbedding.get_embedding(len(ours), width, 1).numpy()
    half = width // 2
    omega = np.exp(-np.arange(half) * np.log(10000) / (half - 1))  # (D/2,)
    p = np.arange(len(ours))[:, None]  # (P + 2, 1)
    angle = (p * omega).astype(np.float32)  # (P + 2, D/2)
    bound = np.tile(p * np.spacing(omega.astype(np.float32)) + np.spacing(angle), 2) + 2 * np.spacing(np.float32(1))
    assert (np.abs(ours - ref) <= bound).all()
    assert (ours == ref).mean() >= 0.9


def test_defaults(tiny):
    """Fields a config.json may omit take M2M100Config's defaults (scale_embedding, the start token, LayerDrop 0.05,
    kept: evaluation as HF's); what jattn cannot run is refused in the conformance table; NLLB-200's MoE too."""
    from jattn.nn.config import ConfigError

    _, folder, model, _ = tiny
    cfg = json.loads((folder / "config.json").read_text())
    spec = jattn.families.get("m2m_100")
    bare = {k: v for k, v in cfg.items() if k not in ("scale_embedding", "decoder_start_token_id", "attention_dropout")}
    got = spec.config_from_hf(dict(bare, encoder_layerdrop=0.0, decoder_layerdrop=0.0))
    assert (got.scale_embedding, got.decoder_start_token_id, got.attention_dropout) == (True, 2, 0.1)
    assert spec.config_from_hf(cfg).layerdrop == (0.0, 0.0)
    omitted = {k: v for k, v in cfg.items() if "layerdrop" not in k}
    assert spec.config_from_hf(omitted).layerdrop == (0.05, 0.05)  # M2M100Config's default: kept; evaluation as HF
    with pytest.raises(ConfigError, match="unsupported model_type 'nllb-moe'"):  # NLLB-200's mixture of experts
        jattn.families.get("nllb-moe")


def test_conversion_reports_all_problems(tiny):
    """Also: the sinusoid table older versions saved is no problem."""
    _, folder, model, _ = tiny
    state = read_state_dict(folder)
    state["model.encoder.embed_positions.weights"] = np.zeros((66, model.config.d_model))  # saved by older versions
    message = parity.check_conversion_problems("m2m_100", model.config, state, (
        "model.encoder.layer_norm.bias", "model.decoder.layers.0.encoder_attn.k_proj.weight"))
    assert "embed_positions" not in message


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
    assert_close(model.forward(batch).logits, ref, terms=parity.terms(model, batch))
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
