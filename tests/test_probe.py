"""The attention probing classifier (Clark et al. 2019 §5): training path, baselines, shards."""

from __future__ import annotations

import numpy as np
import pytest

from jattn.analyses import probe


def random_tree(rng, w: int) -> np.ndarray:
    """A random projective-or-not tree: word 1..w, one ROOT child, heads 0 = ROOT (1-based)."""
    order = rng.permutation(w) + 1
    heads = np.zeros(w, np.int32)
    for k, word in enumerate(order[1:], 1):
        heads[word - 1] = order[rng.integers(0, k)]
    return heads


def synthetic(rng, n: int, L: int = 2, H: int = 2, D: int = 4, signal: bool = True) -> list[dict]:
    """Sentences whose map (layer 1, head 0) is the gold tree (dependent -> head, ROOT -> [CLS]);
    every other map is random attention."""
    out = []
    for _ in range(n):
        w = int(rng.integers(2, 14))
        heads = random_tree(rng, w)
        u = w + 2
        maps = rng.dirichlet(np.ones(u), size=(L, H, u))  # (L, H, u, u)
        if signal:
            gold = np.zeros((u, u))
            gold[np.arange(1, w + 1), heads] = 1.0  # head 0 = ROOT -> unit 0 = [CLS]
            gold[0, 0] = gold[-1, -1] = 1.0
            maps[1, 0] = gold
        pair, root = probe.sentence_features(maps)
        out.append({"pair": pair, "root": root, "emb": rng.normal(size=(w, D)), "heads": heads,
                    "punct": rng.random(w) < 0.1})
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("probe")
    for name, n in (("train", 300), ("dev", 60)):
        probe.write_shards(synthetic(rng, n), root / name, shard_size=70)
    probe.write_shards(synthetic(rng, 60, signal=False), root / "noise", shard_size=70)
    return root


def test_shards_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    sents = synthetic(rng, 9)
    paths = probe.write_shards(sents, tmp_path, shard_size=4)
    assert len(paths) == 3
    back = [s for p in paths for s in probe._sentences(p)]
    for a, b in zip(sents, back):
        np.testing.assert_allclose(b["pair"], a["pair"], atol=1e-3)  # float16
        np.testing.assert_allclose(b["root"], a["root"], atol=1e-3)
        np.testing.assert_array_equal(b["heads"], a["heads"])
        np.testing.assert_array_equal(b["punct"], a["punct"])
    total = sum(int(b["mask"].sum()) for b in probe.batches(tmp_path, 4))
    assert total == sum(len(s["heads"]) for s in sents)


# the attention-only features train (to a plateau) in test_early_stopping_ends_after_patience_epochs_without_gain;
# attn+emb runs the same training, checkpoint and restore code with the embedding features added
@pytest.mark.parametrize("kind", [pytest.param("attn", marks=pytest.mark.slow(
    twin="tests/test_probe.py::test_probe_learns_the_tree_head[attn+emb]")), "attn+emb"])
def test_probe_learns_the_tree_head(shards, tmp_path, kind):
    params, history = probe.train(kind, shards / "train", shards / "dev", epochs=6, batch_size=16, learning_rate=0.02,
                                  checkpoint=tmp_path / "ckpt", progress=False)
    assert history[-1]["dev_uas"] > 97.0, history
    assert probe.uas(params, kind, shards / "noise") < 40.0  # the same probe without the signal
    restored = probe.restore(tmp_path / "ckpt", kind, 2 * 4, 4 * 4, 4)
    assert probe.uas(restored, kind, shards / "dev") == pytest.approx(max(h["dev_uas"] for h in history))


def test_distance_probe_learns_right_branching(tmp_path):
    """Trees where every word attaches to the next (last to ROOT): distances alone suffice."""
    rng = np.random.default_rng(2)
    sents = synthetic(rng, 120)
    for s in sents:
        w = len(s["heads"])
        s["heads"] = np.append(np.arange(2, w + 1), 0).astype(np.int32)
    probe.write_shards(sents[:100], tmp_path / "train")
    probe.write_shards(sents[100:], tmp_path / "dev")
    assert probe.right_branching_uas(tmp_path / "dev") == 100.0
    _, history = probe.train("dist+emb", tmp_path / "train", tmp_path / "dev", epochs=15, batch_size=8,
                             learning_rate=0.02, progress=False)
    assert history[-1]["dev_uas"] > 97.0, history


def test_right_branching_by_hand(tmp_path):
    """Heads 2 3 0 (chain to ROOT) and 3 3 0? second sentence: word 1 -> 3, 2 -> 3, 3 -> ROOT;
    right-branching gets 3 of 3, then words 2 and 3 of the second: 5 of 6, punctuation excluded."""
    sents = []
    for heads, punct in (([2, 3, 0], [False] * 3), ([3, 3, 0], [False] * 3), ([2, 0], [False, True])):
        w = len(heads)
        sents.append({"pair": np.zeros((1, w, w)), "root": np.zeros((4, w)), "emb": np.zeros((w, 2)),
                      "heads": np.array(heads), "punct": np.array(punct)})
    probe.write_shards(sents, tmp_path)
    # scored words: 3 + 3 + 1 (the punctuation word is left out); right: 3 + 2 + 1
    assert probe.right_branching_uas(tmp_path) == pytest.approx(100 * 6 / 7)


