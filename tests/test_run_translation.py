"""The runner on a translation model: (source, target) pairs teacher-forced, statistics per
attention type equal to a per-example numpy loop over HF PyTorch's unpadded attention maps."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import jattn.runner.protocol
import seq2seq_family_analyses as analyses
from jattn.runner.protocol import Method
from jattn.analyses.weights import ClassAttention
from jattn.runner import run_corpus
from seq2seq_family_analyses import corpus_terms
from tiny_seq2seq import sentences
from tolerance import assert_close


@pytest.fixture(scope="module")
def marian(tiny_marian):
    return tiny_marian


def pairs(n=9):
    return list(zip(sentences(n, 1), sentences(n, 2)))


def test_translation_statistics_equal_per_example_loops(marian, tiny_marian_folder):
    """The corpus runner's statistics against per-example loops over HF's attention maps
    (``seq2seq_family_analyses.check_statistics``); causal self-attention has no key i + 1."""
    from tiny_seq2seq import hf_model

    got = analyses.check_statistics(marian, hf_model(tiny_marian_folder, "marian"), pairs())
    np.testing.assert_allclose(got["decoder_attn_next"].value, 0.0, atol=1e-7)  # causal: no key i + 1
    assert "cross_attn_prev" not in got


def test_batch_size_invariance(marian):
    data = pairs(11)
    a = run_corpus(marian, data, [ClassAttention()], batch_size=2, max_length=32, progress=False)
    b = run_corpus(marian, data, [ClassAttention()], batch_size=8, max_length=32, progress=False)
    assert a.meta["segments"] == b.meta["segments"] == 11
    for k in a.statistics:  # other batches: other shapes, other float32 orders
        assert_close(a.statistics[k].value, b.statistics[k].value, terms=corpus_terms(marian, len(data)), err_msg=k)


def test_mismatched_methods_and_inputs_are_clear_errors(marian):
    analyses.check_encoder_only_method_refused(marian, pairs())
    with pytest.raises(ValueError, match="word-level"):
        run_corpus(marian, pairs(), [ClassAttention("word")], max_length=32, progress=False)
    with pytest.raises(ValueError, match=r"\(source, target\) pairs"):
        run_corpus(marian, sentences(3), [ClassAttention()], max_length=32, progress=False)
    with pytest.raises(ValueError, match="corpus is empty"):  # an empty shard: zero totals of the step's shapes
        run_corpus(marian, [("", "")], [ClassAttention()], max_length=32, progress=False)
    from jattn.analyses.registry import make_methods

    with pytest.raises(ValueError, match="grad reads an encoder.*translation model"):
        make_methods(marian, ["grad"])


def test_gold_alignment_links_reach_the_methods(marian, tmp_path):
    """read(..., 'parallel', gold=) labels each pair with its (source word × target word) links;
    the runner pads them into the translation batch for prepare."""
    from jattn.io.readers import Corpus

    (tmp_path / "p.txt").write_text("un homme court ||| a man runs\ndeux chiens ||| two dogs play\n")
    (tmp_path / "p.gold").write_text("1-1 2-2 3p3\n1-1 2-2 2p3\n")
    corpus = Corpus(tmp_path / "p.txt", "parallel", gold=tmp_path / "p.gold")
    first = next(iter(corpus)).labels["links"]
    np.testing.assert_array_equal(first, [[2, 0, 0], [0, 2, 0], [0, 0, 1]])
    seen = {}

    class Links(Method):
        name, families = "links", ("seq2seq",)

        def prepare(self, batch):
            for r, i in enumerate(batch.example):
                if i >= 0:
                    seen[int(i)] = batch.labels["links"][r]
            return {}

        def reduce(self, ctx):
            return {"n": (ctx.batch["labels"]["links"] == 2).sum()}  # sure links, on the devices

        def finalize(self, totals, meta):
            return {"sure": jattn.runner.protocol.Statistic(totals["n"], "() sure links")}

    got = run_corpus(marian, corpus, [Links()], batch_size=2, max_length=32, progress=False)
    assert got.statistics["encoder_sure"].value == 4 and (seen[0][:3, :3] == first).all()
    assert (seen[0][3:] == -1).all() and (seen[1][:2, :3] == [[2, 0, 0], [0, 2, 1]]).all()
    (tmp_path / "bad.gold").write_text("1-1 4-4\n1-1\n")
    with pytest.raises(ValueError, match="outside"):
        list(Corpus(tmp_path / "p.txt", "parallel", gold=tmp_path / "bad.gold"))
