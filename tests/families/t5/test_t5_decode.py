"""T5 / mT5 greedy and beam search vs Hugging Face ``generate`` (decoding from the pad id, the
decoder's one-sided relative bias of each new query on every cached key), the KV-cache step vs
teacher forcing, decoding under head gates."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_generate as generation
from tiny_t5 import CONFIGS, EOS_BOOST, hf_model, save_tiny


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    # mT5 decodes through T5 v1.1's code path (gated GELU, untied head; only sizes differ): fast twin [t5-v1.1]
    if request.param == "mt5" and not request.config.getoption("--runslow"):
        pytest.skip("mT5 decodes as T5 v1.1 does, run on t5-v1.1; mT5 too: --runslow")
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param, seed=1,
                       eos_boost=EOS_BOOST[request.param])
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder, request.param)


HERE = "tests/families/t5/test_t5_decode.py::"


def v11_only(twin: str):
    """``tiny``'s cases with t5-v1.0 (and mt5, skipped by default anyway) slow: T5 decodes every layout through the
    same pre-RMSNorm step, relative bias over the cache and search; t5-v1.0's ReLU FFN and tied, scaled output run
    in its greedy decoding (kept fast) and teacher-forced parity test."""
    slow = pytest.mark.slow(twin=twin)
    return pytest.mark.parametrize("tiny", ["mt5", pytest.param("t5-v1.0", marks=slow), "t5-v1.1"], indirect=True)


# length penalties are the beam search's own arithmetic (jattn.nn.decode), the same for every family: fast on BART
# (test_bart_decode.py); greedy and beam search with this family's cache stay in the default suite
SLOW_PENALTIES = [pytest.param(4, 0.6, 10, marks=pytest.mark.slow)]


def searches():
    """(layout, beams, length penalty, max length): every layout's greedy and beam search; beam search on t5-v1.0
    moves the same cache rows as on t5-v1.1 (fast twin [t5-v1.1-4-1.0-12]), greedy stays on both."""
    for kind in sorted(CONFIGS):
        for search in [(1, 1.0, 12), (4, 1.0, 12), *SLOW_PENALTIES]:
            marks, values = (search.marks, search.values) if hasattr(search, "marks") else ((), search)
            if kind == "t5-v1.0" and values == (4, 1.0, 12):
                marks = (pytest.mark.slow(twin=HERE + "test_generate_matches_hf[t5-v1.1-4-1.0-12]"),)
            yield pytest.param(kind, *values, marks=marks)


# t5-v1.0's beam search: the same search and cache as t5-v1.1's (searches)
@pytest.mark.parametrize("tiny,num_beams,length_penalty,max_length", list(searches()), indirect=["tiny"])
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    _, model, hf = tiny
    generation.check_generate(model, hf, num_beams, length_penalty, max_length, False)


# t5-v1.0: the same decoder step, relative bias and cache as t5-v1.1 (v11_only)
@v11_only(HERE + "test_cached_steps_match_teacher_forcing[t5-v1.1]")
def test_cached_steps_match_teacher_forcing(tiny):
    _, model, _ = tiny
    generation.check_cached_steps(model)


# t5-v1.0: the same gated decoder step as t5-v1.1 (v11_only)
@v11_only(HERE + "test_generate_with_interventions_equals_gated_hf[t5-v1.1]")
def test_generate_with_interventions_equals_gated_hf(tiny):
    _, model, hf = tiny
    generation.check_generate_gated(model, hf)