def test_scores_mask_self_and_padding():
    rng = np.random.default_rng(3)
    b = probe._pad([dict(s, punct=np.zeros(len(s["heads"]), bool)) for s in synthetic(rng, 3)])
    params = probe.init_params("attn+emb", 8, 16, 4)
    s = np.asarray(probe.scores(params, "attn+emb", b))  # (B, W, 1 + W)
    B, W = b["heads"].shape
    for r in range(B):
        w = int(b["mask"][r].sum())
        for i in range(w):
            assert s[r, i, i + 1] == -np.inf
            assert np.isneginf(s[r, i, 1 + w:]).all()
            assert np.isfinite(s[r, i, 0])


def test_word_embeddings_mean_over_subwords():
    table = np.arange(20.0).reshape(10, 2)
    ids = np.array([0, 3, 4, 5, 1])  # [CLS] a## ##b c [SEP]
    word_ids = np.array([-1, 0, 0, 1, -1])
    np.testing.assert_allclose(probe.word_embeddings(table, ids, word_ids, 2), [[7.0, 8.0], [10.0, 11.0]])


def test_word_embedding_table(minilm):
    t = probe.word_embedding_table(minilm)
    assert t.shape == (minilm.config.vocab_size, minilm.config.hidden_size)
    ids = minilm.tokenize(["cat"]).input_ids  # the embedding layer's input for "cat" is row t[id]
    assert np.isfinite(t[ids]).all()


def test_features_through_the_runner_equal_the_per_sentence_path(tiny_bert_folder, tmp_path):
    """ProbeFeatures records -> shards_from_records give the shards of the per-sentence path
    (word_attention + sentence_features + word_embeddings)."""
    import jattn
    from jattn.io import labels
    from jattn.io.readers import Corpus
    from jattn.analyses.word_attention import word_attention
    from jattn.io.records import read_records
    from jattn.runner import run_corpus
    from test_syntax import CONLLU

    (tmp_path / "t.conllu").write_text(CONLLU)
    model = jattn.load(tiny_bert_folder, use_cache=False)
    table = probe.word_embedding_table(model)
    trees = list(labels.read_conllu_trees(tmp_path / "t.conllu"))

    def old():
        for r in word_attention(model, [t.words for t in trees], batch_size=2):
            t = trees[r.index]
            pair, root = probe.sentence_features(r.maps)
            yield {
                "pair": pair,
                "root": root,
                "emb": probe.word_embeddings(table, r.input_ids, r.word_ids, len(t.words)),
                "heads": t.heads,
                "punct": np.array([p == "PUNCT" for p in t.upos]),
            }

    probe.write_shards(old(), tmp_path / "old")
    run_corpus(model, Corpus(tmp_path / "t.conllu", "conllu"), [probe.ProbeFeatures(table)], batch_size=2,
               records=tmp_path / "rec", progress=False)
    probe.shards_from_records(read_records(tmp_path / "rec" / "probe-features"), tmp_path / "new")
    key = lambda s: (len(s["heads"]), s["heads"].tolist())  # noqa: E731  the sentences differ in their trees
    old_s, new_s = (sorted(probe._sentences(tmp_path / d / "shard_00000.npz"), key=key) for d in ("old", "new"))
    assert len(old_s) == len(new_s) == len(trees)
    for a, b in zip(old_s, new_s):
        for k in ("pair", "root", "emb"):
            # stored as float16: float32 rounding across one of its rounding boundaries is 1 ulp (≤ 2**-10)
            np.testing.assert_allclose(
                b[k].astype(np.float32), a[k].astype(np.float32), rtol=2e-3, atol=1e-4, err_msg=k
            )
        assert (a["heads"] == b["heads"]).all() and (a["punct"] == b["punct"]).all()


def test_early_stopping_ends_after_patience_epochs_without_gain(shards):
    """With ``patience`` the run ends ``patience`` epochs after its best dev UAS (the first of a
    plateau), well before ``epochs``; without it, every epoch runs."""
    _, history = probe.train("attn", shards / "train", shards / "dev", epochs=40, batch_size=16, learning_rate=0.05,
                             patience=2, progress=False)
    uas = [h["dev_uas"] for h in history]
    best = int(np.argmax(uas))  # the first epoch with the best dev UAS
    assert len(history) == best + 1 + 2 < 40, uas
    _, full = probe.train("attn", shards / "train", shards / "dev", epochs=3, batch_size=16, learning_rate=0.05,
                          progress=False)
    assert len(full) == 3
    with pytest.raises(ValueError, match="patience"):
        probe.train("attn", shards / "train", shards / "dev", patience=0)
