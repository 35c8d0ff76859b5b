"""Head importance by the gradient of a loss w.r.t. head gates (Michel et al. 2019, "Are Sixteen
Heads Really Better than One?", §4.1, Eq. 3).

A gate ξ_h multiplies head h's context before W_O (``Interventions.head_gates``); the importance
of head h is I_h = E_x |∂L(x)/∂ξ_h| = E_x |Σ_tokens ctx_h · ∂L/∂ctx_h|. Three estimators are in
circulation and all three are offered (``estimator``):

* ``"token"`` — |·| per token position: gates (L, b, H, n), Σ over real query tokens of
  |∂L_s/∂ξ_{h,i}|, divided by the number of real tokens (the authors' released code; default);
* ``"example"`` — |·| per example (the paper's formula): gates (L, b, H), Σ_s |∂L_s/∂ξ_h| / #examples;
* ``"batch"`` — |·| of the batch sum (Hugging Face's later script): gates (L, H),
  Σ_batches |Σ_{s ∈ batch} ∂L_s/∂ξ_h| / #examples — depends on the batch size by definition.

One backward pass per batch gives every example's (and token's) own gradient, because the
batch loss is the sum of the examples' losses L_s and examples do not interact. Padding tokens
and padding rows contribute exactly zero (their terms are masked out).

``normalize=True`` applies the authors' normalisation: the division above (for a [CLS]
classifier's last layer with the token estimator, by the number of examples: only [CLS] gets
gradient there), then per layer I[l] /= ‖I[l]‖₂ + 1e-20. Under a head mask m (pruned heads
ξ = 0), the statistic is |ξ·∂L/∂ξ| at ξ = m, the authors' ctx · ∂L/∂ctx of the masked model:
exactly 0 for pruned heads. The mask reaches the jitted step as data, so a new mask never
recompiles.

Losses (``jattn.nn.losses``): a classifier checkpoint's cross-entropy (examples carry labels), the
masked-LM loss of an MLM checkpoint (15 % masked, seeded per corpus index), a causal LM's
next-token cross-entropy (mean over each sequence's predicted positions), and for a
translation model the teacher-forced token cross-entropy summed over target tokens (examples
are (source, target) pairs; importance per attention type: encoder self, decoder self, cross).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jattn.io import validate
from jattn.nn import losses
from jattn.nn.interventions import Interventions
from jattn.runner.protocol import HostBatch, Method, Statistic, StepContext
from jattn.analyses.registry import register
from jattn.runner.inputs import Tokens, corpus, default_length
from jattn.nn import encoder

__all__ = ["ESTIMATORS", "translation_batches"]

ESTIMATORS = ("token", "example", "batch")
EPS = 1e-20  # the authors' guard in the per-layer L2 normalisation


def check_sizes(batch_size, max_length) -> None:
    """``batch_size`` and ``max_length`` (None allowed) as positive integers."""
    validate.number("batch_size", batch_size, low=1, integer=True)
    if max_length is not None:
        validate.number("max_length", max_length, low=2, integer=True)


def check_estimator(estimator: str) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown importance estimator {estimator!r}. Fix: choose from {', '.join(ESTIMATORS)}")
    return estimator


def gate_sums(total_loss: Callable, masks: dict, queries: dict, rows: jax.Array, estimator: str) -> dict:
    """Σ over the estimator's units of |ξ ∂L/∂ξ| per attention type, at ξ = the head mask.

    total_loss(head_gates: {kind: (L, b, H) or (L, b, H, q)}) -> scalar Σ_s L_s over real rows.
    masks {kind: (b, L, H)} per-row head mask (1 kept, 0 pruned); queries {kind: (b, q)} real
    query tokens of real rows; rows (b,) real rows. The gradient is taken w.r.t. probe gates p
    of ones, ξ = p · m, so ∂L/∂p = m · ∂L/∂ξ: the probe's shape picks the estimator.
    -> {kind: (L, H)}."""
    def gates_of(probes):
        out = {}
        for kind, m in masks.items():
            m = jnp.transpose(m, (1, 0, 2))  # (L, b, H)
            p = probes[kind]
            out[kind] = (p * m[..., None] if estimator == "token"
                         else p * m if estimator == "example" else p[:, None, :] * m)  # (L, b, H[, q])
        return out

    probes = {}
    for kind, m in masks.items():
        b, L, H = m.shape
        q = queries[kind].shape[1]
        probes[kind] = jnp.ones({"token": (L, b, H, q), "example": (L, b, H), "batch": (L, H)}[estimator])
    grads = jax.grad(lambda p: total_loss(gates_of(p)))(probes)
    sums = {}
    for kind, g in grads.items():
        g = jnp.abs(g)
        if estimator == "token":
            sums[kind] = jnp.einsum("lbhq,bq->lh", g, queries[kind].astype(g.dtype))  # (L, H)
        elif estimator == "example":
            sums[kind] = jnp.einsum("lbh,b->lh", g, rows.astype(g.dtype))  # (L, H)
        else:
            sums[kind] = g  # (L, H)
    return sums


def fill_rows(batch: dict, rows: jax.Array) -> dict:
    """``batch`` with its filler rows (``rows`` False: padding only, no example) replaced by a copy
    of the first real row, for a user's loss: it never sees a row without tokens (a mean over no
    token is 0/0, and its gradient NaN even where that row's loss is dropped). The copies stay
    marked as filler (``batch["example"]`` −1, or ``label_mask`` all 0) and their losses are
    dropped (``jnp.where(rows, …)``), so they add exactly nothing. Arrays (b, ...) only, at any depth."""
    first = jnp.argmax(rows)  # the first real row
    keep = ("example", "label_mask")  # the masks that say which rows are filler

    def fill(x):
        if x.ndim == 0 or x.shape[0] != rows.shape[0]:
            return x
        return jnp.where(rows.reshape(-1, *(1,) * (x.ndim - 1)), x, x[first])  # (b, ...)

    return {k: x if k in keep else jax.tree.map(fill, x) for k, x in batch.items()}


def finish(total: np.ndarray, count: np.ndarray, normalize: bool) -> np.ndarray:
    """Mean over units (count per layer (L,) or scalar), then per-layer L2 if ``normalize``."""
    imp = total / np.maximum(np.asarray(count, np.float64), 1.0).reshape(-1, 1)  # (L, H)
    if normalize:
        imp = imp / (np.linalg.norm(imp, axis=1, keepdims=True) + EPS)
    return imp


def head_mask_rows(mask, b: int, L: int, H: int) -> np.ndarray:
    """A (L, H) head mask (None = all kept) repeated per row: (b, L, H) float32."""
    m = np.ones((L, H), np.float32) if mask is None else np.asarray(mask, np.float32)
    if m.shape != (L, H):
        raise ValueError(f"head mask must be (L, H) = ({L}, {H}), got {m.shape}")
    if not np.isin(m, (0.0, 1.0)).all():
        raise ValueError("head mask must hold 0 (pruned) and 1 (kept) only")
    return np.ascontiguousarray(np.broadcast_to(m, (b, L, H)))


@dataclasses.dataclass(frozen=True)
class HeadImportance(Method):
    """Encoder head importance through the corpus runner: additive (L, H) sums and counts.

    ``labels`` (per corpus index, classification) and ``head_mask`` ((L, H), where the
    gradient is taken) reach the step as per-row data through ``prepare``: they are left out
    of equality, so a new mask or label set reuses the compiled step."""

    model: dataclasses.InitVar[object]
    loss: Callable | None = None  # fn(params, config, outputs, batch) -> (b,); None = the model's own
    _: dataclasses.KW_ONLY
    estimator: str = "token"
    normalize: bool = True
    mask_rate: float = 0.15
    seed: int = 0
    labels: tuple | None = dataclasses.field(default=None, compare=False, repr=False)
    head_mask: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)
    kind: str = dataclasses.field(init=False)
    shape: tuple = dataclasses.field(init=False)
    mask_token_id: int = dataclasses.field(init=False)
    name = "importance"
    families = ("encoder", "decoder")  # a causal LM: its next-token loss
    internals = ()  # its own forwards through the gates: the runner's forward keeps no layer's internals
    remat = True  # the gradient keeps one layer's activations at a time (``jattn.nn.engine.layer_loop``): exact

    def __post_init__(self, model):
        check_estimator(self.estimator)
        kind = "custom" if self.loss is not None else losses.default_loss(model)
        if kind == "translation":
            raise ValueError("HeadImportance runs encoders; use jattn.importance(model, pairs) for a translation model")
        if kind == "classification" and self.labels is None:
            raise ValueError("a classifier's importance needs labels. Fix: pass examples as (text, label) pairs")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "shape", (model.config.num_layers, model.config.num_heads))
        if kind == "mlm" and not model.has_tokenizer:
            raise ValueError(f"the masked-LM loss replaces tokens by the tokenizer's mask token, and "
                             f"{model.source or 'the model'} was loaded without a tokenizer. Fix: load it with its "
                             "tokenizer, or pass loss=fn(params, config, outputs, batch) -> (b,)")
        mask_id = getattr(model.tokenizer, "mask_token_id", None) if kind == "mlm" else None
        object.__setattr__(self, "mask_token_id", mask_id or -1)

    def prepare(self, batch: HostBatch) -> dict:
        b = batch.input_ids.shape[0]
        f = {"head_mask": head_mask_rows(self.head_mask, b, *self.shape)}
        if self.kind == "mlm":
            masked = losses.mask_tokens(batch, self.mask_token_id, self.mask_rate, self.seed)
            f.update(input_ids=masked["input_ids"], positions=masked["positions"], mlm_labels=masked["labels"])
        if self.labels is not None:
            f["labels"] = np.asarray([self.labels[i] if i >= 0 else 0 for i in batch.example], np.int32)  # (b,)
        return f

    def example_losses(self, ctx: StepContext, outputs, batch: dict) -> jax.Array:
        """L_s of each row (b,); ``batch`` the rows the forward ran on."""
        f = ctx.features
        if self.kind == "classification":
            return losses.example_cross_entropy(outputs["logits"], f["labels"])
        if self.kind == "mlm":
            return losses.mlm_loss(ctx.params, ctx.config, outputs, {"positions": f["positions"],
                                                                     "labels": f["mlm_labels"]})
        if self.kind == "lm":
            return losses.lm_loss(ctx.params, ctx.config, outputs, batch)
        return self.loss(ctx.params, ctx.config, outputs, {**batch, **f})

    def reduce(self, ctx: StepContext) -> dict:
        f = ctx.features
        rows = ctx.batch["example"] >= 0  # (b,)
        real = (ctx.batch["attention_mask"] > 0) & rows[:, None]  # (b, n)
        batch = fill_rows(ctx.batch, rows) if self.kind == "custom" else ctx.batch
        overrides = {"input_ids": f["input_ids"]} if self.kind == "mlm" else {}

        def total_loss(gates):
            iv = Interventions(head_gates=gates["encoder"])
            if self.kind == "classification":  # the logits alone: the last layer on [CLS] only
                outputs = {"logits": encoder.classify(ctx.params, ctx.config, ctx.batch, iv, remat=self.remat)}
            elif self.kind == "custom":  # on the filled rows
                inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
                outputs, _ = encoder.forward(ctx.params, ctx.config, inputs, iv, internals=None, remat=self.remat)
            else:
                outputs, _ = ctx.forward(interventions=iv, internals=None, remat=self.remat, **overrides)
            return jnp.where(rows, self.example_losses(ctx, outputs, batch), 0.0).sum()

        sums = gate_sums(total_loss, {"encoder": f["head_mask"]}, {"encoder": real}, rows, self.estimator)
        return {"sum": sums["encoder"], "tokens": real.sum().astype(jnp.float32),
                "examples": rows.sum().astype(jnp.float32)}

    def finalize(self, totals, meta):
        L = self.shape[0]
        count = np.full(L, totals["examples"] if self.estimator != "token" else totals["tokens"])
        if self.estimator == "token" and self.kind == "classification":
            count[-1] = totals["examples"]  # only [CLS] gets gradient in a [CLS] classifier's last layer
        value = finish(totals["sum"], count, self.normalize)
        norm = ", per-layer L2 normalised" if self.normalize else ""
        return {"importance": Statistic(value, f"(L, H) head importance E|dL/dξ| ({self.estimator} estimator, "
                                               f"{self.kind} loss{norm}; Michel et al. 2019)")}


def split_labels(examples: Sequence, kind: str) -> tuple[list, tuple | None]:
    """Classification examples are (input, label) with input a text or an (A, B) pair."""
    if kind != "classification":
        return list(examples), None
    inputs, labels = [], []
    for i, x in enumerate(examples):
        if not (isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], (int, np.integer))):
            raise ValueError(f"example {i}: a classifier's importance needs (text, label) pairs with an int label, "
                             f"got {str(x)[:80]!r}")
        inputs.append(x[0])
        labels.append(int(x[1]))
    return inputs, tuple(labels)


def importance(model, examples: Sequence, *, loss: Callable | None = None, estimator: str = "token",
               normalize: bool = True, mask=None, batch_size: int = 32, max_length: int | None = None,
               progress: bool = True):
    """Head importance (Michel et al. 2019, Eq. 3) over ``examples``; see the module docstring.

    -> {attention type: (L, H) numpy}, ``{"encoder": ...}`` for an encoder. Encoder examples are
    texts / (A, B) pairs (masked-LM loss) or (input, label) pairs (a classifier); a translation
    model's are (source, target) text pairs (types "encoder", "decoder", "cross"); or the same
    examples tokenized (``jattn.runner.inputs``: a classifier's batch holds ``labels``).
    ``loss(params, config, outputs, batch) -> (b,)`` replaces the model's own loss. ``mask``: the
    head mask at which the gradient is taken, {type: (L, H)} (or, for an encoder, the bare (L, H));
    pruned heads get 0."""
    check_estimator(estimator)
    check_sizes(batch_size, max_length)
    max_length = default_length(model, max_length)
    mask = {} if mask is None else model.per_type(mask, "mask")
    kind = "custom" if loss is not None else losses.default_loss(model)
    examples = corpus(model, examples, kind == "classification")  # a tokenized batch: a ``Tokens`` per row
    from jattn.runner.loop import run_corpus

    if hasattr(model.config, "decoder_layers"):
        if not any(isinstance(x, Tokens) for x in examples):
            check_pairs(examples)
        if not len(examples):
            raise ValueError("no translation pairs given: importance needs at least one (source, target) pair")
        method = TranslationImportance(loss, estimator=estimator, normalize=normalize, masks=mask,
                                       shapes=model.head_shapes)
        result = run_corpus(model, examples, [method], batch_size=batch_size, max_length=max_length,
                            progress=progress)
        return {kind: result.statistics[f"{kind}_importance"].value for kind in KINDS}
    inputs, labels = split_labels(examples, kind)
    if labels is not None:
        validate.labels("labels", labels, model.config.num_labels)
    method = HeadImportance(model, loss, estimator=estimator, normalize=normalize, labels=labels,
                            head_mask=mask.get("encoder"))
    result = run_corpus(model, inputs, [method], batch_size=batch_size, max_length=max_length, progress=progress)
    return {"encoder": result.statistics["importance"].value}


KINDS = ("encoder", "decoder", "cross")


@dataclasses.dataclass(frozen=True)
class TranslationImportance(Method):
    """A translation model's head importance through the corpus runner (``jattn.runner.translation``):
    the teacher-forced token cross-entropy summed over target tokens (or ``loss``), one backward
    pass per batch through the gates of all three attention types (``joint``), additive (L, H)
    sums and counts per type. ``masks`` {type: (L, H)} (missing types: all kept) reach the step
    as per-row data through ``prepare``, left out of equality like ``HeadImportance``'s."""

    loss: Callable | None = None  # fn(params, config, outputs, batch) -> (b,); None = the model's own
    _: dataclasses.KW_ONLY
    estimator: str = "token"
    normalize: bool = True
    masks: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    shapes: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # {type: (L, H)}
    name = "importance"
    families = ("seq2seq",)
    joint = True
    internals = ()  # its own forwards through the gates: the runner's forward keeps no layer's internals
    remat = True  # as ``HeadImportance``'s: both stacks' layers recomputed one at a time in the backward pass

    def prepare(self, batch) -> dict:
        b = batch.input_ids.shape[0]
        return {kind: head_mask_rows(self.masks.get(kind), b, *self.shapes[kind]) for kind in KINDS}

    def reduce(self, ctx: StepContext) -> dict:
        """One batch of translation pairs -> {type: (L, H)} sums and counts."""
        from jattn.nn import seq2seq

        b = ctx.batch  # the training batch's fields: labels padded as the decoder input, their mask
        batch = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"],
                 "decoder_input_ids": b["decoder_input_ids"],
                 "labels": jnp.where(b["target_ids"] >= 0, b["target_ids"], ctx.config.pad_token_id),
                 "label_mask": b["decoder_attention_mask"]}
        rows = batch["label_mask"].sum(1) > 0  # (b,)
        source = (batch["attention_mask"] > 0) & rows[:, None]  # (b, s)
        target = batch["label_mask"] > 0  # (b, t)
        if self.loss is not None:  # a user's loss never sees a filler row (``fill_rows``)
            batch = fill_rows(batch, rows)
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}

        def total_loss(gates):
            iv = {kind: Interventions(head_gates=g) for kind, g in gates.items()}
            outputs, _ = seq2seq.forward(ctx.params, ctx.config, inputs, iv, internals=None, remat=self.remat)
            per = (losses.translation_loss(outputs["logits"], batch["labels"], batch["label_mask"])
                   if self.loss is None else self.loss(ctx.params, ctx.config, outputs, batch))  # (b,)
            return jnp.where(rows, per, 0.0).sum()

        queries = {"encoder": source, "decoder": target, "cross": target}
        sums = gate_sums(total_loss, ctx.features, queries, rows, self.estimator)
        counts = {"encoder": source.sum(), "decoder": target.sum(), "cross": target.sum(), "examples": rows.sum()}
        return {"sums": sums, "counts": {k: c.astype(jnp.float32) for k, c in counts.items()}}

    def finalize(self, totals, meta):
        norm = ", per-layer L2 normalised" if self.normalize else ""
        counts = totals["counts"]
        return {f"{kind}_importance": Statistic(
            finish(totals["sums"][kind], counts[kind] if self.estimator == "token" else counts["examples"],
                   self.normalize),
            f"{kind} attention: (L, H) head importance E|dL/dξ| ({self.estimator} estimator, "
            f"{'translation' if self.loss is None else 'custom'} loss{norm}; Michel et al. 2019)") for kind in KINDS}


