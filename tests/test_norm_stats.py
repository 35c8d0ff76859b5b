"""Runner methods of the norm analysis vs numpy loops over examples, heads and rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from norms_testing import assert_close, brute_force, internals_np, terms, tiny_bert

from jattn.analyses import norm_stats as NS
from jattn.nn.token_classes import CLASS_NAMES
from jattn.runner.protocol import HostBatch
from jattn.runner import run_corpus, token_classes

CORPUS = [  # all ≤ 16 tokens: one padded bucket, one compile of the runner's step
    "The cat sat on the mat, and slept.",
    "Norms matter.",
    "Commas, full stops. And more, here.",
    "the the the cat",
    "Short one, with a comma",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("norm_stats")
    model = tiny_bert(tmp / "model")
    ranks = tmp / "ranks.txt"  # a frequency ranking of a few ids: the/cat/,/./mat
    ids = model.tokenizer.convert_tokens_to_ids(["the", ",", ".", "cat", "mat", "a", "with"])
    ranks.write_text("".join(f"{r + 1} {1000 - r} {i}\n" for r, i in enumerate(ids)))
    methods = [NS.NormClassAttention(), NS.NormFrequency(model.config.vocab_size, ranks),
               NS.MixingRatio(model, rank_file=ranks)]
    result = run_corpus(model, CORPUS, methods, batch_size=2, progress=False)
    return model, ranks, result.statistics


PAD = 16  # every example is run padded to one length: one compile, and padding must not matter


def corpus_terms(model) -> int:
    """The runner's padded batches vs HF one example at a time, then the means over the corpus."""
    return terms(model, PAD) + len(CORPUS) * PAD


def example(model, k: int, masked: bool):
    """Example k: its unpadded HostBatch, per-layer brute-force quantities of its real tokens,
    and the ids the model saw (masked or not)."""
    b = model.tokenize([CORPUS[k]])
    host = HostBatch(b.input_ids, b.attention_mask, b.token_type_ids,
                     token_classes(model.tokenizer, b.input_ids, b.attention_mask), None, np.array([k]))
    ids = NS.mask_tokens(host, model.tokenizer.mask_token_id, 0.12, 0) if masked else b.input_ids
    n = ids.shape[1]
    pad = lambda x: np.pad(x, ((0, 0), (0, PAD - n)))
    mask = pad(b.attention_mask)
    padded = SimpleNamespace(input_ids=pad(ids), attention_mask=mask)  # single segments: token types all 0
    bfs = []
    for l in range(model.config.num_layers):  # each layer's activations and W_O from the HF PyTorch model
        bf = brute_force(internals_np(model, padded, l), mask, model.config.layer_norm_eps)
        bfs.append({key: bf[key][..., :n, :n] if key in ("weights",) else bf[key][..., :n]
                    for key in ("weights", "f_norm", *(f"mixing_{m}" for m in NS.MIXING))})
    return host, bfs, ids


def test_class_statistics_against_loops(setup):
    model, _, stats = setup
    L, H = model.config.num_layers, model.config.num_heads
    want = {f"{s}_{c}": [] for s in ("weight_to", "norm_to", "norm_share_to", "fnorm", "received") for c in CLASS_NAMES}
    for k in range(len(CORPUS)):
        host, bfs, _ = example(model, k, masked=False)
        cls, n = host.token_class[0], host.input_ids.shape[1]
        per = {key: np.full((L, H), np.nan) for key in want}
        for l, bf in enumerate(bfs):
            for h in range(H):
                a, fn = bf["weights"][0, h], bf["f_norm"][0, h]
                for c, name in enumerate(CLASS_NAMES):
                    cols = cls == c
                    af = a * fn[None, :]
                    per[f"weight_to_{name}"][l, h] = np.mean([a[i, cols].sum() for i in range(n)])
                    per[f"norm_to_{name}"][l, h] = np.mean([af[i, cols].sum() for i in range(n)])
                    per[f"norm_share_to_{name}"][l, h] = np.mean([af[i, cols].sum() / af[i].sum() for i in range(n)])
                    if cols.any():
                        per[f"fnorm_{name}"][l, h] = fn[cols].mean()
                        per[f"received_{name}"][l, h] = a[:, cols].mean(0).mean()
        for key in want:
            want[key].append(per[key])
    for key, values in want.items():
        assert_close(stats[key].value, np.nanmean(np.stack(values), 0), corpus_terms(model),
                     name=key)  # sequences lacking a class skipped


