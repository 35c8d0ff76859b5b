"""Causal language-model training from scratch with optax: next-token cross-entropy
(``jattn.nn.losses.lm_loss``), AdamW with linear warm-up and cosine decay, global-norm
clipping, parameter groups kept at their initial values (``frozen``: e.g. an attention-only model's
zeroed feed-forward blocks), orbax checkpoints for resuming and a tqdm bar with the loss.

The data are a function ``sample(step) -> (b, n) int ids``: batch s depends only on s, so a
resumed run sees exactly the batches an uninterrupted one would (no data position to save).
Training stays on the split state (nested dicts of arrays) as ``jattn.training.nmt`` does.

References: Radford et al. 2019 (the objective); Loshchilov & Hutter 2019 (AdamW); Olsson et al.
2022 (the in-context loss drop on repeated tokens, ``repeat_losses``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from functools import partial
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jattn.nn import encoder
from jattn.nn import state as nn_state
from jattn.nn.config import EncoderConfig
from jattn.nn.losses import lm_loss
from jattn.training.trainer import Checkpointed, Resumable, stop_requests

__all__ = ["init_params", "LMTrainConfig", "repeat_losses", "token_losses", "Trainer"]


@dataclasses.dataclass(frozen=True)
class LMTrainConfig:
    steps: int = 3000
    peak_lr: float = 1e-3
    warmup_steps: int = 200
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    seed: int = 0
    frozen: tuple[str, ...] = ()  # parameter subtrees (names on their path) kept at their initial values
    eval_every: int = 250  # optimizer steps between evaluations (the curve)
    save_every_s: float = 120.0  # checkpoint after this much training time

    def __post_init__(self):
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must lie in [0, steps={self.steps}): the learning rate "
                             "warms up, then decays over the remaining steps. Fix: fewer warm-up steps or more steps")


def init_params(config: EncoderConfig, seed: int, zeroed: tuple[str, ...] = ()) -> dict:
    """Random parameters (each module's initialiser: N(0, 0.02) kernels and embeddings, zero
    biases, unit norms) as a nested dict; every leaf whose path names one of ``zeroed`` is 0."""
    params = nn_state.to_arrays(nn_state.init(config, seed))

    def zero(path, x):
        names = {getattr(k, "key", None) for k in path}
        return jnp.zeros_like(x) if names & set(zeroed) else x

    return jax.tree_util.tree_map_with_path(zero, params)


@functools.lru_cache(maxsize=8)
def make_optimizer(tc: LMTrainConfig, params_structure):
    """AdamW(0.9, 0.95) with warm-up then cosine decay to 10 % of the peak, clipping; the
    subtrees named in ``tc.frozen`` get a zero update (``optax.multi_transform``)."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, tc.peak_lr, tc.warmup_steps, tc.steps, tc.peak_lr / 10)
    train = optax.chain(optax.clip_by_global_norm(tc.clip_norm),
                        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay))
    if not tc.frozen:
        return train

    def label(path, _):
        return "frozen" if {getattr(k, "key", None) for k in path} & set(tc.frozen) else "train"

    labels = jax.tree_util.tree_map_with_path(
        label, jax.tree.unflatten(params_structure, [0] * params_structure.num_leaves)
    )
    return optax.multi_transform({"train": train, "frozen": optax.set_to_zero()}, labels)


@partial(jax.jit, static_argnames=("config", "optimizer"), donate_argnums=(0, 1))
def train_step(params, opt_state, ids, *, config: EncoderConfig, optimizer):
    """One update on ids (b, n): the mean over rows of each row's mean next-token loss."""
    batch = {"input_ids": ids, "attention_mask": jnp.ones_like(ids)}

    def loss_fn(p):
        outputs, _ = encoder.forward(p, config, batch, internals=None)
        return lm_loss(p, config, outputs, batch).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@partial(jax.jit, static_argnames=("config",))
