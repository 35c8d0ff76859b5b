"""BART greedy and beam search vs Hugging Face ``generate`` (decoder start </s>, forced <s> first
where the generation config asks, forced </s> at max_length); the KV-cache step vs teacher forcing."""

from __future__ import annotations

import pytest

import seq2seq_family_generate as generation
import seq2seq_family_parity as parity
import tiny_bart
from tiny_bart import FORCED_BOS

tiny = parity.tiny_cases(tiny_bart, decoding=True)
HERE = "tests/families/bart/test_bart_decode.py::"


def scaled_slow(twin: str):
    """``tiny``'s cases with bart-scaled slow: BART decodes both through the same post-LN cache and search
    (jattn.nn.decode); bart-scaled differs in sizes, activation, embedding scale and no forced <s>, which the
    teacher-forced parity tests (test_bart_parity.py) and the mBART / M2M100 cases check fast."""
    return parity.slow_case("bart", "bart-scaled", twin)


# a second length penalty is the same beam arithmetic (jattn.nn.decode) as 0.6: fast twin [bart-4-0.6-10]
@pytest.mark.parametrize("num_beams,length_penalty,max_length", [
    (1, 1.0, 12), (4, 1.0, 12), (4, 0.6, 10),
    pytest.param(4, 2.0, 14, marks=pytest.mark.slow(twin=HERE + "test_generate_matches_hf[bart-4-0.6-10]"))])
# bart-scaled: fast twin bart's same search (scaled_slow)
@scaled_slow(HERE + "test_generate_matches_hf[bart-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    """EOS boosted (EOS_BOOST): at max_length 12 hypotheses end at different lengths."""
    kind, _, model, hf = tiny
    generation.check_generate(model, hf, num_beams, length_penalty, max_length, FORCED_BOS[kind])


# the same post-LN decoder step and KV cache, with gates and disabled heads in all three types, as Marian's and FSMT's
# (BART differs in embeddings only: its learned positions offset by the step are checked by the generate tests)
@pytest.mark.slow(twin="tests/test_decode.py::test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    _, _, model, _ = tiny
    generation.check_cached_steps(model)


# bart-scaled: fast twin bart's same gated search (scaled_slow)
@scaled_slow(HERE + "test_generate_with_interventions_equals_gated_hf[bart]")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, _, model, hf = tiny
    generation.check_generate_gated(model, hf)
