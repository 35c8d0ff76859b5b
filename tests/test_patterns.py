"""Attention-pattern types (issue 15): the rules classify maps built to be each type as that
type; the statistics agree with numpy loops over real tokens only; the runner method counts
per head; the CNN learns the synthetic set (≥ 95 %)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.analyses import pattern_cnn, patterns as P
from jattn.runner import run_corpus
from tiny_encoders import save_tiny
from tolerance import assert_close, model_terms


def synthetic_set(count: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        k = i % len(P.TYPES)
        n = int(rng.integers(16 if k == P.BLOCK else 12, 40))
        A, cls = P.synthetic_map(k, n, rng, pair=k == P.BLOCK or rng.random() < 0.3)
        out.append((k, A, cls))
    return out


def rule_labels(maps, size: int = 48):
    """Classify (A, cls) maps in one call, each padded to ``size`` tokens with garbage on the padding
    rows (padding must not matter). -> (labels (N,), statistics each (N,))."""
    A = np.zeros((len(maps), size, size), np.float32)
    cls = np.full((len(maps), size), -1, np.int32)
    for i, (m, c) in enumerate(maps):
        n = len(c)
        A[i, :n, :n], cls[i, :n] = m, c
        A[i, n:] = np.random.default_rng(i).random((size - n, size))
    stats = P.map_statistics(jnp.asarray(A)[:, None], jnp.asarray(cls))  # each (N, 1)
    return np.asarray(P.classify(stats))[:, 0], {
        k: np.asarray(v).reshape(len(maps), -1)[:, 0] for k, v in stats.items()
    }


def rule_label(A, cls):
    labels, stats = rule_labels([(A, cls)])
    return int(labels[0]), {k: v[0] for k, v in stats.items()}


def test_synthetic_maps_of_each_type_are_classified_as_that_type():
    data = synthetic_set(200, seed=0)
    labels, _ = rule_labels([(A, cls) for _, A, cls in data])
    np.testing.assert_array_equal(labels, [k for k, _, _ in data])
    unpadded = [rule_label(A, cls)[0] for _, A, cls in data[:5]]  # the same without padding
    np.testing.assert_array_equal(unpadded, labels[:5])


def test_statistics_equal_numpy_loops():
    data = synthetic_set(10, seed=1)
    _, stats = rule_labels([(A, cls) for _, A, cls in data])
    for s, (k, A, cls) in enumerate(data):
        got = {key: v[s] for key, v in stats.items()}
        n = len(cls)
        special = {j for j in range(n) if cls[j] in (0, 1)}
        seg = np.cumsum(cls == 1) - (cls == 1)
        body = [i for i in range(n) if i not in special]
        V = np.mean([sum(A[i, j] for j in special) for i in body])
        D = np.mean([sum(A[i, j] for j in (i - 1, i, i + 1) if 0 <= j < n and j not in special) for i in body])
        B = np.mean([sum(A[i, j] for j in body if seg[j] == seg[i]) / (1 - sum(A[i, j] for j in special))
                     for i in body])
        assert_close([got["vertical"], got["diagonal"], got["block"]], [V, D, B], terms=2 * n)  # float32 rows, means
        assert got["pair"] == (seg[body].max() > 0)


def test_rule_thresholds_on_hand_made_maps():
    """Boundaries: a [CLS] column of mass 0.34 is not vertical, 0.36 is; R just below/above 0.45."""
    n = 22
    cls = np.full(n, 3, np.int32)
    cls[0], cls[-1] = 0, 1
    uniform = np.full((n, n), 1.0 / n)
    maps, want = [], []
    for v, label in ((0.34, P.HETEROGENEOUS), (0.36, P.VERTICAL)):
        A = (1 - v) * uniform.copy()
        A[:, 0] += v - (1 - v) * 2 / n  # total special mass exactly v (uniform puts 2/n on [CLS], [SEP])
        maps.append((A, cls))
        want.append(label)
    for r, label in ((0.44, P.HETEROGENEOUS), (0.46, P.DIAGONAL)):
        A = np.zeros((n, n))
        for i in range(1, n - 1):
            rest = [j for j in range(1, n - 1) if abs(j - i) > 1]
            A[i, i] = r
            A[i, rest] = (1 - r) / len(rest)
        maps.append((A, cls))
        want.append(label)
    np.testing.assert_array_equal(rule_labels(maps)[0], want)


def test_the_cnn_learns_the_synthetic_set():
    data = synthetic_set(600, seed=2)
    images = np.stack([pattern_cnn.to_image(A) for _, A, _ in data])
    labels = np.array([k for k, _, _ in data])
    model = pattern_cnn.train(images[:450], labels[:450], steps=150, seed=0)
    assert (pattern_cnn.predict(model, images[450:]) == labels[450:]).mean() >= 0.95


def test_runner_method_counts_every_map_once(tmp_path):
    model = jattn.load(save_tiny(tmp_path / "m", "bert-2x4"), use_cache=False)
    texts = ["A cat sat.", ("A question?", "An answer, here."), "Nothing more to say today"]
    result = run_corpus(model, texts, [P.PatternTypes()], batch_size=2, max_length=32, progress=False)
    share = result.statistics["pattern_share"].value  # (L, H, 5)
    np.testing.assert_allclose(share.sum(-1), 1.0, atol=1e-9)
    # the same labels from one forward per example, classified directly; each example padded to 32 (one
    # compiled forward for the three: classify reads real tokens only, test_synthetic_maps_of_each_type_are_
    # classified_as_that_type checks it unpadded)
    from jattn.runner import token_classes

    counts = np.zeros_like(share)
    for t in texts:
        b = model.tokenize([t], max_length=32)
        pad = lambda x: np.pad(np.asarray(x), ((0, 0), (0, 32 - x.shape[1])))  # noqa: E731
        ids, mask = pad(b.input_ids), pad(b.attention_mask)
        w = model.forward({"input_ids": ids, "attention_mask": mask, "token_type_ids": pad(b.token_type_ids)}
                          ).attentions  # (L, 1, H, 32, 32)
        cls = token_classes(model.tokenizer, ids, mask)
        lab = np.asarray(P.classify(P.map_statistics(w, jnp.asarray(cls))))  # (L, 1, H)
        for l, h in np.ndindex(lab.shape[0], lab.shape[2]):
            counts[l, h, lab[l, 0, h]] += 1
    np.testing.assert_allclose(share, counts / len(texts))


def test_finetune_cosine_is_one_with_itself_and_below_one_exactly_at_a_disabled_head(tmp_path):
    from jattn import Interventions

    model = jattn.load(save_tiny(tmp_path / "m", "bert-2x4"), use_cache=False)
    texts = ["A cat sat on the mat.", ("A question?", "An answer."), "Short"]
    same = P.finetune_change(model, model, texts, max_length=32, progress=False)
    np.testing.assert_allclose(same["cosine"], 1.0, atol=1e-6)
    disabled = np.zeros((2, 4), bool)
    disabled[1, 2] = True
    one = P.finetune_change(model, model, texts, interventions_b=Interventions(disabled_heads=disabled),
                            max_length=32, progress=False)
    cos = one["cosine"]
    assert cos[1, 2] < 1 - 1e-3
    np.testing.assert_allclose(np.delete(cos.ravel(), 1 * 4 + 2), 1.0, atol=1e-6)
    # by hand: the mean over examples of the cosine of the flattened real-token maps
    want = []
    for t in texts:
        b = model.tokenize([t], max_length=32)
        n = int(b.attention_mask.sum())
        a = np.asarray(model.forward(b).attentions[1, 0, 2, :n, :n]).ravel()
        u = np.full(n * n, 1.0 / n)
        want.append(a @ u / np.linalg.norm(a) / np.linalg.norm(u))
    assert_close(cos[1, 2], np.mean(want), terms=model_terms(model.config, 32) + 32 * 32)  # batched vs alone, n² sums
    cls_rows = same["cls_to_class"]
    assert_close(sum(cls_rows["a"][c] for c in cls_rows["a"]), 1.0, terms=2 * 32)  # the [CLS] row sums to 1


def test_command_line(tmp_path, capsys):
    from jattn.cli import main

    folder = save_tiny(tmp_path / "m", "bert-2x4")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A cat sat.\nA question?\tAn answer.\nNothing more\n")
    out = tmp_path / "out"
    main(["patterns", "--model", str(folder), "--before", str(folder), "--input", str(corpus), "--out", str(out),
          "--max-length", "32"])
    assert "vertical" in capsys.readouterr().out
    doc = __import__("json").loads((out / "results.json").read_text())
    np.testing.assert_allclose(np.sum(doc["pattern_proportions"]["value"]), 1.0)
    np.testing.assert_allclose(doc["finetune_cosine"]["value"], 1.0, atol=1e-6)
    assert (out / "figures" / "pattern_0_vertical.png").is_file()


def test_finetune_change_refuses_models_that_tokenize_differently(tmp_path):
    import copy
    from types import SimpleNamespace

    model = jattn.load(save_tiny(tmp_path / "m", "bert-2x4"), use_cache=False)
    other = copy.copy(model)
    other.tokenizer = SimpleNamespace(get_vocab=lambda: {"[PAD]": 0, "hello": 1})
    with pytest.raises(ValueError, match="tokenize differently.*Fix: compare a fine-tuned model with the pretrained"):
        P.finetune_change(other, model, ["A cat sat."], max_length=32, progress=False)
