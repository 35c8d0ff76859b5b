"""``generate(..., return_attentions=True)`` (issue #59, item 8): the attention weights the ids were
generated with, against HF ``generate(output_attentions=True, return_dict_in_generate=True)`` on a
tiny random Marian, whose decoder start token is its pad id, and against HF's teacher-forced
forward under the same decoder mask."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.models.seq2seq import Generation
from jattn.nn import decode
from tiny_seq2seq import hf_model, padded_batch, save_tiny
from tolerance import assert_close, model_terms

MAX_LENGTH = 12


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("marian"), "marian", seed=1)
    return jattn.load(folder, use_cache=False), hf_model(folder, "marian")


@pytest.fixture(scope="module")
def generated(tiny):
    model, hf = tiny
    import torch

    batch = padded_batch(model.config, seed=2, b=5)
    ours = model.generate(batch["input_ids"], batch["attention_mask"], max_length=MAX_LENGTH, return_attentions=True)
    with torch.no_grad():
        ref = hf.generate(
            input_ids=torch.tensor(batch["input_ids"]),
            attention_mask=torch.tensor(batch["attention_mask"]),
            do_sample=False,
            num_beams=1,
            max_length=MAX_LENGTH,
            output_attentions=True,
            return_dict_in_generate=True,
        )
    return batch, ours, ref


def test_ids_equal_hf_and_one_sequence_ends_early(tiny, generated):
    model, _ = tiny
    _, ours, ref = generated
    assert isinstance(ours, Generation)
    np.testing.assert_array_equal(ours.sequences, ref.sequences.numpy())
    batch = generated[0]
    np.testing.assert_array_equal(ours.sequences, model.generate(batch["input_ids"], batch["attention_mask"],
                                                                 max_length=MAX_LENGTH).sequences)
    mask = ours.decoder_attention_mask
    assert mask[:, 0].all(), "the start token (Marian's pad id) is kept"
    assert (ours.sequences[:, 0] == model.config.pad_token_id).all()
    assert (mask == 0).any(axis=1).any() and mask.all(axis=1).any(), "one row ends early, another runs on"


def test_attentions_equal_hf_generate(tiny, generated):
    """Encoder maps whole; for each step t, layer l: HF's decoder row (b, H, 1, t + 1) and cross row
    (b, H, 1, s) equal row t of ours, on the rows up to each sequence's EOS (after it HF feeds pad
    tokens that attend to the padding before them, which our mask hides)."""
    model, _ = tiny
    batch, ours, ref = generated
    c = model.config
    s, n = batch["input_ids"].shape[1], ours.sequences.shape[1]
    terms = model_terms(c, s, n)
    enc = np.stack([a.numpy() for a in ref.encoder_attentions])  # (L_enc, b, H, s, s)
    real = batch["attention_mask"].astype(bool)  # (b, s): padded source queries are not compared
    assert_close(np.where(real[None, :, None, :, None], ours.encoder_attentions, 0),
                 np.where(real[None, :, None, :, None], enc, 0), terms=terms)
    assert len(ref.decoder_attentions) == n - 1 == ours.decoder_attentions.shape[3]
    dec, cross = np.asarray(ours.decoder_attentions), np.asarray(ours.cross_attentions)
    rows = ours.decoder_attention_mask.astype(bool)  # (b, n - 1) rows up to each EOS
    for t in range(n - 1):
        want_self = np.stack([a.numpy()[:, :, 0] for a in ref.decoder_attentions[t]])  # (L, b, H, t + 1)
        want_cross = np.stack([a.numpy()[:, :, 0] for a in ref.cross_attentions[t]])  # (L, b, H, s)
        on = rows[:, t]
        assert_close(dec[:, on][:, :, :, t, : t + 1], want_self[:, on], terms=terms, err_msg=f"decoder step {t}")
        assert_close(dec[:, :, :, t, t + 1:], 0.0, err_msg="causal")
        assert_close(cross[:, on][:, :, :, t], want_cross[:, on], terms=terms, err_msg=f"cross step {t}")
    assert (~rows).any()  # rows after an EOS exist, and were left out above


def test_attentions_equal_hf_teacher_forced(tiny, generated):
    """Every row (those after an EOS too) equals HF's forward over the generated ids with the mask."""
    import torch

    model, hf = tiny
    batch, ours, _ = generated
    dec = ours.sequences[:, :-1]
    mask = decode.generated_mask(model.config, dec)
    np.testing.assert_array_equal(mask, ours.decoder_attention_mask)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(batch["input_ids"]), attention_mask=torch.tensor(batch["attention_mask"]),
                 decoder_input_ids=torch.tensor(dec), decoder_attention_mask=torch.tensor(mask), output_attentions=True)
    terms = model_terms(model.config, batch["input_ids"].shape[1], dec.shape[1])
    real = batch["attention_mask"].astype(bool)[None, :, None, :, None]  # padded source queries: not compared
    assert_close(np.where(real, ours.encoder_attentions, 0),
                 np.where(real, np.stack([a.numpy() for a in ref.encoder_attentions]), 0), terms=terms)
    assert_close(ours.decoder_attentions, np.stack([a.numpy() for a in ref.decoder_attentions]), terms=terms)
    assert_close(ours.cross_attentions, np.stack([a.numpy() for a in ref.cross_attentions]), terms=terms)
    forced = model.forward({**batch, "decoder_input_ids": dec, "decoder_attention_mask": mask})
    np.testing.assert_array_equal(forced.cross_attentions, ours.cross_attentions)


def test_generated_mask():
    """Kept: the start token whatever its id (here the EOS id, as BART's), every token up to and
    including the first EOS after it; masked: what follows."""
    from types import SimpleNamespace

    config = SimpleNamespace(eos_token_id=2)
    ids = np.array([[2, 5, 6, 2, 1, 1], [2, 5, 6, 7, 8, 9], [2, 2, 1, 1, 1, 1]])
    want = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(decode.generated_mask(config, ids), want)
    np.testing.assert_array_equal(np.asarray(decode.generated_mask(config, jnp.asarray(ids))), want)
