"""Pruning curves by head importance (Michel et al. 2019, §4.2 and Fig. 3/4): rank every head by
importance, mask the least important in cumulative steps of a fixed share of all heads
(``step`` = 10 % or 5 %), evaluate the task metric after each step.

Masking is Michel's: gate ξ_h = 0 zeroes the head's context (W_O's bias still passes), as
``Interventions.head_gates``. For a translation model encoder self-, decoder self- and
cross-attention heads are ranked together. ``schedule="once"`` ranks with the importance of the
full model; ``"reestimate"`` recomputes importance under the current mask before each step (the
paper's iterative variant). ``keep_one_per_layer`` never masks the last head of a layer. The
mask is an array argument of the jitted evaluation, so the curve compiles once. On a model pruned
before (``jattn.sweeps.pruning``) the shares and steps count its heads, not its padding slots.

Metric helpers: ``classification_metric`` (accuracy or Matthews correlation of a classifier)
and ``bleu_metric`` (corpus sacreBLEU of greedy translations), each a function mask -> float.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from jattn.io import validate
from jattn.nn.interventions import Interventions
from jattn.runner.batcher import model_batches
from jattn.runner.inputs import corpus
from jattn.sweeps.importance import KINDS, check_sizes, importance
from jattn.sweeps.pruning import real_heads

__all__ = ["as_lists", "bleu_metric", "classification_metric", "classification_predictions", "flat_scores",
           "heads_per_step", "prunable_fraction", "prune", "SCHEDULES"]

SCHEDULES = ("once", "reestimate")


def flat_scores(model, scores) -> np.ndarray:
    """Scores per head ({type: (L, H)}, or an encoder's bare (L, H)) flattened in
    ``model.head_shapes`` order."""
    scores = model.per_type(scores, "scores")
    if missing := [k for k in model.head_shapes if k not in scores]:
        raise ValueError(f"scores: no scores for the attention types {missing}")
    return np.concatenate([np.asarray(scores[k], np.float64).ravel() for k in model.head_shapes])


def held(model) -> np.ndarray:
    """(N,) bool in ``model.head_shapes`` order: True where a slot holds a head, False on the
    padding slots of a physically pruned model (``jattn.sweeps.pruning``), which are not heads."""
    if getattr(getattr(model, "config", None), "pruned", None) is None:  # unpruned, or a model-like object
        return np.ones(sum(L * H for L, H in model.head_shapes.values()), bool)
    real = real_heads(model.config)  # {type: (L, H')}
    return np.concatenate([real[k].ravel() for k in model.head_shapes])


def choose(scores: np.ndarray, kept: np.ndarray, layer_of: np.ndarray, k: int, keep_one_per_layer: bool) -> list:
    """The k kept heads of lowest score (ties: lower flat index), never a layer's last head
    when ``keep_one_per_layer``. scores, kept, layer_of (N,) -> flat indices."""
    left = np.bincount(layer_of, weights=kept, minlength=layer_of.max() + 1)  # kept heads per layer
    chosen = []
    for i in np.lexsort((np.arange(len(scores)), scores)):
        if len(chosen) == k:
            break
        if not kept[i] or (keep_one_per_layer and left[layer_of[i]] <= 1):
            continue
        chosen.append(int(i))
        left[layer_of[i]] -= 1
    return chosen


def heads_per_step(step: float, heads: int, option: str = "step") -> int:
    """The heads one step masks: ``step`` (a share of all ``heads``) rounded to whole heads; a
    step under half a head is refused (it would mask none, or one head under another name)."""
    k = int(round(step * heads))
    if k < 1:
        raise ValueError(f"{option} {step:g} of {heads} heads is {step * heads:.2g} of a head per step. "
                         f"Fix: pass {option} ≥ {1 / heads:.2g} (one head per step)")
    return k


def prune(model, examples: Sequence, metric_fn: Callable, *, estimator: str = "token",
                  schedule: str = "once", step: float = 0.1, keep_one_per_layer: bool = False, loss=None,
                  scores=None, batch_size: int = 32, max_length: int | None = None, progress: bool = False,
                  history: list | None = None, masks_out: list | None = None, state_file=None,
                  identity: dict | None = None) -> list[list[float]]:
    """Metric vs share of heads masked: [[fraction_pruned, metric], ...] from 0 to the last step.

    ``examples``: what ``jattn.importance`` takes (the data importance is estimated on).
    ``metric_fn(mask) -> float`` with mask {attention type: (L, H) float {0, 1}} (as ``importance``
    returns them). ``scores``: a fixed ranking instead of importance (e.g. random: the baseline),
    in the same form (an encoder's bare (L, H) too), only with ``schedule="once"``. ``history`` /
    ``masks_out``: if lists, the importance used at each step / the head mask of each curve point
    are appended to them.

    ``state_file``: a JSON file the curve is saved to after every point (written atomically), and
    resumed from when it exists: a run stopped anywhere (Ctrl-C, a kill) and started again with
    the same arguments continues where it stopped and ends with the uninterrupted run's curve.
    The settings and ``identity`` (what else determines the curve, e.g. the model and data) are
    recorded in it; a file recorded with others is refused."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}. Fix: choose from {', '.join(SCHEDULES)}")
    step = validate.number("step", step, low=0, high=1, low_open=True,
                           fix="pass a share of all heads, e.g. step=0.1 (10 % per step)")
    check_sizes(batch_size, max_length)
    if scores is not None and schedule != "once":
        raise ValueError("a fixed ranking (scores=...) cannot be re-estimated: use schedule='once'")
    shapes = model.head_shapes
    layer_of = np.concatenate([np.repeat(np.arange(L) + sum(s[0] for s in list(shapes.values())[:i]), H)
                               for i, (L, H) in enumerate(shapes.values())])  # (N,) a global layer id per head
    real = held(model)  # (N,) padding slots of an already pruned model are not heads: never counted or chosen
    N = int(real.sum())
    k = heads_per_step(step, N)
    kept = real.astype(np.float32)  # (N,) slots, 0 on padding

    def masks() -> dict:
        out, start = {}, 0
        for kind, (L, H) in shapes.items():
            out[kind] = kept[start:start + L * H].reshape(L, H).copy()
            start += L * H
        return out

    def estimate():
        imp = importance(model, examples, loss=loss, estimator=estimator, mask=masks(), batch_size=batch_size,
                         max_length=max_length, progress=progress)
        if history is not None:
            history.append(imp)
        return flat_scores(model, imp)

    def evaluate() -> float:
        if masks_out is not None:
            masks_out.append(masks())
        value = float(metric_fn(masks()))
        if not np.isfinite(value):
            raise ValueError(
                f"the metric is {value} with {1 - kept[real].mean():.1%} of the heads masked: a curve with a "
                "non-finite point cannot be read. Fix: check the dev data (enough examples for the "
                "metric) and the model's outputs (finite logits)"
            )
        return value

    settings = {"estimator": estimator, "schedule": schedule, "step": step, "keep_one_per_layer": keep_one_per_layer,
                "heads": N, "fixed_scores": scores is not None, **(identity or {})}
    saved = _resume(state_file, settings)
    if saved is None:
        curve, current = [[0.0, evaluate()]], (flat_scores(model, scores) if scores is not None else None)
    else:
        curve, kept[:] = saved["curve"], saved["kept"]
        current = None if saved["current"] is None else np.asarray(saved["current"], np.float64)
        for name, out in (("history", history), ("masks", masks_out)):
            if out is not None:
                out += [_arrays(x) for x in saved[name]]
    while True:
        _save(state_file, settings, curve, kept, current, history, masks_out)
        if current is None or schedule == "reestimate":
            current = estimate()
        chosen = choose(current, kept, layer_of, k, keep_one_per_layer)
        if not chosen:
            return curve
        kept[chosen] = 0.0
        curve.append([float(1 - kept[real].mean()), evaluate()])


def as_lists(x: dict) -> dict:
    """{type: array} as nested lists, for JSON."""
    return {k: np.asarray(v).tolist() for k, v in x.items()}


def _arrays(x: dict) -> dict:
    return {k: np.asarray(v) for k, v in x.items()}


def _save(state_file, settings, curve, kept, current, history, masks_out) -> None:
    """The curve so far, the kept heads and the ranking in use, replacing ``state_file`` whole
    (``jattn.io.atomic``: a reader never sees half a file; never written through a link)."""
    import json
    from pathlib import Path

    from jattn.io import atomic

    if state_file is None:
        return
    path = Path(state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"settings": settings, "curve": curve, "kept": kept.tolist(),
           "current": None if current is None else np.asarray(current).tolist(),
           "history": [as_lists(x) for x in history or []], "masks": [as_lists(x) for x in masks_out or []]}
    atomic.replace(path, json.dumps(doc), instead="pass another state_file (jattn prune: another --out)")


def _resume(state_file, settings) -> dict | None:
    """The saved state of a run with these ``settings``; None when there is none."""
    import json
    from pathlib import Path

    if state_file is None or not Path(state_file).is_file():
        return None
    saved = json.loads(Path(state_file).read_text())
    recorded = json.loads(json.dumps(saved["settings"]))
    if recorded != json.loads(json.dumps(settings)):
        differ = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != settings.get(k))
        raise ValueError(f"{state_file} holds a pruning curve with other settings: "
                         + ", ".join(f"{k}={recorded.get(k)!r} (now {settings.get(k)!r})" for k in differ)
                         + ". Fix: rerun with the recorded settings to resume it, or delete the file to start anew")
    return saved


