"""M2M100 / NLLB greedy and beam search vs Hugging Face ``generate``: decoding starts from </s>,
the target's language code forced first (from the generation config, or per call as
``generate(forced_bos_token_id=)``), the sinusoid position of each step counted from the padding;
the KV-cache step vs teacher forcing; decoding under head gates."""

from __future__ import annotations

import pytest

import seq2seq_family_generate as generation
import seq2seq_family_parity as parity
import tiny_m2m_100
from tiny_m2m_100 import FORCED_BOS, OTHER_LANG

tiny = parity.tiny_cases(tiny_m2m_100, decoding=True)
HERE = "tests/families/m2m_100/test_m2m_100_decode.py::"
T5 = "tests/families/t5/test_t5_decode.py::"


def gelu_slow(twin: str):
    """``tiny``'s cases with m2m_100-gelu slow: M2M100 decodes both through the same pre-LN cache, sinusoid
    positions and search (jattn.nn.decode); m2m_100-gelu differs in sizes, activation, embedding scale and no
    forced first code, which its teacher-forced parity test and mBART-cc25's decoding check fast."""
    return parity.slow_case("m2m_100", "m2m_100-gelu", twin)


# the other length penalties run fast on BART (generation.SLOW_PENALTIES)
@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (4, 1.0, 12), *generation.SLOW_PENALTIES])
# m2m_100-gelu: the same search and cache as m2m_100 (gelu_slow)
@gelu_slow(HERE + "test_generate_matches_hf[m2m_100-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, _, model, hf = tiny
    generation.check_generate(model, hf, num_beams, length_penalty, max_length, FORCED_BOS[kind])


# a code forced per call is decode.generate's forced_bos_token_id, the same for every family (M2M100's own decoding
# runs in test_generate_matches_hf): fast twin mBART's
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_decode.py::test_language_code_forced_per_call")
def test_language_code_forced_per_call(tiny):
    _, _, model, hf = tiny
    generation.check_generate_language(model, hf, model.tokenizer.convert_tokens_to_ids(OTHER_LANG))


# the same pre-norm decoder step (Seq2SeqLayer, the decoder's final norm) and KV cache, with gates and disabled heads
# in all three types, as T5's (which adds its relative bias); M2M100's sinusoid positions offset by the step are
# checked by its greedy and beam generate tests
@pytest.mark.slow(twin=T5 + "test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    _, _, model, _ = tiny
    generation.check_cached_steps(model)


# cross-attention gates in the cached decoder step of the same pre-norm seq2seq code as T5's (jattn.nn.decode, the
# same for every family); M2M100's own greedy and beam search run in test_generate_matches_hf
@pytest.mark.slow(twin=T5 + "test_generate_with_interventions_equals_gated_hf")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, _, model, hf = tiny
    generation.check_generate_gated(model, hf)
