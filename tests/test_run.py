"""The streaming runner: batch-size and padding invariance, errors, flat memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jattn
from analysis_helpers import SENTENCES, WORDS, tiny_bert
from jattn.io.readers import as_example
from jattn.io.tokenize import SequenceTooLongError
from jattn.analyses.distance import JSDistance
from jattn.analyses.grad import AttentionGradient
from jattn.analyses.weights import ClassAttention, Entropy
from jattn.runner import run_corpus
from jattn.runner.batcher import batches as _batches, pad_segments as _pad_batch, tokenize_segments as _tokenize_rows
from jattn.runner.loop import make_step
from tolerance import ULPS, assert_close, model_terms


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return jattn.load(tiny_bert(tmp_path_factory.mktemp("tiny"), mlm=True, layers=2, heads=2), use_cache=False)


def methods(model):
    return [ClassAttention(), Entropy(), JSDistance(), AttentionGradient(model)]


def terms(model, tokens: int) -> int:
    """Float32 reductions behind a statistic: the forward and backward (AttentionGradient) on up to
    64 keys, then the sums over the corpus's ``tokens`` rows (tests/tolerance.py)."""
    return 2 * model_terms(model.config, 64) + tokens


def assert_same(model, a, b):
    """Statistics of one corpus run in other batches: other shapes, so float32 sums in another order."""
    assert a.statistics.keys() == b.statistics.keys()
    n = terms(model, a.meta["tokens"])
    for k in a.statistics:
        x, y = a.statistics[k].value, b.statistics[k].value
        if k == "js_mds":  # an embedding is defined up to rotation/reflection: compare its distances
            x, y = (np.linalg.norm(v[:, None] - v[None], axis=-1) for v in (x, y))
        assert_close(x, y, terms=n, ulps=2 * ULPS if k == "js_mds" else ULPS, err_msg=k)  # MDS's gain: ≤ 2


def test_batch_size_invariance(model):
    corpus = SENTENCES * 3  # 21 examples: several buckets and partial batches
    ref = run_corpus(model, corpus, methods(model), batch_size=2, progress=False)
    for bs in (7,):
        got = run_corpus(model, corpus, methods(model), batch_size=bs, chunk_batches=2, progress=False)
        assert_same(model, got, ref)
        assert got.meta["segments"] == ref.meta["segments"] == len(corpus)


def test_the_partial_batch_holds_the_shortest_rows(model):
    corpus = [" ".join(["word"] * k) for k in range(11, 0, -1)]  # example i has 11 - i words
    got = list(_batches(model, corpus, 4, 64, False, False, (0, 1), 100, []))
    assert [n for _, n in got] == [3, 4, 4]
    rows = [batch.example[:n].tolist() for batch, n in got]
    assert rows[0] == [10, 9, 8]  # the three shortest, so the filler row is short too
    assert sorted(i for row in rows for i in row) == list(range(11))
    assert got[0][0].input_ids.shape[1] <= got[1][0].input_ids.shape[1] <= got[2][0].input_ids.shape[1]


def test_padding_examples_and_columns_change_nothing(model):
    ms = methods(model)
    step, data, replicated = make_step(model, ms, jax.make_mesh((1,), ("data",)))
    rows = _tokenize_rows(model, [(i, as_example(x, i)) for i, x in enumerate(SENTENCES)], 128, False, False)
    longest = max(len(r[1]["input_ids"]) for r in rows)

    def totals(batch_size, length):
        host = _pad_batch(model, rows, batch_size, length, False)
        features = {m.name: m.prepare(host) for m in ms}
        arrays = {k: v for k, v in host.arrays().items() if v is not None}
        return jax.tree.map(np.asarray, step(model.params, arrays, features))

    tight = totals(len(rows), longest)
    padded = totals(len(rows) + 5, 64)  # 5 all-padding examples, 64 - longest padding columns
    for name in tight:
        for key in tight[name]:  # padding changes the compiled shapes, hence the float32 summation order
            assert_close(padded[name][key], tight[name][key], terms=terms(model, longest * len(rows)),
                         err_msg=f"{name}/{key}")


def test_layerwise_reduction_inside_the_scan_equals_reduction_of_the_stack(model):
    """A ``layerwise`` method reduced per layer inside the encoder's scan gives what its
    ``reduce`` gives on the stacked (L, b, ...) internals (token and word level)."""

    class Stacked:  # the same method, reduced after the scan
        layerwise = False

        def __init__(self, method):
            self.method, self.name = method, method.name

        def __getattr__(self, attr):
            return getattr(self.method, attr)

    corpus = WORDS * 3
    inside = [ClassAttention(), Entropy(), ClassAttention("word"), Entropy("word")]
    assert all(m.layerwise for m in inside)
    a = run_corpus(model, corpus, inside, batch_size=4, progress=False)
    b = run_corpus(model, corpus, [Stacked(m) for m in inside], batch_size=4, progress=False)
    assert_same(model, a, b)


def test_too_long_is_an_error_naming_the_example_unless_truncate(model):
    long = "word " * 80
    with pytest.raises(
        SequenceTooLongError, match="example 1: 82 tokens, more than max_length=64.*truncate=True.*skip_too_long=True"
    ):
        run_corpus(model, ["short one", long], [ClassAttention()], batch_size=2, max_length=64, progress=False)
    res = run_corpus(model, ["short one", long], [ClassAttention()], batch_size=2, max_length=64, truncate=True,
                     progress=False)
    assert res.meta["tokens"] == 4 + 64


