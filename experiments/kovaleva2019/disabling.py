"""Kovaleva et al. 2019, §6 (Fig. 9-10): every head, and every layer, disabled one at a time on a
fine-tuned classifier, tested against the unmodified model on the same dev examples.

- ``sweep``: the dev predictions of the unmodified model and of each variant (a head's attention
  made uniform over the real keys, ``jattn.sweeps.disable.disable`` mode "uniform"; a layer:
  all its heads), in chunks of length-sorted examples saved to the stage's work folder, so that a
  killed sweep continues from its last chunk. Stored compactly: a variant of a binary classifier
  is the unmodified prediction with some examples flipped, so per variant only the flipped
  examples' indices are kept (``flips`` / ``unflip``).
- ``paired_family``: ``jattn.stats.paired_bootstrap`` for every variant at once (the same index
  resamples for all; the metric of each resample from the counts of how often each example was
  drawn), with B = ``B_FAMILY`` resamples: Holm over 144 heads needs p-values below 0.05 / 144 =
  3.5e-4, which B = 1000 cannot resolve (its smallest non-zero p is 0.002).
- ``halves`` / ``best_variant``: the dev split in two fixed halves (select on one, report on
  the other: STATISTICS.md §5).
- ``sweep_stage``: the ``kovaleva.sweep-<model>-<task>-s<seed>`` stage (here rather than in
  ``kovaleva``, so that its key, which hashes its own module, stays when the claims change).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

B_FAMILY = 10_000  # resamples of the family-wise tests (module docstring)
ALPHA = 0.05
TASK_DATA = {"sst2": ("sst2/dev.tsv",), "cola": ("cola/in_domain_dev.tsv",)}


def dev_examples(ctx, task: str) -> list[tuple[str, int]]:
    """The dev (text, label) pairs of ``task`` from the data file the stage declared."""
    from jattn.io import glue

    return glue.read_task(task, "dev", root=ctx.data(TASK_DATA[task][0]).parents[1])


def subset(n_all: int, n: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """A fixed random subset of n of the n_all dev examples (of the ``allowed`` indices when
    given; all of them when n is 0 or more than there are), sorted."""
    pool = np.arange(n_all) if allowed is None else np.asarray(allowed)
    if not n or n >= len(pool):
        return pool
    return np.sort(np.random.default_rng(0).choice(pool, n, replace=False))


def short(tokenizer, dev: list[tuple[str, int]], max_tokens: int | None) -> np.ndarray | None:
    """Indices of the dev examples of at most ``max_tokens`` tokens (None: no limit). The quick
    profile sweeps only these: one length bucket, so one compiled program per sweep."""
    if not max_tokens:
        return None
    lengths = np.array([len(x) for x in tokenizer([t for t, _ in dev])["input_ids"]])
    return np.flatnonzero(lengths <= max_tokens)


def sweep_stage(model: str, task: str, seed: int):
    """The sweep of one classifier (``experiments.common.classifier``) on ``ctx.params["dev"]`` dev examples
    (0: all): the examples' indices and labels, the unmodified predictions and, per head
    (l·H + h) and per layer, the examples whose prediction flips."""
    def run(ctx) -> dict:
        import jattn
        from experiments import common

        dev = dev_examples(ctx, task)
        folder = common.classifier(ctx, model, task, seed)
        net = jattn.load(folder)
        index = subset(len(dev), ctx.params["dev"], short(net.tokenizer, dev, ctx.params.get("max_tokens")))
        files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).iterdir() if p.is_file())
        if net.config.num_labels != 2:
            raise ValueError(f"the disabling claims store binary predictions; {model}-{task} has "
                             f"{net.config.num_labels} labels")
        r = sweep(net, [dev[i] for i in index], ctx.work(), chunk=ctx.params["chunk"], progress=ctx.progress,
                  identity=repr(files))
        L, H = net.config.num_layers, net.config.num_heads
        return {
            "model": model,
            "task": task,
            "seed": seed,
            "index": index.tolist(),
            "heads_per_layer": H,
            "gold": [dev[i][1] for i in index],
            "base": r["base"].tolist(),
            "head_flips": flips(r["base"], r["heads"].reshape(L * H, -1)),
            "layer_flips": flips(r["base"], r["layers"]),
        }

    return run


def sweep(model, examples: list[tuple[str, int]], work: Path, chunk: int = 64, batch_size: int = 32,
          progress: bool = False, identity: str = "") -> dict:
    """Dev predictions with nothing, each head and each layer disabled (uniform). ``examples``
    (text, label); chunks of ``chunk`` examples in order of token length, each saved to
    ``work/chunk_<k>.npz`` once done and read back on a rerun with the same ``identity`` (what
    else the predictions depend on: the model's files); other chunks there are deleted first.
    Returns ``base`` (N,), ``heads`` (L, H, N), ``layers`` (L, N) predicted classes, input order."""
    import hashlib
    import json

    from jattn.sweeps.disable import disable

    work.mkdir(parents=True, exist_ok=True)
    mark = work / "identity.json"
    key = hashlib.sha256(json.dumps([identity, chunk, batch_size, examples]).encode()).hexdigest()
    if not mark.is_file() or json.loads(mark.read_text()) != key:
        for old in work.glob("chunk_*.npz"):
            old.unlink()  # chunks of another model or other examples
        mark.write_text(json.dumps(key))

    lengths = [len(x) for x in model.tokenizer([t for t, _ in examples])["input_ids"]]
    order = np.argsort(lengths, kind="stable")  # (N,) similar lengths share a chunk: little padding
    c = model.config
    N = len(examples)
    base, heads, layers = np.zeros(N, np.int64), np.zeros((c.num_layers, c.num_heads, N), np.int64), \
        np.zeros((c.num_layers, N), np.int64)
    for k, start in enumerate(range(0, N, chunk)):
        idx = order[start:start + chunk]  # (m,)
        path = work / f"chunk_{k}.npz"
        if not path.is_file():
            part = [examples[i] for i in idx]
            kw = dict(mode="uniform", batch_size=batch_size, progress=False)
            h = disable(model, part, unit="head", **kw)
            layer = disable(model, part, unit="layer", **kw)
            tmp = work / f"chunk_{k}.tmp.npz"
            np.savez(tmp, idx=idx, base=h.baseline_predictions, heads=h.predictions, layers=layer.predictions)
            tmp.replace(path)  # a chunk is there whole or not at all
            if progress:
                print(f"    disabling: {min(start + chunk, N)}/{N} examples", flush=True)
        saved = np.load(path)
        if not np.array_equal(saved["idx"], idx):
            raise ValueError(f"{path} holds other examples than this sweep's chunk {k}. Fix: delete {work}")
        base[idx], heads[:, :, idx], layers[:, idx] = saved["base"], saved["heads"], saved["layers"]
    return {"base": base, "heads": heads, "layers": layers}


def flips(base: np.ndarray, preds: np.ndarray) -> list:
    """Binary predictions of variants (..., N) as nested lists of the indices where a variant
    differs from ``base`` (N,)."""
    preds = np.asarray(preds)
    if preds.ndim == 1:
        return np.flatnonzero(preds != base).tolist()
    return [flips(base, p) for p in preds]


def unflip(base, flipped) -> np.ndarray:
    """Inverse of ``flips``: (..., N) binary predictions."""
    base = np.asarray(base)
    if flipped and isinstance(flipped[0], list):  # a list per variant
        return np.stack([unflip(base, f) for f in flipped])
    out = base.copy()
    at = np.asarray(flipped, np.int64)
    out[at] = 1 - out[at]
    return out


def metric_counts(weights: np.ndarray, gold: np.ndarray, preds: np.ndarray, metric: str) -> np.ndarray:
    """The metric of each system on each weighting of the examples: weights (R, n) (how often
    each example counts), gold (n,) and preds (S, n) binary -> (R, S). ``metric``: "accuracy" or
    "mcc" (Matthews correlation from the weighted confusion counts; 0 when a margin is empty, as
    ``jattn.io.glue.matthews_corr``)."""
    g, p = np.asarray(gold, bool), np.asarray(preds, bool)  # (n,), (S, n)
    W = np.asarray(weights, np.float64)  # (R, n)
    if metric == "accuracy":
        return W @ (p == g).T / W.sum(1, keepdims=True)  # (R, S)
    if metric != "mcc":
        raise ValueError(f"metric must be 'accuracy' or 'mcc', got {metric!r}")
    tp, fp = W @ (p & g).T, W @ (p & ~g).T  # (R, S)
    fn, tn = W @ (~p & g).T, W @ (~p & ~g).T  # (R, S)
    den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return np.where(den > 0, (tp * tn - fp * fn) / np.where(den > 0, den, 1.0), 0.0)


def paired_family(gold, base, preds, metric: str, *, b: int = B_FAMILY, seed: int = 0, level: float = 0.95) -> dict:
    """``jattn.stats.paired_bootstrap`` of every system of ``preds`` (S, n) against ``base`` (n,)
    with the same resamples (``default_rng(seed).integers(0, n, (b, n))``, as the stats module
    draws them): ``delta`` (S,), ``ci`` (S, 2), ``p`` (S,) two-sided."""
    gold, base, preds = np.asarray(gold), np.asarray(base), np.atleast_2d(preds)
    n = len(gold)
    idx = np.random.default_rng(seed).integers(0, n, size=(b, n))  # (b, n)
    counts = np.bincount((np.arange(b)[:, None] * n + idx).ravel(), minlength=b * n).reshape(b, n)  # (b, n)
    weights = np.vstack([np.ones((1, n)), counts])  # (1 + b, n): row 0 all examples once
    scores = metric_counts(weights, gold, np.vstack([base[None], preds]), metric)  # (1 + b, 1 + S)
    deltas = scores[:, 1:] - scores[:, :1]  # (1 + b, S)
    lo, hi = np.quantile(deltas[1:], [(1 - level) / 2, (1 + level) / 2], axis=0)  # (S,), (S,)
    p = np.minimum(1.0, 2 * np.minimum((deltas[1:] <= 0).mean(0), (deltas[1:] >= 0).mean(0)))  # (S,)
    return {"delta": deltas[0], "ci": np.stack([lo, hi], 1), "p": p, "b": b}


def halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two fixed, disjoint halves of n dev examples (selection, report): sorted indices."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def best_variant(gold, base, preds, metric: str, rows) -> int:
    """The variant (index into ``preds`` (S, n)) whose Δmetric against ``base`` is largest on
    the examples ``rows`` (ties: the lowest index)."""
    ones = np.ones((1, len(rows)))
    scores = metric_counts(ones, np.asarray(gold)[rows], np.vstack([np.asarray(base)[rows][None],
                                                                     np.asarray(preds)[:, rows]]), metric)[0]
    return int(np.argmax(scores[1:] - scores[0]))
