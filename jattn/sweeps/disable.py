"""Head and layer disabling sweeps (Kovaleva et al. 2019, §4.2 and Fig. 9; Michel et al. 2019, §3).

For every single head (l, h) — and every whole layer l — the task metric of a sequence
classifier is measured with that head (or all of the layer's heads) disabled, and reported as
Δmetric = metric(disabled) − metric(intact). Two ways to disable (``mode``):

* ``"uniform"`` (Kovaleva): the head's weights become the uniform distribution over the
  sequence's real keys, α[h,i,j] = mask_j / Σ_j mask_j (``Interventions.disabled_heads``);
* ``"zero"`` (Michel): the head's context Σ_j α v is multiplied by ξ = 0 before W_O, so the
  block's output is b_O plus the other heads' terms (``Interventions.head_gates``).

Batched form. Disabling a head of layer l leaves layers 0..l−1 unchanged, so one intact
forward per batch gives every layer's input x_l (``hidden_states[l]``), and each variant only
re-runs the *suffix* of layers l..L−1 from x_l (prefix reuse). The variants of layer l (its H
single-head masks, or the all-heads mask) run in one compiled call, one after another
(``lax.map``): under ``jax.vmap`` they ran as one V·b-row batch whose activations outgrow the
CPU caches, 1.5× slower per layer than a b-row forward (MiniLM, 32 × 40 tokens). The
suffix is one compiled program for every l: a ``fori_loop`` from the traced start l indexes the
stacked layer state, and the mask is applied at the first layer of the loop only. The last
layer computes the [CLS] query row only — the classifier reads nothing else — while its keys
and values still come from every token. Cost per batch: H·Σ_l (L − l − 1) full layers plus
H·L last-layer [CLS] rows, instead of L·H full L-layer forwards.

``sweep_by_loop`` is the straightforward reference: one complete evaluation per disabled
head or layer through ``model.forward`` with interventions, as the original study ran it.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from jattn.io import validate
from jattn.nn.engine import layer_slice
from jattn.nn.interventions import Interventions
from jattn.nn import state
from jattn.runner.batcher import model_batches
from jattn.runner.inputs import Tokens, corpus, default_length
from jattn.sweeps.importance import check_sizes

__all__ = ["batches", "disable", "heads_metric", "metric_function", "MODES", "SweepResult", "UNITS"]

MODES = ("uniform", "zero")
UNITS = ("head", "layer")


@dataclasses.dataclass
class SweepResult:
    """One sweep: the intact metric, and the metric with each unit disabled."""

    mode: str  # "uniform" | "zero"
    unit: str  # "head" | "layer"
    metric_name: str
    baseline: float  # metric of the intact model
    metric: np.ndarray  # (L, H) for heads, (L,) for layers: metric with that unit disabled
    predictions: np.ndarray  # (L, H, N) or (L, N) predicted class per example (input order)
    baseline_predictions: np.ndarray | None = None  # (N,) the intact model's predicted classes

    @property
    def delta(self) -> np.ndarray:
        """Δmetric = metric(disabled) − baseline, (L, H) or (L,)."""
        return self.metric - self.baseline

    def improving(self) -> list[dict]:
        """The units whose removal improves the metric, best first, 0-based."""
        d = self.delta
        order = np.argsort(-d, axis=None)
        return [dict(zip(("layer", "head")[:d.ndim], map(int, np.unravel_index(i, d.shape))), delta=float(d.flat[i]))
                for i in order if d.flat[i] > 0]

    def to_json(self) -> dict:
        return {"mode": self.mode, "unit": self.unit, "metric": self.metric_name, "baseline_metric": self.baseline,
                "metric_disabled": self.metric.tolist(), "delta": self.delta.tolist(), "improving": self.improving()}


def metric_function(metric) -> tuple[str, Callable]:
    """A metric name ("accuracy" | "matthews_corr") or a callable (pred, gold) -> float."""
    from jattn.io import glue

    if callable(metric):
        return getattr(metric, "__name__", "metric"), metric
    known = {"accuracy": glue.accuracy, "matthews_corr": glue.matthews_corr}
    if metric not in known:
        raise ValueError(f"unknown metric {metric!r}. Fix: use one of {', '.join(known)} or pass a function "
                         "(predictions, labels) -> float")
    return metric, known[metric]


def _check(model, examples, mode: str, unit: str) -> list:
    """The sweep's arguments checked; -> ``examples`` as (input, label) pairs (a tokenized batch's
    rows with its ``labels``: ``jattn.runner.inputs.corpus``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (uniform: Kovaleva's disabling; zero: Michel's masking), "
                         f"got {mode!r}")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if not getattr(model.config, "num_labels", 0):
        raise ValueError(
            "the disabling sweep needs a sequence classifier (config.num_labels > 0). Fix: load a "
            'fine-tuned classifier (e.g. `jattn models make minilm-sst2`, then jattn.load("minilm-sst2")) '
            "or fine-tune one with jattn.training.finetune"
        )
    examples = corpus(model, examples)
    if not examples:
        raise ValueError("no examples: the sweep needs (text, label) pairs")
    for i, ex in enumerate(examples):
        if not (isinstance(ex, (tuple, list)) and len(ex) == 2 and isinstance(ex[1], (int, np.integer))):
            raise ValueError(f"example {i} is {ex!r}: examples must be (text, label) or ((A, B), label) "
                             "with an integer label, or a tokenized batch with labels (b,). Fix: e.g. "
                             "jattn.io.glue.read_task('sst2', 'dev')")
    validate.labels("labels", [y for _, y in examples], model.config.num_labels)
    return list(examples)


