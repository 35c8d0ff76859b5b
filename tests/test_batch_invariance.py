"""Batch invariance of every registered analysis (property-based): an example contributes the
same additive statistics whatever else is in its batch and however much padding it gets.

For a corpus drawn by hypothesis (examples of different lengths, in any order, one long enough to
pad the others to a larger bucket), the runner's totals with every example alone in its batch
(batch size 1: padded only to its own bucket) equal the totals with the examples batched together
(padded to the longest, filler rows added), within the float32 bound of tests/tolerance.py: the
totals are the same per-example terms, summed in another order and computed on other shapes.
Corpus indices are the same in both runs, so methods that draw per example (seeded by index) draw
the same. The batched runs take the chunked layer (fixture ``chunked_layers``). Every registered
method runs, on a tiny model of each family it reads (a BERT, a Marian, a GPT-2); methods that
need labels get them from CoNLL-U words (the bundled UD sample), GAP-style labels where asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import jattn
from jattn.analyses import registry
from jattn.io.readers import read_conllu
from jattn.runner import run_corpus
from tiny_encoders import save_tiny
from tiny_lm import save_tiny_gpt2
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module", autouse=True)
def chunked_layers():
    """Layers on chunks of ≤ 16 token rows (``jattn.nn.engine.chunk_rows``): a batched run splits
    its 2-4 rows into chunks of one or two examples, an example alone runs in one chunk, so each
    property also compares every analysis on the chunked layer with the whole one."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JATTN_CHUNK_ROWS", "16")
        yield


SAMPLE = Path(jattn.__file__).parent / "io" / "sample" / "en_ewt-ud-dev.sample.conllu"
NEEDS_DATA = {"coref"}  # GAP labels: tests/test_coref.py covers it on GAP data


@pytest.fixture(scope="module")
def encoder_setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inv")
    model = jattn.load(save_tiny(folder / "model", "bert-2x4", head="mlm", max_positions=128), use_cache=False)
    ranks = folder / "ranks.txt"
    ranks.write_text("".join(f"{r} {1000 - r} {i}\n" for r, i in enumerate([1996, 4937, 1012, 1010, 1997], 1)))
    # 11 short examples (one 16-token bucket) and a long one that pads its batch mates: each run compiles
    # two lengths (each of 2-5 lengths across the buckets cost a compile of every method)
    examples = list(read_conllu(SAMPLE))
    pool = [ex for ex in examples if 3 <= len(ex.a) <= 10][:11] + [next(ex for ex in examples if len(ex.a) >= 30)]
    relations = tuple(sorted({r for ex in pool for r in ex.labels["relations"]}))
    options = registry.Options(rank_file=ranks, relations=relations, min_count=1)
    built = {n: e.factory(model, options) for n, e in registry.entries().items() if n not in NEEDS_DATA}
    families = {n: getattr(m, "families", ("encoder",)) for n, m in built.items()}
    return model, pool, [m for n, m in built.items() if "encoder" in families[n]], families


@pytest.fixture(scope="module")
def seq2seq_setup(tiny_marian, encoder_setup):
    from tiny_seq2seq import sentences

    entries, families = registry.entries(), encoder_setup[3]
    methods = [m for m in (entries[n].factory(tiny_marian, registry.Options()) for n in families
                           # word level: encoders
                           if "seq2seq" in families[n]) if getattr(m, "level", "token") == "token"]
    pool = sorted(zip(sentences(10, seed=4), sentences(10, seed=5)), key=lambda p: len(p[0]))
    return tiny_marian, pool, methods


@pytest.fixture(scope="module")
def decoder_setup(tmp_path_factory, encoder_setup):
    """A tiny GPT-2 whose tokenizer is trained on the pool's sentences, cut to 3-8 words (one
    length bucket: fewer compiles); the token-level methods that read causal LMs."""
    pool = [" ".join(ex.a[: 3 + i // 2]) for i, ex in enumerate(encoder_setup[1])]
    model = jattn.load(save_tiny_gpt2(tmp_path_factory.mktemp("lm"), pool, vocab_size=2000), use_cache=False)
    entries, families = registry.entries(), encoder_setup[3]
    methods = [m for m in (entries[n].factory(model, registry.Options()) for n in families
                           if "decoder" in families[n]) if getattr(m, "level", "token") == "token"]
    return model, pool, methods


def compare(model, corpus, methods, batch_size: int, n: int):
    length = min(128, model.config.max_length)
    alone = run_corpus(model, corpus, methods, batch_size=1, max_length=length, progress=False)
    together = run_corpus(model, corpus, methods, batch_size=batch_size, max_length=length, progress=False)
    c = model.config
    terms = (model_terms(c, n, n) if hasattr(c, "d_model") else model_terms(c, n)) + len(corpus) * n * n
    for name, totals in alone.totals.items():
        for key, want in totals.items():
            want = np.asarray(want, np.float64)
            scale = float(np.abs(want).max()) or 1.0
            # the backward of gradient methods doubles the chain; 8 ulps per float32 sum as tolerance.py says
            assert_close(together.totals[name][key], want, terms=2 * terms, scale=scale, err_msg=f"{name}.{key}")


corpora = st.lists(st.integers(0, 11), min_size=2, max_size=4, unique=True).flatmap(
    lambda picks: st.tuples(st.permutations(picks), st.sampled_from([2, 4])))


# each draw compiles every method anew
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(corpora)
def test_every_encoder_analysis_is_batch_invariant(encoder_setup, drawn):
    model, pool, methods, _ = encoder_setup
    picks, batch_size = drawn
    corpus = [pool[i] for i in picks] + [pool[-1]]  # the longest example pads its batch mates
    compare(model, corpus, methods, batch_size, n=64)


# each draw compiles every method anew
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(corpora)
def test_every_translation_analysis_is_batch_invariant(seq2seq_setup, drawn):
    model, pool, methods = seq2seq_setup
    picks, batch_size = drawn
    corpus = [pool[i % len(pool)] for i in picks] + [pool[-1]]
    compare(model, corpus, methods, batch_size, n=32)


# each draw compiles every method anew
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(corpora)
def test_every_causal_lm_analysis_is_batch_invariant(decoder_setup, drawn):
    model, pool, methods = decoder_setup
    picks, batch_size = drawn
    corpus = [pool[i] for i in picks] + [pool[-1]]
    compare(model, corpus, methods, batch_size, n=64)


def test_the_registry_is_covered(encoder_setup, seq2seq_setup, decoder_setup):
    """Every registered method is in one of the three properties, or tested on real data elsewhere."""
    covered = ({m.name for m in encoder_setup[2]} | {m.name for m in seq2seq_setup[2]}
               | {m.name for m in decoder_setup[2]} | NEEDS_DATA)
    assert covered == set(registry.entries())
