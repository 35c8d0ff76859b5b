"""M2M100 / NLLB greedy and beam search vs Hugging Face ``generate``: decoding starts from </s>,
the target's language code forced first (from the generation config, or per call as
``generate(forced_bos_token_id=)``), the sinusoid position of each step counted from the padding;
the KV-cache step vs teacher forcing; decoding under head gates."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_m2m_100 import CONFIGS, EOS_BOOST, FORCED_BOS, OTHER_LANG, hf_model, save_tiny


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param, seed=1,
                       eos_boost=EOS_BOOST[request.param])
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder)


HERE = "tests/families/m2m_100/test_m2m_100_decode.py::"
T5 = "tests/families/t5/test_t5_decode.py::"


def gelu_slow(twin: str):
    """``tiny``'s cases with m2m_100-gelu slow: M2M100 decodes both through the same pre-LN cache, sinusoid
    positions and search (jattn.nn.decode); m2m_100-gelu differs in sizes, activation, embedding scale and no
    forced first code, which its teacher-forced parity test and mBART-cc25's decoding check fast."""
    return pytest.mark.parametrize("tiny", ["m2m_100", pytest.param("m2m_100-gelu", marks=pytest.mark.slow(twin=twin))],
                                   indirect=True)


# length penalties are the beam search's own arithmetic (jattn.nn.decode), the same for every family: fast on BART
# (test_bart_decode.py); greedy and beam search with this family's cache stay in the default suite
SLOW_PENALTIES = [pytest.param(4, 0.6, 10, marks=pytest.mark.slow), pytest.param(4, 2.0, 14, marks=pytest.mark.slow)]


@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (4, 1.0, 12), *SLOW_PENALTIES])
# m2m_100-gelu: the same search and cache as m2m_100 (gelu_slow)
@gelu_slow(HERE + "test_generate_matches_hf[m2m_100-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, model, hf = tiny
    parity.check_generate(model, hf, num_beams, length_penalty, max_length, FORCED_BOS[kind])


# a code forced per call is decode.generate's forced_bos_token_id, the same for every family (M2M100's own decoding
# runs in test_generate_matches_hf): fast twin mBART's
@pytest.mark.slow(twin="tests/families/mbart/test_mbart_decode.py::test_language_code_forced_per_call")
def test_language_code_forced_per_call(tiny):
    _, model, hf = tiny
    parity.check_generate_language(model, hf, model.tokenizer.convert_tokens_to_ids(OTHER_LANG))


# the same pre-norm decoder step (Seq2SeqLayer, the decoder's final norm) and KV cache, with gates and disabled heads
# in all three types, as T5's (which adds its relative bias); M2M100's sinusoid positions offset by the step are
# checked by its greedy and beam generate tests
@pytest.mark.slow(twin=T5 + "test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    _, model, _ = tiny
    parity.check_cached_steps(model)


# cross-attention gates in the cached decoder step of the same pre-norm seq2seq code as T5's (jattn.nn.decode, the
# same for every family); M2M100's own greedy and beam search run in test_generate_matches_hf
@pytest.mark.slow(twin=T5 + "test_generate_with_interventions_equals_gated_hf")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, model, hf = tiny
    parity.check_generate_gated(model, hf)