def test_frequency_against_loops(setup):
    model, ranks_file, stats = setup
    V = model.config.vocab_size
    sums = {"alpha": np.zeros(V), "fnorm": np.zeros(V), "count": np.zeros(V)}
    for k in range(len(CORPUS)):
        host, bfs, _ = example(model, k, masked=False)
        for j, tok in enumerate(host.input_ids[0]):
            sums["alpha"][tok] += np.mean([bf["weights"][0, :, :, j].mean() for bf in bfs])
            sums["fnorm"][tok] += np.mean([bf["f_norm"][0, :, j].mean() for bf in bfs])
            sums["count"][tok] += 1
    seen = sums["count"] > 0
    np.testing.assert_array_equal(stats["freq_token_count"].value, sums["count"])
    ranks = NS.read_ranks(ranks_file, V)
    for key in ("alpha", "fnorm"):
        got = stats[f"freq_{key}_by_id"].value
        assert_close(got[seen], sums[key][seen] / sums["count"][seen], corpus_terms(model), name=key)
        assert np.isnan(got[~seen]).all()
        from scipy.stats import spearmanr
        ok = seen & ~np.isnan(ranks)
        # ρ steps where rounding swaps two near-equal values: from the values checked above
        rho = spearmanr(got[ok], ranks[ok]).statistic
        assert stats[f"freq_{key}_spearman_rank"].value == pytest.approx(rho, abs=1e-12)


def test_mixing_against_loops(setup):
    model, _, stats = setup
    L = model.config.num_layers
    total = {k: np.zeros(L) for k in NS.MIXING}
    tokens = 0
    for k in range(len(CORPUS)):
        host, bfs, _ = example(model, k, masked=True)
        tokens += host.input_ids.shape[1]
        for l, bf in enumerate(bfs):
            for key in NS.MIXING:
                total[key][l] += bf[f"mixing_{key}"].sum()
    for key in NS.MIXING:
        assert_close(stats[f"mixing_{key}"].value, total[key] / tokens, corpus_terms(model), name=key)
        assert_close(stats[f"mixing_{key}_mean"].value, total[key].sum() / (tokens * L), corpus_terms(model) + L,
                     name=key)


def test_mask_tokens_rule_and_batch_independence(setup):
    model, _, _ = setup
    b = model.tokenize(CORPUS)
    host = HostBatch(b.input_ids, b.attention_mask, b.token_type_ids,
                     token_classes(model.tokenizer, b.input_ids, b.attention_mask), None, np.arange(len(CORPUS)))
    mask_id = model.tokenizer.mask_token_id
    masked = NS.mask_tokens(host, mask_id, 0.12, 0)
    for r in range(len(CORPUS)):
        m = int(((host.attention_mask[r] > 0) & (host.token_class[r] >= 2)).sum())
        assert (masked[r] == mask_id).sum() == max(1, int(0.12 * m))
        assert (masked[r][host.token_class[r] < 2] != mask_id).all()  # [CLS]/[SEP]/padding kept
        alone, _, ids = example(model, r, masked=True)
        np.testing.assert_array_equal(ids[0], masked[r, :ids.shape[1]])


def test_read_ranks_errors(tmp_path):
    bad = tmp_path / "r.txt"
    bad.write_text("1 10\n")
    with pytest.raises(ValueError, match="rank count id"):
        NS.read_ranks(bad, 100)
    bad.write_text("1 10 500\n")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        NS.read_ranks(bad, 100)
    with pytest.raises(FileNotFoundError, match="rank_file="):
        NS.read_ranks(tmp_path / "missing.txt", 100)