def check_pairs(pairs: Sequence) -> None:
    """(source, target) text pairs, each side a non-empty string; else a ValueError naming the first other."""
    for i, x in enumerate(pairs):
        if not (isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(t, str) and t.strip() for t in x)):
            raise ValueError(f"example {i}: a translation model's importance needs (source, target) text pairs, "
                             f"got {str(x)[:80]!r}")


def translation_batches(model, pairs: Sequence, batch_size: int, max_length: int):
    """(source, target) text pairs, or a tokenized batch's rows (``Tokens``) -> (length-sorted padded
    ``jattn.runner.batcher.TrainingBatch`` of ``batch_size`` rows (filler rows fully masked), lengths
    rounded up to multiples of 16; the indices of its real rows' pairs)."""
    from jattn.io.parallel import encode
    from jattn.runner.batcher import make_batch, round_up

    given = [x for x in pairs if isinstance(x, Tokens)]  # a tokenized batch's rows: no text to encode
    if not given:
        check_pairs(pairs)
    c, prepare = model.config, getattr(model, "prepare_texts", list)  # the model's own text normalisation
    if given:
        src, tgt = [x.ids for x in given], [x.target for x in given]
        if too_long := [i for i, (x, y) in enumerate(zip(src, tgt)) if max(len(x), len(y)) > max_length]:
            raise ValueError(f"{len(too_long)} row(s) of the tokenized batch exceed max_length={max_length} tokens "
                             f"(first: row {too_long[0]}). Fix: a larger max_length= (up to the model's positions)")
    else:
        src = encode(model.tokenizer, prepare([s for s, _ in pairs]), max_length)
        tgt = encode(model.tokenizer, prepare([t for _, t in pairs]), max_length, target=True)
    order = np.argsort([max(len(x), len(y)) for x, y in zip(src, tgt)], kind="stable")
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        n = round_up(max(max(len(src[i]), len(tgt[i])) for i in idx), 16)
        yield make_batch([src[i] for i in idx], [tgt[i] for i in idx], c.pad_token_id, c.decoder_start_token_id,
                         rows=batch_size, length=n), idx


register("importance", "head importance |dL/d gate| (token estimator; the model's own loss; Michel et al. 2019)",
         lambda model, options: HeadImportance(model))