def batches(model, examples, batch_size: int, max_length: int | None):
    """(text, label) examples -> the runner's batches (``jattn.runner.batcher.model_batches``):
    yields (input dict of (b, n) arrays, corpus indices (b_real,)); every batch has
    ``batch_size`` rows (filler rows' predictions are dropped), so each bucket length compiles once;
    ``max_length`` None: 128, or the model's positions where fewer."""
    texts = [t if isinstance(t, (str, Tokens)) else tuple(t) for t, _ in examples]
    for inputs, idx in model_batches(model, texts, batch_size, default_length(model, max_length)):
        yield model.check_batch(inputs), idx


def variant_masks(config, unit: str) -> np.ndarray:
    """The disable masks of one layer's variants: (H, H) one-hot rows for heads, (1, H) all-True for the layer."""
    H = config.num_heads
    return np.eye(H, dtype=bool) if unit == "head" else np.ones((1, H), bool)


def _layer_interventions(mask, mode: str, on) -> Interventions:
    """One layer's interventions: ``mask`` (H,) bool applied when ``on`` (traced bool)."""
    mask = mask & on  # (H,)
    if mode == "uniform":
        return Interventions(disabled_heads=mask)
    return Interventions(head_gates=1.0 - mask.astype(jnp.float32))  # ξ_h = 0 on the masked head


def suffix_logits(params, config, x, allowed, start, mask, mode: str) -> jax.Array:
    """Logits after running layers start..L−1 from x (the input of layer ``start``), with the
    heads in ``mask`` (H,) disabled in layer ``start`` only. x (b, n, D), allowed (b, 1, n),
    start a traced int -> (b, C)."""
    encoder = state.merge(params, config)
    graphdef, stacked = nnx.split(encoder.layers)
    L = config.num_layers

    def layer_at(i):
        return nnx.merge(graphdef, layer_slice(stacked, i))

    n = x.shape[1]

    def body(i, x):
        y, _ = layer_at(i)(x, allowed, _layer_interventions(mask, mode, i == start), None,
                           encoder.score_bias(i, n))  # (b, n, D)
        return y

    x = jax.lax.fori_loop(start, L - 1, body, x)  # (b, n, D) input of the last layer
    cls = layer_at(L - 1).cls_row(x, allowed, _layer_interventions(mask, mode, start == L - 1),
                                  encoder.score_bias(L - 1, n))  # (b, 1, D)
    return encoder.head_logits(cls)  # (b, C)


@partial(jax.jit, static_argnames=("config", "mode"))
def _variants(params, config, x, allowed, start, masks, mode):
    """``suffix_logits`` for every mask of ``masks`` (V, H), one after another -> (V, b, C)."""
    return jax.lax.map(lambda m: suffix_logits(params, config, x, allowed, start, m, mode), masks)


@partial(jax.jit, static_argnames=("config",))
def _intact(params, config, batch):
    """Intact forward: (every layer's input (L+1, b, n, D), logits (b, C))."""
    from jattn.nn.encoder import forward

    out, _ = forward(params, config, batch, None, internals=None)
    return out["hidden_states"], out["logits"]


@partial(jax.jit, static_argnames=("config",))
def _full_logits(params, config, batch, interventions):
    """One complete forward with ``interventions`` -> logits (b, C)."""
    from jattn.nn.encoder import forward

    return forward(params, config, batch, interventions, internals=None)[0]["logits"]


def sweep_logits(model, batch: dict, mode: str, unit: str) -> tuple[jax.Array, jax.Array]:
    """Intact logits (b, C) and the logits of every variant (L, V, b, C) on one checked batch
    (``model.check_batch``): V = H single heads, or V = 1 whole layer."""
    c = model.config
    masks = jnp.asarray(variant_masks(c, unit))  # (V, H)
    hidden, logits = _intact(model.params, c, batch)  # (L+1, b, n, D), (b, C)
    allowed = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, n)
    variants = [_variants(model.params, c, hidden[l], allowed, jnp.int32(l), masks, mode)  # (V, b, C)
                for l in range(c.num_layers)]
    return logits, jnp.stack(variants)  # (b, C), (L, V, b, C)


