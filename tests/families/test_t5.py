"""T5 / mT5's quirks (``jattn/families/t5``): the layouts (T5 v1.0: ReLU, tied and scaled output; T5 v1.1:
gated GELU, untied ``lm_head``; mT5), H·d_kv ≠ d_model, the relative-position buckets (both directions) against
HF's ``_relative_position_bucket``, the pre-RMSNorm internals, the relative bias acting on α alone, the output
projection's tying, the tokenizer, head removal refused and the rest of the public API per attention type. The
rest of T5's checks: the conformance table."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flax import nnx

import jattn
import seq2seq_family_parity as parity
from family_pairs import tiny_fixture
from tiny_seq2seq import padded_batch
from tiny_t5 import CONFIGS, UNTIED, hf_model, save_tiny
from tolerance import assert_close

tiny = tiny_fixture("t5", "t5-v1.1", "t5-v1.0", "mt5")
HERE = "tests/families/test_t5.py::"
TEXTS = ["un homme court sur la plage.", "the dog, a ball"]


def v11_only(test: str):
    """``tiny``'s cases with t5-v1.0 and mt5 slow, their fast twin the same test on t5-v1.1: all three run the same
    pre-RMSNorm layers with the relative bias and the same interventions; t5-v1.0 differs in its ReLU FFN and tied,
    scaled output, mt5 in sizes and model_type only, which their teacher-forced parity tests check fast."""
    slow = pytest.mark.slow(twin=f"{HERE}{test}[t5-v1.1]")
    return pytest.mark.parametrize("tiny", ["t5-v1.1", pytest.param("t5-v1.0", marks=slow),
                                            pytest.param("mt5", marks=slow)], indirect=True)


def test_config_layout(tiny):
    kind, _, model, hf = tiny
    c = model.config
    assert (c.norm_position, c.final_norm, c.norm, c.positions, c.linear_bias, c.score_scale) == ("pre", True, "rms",
                                                                                                 "none", False, 1.0)
    assert c.encoder_head_dim == CONFIGS[kind]["d_kv"] != c.d_model // c.encoder_heads  # H·d_kv ≠ D
    assert c.gated_ffn == (CONFIGS[kind]["feed_forward_proj"] == "gated-gelu")
    assert c.tie_output == (not UNTIED[kind]) and c.shared_embeddings and not c.final_logits_bias
    scaled = kind == "t5-v1.0"  # HF 5: T5 scales unless tie_word_embeddings is false; mT5 never
    assert c.output_scale == (c.d_model ** -0.5 if scaled else 1.0)
    assert getattr(hf.config, "scale_decoder_outputs", False) == scaled
    assert c.decoder_start_token_id == c.pad_token_id == 0 and c.decoder_mask == "all"


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_hf(bidirectional):
    """``jattn.nn.relative.relative_position_bucket`` = HF's ``T5Attention._relative_position_bucket``
    for signed distances in [−300, 300), both directions, several bucket counts and distances."""
    import jax.numpy as jnp
    from transformers.models.t5.modeling_t5 import T5Attention

    from jattn.nn.relative import relative_position_bucket

    rel = np.arange(-300, 300)
    for buckets, distance in ((32, 128), (8, 20), (6, 10), (16, 7), (10, 7)):
        ref = T5Attention._relative_position_bucket(torch.tensor(rel), bidirectional=bidirectional,
                                                    num_buckets=buckets, max_distance=distance).numpy()
        got = np.asarray(relative_position_bucket(jnp.asarray(rel), buckets, distance, bidirectional))
        np.testing.assert_array_equal(got, ref, err_msg=f"{buckets} buckets, max distance {distance}")


# t5-v1.0, mt5: the same T5 layers and code as t5-v1.1 (v11_only)
@v11_only("test_relative_bias_changes_only_alpha")
def test_relative_bias_changes_only_alpha(tiny):
    """With the stacks' relative bias tables zeroed, α is softmax(q·k) alone: it differs from the
    model's, the values do not (the bias enters the scores only)."""
    _, _, model, _ = tiny
    batch = padded_batch(model.config, b=2)
    params = nnx.to_pure_dict(model.params)
    for side in ("encoder", "decoder"):
        params[side]["relative_bias"] = np.zeros_like(params[side]["relative_bias"])
    from jattn.nn import seq2seq

    _, flat = seq2seq.forward(params, model.config, {k: np.asarray(v) for k, v in batch.items()})
    base = model.forward(batch).internals
    assert_close(flat["encoder"]["values"][0], base["encoder"]["values"][0], terms=model.config.d_model)
    assert np.abs(np.asarray(flat["encoder"]["weights"]) - np.asarray(base["encoder"]["weights"])).max() > 1e-3


def test_tied_config_with_own_lm_head_refused(tmp_path):
    """A checkpoint whose ``lm_head.weight`` differs from ``shared.weight`` under a config that ties
    them (HF then unties them silently) is refused, naming the config field to set."""
    from jattn.io.hf import ConversionError

    folder = save_tiny(tmp_path / "m", "t5-v1.1")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, tie_word_embeddings=True)))
    with pytest.raises(ConversionError, match="tie_word_embeddings"):
        jattn.load(folder, use_cache=False)


def test_untied_config_without_lm_head_reads_shared(tmp_path):
    """``tie_word_embeddings: false`` with no ``lm_head.weight`` in the checkpoint: HF ties the output
    projection to the shared table, so does jattn (the logits equal HF's)."""
    from safetensors.numpy import load_file, save_file

    folder = save_tiny(tmp_path / "m", "mt5")
    state = load_file(str(folder / "model.safetensors"))
    state.pop("lm_head.weight")
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model = jattn.load(folder, use_cache=False)
    batch = padded_batch(model.config, seed=4)
    parity.compare(model.forward(batch), parity.hf_forward(hf_model(folder, "mt5"), batch), batch,
                   parity.terms(model, batch))


# t5-v1.0, mt5: the same T5Tokenizer files and translate() as t5-v1.1 (v11_only)
@v11_only("test_load_with_tokenizer")
def test_load_with_tokenizer(tiny):
    """The folder's tokenizer tokenizes as HF's AutoTokenizer (``X </s>``); translate() runs."""
    from transformers import AutoTokenizer

    _, folder, model, _ = tiny
    hf_tok = AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        ids = model.tokenizer(text)["input_ids"]
        assert ids == hf_tok(text)["input_ids"] and ids[-1] == model.config.eos_token_id
    out = model.translate(TEXTS, num_beams=2, max_length=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_pruning_refused(tiny, tmp_path):
    """Physically removing heads is refused (the relative bias's head columns would not follow the
    heads): in memory and as an export, naming the fix (gates)."""
    import numpy as np

    from jattn.sweeps.pruning import export_pruned, remove_heads

    _, _, model, _ = tiny
    c = model.config
    keep = {"encoder": np.ones((c.encoder_layers, c.encoder_heads), bool),
            "decoder": np.ones((c.decoder_layers, c.decoder_heads), bool),
            "cross": np.ones((c.decoder_layers, c.decoder_heads), bool)}
    keep["encoder"][0, 0] = False
    with pytest.raises(ValueError, match="relative-position bias.*head_gates"):
        remove_heads(model, keep)
    with pytest.raises(ValueError, match="relative-position bias.*head_gates"):
        export_pruned(model, keep, tmp_path / "pruned")
