"""mBART greedy and beam search vs Hugging Face ``generate``: mBART-cc25 style (decoding starts
from the target's language code) and mBART-50 style (starts from </s>, the target's code forced
first, from the generation config or per call); forced </s> at max_length; the KV-cache step vs
teacher forcing; decoding under head gates."""

from __future__ import annotations

import pytest

import seq2seq_family_generate as generation
import seq2seq_family_parity as parity
import tiny_mbart
from tiny_mbart import FORCED_BOS, TGT_LANG

tiny = parity.tiny_cases(tiny_mbart, decoding=True)
HERE = "tests/families/mbart/test_mbart_decode.py::"


def fifty_slow(twin: str):
    """``tiny``'s cases with mbart-50 slow: mBART decodes both through the same pre-LN cache and search
    (jattn.nn.decode); mbart-50 differs in sizes, activation, embedding scale and the forced first code (from the
    generation config, as BART's and M2M100's default cases force theirs fast), which its teacher-forced parity
    test checks fast."""
    return parity.slow_case("mbart-cc25", "mbart-50", twin)


# the other length penalties run fast on BART (generation.SLOW_PENALTIES)
@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (4, 1.0, 12), *generation.SLOW_PENALTIES])
# mbart-50: the same search and cache as mbart-cc25 (fifty_slow)
@fifty_slow(HERE + "test_generate_matches_hf[mbart-cc25-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, _, model, hf = tiny
    generation.check_generate(model, hf, num_beams, length_penalty, max_length, FORCED_BOS[kind])
    if kind == "mbart-cc25":  # decoding starts from the target's language code
        assert model.config.decoder_start_token_id == model.tokenizer.convert_tokens_to_ids(TGT_LANG)


# mbart-50: the same forced code per call as mbart-cc25 (fifty_slow)
@fifty_slow(HERE + "test_language_code_forced_per_call[mbart-cc25]")
def test_language_code_forced_per_call(tiny):
    """Another target language (fr_XX) forced first for one call, as ``generate(forced_bos_token_id=)``."""
    _, _, model, hf = tiny
    generation.check_generate_language(model, hf, model.tokenizer.convert_tokens_to_ids("fr_XX"))


# the same pre-norm decoder step (Seq2SeqLayer, the decoder's final norm) and KV cache, with gates and disabled heads
# in all three types, as T5's (which adds its relative bias); mBART's learned positions offset by the step are
# checked by its greedy and beam generate tests
@pytest.mark.slow(twin="tests/families/t5/test_t5_decode.py::test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    _, _, model, _ = tiny
    generation.check_cached_steps(model)


# cross-attention gates in the cached decoder step of the same pre-norm seq2seq code as T5's (jattn.nn.decode, the
# same for every family); mBART's own greedy and beam search run in test_generate_matches_hf
@pytest.mark.slow(twin="tests/families/t5/test_t5_decode.py::test_generate_with_interventions_equals_gated_hf")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, _, model, hf = tiny
    generation.check_generate_gated(model, hf)
