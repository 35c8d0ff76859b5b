"""Pattern-type classifiers fitted on one set of hand-labelled maps and scored on another
(Kovaleva et al. 2019 §4; STATISTICS.md §4-5).

The labelled maps are the 72 of ``experiments/labels/kovaleva-patterns``
(``hand_labels.json``, ``hand_maps.npz``): pretrained MiniLM on SST-2 dev sentences (56 single, 16
pairs), (example, layer, head) drawn at random, labelled by eye by one annotator (29
heterogeneous, 22 vertical, 11 diagonal, 9 vertical+diagonal, 1 block). Too few for a fixed
fit/report split of useful size, so both classifiers are *cross-fitted*: the maps are split into
two folds stratified by label, and each fold's maps are labelled by a classifier fitted on the
other fold only, so that every reported label comes from a classifier that never saw that map.

- Rules (``jattn.analyses.patterns``): the thresholds V (mass on [CLS]/[SEP]) and R (diagonal
  share of the rest) that agree best with the fitting fold's hand labels on the grid ``GRID_V`` ×
  ``GRID_R`` (ties: the smallest V, then R). The block threshold stays at its default: one block
  map cannot fit it (and the tasks here are single sentences, where the rule never says block).
- CNN (``jattn.analyses.pattern_cnn``): trained on the fitting fold's hand-labelled maps plus
  maps of pretrained MiniLM on SST-2 *train* sentences labelled by that fold's rules (disjoint
  from the hand-labelled dev maps), scored on the other fold's hand labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jattn.analyses.patterns import TYPES, Thresholds, classify, map_statistics

HAND = Path("experiments") / "labels" / "kovaleva-patterns"
GRID_V = tuple(np.round(np.arange(0.25, 0.701, 0.05), 2))
GRID_R = tuple(np.round(np.arange(0.15, 0.801, 0.05), 2))


def hand_files(root: Path) -> tuple[Path, Path]:
    """(hand_labels.json, hand_maps.npz) of the checkout ``root``."""
    return root / HAND / "hand_labels.json", root / HAND / "hand_maps.npz"


def hand_set(root: Path, tokenizer, dev: list[tuple[str, int]]) -> dict:
    """The labelled maps: ``maps`` [(n, n)], ``classes`` [(n,)] token classes (the sentence, or
    the pair, of SST-2 ``dev`` re-tokenized), ``labels`` (72,) type indices, ``ids``."""
    from jattn.runner import token_classes

    labels_path, maps_path = hand_files(root)
    doc, arrays = json.loads(labels_path.read_text()), np.load(maps_path)
    maps, classes = [], []
    for m in doc["maps"]:
        a = m["sst2_dev"]
        text = dev[a[0]][0] if len(a) == 1 else (dev[a[0]][0], dev[a[1]][0])
        enc = tokenizer(*([text] if isinstance(text, str) else list(text)), truncation=True, max_length=128)
        ids = np.asarray(enc["input_ids"])[None]  # (1, n)
        A = np.asarray(arrays[f"map_{m['id']}"], np.float32)  # (n, n)
        if A.shape != (ids.shape[1],) * 2:
            raise ValueError(f"hand map {m['id']} is {A.shape}, its text has {ids.shape[1]} tokens: the labelled "
                             "set and the data disagree")
        maps.append(A)
        classes.append(token_classes(tokenizer, ids, np.ones_like(ids))[0])
    return {"maps": maps, "classes": classes, "labels": np.asarray([TYPES.index(m["hand"]) for m in doc["maps"]]),
            "ids": [m["id"] for m in doc["maps"]], "recorded": doc["maps"]}


def statistics(maps: list[np.ndarray], classes: list[np.ndarray]) -> dict:
    """``map_statistics`` of maps of different lengths in one call (padded, class −1): each (N,)."""
    n = max(len(c) for c in classes)
    A = np.zeros((len(maps), n, n), np.float32)  # (N, n, n)
    cls = np.full((len(maps), n), -1, np.int32)  # (N, n)
    for i, (m, c) in enumerate(zip(maps, classes)):
        A[i, :len(c), :len(c)], cls[i, :len(c)] = m, c
    s = map_statistics(jnp.asarray(A)[:, None], jnp.asarray(cls))  # each (N, 1) or (N,)
    return {k: np.asarray(v)[:, 0] if np.ndim(v) == 2 else np.asarray(v) for k, v in s.items()}


def rule_labels(stats: dict, t: Thresholds) -> np.ndarray:
    """(N,) type indices of maps with ``statistics`` under thresholds ``t``."""
    s = {k: jnp.asarray(v)[:, None] if k not in ("pair", "rows") else jnp.asarray(v) for k, v in stats.items()}
    return np.asarray(classify(s, t))[:, 0]


def fit_thresholds(stats: dict, labels: np.ndarray) -> tuple[Thresholds, float]:
    """The grid thresholds agreeing best with ``labels`` on these maps, and that agreement."""
    best, found = -1.0, None
    for v in GRID_V:
        for r in GRID_R:
            t = Thresholds(vertical=float(v), diagonal=float(r))
            agree = float(np.mean(rule_labels(stats, t) == labels))
            if agree > best:
                best, found = agree, t
    return found, best


def folds(labels: np.ndarray, seed: int = 0) -> np.ndarray:
    """(N,) fold 0/1 per map, stratified: each label's maps in random order, alternating folds."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(labels), np.int64)
    start = 0
    for k in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == k))
        fold[members] = (np.arange(len(members)) + start) % 2
        start += len(members)  # an odd class leaves the next one starting on the other fold
    return fold


