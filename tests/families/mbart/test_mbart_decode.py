"""mBART greedy and beam search vs Hugging Face ``generate``: mBART-cc25 style (decoding starts
from the target's language code) and mBART-50 style (starts from </s>, the target's code forced
first, from the generation config or per call); forced </s> at max_length; the KV-cache step vs
teacher forcing; decoding under head gates."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_mbart import CONFIGS, EOS_BOOST, FORCED_BOS, TGT_LANG, hf_model, save_tiny


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param, seed=1,
                       eos_boost=EOS_BOOST[request.param])
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder)


HERE = "tests/families/mbart/test_mbart_decode.py::"


def fifty_slow(twin: str):
    """``tiny``'s cases with mbart-50 slow: mBART decodes both through the same pre-LN cache and search
    (jattn.nn.decode); mbart-50 differs in sizes, activation, embedding scale and the forced first code (from the
    generation config, as BART's and M2M100's default cases force theirs fast), which its teacher-forced parity
    test checks fast."""
    return pytest.mark.parametrize("tiny", ["mbart-cc25", pytest.param("mbart-50", marks=pytest.mark.slow(twin=twin))],
                                   indirect=True)


# length penalties are the beam search's own arithmetic (jattn.nn.decode), the same for every family: fast on BART
# (test_bart_decode.py); greedy and beam search with this family's cache stay in the default suite
SLOW_PENALTIES = [pytest.param(4, 0.6, 10, marks=pytest.mark.slow), pytest.param(4, 2.0, 14, marks=pytest.mark.slow)]


@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (4, 1.0, 12), *SLOW_PENALTIES])
# mbart-50: the same search and cache as mbart-cc25 (fifty_slow)
@fifty_slow(HERE + "test_generate_matches_hf[mbart-cc25-1-1.0-12]")
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    kind, model, hf = tiny
    parity.check_generate(model, hf, num_beams, length_penalty, max_length, FORCED_BOS[kind])
    if kind == "mbart-cc25":  # decoding starts from the target's language code
        assert model.config.decoder_start_token_id == model.tokenizer.convert_tokens_to_ids(TGT_LANG)


# mbart-50: the same forced code per call as mbart-cc25 (fifty_slow)
@fifty_slow(HERE + "test_language_code_forced_per_call[mbart-cc25]")
def test_language_code_forced_per_call(tiny):
    """Another target language (fr_XX) forced first for one call, as ``generate(forced_bos_token_id=)``."""
    _, model, hf = tiny
    parity.check_generate_language(model, hf, model.tokenizer.convert_tokens_to_ids("fr_XX"))


# the same pre-norm decoder step (Seq2SeqLayer, the decoder's final norm) and KV cache, with gates and disabled heads
# in all three types, as T5's (which adds its relative bias); mBART's learned positions offset by the step are
# checked by its greedy and beam generate tests
@pytest.mark.slow(twin="tests/families/t5/test_t5_decode.py::test_cached_steps_match_teacher_forcing")
def test_cached_steps_match_teacher_forcing(tiny):
    _, model, _ = tiny
    parity.check_cached_steps(model)


# cross-attention gates in the cached decoder step of the same pre-norm seq2seq code as T5's (jattn.nn.decode, the
# same for every family); mBART's own greedy and beam search run in test_generate_matches_hf
@pytest.mark.slow(twin="tests/families/t5/test_t5_decode.py::test_generate_with_interventions_equals_gated_hf")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, model, hf = tiny
    parity.check_generate_gated(model, hf)