def prunable_fraction(curve: list, baseline: float, tolerance: float = 1.0, higher_is_better: bool = True) -> float:
    """The largest fraction pruned such that every step up to it stays within ``tolerance`` of
    ``baseline`` (metric points: accuracy/MCC ×100 or BLEU)."""
    tolerance = validate.number("tolerance", tolerance, low=0,
                                fix="pass the metric points a prunable step may lose, e.g. 1.0")
    validate.number("baseline", baseline, fix="the unpruned model's metric must be a finite number")
    for fraction, value in curve:
        validate.number(f"curve point at {fraction:.1%}", value, fix="compute the curve's metric again")
    best = 0.0
    for fraction, value in curve:
        loss = (baseline - value) if higher_is_better else (value - baseline)
        if loss > tolerance:
            break
        best = fraction
    return best


def classification_predictions(model, texts: Sequence, batch_size: int = 64,
                               max_length: int | None = None) -> Callable:
    """mask ({"encoder": (L, H)} or the bare (L, H)) -> the classifier's predicted class of
    each of ``texts`` (an int array, the texts' order) with the heads where mask is 0 gated
    off. Batches are tokenized once (the runner's batches,
    ``jattn.runner.batcher.model_batches``; an over-long input is an error, never cut); the
    jitted forward takes the mask as an argument."""
    if not getattr(model.config, "num_labels", 0):
        raise ValueError("a classifier checkpoint is needed (config.num_labels > 0)")
    max_length = min(128, model.config.max_length) if max_length is None else max_length
    texts = corpus(model, texts, False)  # a tokenized batch: one ``Tokens`` per row
    batches = list(model_batches(model, list(texts), batch_size, max_length))

    def predict(mask) -> np.ndarray:
        iv = Interventions(head_gates=jnp.asarray(model.per_type(mask, "mask")["encoder"], jnp.float32))
        pred = np.zeros(len(texts), np.int64)
        for batch, idx in batches:
            logits = model.classify(batch, iv)  # (b, C)
            pred[idx] = np.asarray(logits).argmax(-1)[: len(idx)]
        return pred

    return predict