def cross_fit_rules(stats: dict, labels: np.ndarray, fold: np.ndarray) -> dict:
    """Each fold labelled by the thresholds fitted on the other: ``pred`` (N,), ``majority`` (N,)
    the other fold's most frequent label, ``thresholds`` per fitting fold, ``fit_agreement``."""
    pred, majority, fitted = np.zeros_like(labels), np.zeros_like(labels), []
    for f in (0, 1):
        fit, held = fold != f, fold == f
        t, agree = fit_thresholds({k: v[fit] for k, v in stats.items()}, labels[fit])
        pred[held] = rule_labels({k: v[held] for k, v in stats.items()}, t)
        majority[held] = np.bincount(labels[fit], minlength=len(TYPES)).argmax()
        fitted.append({"fitted_on_fold": 1 - f, "vertical": t.vertical, "diagonal": t.diagonal,
                       "agreement_on_fitting_fold": agree})
    return {"pred": pred, "majority": majority, "thresholds": fitted}


def sample_maps(model, texts: list[str], sentences: int, per_sentence: int, seed: int = 0,
                batch_size: int = 32) -> tuple[list, list, np.ndarray]:
    """``per_sentence`` random (layer, head) maps over real tokens of each of ``sentences``
    random ``texts``: (maps [(n, n)], token classes [(n,)], the sentence each came from (M,))."""
    from jattn.runner import token_classes
    from jattn.sweeps.disable import batches

    rng = np.random.default_rng(seed)
    L, H = model.config.num_layers, model.config.num_heads
    chosen = rng.choice(len(texts), sentences, replace=False)
    heads = rng.integers(0, L * H, (sentences, per_sentence))  # (S, k) flat (layer, head)
    maps, classes, source = [], [], []
    for batch, idx in batches(model, [(texts[i], 0) for i in chosen], batch_size, 128):
        w = np.asarray(model.forward(batch, internals=("weights",)).attentions)  # (L, b, H, n, n)
        mask = np.asarray(batch["attention_mask"])
        cls = token_classes(model.tokenizer, np.asarray(batch["input_ids"]), mask)
        for r, i in enumerate(idx):
            n = int(mask[r].sum())
            for flat in heads[i]:
                maps.append(w[flat // H, r, flat % H, :n, :n])
                classes.append(cls[r, :n])
                source.append(i)
    return maps, classes, np.asarray(source)


def cross_fit_cnn(hand: dict, fold: np.ndarray, thresholds: list[dict], corpus: tuple, *, steps: int,
                  seed: int = 0) -> dict:
    """The CNN per fold: trained on the other fold's hand maps plus the corpus maps labelled by
    the other fold's rules (the corpus sentences split 4:1, the fifth held out); ``pred`` (N,)
    on the hand maps, and its agreement with the rules on the held-out corpus maps."""
    from jattn.analyses import pattern_cnn as C

    maps, classes, source = corpus
    images = np.stack([C.to_image(A) for A in maps])  # (M, S, S)
    hand_images = np.stack([C.to_image(A) for A in hand["maps"]])  # (N, S, S)
    corpus_stats = statistics(maps, classes)
    train_rows = source % 5 != 0  # (M,) the held-out fifth: sentences 0, 5, 10, ...
    labels = hand["labels"]
    pred, agreement = np.zeros_like(labels), []
    for f in (0, 1):
        fit, held = fold != f, fold == f
        t = next(x for x in thresholds if x["fitted_on_fold"] == 1 - f)
        rules = rule_labels(corpus_stats, Thresholds(vertical=t["vertical"], diagonal=t["diagonal"]))  # (M,)
        cnn = C.train(np.concatenate([images[train_rows], hand_images[fit]]),
                      np.concatenate([rules[train_rows], labels[fit]]), steps=steps, seed=seed)
        pred[held] = C.predict(cnn, hand_images[held])
        agreement.append(float(np.mean(C.predict(cnn, images[~train_rows]) == rules[~train_rows])))
    return {"pred": pred, "corpus_agreement_with_rules": agreement, "corpus_maps": len(maps),
            "corpus_held_out": int((~train_rows).sum())}
