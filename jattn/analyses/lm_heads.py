"""Detectors of a causal language model's attention heads and the logit lens.

* Induction and previous-token heads (Olsson et al. 2022, "In-context Learning and Induction
  Heads", §2 and Appendix): on a sequence of T random tokens repeated once, x_{T+t} = x_t, an
  induction head attends from the second copy's token i (T ≤ i < 2T) to the token after that
  token's first occurrence, i − T + 1 (prefix matching); its score is the mean of α[h, i, i − T + 1]
  over those queries. A previous-token head attends to i − 1; its score is the mean of
  α[h, i, i − 1] over i ≥ 1. The share of attention on the first token, α[h, i, 0] for i ≥ 1, is the
  attention-sink share (Xiao et al. 2024). Scores are per sequence, so that intervals resample
  sequences; a head that attends uniformly scores about 1 / (i + 1) on each.
* The logit lens (nostalgebraist 2020): the LM head (after the final norm) applied to the residual
  stream entering each layer, logits_l = W_U · Norm_f(h_l), and to the model's output: what the
  stream would predict if the remaining layers were skipped.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["head_scores", "induction_scores", "logit_lens", "repeated_tokens"]


def repeated_tokens(vocab_size: int, length: int, count: int, seed: int = 0, low: int = 0,
                    first: int | None = None) -> np.ndarray:
    """``count`` sequences of ``length`` tokens drawn uniformly from [low, vocab_size), each repeated
    once (Olsson et al. 2022), with ``first`` (e.g. the model's BOS) in front when given.
    -> (count, 2·length [+ 1]) int32."""
    if not 0 <= low < vocab_size:
        raise ValueError(f"low={low} must lie in [0, vocab_size={vocab_size})")
    if length < 2 or count < 1:
        raise ValueError(f"need length >= 2 and count >= 1, got length={length}, count={count}")
    half = np.random.default_rng(seed).integers(low, vocab_size, size=(count, length))  # (N, T)
    ids = np.concatenate([half, half], axis=1)  # (N, 2T)
    if first is not None:
        ids = np.concatenate([np.full((count, 1), first), ids], axis=1)  # (N, 1 + 2T)
    return ids.astype(np.int32)


def head_scores(weights: jax.Array, length: int, offset: int = 0) -> dict[str, jax.Array]:
    """Induction, previous-token and first-token (sink) scores of every head from the attention
    weights on repeated sequences. weights (L, b, H, n, n) with n = offset + 2·length (``offset``
    tokens before the first copy) -> each (b, L, H)."""
    a = weights.astype(jnp.float32)  # (L, b, H, n, n)
    n = a.shape[-1]
    if n != offset + 2 * length:
        raise ValueError(f"weights over {n} positions, but offset {offset} + 2 × length {length} = "
                         f"{offset + 2 * length}")
    second = jnp.arange(offset + length, n)  # (T,) queries in the second copy
    induction = a[..., second, second - length + 1].mean(-1)  # (L, b, H)
    rows = jnp.arange(1, n)  # (n-1,)
    previous = a[..., rows, rows - 1].mean(-1)  # (L, b, H)
    sink = a[..., rows, 0].mean(-1)  # (L, b, H)
    return {k: jnp.moveaxis(v, 1, 0) for k, v in
            (("induction", induction), ("previous_token", previous), ("first_token", sink))}


def induction_scores(model, length: int = 24, count: int = 64, seed: int = 0, batch_size: int = 16,
                     low: int = 0) -> dict[str, np.ndarray]:
    """Every head's induction, previous-token and first-token scores on ``count`` random token
    sequences of ``length`` tokens repeated once (``repeated_tokens``; the model's BOS in front
    when it has one) -> each (count, L, H) numpy, one row per sequence (``head_scores``)."""
    c = model.config
    if not getattr(c, "causal", False):
        raise ValueError("induction_scores reads a causal language model's attention (an induction head attends "
                         "back to where the current token came before); this model is bidirectional. Fix: load a "
                         "causal (decoder-only) language model")
    first = getattr(c, "bos_token_id", None)
    ids = repeated_tokens(c.vocab_size, length, count, seed, low, first)  # (N, n)
    offset = 0 if first is None else 1
    if ids.shape[1] > c.max_length:
        raise ValueError(f"2 × length={length} tokens{' + BOS' if offset else ''} exceed the model's "
                         f"{c.max_length} positions. Fix: length <= {(c.max_length - offset) // 2}")
    out = []
    for start in range(0, count, batch_size):
        rows = ids[start:start + batch_size]  # (b, n)
        weights = model.forward({"input_ids": rows, "attention_mask": np.ones_like(rows)},
                                internals=("weights",), heads=()).attentions  # (L, b, H, n, n); no logits
        out.append(jax.tree.map(np.asarray, head_scores(weights, length, offset)))
    return {k: np.concatenate([o[k] for o in out]) for k in out[0]}


@partial(jax.jit, static_argnames=("config",))
def _lens(params, config, inputs):
    from jattn.nn import encoder

    module = encoder.module(params, config)
    outputs, _ = module(inputs, internals=None, heads=("lm_logits",))
    stream = outputs["hidden_states"][:-1]  # (L, b, n, D) the residual stream entering each layer
    lens = jax.lax.map(lambda h: module.task_outputs(module.final(h), ("lm_logits",))["lm_logits"], stream)
    return jnp.concatenate([lens, outputs["lm_logits"][None]])  # (L+1, b, n, V)


def logit_lens(model, batch) -> np.ndarray:
    """The logit lens of a causal LM on a batch (token ids, or examples ``model.batch`` takes):
    (L+1, b, n, V) numpy, row l < L the final norm and LM head applied to the stream entering
    layer l (l = 0: the embeddings), row L the model's own next-token logits."""
    if not getattr(model.config, "causal", False):
        raise ValueError("logit_lens reads a causal LM's next-token head; this model has none. Fix: load a "
                         "causal (decoder-only) language model")
    inputs = model.batch(batch)
    return np.asarray(_lens(model.params, model.config, {k: inputs[k] for k in ("input_ids", "attention_mask")}))