def token_losses(params, config: EncoderConfig, ids) -> jax.Array:
    """−log p(x_{t+1} | x_≤t) at every position: ids (b, n) -> (b, n-1)."""
    batch = {"input_ids": ids, "attention_mask": jnp.ones_like(ids)}
    outputs, _ = encoder.forward(params, config, batch, internals=None)
    logits = encoder.module(params, config).task_outputs(outputs["last_hidden_state"], ("lm_logits",))["lm_logits"]
    logits = logits[:, :-1].astype(jnp.float32)  # (b, n-1, V)
    nxt = ids[:, 1:]  # (b, n-1)
    return jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, nxt[..., None], -1)[..., 0]  # (b, n-1)


def repeat_losses(params, config: EncoderConfig, ids: np.ndarray, length: int, offset: int) -> dict[str, np.ndarray]:
    """Olsson et al. 2022's in-context measure on sequences of ``length`` random tokens repeated once
    (``offset`` tokens, e.g. BOS, before them): the mean loss of predicting the first copy's tokens
    2..T and the second copy's tokens 2..T, per sequence; an induction mechanism makes the second
    small. ids (N, offset + 2T) -> {"first", "second", "drop"} each (N,)."""
    nll = np.asarray(token_losses(params, config, jnp.asarray(ids)))  # (N, n-1): row t predicts token t + 1
    first = nll[:, offset: offset + length - 1].mean(-1)  # (N,) predicting tokens offset+1 .. offset+T-1
    second = nll[:, offset + length: offset + 2 * length - 1].mean(-1)  # (N,) the second copy's tokens 2..T
    return {"first": first, "second": second, "drop": first - second}


class Trainer(Checkpointed):
    """Runs ``LMTrainConfig`` on batches ``sample(step)``; ``workdir/last`` holds the resumable
    state (``jattn.training.trainer.Resumable``: parameters, optimizer, step, curve, the run's
    arguments; only the evaluation and checkpoint schedules may change on resume: the learning-rate
    schedule depends on ``steps``)."""

    EXTENDABLE = ("eval_every", "save_every_s")

    def __init__(self, config: EncoderConfig, tc: LMTrainConfig, workdir, zeroed: tuple[str, ...] = ()):
        self.config, self.tc = config, tc
        params = init_params(config, tc.seed, zeroed)
        self.optimizer = make_optimizer(tc, jax.tree.structure(params))
        self.run = Resumable(Path(workdir), {"params": params, "opt_state": self.optimizer.init(params)},
                             {"step": 0, "train_time_s": 0.0, "curve": []}, tc, self.EXTENDABLE)

    def fit(self, sample: Callable[[int], np.ndarray], evaluate: Callable[[dict], dict] | None = None,
            progress: bool = True) -> list[dict]:
        """Train to ``tc.steps``; every ``eval_every`` steps append {step, train_loss, **evaluate(params)}
        to the curve. Ctrl-C / SIGTERM: a checkpoint, then ``KeyboardInterrupt``. Returns the curve."""
        from tqdm.auto import tqdm

        tc, m = self.tc, self.meta
        losses = []
        with stop_requests() as stop, tqdm(total=tc.steps, initial=m["step"], disable=not progress, unit="step",
                                           mininterval=5) as bar:
            while m["step"] < tc.steps:
                ids = jnp.asarray(sample(m["step"]))  # (b, n)
                t0 = time.perf_counter()
                params, opt_state, loss = train_step(self.state["params"], self.state["opt_state"], ids,
                                                     config=self.config, optimizer=self.optimizer)
                self.state = {"params": params, "opt_state": opt_state}
                losses.append(float(loss))
                m["train_time_s"] += time.perf_counter() - t0
                m["step"] += 1
                bar.update(1)
                if m["step"] % tc.eval_every == 0 or m["step"] == tc.steps:
                    point = {"step": m["step"], "train_loss": float(np.mean(losses)),
                             "train_time_s": round(m["train_time_s"], 1)}
                    point.update(evaluate(self.state["params"]) if evaluate else {})
                    m["curve"].append(point)
                    bar.set_postfix({k: f"{v:.3f}" for k, v in point.items() if isinstance(v, float)}, refresh=False)
                    losses = []
                if stop.requested:
                    self.run.save(m["step"])
                    raise KeyboardInterrupt
                if m["train_time_s"] - m.get("saved_at_s", 0.0) >= tc.save_every_s or m["step"] == tc.steps:
                    m["saved_at_s"] = m["train_time_s"]
                    self.run.save(m["step"])
        return m["curve"]