def test_cli_runs_the_norm_methods(setup, tmp_path):
    """``jattn analyze --methods norms,norm-freq,mixing`` end to end: the statistics are in
    results.json and equal the Python API's."""
    import json

    from jattn.cli import main

    model, ranks, stats = setup
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    out = tmp_path / "out"
    main(["analyze", "--model", model.source, "--input", str(corpus), "--methods", "norms,norm-freq,mixing",
          "--out", str(out), "--batch-size", "2", "--rank-file", str(ranks)])
    doc = json.loads((out / "results.json").read_text())
    for key in ("norm_share_to_sep", "fnorm_cls", "mixing_attnresln_n", "mixing_attn_w_mean"):
        assert doc[key]["shape"] == list(stats[key].value.shape)
        np.testing.assert_allclose(np.array(doc[key]["value"], float), stats[key].value, rtol=1e-6)
    assert (out / "figures" / "heatmap_norm_share_to_sep.png").stat().st_size > 2000


def test_spearman_occurrences_equals_repeated_arrays():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    values = rng.integers(0, 5, 40).astype(float)  # many ties
    ranks = rng.permutation(40).astype(float)
    counts = rng.integers(0, 6, 40)
    values[3], ranks[7] = np.nan, np.nan
    ok = ~np.isnan(values) & ~np.isnan(ranks)
    want = spearmanr(np.repeat(values[ok], counts[ok]), np.repeat(ranks[ok], counts[ok])).statistic
    assert NS.spearman_occurrences(values, ranks, counts) == pytest.approx(want, abs=1e-12)


# ------------------------------------------------ the authors' occurrence-level statistic

def brute_spearman(x, y) -> float:
    """Spearman ρ by definition: Pearson correlation of tie-averaged ranks, ranks by counting."""
    def ranks(v):
        v = np.asarray(v, np.float64)
        return np.array([1 + (v < a).sum() + ((v == a).sum() - 1) / 2 for a in v])

    rx, ry = ranks(x), ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    return float((dx * dy).sum() / np.sqrt((dx ** 2).sum() * (dy ** 2).sum()))


@pytest.fixture(scope="module")
def occurrences(tmp_path_factory):
    """The streamed pass over CORPUS (+ one pair) in batches of 2 (padding rows and columns),
    and, per example alone (padded to PAD: one compiled program for all of them, where unpadded
    lengths need one each; padding invariance of jattn.norms is tests/test_norms.py's), the per-token
    values by loops over layers and heads, in the pass's order (examples sorted by token length,
    then corpus index)."""
    import jattn
    from jattn.analyses.norm_occurrences import occurrence_pass

    tmp = tmp_path_factory.mktemp("occurrences")
    model = tiny_bert(tmp / "model")
    corpus = CORPUS + [("A pair, first.", "Second part")]
    logs = {res: occurrence_pass(model, corpus, tmp / f"log{res}", residual=res, batch_size=2, progress=False)
            for res in (False, True)}
    L, H = model.config.num_layers, model.config.num_heads
    want = {"ids": [], "fnorm": [], "alpha": [], **{f"mixing_{k}": [] for k in NS.MIXING}}
    lengths = [model.tokenize([text]).input_ids.shape[1] for text in corpus]
    for e in sorted(range(len(corpus)), key=lambda e: (lengths[e], e)):  # the pass's documented order
        b = model.tokenize([corpus[e]])
        n = b.input_ids.shape[1]
        assert n <= PAD
        padded = {k: np.pad(np.asarray(v), ((0, 0), (0, PAD - n))) for k, v in b.inputs().items() if v is not None}
        out = jattn.norms(model, padded, residual=True)["encoder"]
        for j in range(n):
            want["ids"].append(int(b.input_ids[0, j]))
            want["fnorm"].append(sum(out["f_norm"][l, 0, h, j] for l in range(L) for h in range(H)) / (L * H))
            want["alpha"].append(sum(out["weights"][l, 0, h, :n, j].sum() / n for l in range(L) for h in range(H))
                                 / (L * H))  # the real queries' weights
            for k in NS.MIXING:
                want[f"mixing_{k}"].append(sum(out[f"mixing_{k}"][l, 0, j] for l in range(L)) / L)
    return model, logs, {k: np.array(v) for k, v in want.items()}