def test_bad_arguments_are_clear_errors(model):
    with pytest.raises(ValueError, match="not a multiple"):
        run_corpus(model, SENTENCES, [ClassAttention()], batch_size=3, devices=jax.devices() * 2, progress=False)
    with pytest.raises(ValueError, match="corpus is empty"):
        run_corpus(model, [], [ClassAttention()], progress=False)
    with pytest.raises(ValueError, match="pre-split into words"):
        run_corpus(model, SENTENCES, [ClassAttention("word")], progress=False)


MEMORY_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    import jattn
    from jattn.analyses.distance import JSDistance
    from jattn.analyses.weights import ClassAttention, Entropy
    from jattn.runner import run_corpus
    model = jattn.load(sys.argv[1], use_cache=False)
    base = ["The cat sat on the mat, again.", "A second, somewhat longer sentence about nothing at all."]
    corpus = (base[i % 2] + " x" * (i % 7) for i in range(int(sys.argv[2])))  # a generator: streamed
    run_corpus(model, corpus, [ClassAttention(), Entropy(), JSDistance()], batch_size=32, progress=False)
    print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
""")


@pytest.mark.slow  # ~1-4 min: 11k examples in two processes; the benchmark measures the same on MiniLM
def test_peak_memory_is_flat_in_corpus_size(tmp_path):
    layers, heads, n = 4, 8, 1024  # n: enough for several full tokenization chunks (allocator warm)
    folder = tiny_bert(tmp_path / "m", layers=layers, heads=heads)

    def peak_kb(size):
        out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(folder), str(size)], capture_output=True,
                             text=True, check=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
        return json.loads(out.stdout.strip().splitlines()[-1])

    small, large = peak_kb(n), peak_kb(10 * n)
    kept_maps_kb = 10 * n * layers * heads * 16 * 16 * 4 / 1024  # keeping even unpadded 16-token maps
    assert kept_maps_kb > 100_000  # so the bound below catches a runner that keeps maps
    assert large - small < 20_000, (small, large)  # 10x the corpus: < 20 MB more peak RSS


def test_labels_and_per_example_records(model, tmp_path):
    """Labels reach prepare padded per word; records come back per example, cut to the
    example's units, equal to the word-level maps of the per-sentence path."""
    import dataclasses

    import jax.numpy as jnp

    from jattn.io.readers import Example
    from jattn.runner.protocol import Method
    from jattn.analyses.weights import word_level
    from jattn.analyses.word_attention import word_attention
    from jattn.io.records import read_records

    seen = {}

    @dataclasses.dataclass(frozen=True)
    class WordMaps(Method):
        name = "word-maps"
        level = "word"
        record_axes = {"maps": (2, 3)}  # (L, H, u, u): cut both unit axes

        def prepare(self, batch):
            for r, i in enumerate(batch.example):
                if i >= 0:
                    seen[int(i)] = (batch.labels["tag"][r].copy(), batch.labels["id"][r], batch.label_lists["pos"][r])
            return {}

        def reduce(self, ctx):
            return {"n": (ctx.batch["example"] >= 0).sum()}

        def records(self, ctx):
            maps = word_level(ctx.internals["weights"], ctx.batch["unit_ids"])  # (L, b, H, u, u)
            return {"maps": jnp.moveaxis(maps, 1, 0), "first": ctx.batch["input_ids"][:, 0]}  # (b, L, H, u, u), (b,)

        def finalize(self, totals, meta):
            return {}

    examples = [Example(w, None, f"s{i}", {"tag": np.arange(len(w), dtype=np.int32) + 10 * i, "id": i,
                                           "pos": ["X"] * len(w)}) for i, w in enumerate(WORDS)]
    with pytest.raises(ValueError, match="records"):
        run_corpus(model, examples, [WordMaps()], progress=False)
    run_corpus(model, examples, [WordMaps()], batch_size=3, records=tmp_path / "rec", records_shard_size=3,
               progress=False)
    for i, w in enumerate(WORDS):
        tag, index, pos = seen[i]
        assert (tag[:len(w)] == np.arange(len(w)) + 10 * i).all() and (tag[len(w):] == -1).all()
        assert index == i and pos == ["X"] * len(w)
    got = {r["example"]: r for r in read_records(tmp_path / "rec" / "word-maps")}
    assert len(list((tmp_path / "rec" / "word-maps").glob("shard_*.npz"))) == 2
    for r in word_attention(model, WORDS, batch_size=2):
        assert_close(got[r.index]["maps"], r.maps, terms=model_terms(model.config, 64))  # other batches, padding
        assert got[r.index]["first"] == r.input_ids[0]


def test_too_long_and_unmappable_examples_are_skipped_with_a_count(model):
    from jattn.io.readers import Example

    long = ["word"] * 200
    examples = [Example(WORDS[0], labels={"x": np.zeros(len(WORDS[0]), np.int32)}),
                Example(long, labels={"x": np.zeros(200, np.int32)}),
                Example(["ok", "\u200b"], labels={"x": np.zeros(2, np.int32)})]  # a zero-width space: no subword
    with pytest.raises(SequenceTooLongError, match="skip_too_long=True"):
        run_corpus(model, examples, [ClassAttention("word")], max_length=64, progress=False)
    got = run_corpus(model, examples, [ClassAttention("word")], max_length=64, skip_too_long=True, progress=False)
    assert (got.meta["segments"], got.meta["skipped_too_long"], got.meta["skipped_unmappable"]) == (1, 1, 1)