def classification_metric(model, examples: Sequence, metric: str = "accuracy", batch_size: int = 64,
                          max_length: int | None = None, scale: float = 100.0) -> Callable:
    """mask ({"encoder": (L, H)} or the bare (L, H)) -> ``metric`` ("accuracy" |
    "matthews_corr") ×``scale`` of a classifier on (input, label) ``examples``
    (``classification_predictions`` scored against the labels)."""
    from jattn.io.glue import accuracy, matthews_corr

    score = {"accuracy": accuracy, "matthews_corr": matthews_corr}.get(metric)
    if score is None:
        raise ValueError(f"unknown metric {metric!r}; choose accuracy or matthews_corr")
    if not getattr(model.config, "num_labels", 0):
        raise ValueError("classification_metric needs a classifier checkpoint (config.num_labels > 0)")
    examples = corpus(model, examples)  # a tokenized batch with labels: (``Tokens``, label) per row
    gold = validate.labels("labels", [y for _, y in examples], model.config.num_labels)
    predict = classification_predictions(model, [x for x, _ in examples], batch_size, max_length)
    return lambda mask: scale * score(predict(mask), gold)


def bleu_metric(model, pairs: Sequence, batch_size: int = 64, max_length: int | None = None) -> Callable:
    """mask {kind: (L, H)} -> corpus sacreBLEU (13a) of greedy translations of the sources of
    (source, reference) ``pairs`` against the references. Sources are tokenized once, sorted
    by length and padded to fixed shapes (rows ``batch_size``, lengths multiples of 16)."""
    import sacrebleu

    from jattn.io.parallel import encode
    from jattn.runner.batcher import make_batch, round_up
    from jattn.nn import decode

    c = model.config
    max_length = min(128, c.max_length) if max_length is None else max_length
    prepare = getattr(model, "prepare_texts", list)  # the model's own text normalisation, on both sides
    src = encode(model.tokenizer, prepare([s for s, _ in pairs]), max_length)
    refs = prepare([t for _, t in pairs])
    order = np.argsort([len(x) for x in src], kind="stable")
    batches = []
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        chunk = [src[j] for j in idx]
        b = make_batch(chunk + [chunk[0]] * (batch_size - len(idx)), [np.zeros(1, np.int32)] * batch_size,
                       c.pad_token_id, c.decoder_start_token_id, length=round_up(max(len(x) for x in chunk), 16))
        batches.append((idx, jnp.asarray(b.input_ids), jnp.asarray(b.attention_mask)))

    def evaluate(mask) -> float:
        iv = {kind: Interventions(head_gates=jnp.asarray(mask[kind], jnp.float32)) for kind in KINDS}
        hyps: list = [None] * len(src)
        for idx, ids, att in batches:
            out = np.asarray(decode.generate(model.params, c, ids, att, max_length=max_length, interventions=iv))
            for j, text in zip(idx, model.tokenizer.batch_decode(out[: len(idx)].tolist(), skip_special_tokens=True)):
                hyps[j] = text
        return sacrebleu.corpus_bleu(hyps, [refs]).score

    return evaluate