def test_occurrence_pass_streams_every_token_once(occurrences):
    """Every real token of the corpus, with its own (unpadded, single-example) value, batching
    and padding notwithstanding; the log is on disk in the declared dtypes."""
    model, logs, want = occurrences
    for res, fields in ((False, ("fnorm", "alpha")), (True, tuple(f"mixing_{k}" for k in NS.MIXING))):
        got = logs[res].read()
        assert logs[res].count == len(want["ids"]) == len(got["ids"])
        assert got["ids"].dtype == np.int32 and (logs[res].folder / "ids.bin").stat().st_size == 4 * len(want["ids"])
        np.testing.assert_array_equal(got["ids"], want["ids"])
        for f in fields:
            assert_close(got[f], want[f], terms(model, PAD) + model.config.num_layers * model.config.num_heads,
                         name=f)  # batches of 2, padded, vs one example alone; then the means over heads


def test_occurrence_spearman_equals_brute_force(occurrences, tmp_path):
    """spearman_authors on the streamed values is exactly the by-definition ρ, with every
    occurrence's rank looked up by hand ([CLS]/[SEP] and unranked ids at the bottom rank)."""
    from jattn.analyses.norm_occurrences import spearman_authors

    model, logs, _ = occurrences
    ids = model.tokenizer.convert_tokens_to_ids(["the", ",", ".", "cat", "mat", "a", "with"])
    table = {i: 3 * r + 2 for r, i in enumerate(ids)}  # ranks 2, 5, 8, ...: not 1..k
    rank_file = tmp_path / "ranks.txt"
    rank_file.write_text("".join(f"{r} {1000 - r} {i}\n" for i, r in table.items()))
    ranks = NS.read_ranks(rank_file, model.config.vocab_size)
    bottom = max(table.values()) + 1
    for res, field in ((False, "fnorm"), (False, "alpha"), (True, "mixing_attnres_n"), (True, "mixing_attnresln_n")):
        occ = logs[res].read()
        freq = [table.get(int(i), bottom) for i in occ["ids"]]
        assert bottom in freq and len(set(freq)) > 3  # the rule is exercised
        want = brute_spearman(occ[field], freq)
        assert spearman_authors(occ[field], occ["ids"], ranks) == pytest.approx(want, abs=1e-12)


def test_type_mean_and_occurrence_statistics_differ():
    """Type A (rank 1) occurs with ‖f‖ 0 and 10, type B (rank 2) with 4 and 5. Type means 5 > 4.5
    give ρ = −1 when every occurrence carries its type's mean; the occurrences' own values give
    ranks (1, 4, 2, 3) against (1.5, 1.5, 3.5, 3.5): covariance 0, ρ = 0."""
    from jattn.analyses.norm_occurrences import bottom_ranked, spearman_authors

    ids = np.array([0, 0, 1, 1])
    values = np.array([0.0, 10.0, 4.0, 5.0])
    ranks = np.array([1.0, 2.0, np.nan])  # id 2 unranked
    means = np.array([5.0, 4.5, np.nan])
    counts = np.array([2, 2, 0])
    assert NS.spearman_occurrences(means, ranks, counts) == pytest.approx(-1.0, abs=1e-12)
    assert spearman_authors(values, ids, ranks) == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_array_equal(bottom_ranked(ranks), [1.0, 2.0, 3.0])
    # an unranked occurrence joins at the bottom rank: (0, 10, 4, 5, 7) vs (1, 1, 2, 2, 3)
    assert spearman_authors(np.r_[values, 7.0], np.r_[ids, 2], ranks) == pytest.approx(
        brute_spearman([0, 10, 4, 5, 7], [1, 1, 2, 2, 3]), abs=1e-12)
    with pytest.raises(ValueError, match="matching 1-D"):
        spearman_authors(values, ids[:3], ranks)