def disable(model, examples: Sequence, metric="accuracy", *, mode: str = "uniform", unit: str = "head",
                  batch_size: int = 32, max_length: int | None = None, progress: bool = True) -> SweepResult:
    """Δmetric for each single head (``unit="head"``, (L, H)) or whole layer (``"layer"``, (L,))
    disabled (``mode`` "uniform": Kovaleva et al. 2019; "zero": Michel et al. 2019), batched
    with prefix reuse (module docstring). ``examples``: (text or (A, B), label) pairs, or a
    tokenized batch with ``labels`` (b,);
    ``metric``: "accuracy", "matthews_corr" or a function (predictions, labels) -> float."""
    examples = _check(model, examples, mode, unit)
    check_sizes(batch_size, max_length)
    name, fn = metric_function(metric)
    L, N = model.config.num_layers, len(examples)
    base = np.zeros(N, np.int64)  # (N,)
    preds = np.zeros((L, len(variant_masks(model.config, unit)), N), np.int64)  # (L, V, N)
    bar = tqdm(total=N, unit="ex", desc=f"disable {unit}s ({mode})", disable=not progress, dynamic_ncols=True)
    for batch, idx in batches(model, examples, batch_size, max_length):
        logits, variants = sweep_logits(model, batch, mode, unit)  # (b, C), (L, V, b, C)
        base[idx] = np.asarray(logits.argmax(-1))[:len(idx)]
        preds[:, :, idx] = np.asarray(variants.argmax(-1))[:, :, :len(idx)]
        bar.update(len(idx))
    bar.close()
    return _result(mode, unit, name, fn, examples, base, preds)


def _result(mode, unit, name, fn, examples, base, preds) -> SweepResult:
    labels = np.asarray([y for _, y in examples])  # (N,)
    if unit == "layer":
        preds = preds[:, 0]  # (L, N)
    scores = np.vectorize(lambda *i: fn(preds[i], labels))(*np.indices(preds.shape[:-1]))  # (L, H) or (L,)
    return SweepResult(mode, unit, name, float(fn(base, labels)), np.asarray(scores, np.float64), preds, base)


def sweep_by_loop(model, examples: Sequence, metric="accuracy", *, mode: str = "uniform", unit: str = "head",
                  batch_size: int = 32, max_length: int | None = None, progress: bool = True) -> SweepResult:
    """The same sweep as L·H (or L) complete evaluations through ``model.forward`` with one
    ``Interventions`` each: the straightforward reference for tests and the benchmark."""
    examples = _check(model, examples, mode, unit)
    name, fn = metric_function(metric)
    c = model.config
    L, H, N = c.num_layers, c.num_heads, len(examples)
    data = list(batches(model, examples, batch_size, max_length))

    def evaluate(iv):
        out = np.zeros(N, np.int64)
        for batch, idx in data:
            logits = _full_logits(model.params, c, batch, iv)  # (b, C)
            out[idx] = np.asarray(logits.argmax(-1))[:len(idx)]
        return out

    masks = variant_masks(c, unit)  # (V, H)
    preds = np.zeros((L, len(masks), N), np.int64)
    base = evaluate(Interventions())
    with tqdm(total=L * len(masks), desc=f"disable {unit}s one by one", disable=not progress) as bar:
        for l in range(L):
            for v, m in enumerate(masks):
                full = np.zeros((L, H), bool)
                full[l] = m
                iv = (Interventions(disabled_heads=full) if mode == "uniform"
                      else Interventions(head_gates=1.0 - full.astype(np.float32)))
                preds[l, v] = evaluate(iv.check(L, H))
                bar.update()
    return _result(mode, unit, name, fn, examples, base, preds)


def heads_metric(model, examples: Sequence, heads, metric="accuracy", *, mode: str = "uniform",
                 batch_size: int = 32, max_length: int | None = None) -> float:
    """The metric with the heads ``heads`` ([(layer, head)], 0-based, or an "L:H,L:H" string:
    ``jattn.io.validate.heads``) disabled together (``mode`` as ``disable``)."""
    examples = _check(model, examples, mode, "head")
    check_sizes(batch_size, max_length)
    c = model.config
    if isinstance(heads, str):
        heads = validate.heads(heads, c.num_layers, c.num_heads, "heads")
    full = np.zeros((c.num_layers, c.num_heads), bool)  # (L, H)
    for l, h in heads:
        validate.number("heads: layer", l, low=0, high=c.num_layers - 1, integer=True)
        validate.number("heads: head", h, low=0, high=c.num_heads - 1, integer=True)
        full[l, h] = True
    iv = (Interventions(disabled_heads=full) if mode == "uniform"
          else Interventions(head_gates=1.0 - full.astype(np.float32))).check(c.num_layers, c.num_heads)
    name, fn = metric_function(metric)
    pred = np.zeros(len(examples), np.int64)
    for batch, idx in batches(model, examples, batch_size, max_length):
        pred[idx] = np.asarray(_full_logits(model.params, c, batch, iv).argmax(-1))[:len(idx)]
    return float(fn(pred, np.asarray([y for _, y in examples])))
