"""Training and importance losses shared by fine-tuning, head importance, gate training and
Clark's ∂L/∂α (``jattn.analyses.grad``). Per-example losses return (b,); padding never enters."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax


def classification_loss(logits: jax.Array, labels: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """Mean cross-entropy over examples. logits (b, C), labels (b,) int; ``weights`` (b,) {0,1}
    drops padding rows of a fixed-size batch exactly."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)  # (b,)
    if weights is None:
        return ce.mean()
    return (ce * weights).sum() / jnp.maximum(weights.sum(), 1.0)


def example_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Cross-entropy of each example. logits (b, C), labels (b,) int -> (b,)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)  # (b,)


def mask_tokens(batch, mask_token_id: int, rate: float, seed: int) -> dict[str, np.ndarray]:
    """Masked-LM input (Devlin et al. 2019, §3.1, without the 80/10/10 replacement): choose ⌊rate·m⌉
    (≥ 1) of the m real non-special tokens of each row of a ``jattn.runner.protocol.HostBatch`` and
    replace them by [MASK]. Positions are drawn with a generator seeded by (seed, corpus index),
    so they do not depend on batching. Returns masked ``input_ids`` (b, n), ``positions`` /
    ``labels`` (b, M) (-1 = unused; M = ⌈rate·n⌉ + 1 depends only on the padded length) and the
    model-side ``token_class`` (a masked token counts as OTHER)."""
    from jattn.nn.token_classes import CLS, OTHER, SEP

    b, n = batch.input_ids.shape
    M = math.ceil(rate * n) + 1
    ids = batch.input_ids.copy()  # (b, n)
    positions = np.full((b, M), -1, np.int32)  # (b, M)
    labels = np.full((b, M), -1, np.int32)  # (b, M)
    token_class = batch.token_class.copy()  # (b, n)
    for r in range(b):
        if batch.example[r] < 0:
            continue
        cands = np.flatnonzero((batch.attention_mask[r] > 0) & (batch.token_class[r] != CLS)
                               & (batch.token_class[r] != SEP))
        if not len(cands):
            continue
        k = max(1, int(round(rate * len(cands))))
        chosen = np.sort(np.random.default_rng([seed, int(batch.example[r])]).choice(cands, k, replace=False))
        positions[r, :k], labels[r, :k] = chosen, ids[r, chosen]
        ids[r, chosen] = mask_token_id
        token_class[r, chosen] = OTHER
    return {"input_ids": ids, "positions": positions, "labels": labels, "token_class": token_class}


def mlm_loss(params, config, outputs, features) -> jax.Array:
    """Masked-LM loss of each sequence: mean cross-entropy over its masked positions
    (``features`` from ``mask_tokens``; 0 for a row with none). -> (b,)"""
    from jattn.nn import encoder

    pos = jnp.maximum(features["positions"], 0)  # (b, M)
    hidden = jnp.take_along_axis(outputs["last_hidden_state"], pos[..., None], axis=1)  # (b, M, D)
    logits = encoder.mlm_logits(params, config, hidden).astype(jnp.float32)  # (b, M, V)
    labels = jnp.maximum(features["labels"], 0)  # (b, M)
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, labels[..., None], -1)[..., 0]  # (b, M)
    used = (features["labels"] >= 0).astype(nll.dtype)  # (b, M)
    return (nll * used).sum(-1) / jnp.maximum(used.sum(-1), 1.0)  # (b,)


def lm_loss(params, config, outputs, batch) -> jax.Array:
    """Next-token cross-entropy of each sequence of a causal LM (Radford et al. 2019): the mean
    over the positions t whose token t + 1 is real of −log p(x_{t+1} | x_≤t) (0 for a row with
    none). ``outputs["last_hidden_state"]`` (b, n, D), ``batch``: ``input_ids``, ``attention_mask``
    (b, n). -> (b,)"""
    from jattn.nn import encoder

    hidden = outputs["last_hidden_state"]  # (b, n, D)
    logits = encoder.module(params, config).task_outputs(hidden, ("lm_logits",))["lm_logits"][:, :-1]  # (b, n-1, V)
    logits = logits.astype(jnp.float32)
    nxt = batch["input_ids"][:, 1:]  # (b, n-1)
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, nxt[..., None], -1)[..., 0]  # (b, n-1)
    real = batch["attention_mask"] > 0  # (b, n)
    used = (real[:, 1:] & real[:, :-1]).astype(nll.dtype)  # (b, n-1)
    return (nll * used).sum(-1) / jnp.maximum(used.sum(-1), 1.0)  # (b,)


def translation_loss(logits: jax.Array, labels: jax.Array, label_mask: jax.Array) -> jax.Array:
    """Teacher-forced token cross-entropy of each sentence pair, summed over its real target
    tokens (padding contributes exactly zero). logits (b, t, V), labels / label_mask (b, t) -> (b,)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # (b, t, V)
    nll = -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]  # (b, t)
    return jnp.where(label_mask > 0, nll, 0.0).sum(-1)  # (b,)


def default_loss(model) -> str:
    """The loss a model's own head defines: "classification" (a sequence-classification
    checkpoint, ``config.num_labels`` > 0), "mlm" (a masked-LM checkpoint), "lm" (a causal LM,
    next-token cross-entropy) or "translation" (an encoder–decoder model, teacher-forced token
    cross-entropy). ValueError otherwise."""
    config = model.config
    if hasattr(config, "decoder_layers"):
        return "translation"
    if getattr(config, "causal", False):
        return "lm"
    if getattr(config, "num_labels", 0) > 0:
        return "classification"
    if getattr(config, "with_mlm_head", False):
        return "mlm"
    raise ValueError(f"{getattr(model, 'source', '') or 'this model'} has neither a classification nor a masked-LM "
                     "head, so it defines no loss. Fix: load a *ForSequenceClassification or *ForMaskedLM "
                     "checkpoint, or pass loss=fn(params, config, outputs, batch) -> (b,) per-example losses")
