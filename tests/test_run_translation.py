"""The runner on a translation model: (source, target) pairs teacher-forced, statistics per
attention type equal to a per-example numpy loop over HF PyTorch's unpadded attention maps."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
import jattn.runner.protocol
from jattn.analyses.distance import JSDistance
from jattn.runner.protocol import Method
from jattn.analyses.norm_stats import NormClassAttention
from jattn.analyses.weights import ClassAttention, Entropy
from jattn.runner import run_corpus
from tiny_seq2seq import sentences
from tolerance import assert_close, model_terms

KINDS = ("encoder", "decoder", "cross")


@pytest.fixture(scope="module")
def marian(tiny_marian):
    return tiny_marian


def pairs(n=9):
    return list(zip(sentences(n, 1), sentences(n, 2)))


def pair_ids(model, src: str, tgt: str):
    """Source ids, target ids and teacher-forced decoder input of one pair, as the runner builds them."""
    x = np.asarray(model.tokenizer([src])["input_ids"][0])
    y = np.asarray(model.tokenizer(text_target=[tgt])["input_ids"][0])
    return x, y, np.concatenate([[model.config.decoder_start_token_id], y[:-1]])


def corpus_terms(model, pairs: int) -> int:
    """The float32 reductions behind a statistic: the model on ≤ 32 tokens a side, then the sums
    over the corpus's rows (tests/tolerance.py)."""
    return model_terms(model.config, 32, 32) + 32 * pairs


def reference(model, folder, data):
    """Per pair: α of each attention type from HF PyTorch (eager, unpadded; the oracle), the
    per-head norms ‖α f‖ from one padded ``jattn.norms`` call (itself tested against HF),
    and which keys are </s>."""
    import torch

    from tiny_seq2seq import hf_model

    hf = hf_model(folder, "marian")
    ids = [pair_ids(model, a, b) for a, b in data]
    s, t = max(len(x) for x, _, _ in ids), max(len(y) for _, y, _ in ids)
    batch = {k: np.zeros((len(ids), n), np.int64) for k, n in (("input_ids", s), ("attention_mask", s),
                                                              ("decoder_input_ids", t), ("decoder_attention_mask", t))}
    for r, (x, y, dec) in enumerate(ids):
        batch["input_ids"][r, :len(x)], batch["attention_mask"][r, :len(x)] = x, 1
        batch["decoder_input_ids"][r, :len(y)], batch["decoder_attention_mask"][r, :len(y)] = dec, 1
    norms = jattn.norms(model, batch)
    out = []
    for r, (x, y, dec) in enumerate(ids):
        with torch.no_grad():
            o = hf(input_ids=torch.tensor(x[None]), decoder_input_ids=torch.tensor(dec[None]), output_attentions=True)
        maps = {"encoder": o.encoder_attentions, "decoder": o.decoder_attentions, "cross": o.cross_attentions}
        weights = {k: np.stack([a[0].double().numpy() for a in v]) for k, v in maps.items()}  # (L, H, q, k)
        q = {"encoder": len(x), "decoder": len(y), "cross": len(y)}
        k = {"encoder": len(x), "decoder": len(y), "cross": len(x)}
        weighted = {kind: np.asarray(norms[kind]["weighted_norm"], np.float64)[:, r, :, :q[kind], :k[kind]]
                    for kind in KINDS}  # (L, H, q, k)
        eos = {"encoder": x == model.config.eos_token_id, "decoder": dec == model.config.eos_token_id,
               "cross": x == model.config.eos_token_id}
        out.append((weights, weighted, eos))
    return out


def test_translation_statistics_equal_per_example_loops(marian, tiny_marian_folder):
    data = pairs()
    got = run_corpus(marian, data, [ClassAttention(), Entropy(), NormClassAttention(), JSDistance()],
                     batch_size=4, max_length=32, progress=False).statistics
    to_sep = {k: [] for k in KINDS}
    norm_to_sep = {k: [] for k in KINDS}
    entropy = {k: [] for k in KINDS}
    prev = []
    js = {k: 0.0 for k in KINDS}
    for weights, weighted, eos in reference(marian, tiny_marian_folder, data):
        for k in KINDS:
            A = weights[k]  # (L, H, q, k)
            L, H, q, n = A.shape
            to_sep[k].append(A[..., eos[k]].sum(-1).mean(-1))
            norm_to_sep[k].append(weighted[k][..., eos[k]].sum(-1).mean(-1))
            rows = np.zeros((L, H, q))
            for i in range(q):
                m = i + 1 if k == "decoder" else n  # keys row i may attend
                p = 0.9999 * A[..., i, :m] + 0.0001 / m
                rows[..., i] = -(p * np.log(p)).sum(-1)
                # JS between every pair of heads on this row, smoothing 0.999 / 0.001 over the m keys
                s = (0.999 * A[..., i, :m] + 0.001 / m).reshape(L * H, m)
                mid = 0.5 * (s[:, None] + s[None])
                kl = lambda a, b: (a * np.log(a / b)).sum(-1)  # noqa: E731
                js[k] = js[k] + 0.5 * (kl(s[:, None], mid) + kl(s[None], mid))
            entropy[k].append(rows.mean(-1))
        A = weights["decoder"]
        prev.append(np.mean([A[..., i, i - 1] for i in range(1, A.shape[2])], 0))
    terms = corpus_terms(marian, len(data))  # batches of 4 vs HF (and one jattn.norms batch) alone
    for k in KINDS:
        assert_close(got[f"{k}_attn_to_sep"].value, np.mean(to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_norm_to_sep"].value, np.mean(norm_to_sep[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_entropy"].value, np.mean(entropy[k], 0), terms=terms, err_msg=k)
        assert_close(got[f"{k}_js_distance"].value, js[k], terms=terms, err_msg=k)
    assert_close(got["decoder_attn_prev"].value, np.mean(prev, 0), terms=terms)
    np.testing.assert_allclose(got["decoder_attn_next"].value, 0.0, atol=1e-7)  # causal: no key i + 1
    assert "cross_attn_prev" not in got and got["cross_attn_to_sep"].value.shape == (3, 2)
    assert got["encoder_attn_to_sep"].value.shape == (2, 4)


def test_batch_size_invariance(marian):
    data = pairs(11)
    a = run_corpus(marian, data, [ClassAttention()], batch_size=2, max_length=32, progress=False)
    b = run_corpus(marian, data, [ClassAttention()], batch_size=8, max_length=32, progress=False)
    assert a.meta["segments"] == b.meta["segments"] == 11
    for k in a.statistics:  # other batches: other shapes, other float32 orders
        assert_close(a.statistics[k].value, b.statistics[k].value, terms=corpus_terms(marian, len(data)), err_msg=k)


def test_mismatched_methods_and_inputs_are_clear_errors(marian):
    class EncoderOnly(Method):  # the default families: ("encoder",)
        name = "encoder-only"

    with pytest.raises(ValueError, match="reads encoder models.*translation"):
        run_corpus(marian, pairs(), [EncoderOnly()], max_length=32, progress=False)
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
