"""T5 / mT5 greedy and beam search vs Hugging Face ``generate`` (decoding from the pad id, the
decoder's one-sided relative bias of each new query on every cached key), the KV-cache step vs
teacher forcing, decoding under head gates."""

from __future__ import annotations

import pytest

import jattn
import seq2seq_family_parity as parity
from tiny_t5 import CONFIGS, EOS_BOOST, hf_model, save_tiny


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    # mT5 decodes through T5 v1.1's code path (gated GELU, untied head; only sizes differ): fast twin [t5-v1.1]
    if request.param == "mt5" and not request.config.getoption("--runslow"):
        pytest.skip("mT5 decodes as T5 v1.1 does, run on t5-v1.1; mT5 too: --runslow")
    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param, seed=1,
                       eos_boost=EOS_BOOST[request.param])
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder, request.param)


# length penalties are the beam search's own arithmetic (jattn.nn.decode), the same for every family: fast on BART
# (test_bart_decode.py); greedy and beam search with this family's cache stay in the default suite
SLOW_PENALTIES = [pytest.param(4, 0.6, 10, marks=pytest.mark.slow)]


@pytest.mark.parametrize("num_beams,length_penalty,max_length", [(1, 1.0, 12), (4, 1.0, 12), *SLOW_PENALTIES])
def test_generate_matches_hf(tiny, num_beams, length_penalty, max_length):
    _, model, hf = tiny
    parity.check_generate(model, hf, num_beams, length_penalty, max_length, False)


def test_cached_steps_match_teacher_forcing(tiny):
    _, model, _ = tiny
    parity.check_cached_steps(model)


def test_generate_with_interventions_equals_gated_hf(tiny):
    _, model, hf = tiny
    parity.check_generate_gated(model, hf)
