"""Training L0 head gates on a converged model (Voita et al. 2019, §5; Louizos et al. 2018).

Objective per step: task loss + λ · L0 penalty, where the gates of every gated attention type are
drawn once per step (``jattn.nn.gates.sample``) and multiply the heads' contexts through
``Interventions.head_gates``. The penalty's normalisation is named (``gates.regulariser``):
``sum_heads`` (the paper's Eq. 5) or ``mean_layers`` (the authors' code). The model's parameters
are frozen unless ``model_lr`` > 0 (then Adam trains them beside the gates, as the paper does).

Task losses: a translation model's token-mean cross-entropy under teacher forcing (optionally
label-smoothed, ``jattn.training.nmt.label_smoothed_loss``), or a sequence classifier's mean
cross-entropy over examples. Evaluation folds the deterministic gates into W_O (a gate on a
head's context equals scaling that head's rows of W_O), so any decoder or classifier runs the
gated model unchanged; ``prune`` then removes the closed heads physically.

Like ``jattn.training.nmt.Trainer``, training holds plain dicts of arrays, one jitted step, and orbax
checkpoints (``last/``: log α, model parameters when trained, optimizer state, data position,
curve) so that constructing a ``GateTrainer`` on an existing workdir resumes.
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

from jattn.io import validate
from jattn.nn.config import EncoderConfig
from jattn.nn import gates as G
from jattn.nn import encoder, seq2seq
from jattn.training.trainer import Checkpointed, Resumable, stop_requests

__all__ = ["fold_gates", "gate_shapes", "GateConfig", "GateTrainer"]

SEQ2SEQ_OUT = {"encoder": ("encoder", "self_attn"), "decoder": ("decoder", "self_attn"),
               "cross": ("decoder", "cross_attn")}


@dataclasses.dataclass(frozen=True)
class GateConfig:
    lam: float = 0.1  # λ
    normalisation: str = "sum_heads"  # see gates.regulariser
    kinds: tuple = ("encoder",)  # gated attention types ("encoder" is the only one of an encoder model)
    steps: int = 500  # optimizer updates
    lr: float = 0.05  # Adam on log α
    model_lr: float = 0.0  # 0: the model is frozen; > 0: Adam on the model's parameters too
    init_log_alpha: float = 3.0
    fixed_open: bool = False  # gates held at 1 and not trained (the λ = 0 control)
    dropout: bool = False  # the model's dropout during gate training
    label_smoothing: float = 0.0  # translation loss
    seed: int = 0
    save_every: int = 100  # updates between checkpoints of last/


def gate_shapes(config) -> dict[str, tuple[int, int]]:
    if isinstance(config, EncoderConfig):
        return {"encoder": (config.num_layers, config.num_heads)}
    return {"encoder": (config.encoder_layers, config.encoder_heads),
            "decoder": (config.decoder_layers, config.decoder_heads),
            "cross": (config.decoder_layers, config.decoder_heads)}


def _out_kernel_path(config, kind: str) -> tuple:
    if isinstance(config, EncoderConfig):
        return ("layers", "attention", "out", "kernel")
    stack, attn = SEQ2SEQ_OUT[kind]
    return (stack, "layers", attn, "out", "kernel")


def fold_gates(params: dict, config, gate_values: dict) -> dict:
    """Parameters whose W_O^h rows are scaled by g_h: the gated model without interventions.
    params: a nested dict (``nnx.to_pure_dict``); gate_values {kind: (L, H)}."""
    out = jax.tree.map(lambda x: x, params)  # a new tree; arrays are shared until replaced
    for kind, g in gate_values.items():
        *parents, leaf = _out_kernel_path(config, kind)
        node = out
        for p in parents:
            node = node[p]
        node[leaf] = node[leaf] * jnp.asarray(g, node[leaf].dtype)[:, :, None, None]  # (L, H, d_h, D)
    return out


def task_loss(config, params, batch: dict, interventions, key, gc: GateConfig, remat: bool = True) -> jax.Array:
    """Token-mean cross-entropy (translation) or example-mean cross-entropy (classifier). ``remat``:
    the gradient keeps one layer's activations at a time where the layers' residuals would not fit
    (``jattn.nn.engine.layer_loop``, ``remat_pays``), the same values."""
    if isinstance(config, EncoderConfig):
        from jattn.nn.losses import classification_loss

        inputs = {k: v for k, v in batch.items() if k != "labels"}
        outputs, _ = encoder.forward(params, config, inputs, interventions, dropout_rng=key, internals=None,
                                     remat=remat)
        return classification_loss(outputs["logits"], batch["labels"])
    from jattn.training.nmt import label_smoothed_loss

    outputs, _ = seq2seq.forward(params, config, batch, interventions, dropout_rng=key, internals=None, remat=remat)
    loss, _ = label_smoothed_loss(outputs["logits"], batch["labels"], batch["label_mask"], gc.label_smoothing)
    return loss / jnp.maximum(batch["label_mask"].sum(), 1)


def objective(log_alpha: dict, params: dict, batch: dict, key, lam, *, config, gc: GateConfig):
    """task loss + λ · penalty, with gates sampled once for the batch. Returns (total, parts).
    ``lam`` is an argument (not read from ``gc``) so that a λ sweep compiles the step once."""
    k_gate, k_drop = jax.random.split(key)
    if gc.fixed_open:
        values = {k: jnp.ones_like(a) for k, a in log_alpha.items()}
    else:
        values = G.gates(log_alpha, k_gate)  # {kind: (L, H)}
    iv = G.interventions(values, encoder_only=isinstance(config, EncoderConfig))
    task = task_loss(config, params, batch, iv, k_drop if gc.dropout else None, gc)
    penalty = G.regulariser(log_alpha, gc.normalisation)
    return task + lam * penalty, {"task": task, "penalty": penalty}


@functools.lru_cache(maxsize=8)
def make_optimizer(gc: GateConfig):
    """Adam on log α (lr ``gc.lr``) and, when ``model_lr`` > 0, on the model (lr ``model_lr``)."""
    gate_opt = optax.adam(gc.lr) if not gc.fixed_open else optax.set_to_zero()
    model_opt = optax.adam(gc.model_lr) if gc.model_lr > 0 else optax.set_to_zero()
    return optax.multi_transform({"gates": gate_opt, "model": model_opt},
                                 {"log_alpha": "gates", "params": "model"})


@partial(jax.jit, static_argnames=("config", "gc", "optimizer"))
def train_step(state: dict, batch: dict, key, lam, *, config, gc: GateConfig, optimizer):
    """One update of log α (and of the model when it is trained)."""
    trainable = {"log_alpha": state["log_alpha"], "params": state["params"]}

    def loss_fn(t):  # a frozen model: no parameter gradients are computed
        params = t["params"] if gc.model_lr > 0 else jax.lax.stop_gradient(t["params"])
        return objective(t["log_alpha"], params, batch, key, lam, config=config, gc=gc)

    (total, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
    updates, opt_state = optimizer.update(grads, state["opt_state"], trainable)
    new = optax.apply_updates(trainable, updates)
    return {**new, "opt_state": opt_state}, {"loss": total, **parts}


def kept(log_alpha: dict) -> dict[str, np.ndarray]:
    """Heads whose evaluation gate is non-zero: {kind: bool (L, H)}."""
    return {k: np.asarray(G.deterministic(a)) > 0 for k, a in log_alpha.items()}


def check_gate_config(gc: GateConfig) -> None:
    """Every number of a ``GateConfig`` finite and in range (``jattn.io.validate``), before any compile."""
    if not isinstance(gc, GateConfig):
        raise TypeError(f"gc must be a GateConfig, got {type(gc).__name__}")
    validate.number("lam (λ)", gc.lam, low=0, fix="pass a non-negative penalty weight, e.g. lam=0.01")
    validate.number("lr", gc.lr, low=0, low_open=True, fix="pass a positive learning rate, e.g. lr=0.05")
    validate.number("model_lr", gc.model_lr, low=0, fix="pass 0 (a frozen model) or a positive learning rate")
    validate.number("init_log_alpha", gc.init_log_alpha)
    validate.number("label_smoothing", gc.label_smoothing, low=0, high=1, high_open=True)
    validate.number("steps", gc.steps, low=1, integer=True)
    validate.number("save_every", gc.save_every, low=1, integer=True)
    validate.number("seed", gc.seed, integer=True)
    if not isinstance(gc.kinds, tuple) or not gc.kinds:
        raise validate.BadArgument("kinds", gc.kinds, "a non-empty tuple of attention types",
                                   "e.g. kinds=('encoder',)")


class GateTrainer(Checkpointed):
    """Runs ``GateConfig`` from ``params`` (a converged model's nested dict) on batches from
    ``batches(epoch) -> list[dict]``; checkpoints under ``workdir/last`` with the run's arguments
    (``jattn.training.trainer.Resumable``); resumes when it exists (with more ``steps`` allowed,
    other arguments refused)."""

    def __init__(self, config, params: dict, gc: GateConfig, workdir, batches: Callable[[int], list]):
        check_gate_config(gc)
        shapes = gate_shapes(config)
        if unknown := set(gc.kinds) - set(shapes):
            raise ValueError(f"cannot gate {sorted(unknown)}: this model has the attention types {sorted(shapes)}")
        if gc.normalisation not in G.NORMALISATIONS:
            raise ValueError(f"normalisation must be one of {G.NORMALISATIONS}, got {gc.normalisation!r}")
        self.config, self.gc, self.batches = config, gc, batches
        # what the compiled step depends on: runs differing only in λ, steps or seed share one compile
        self.static_gc = dataclasses.replace(gc, lam=0.0, steps=0, seed=0, save_every=0)
        self.optimizer = make_optimizer(self.static_gc)
        log_alpha = {k: G.init_log_alpha(shapes[k], gc.init_log_alpha) for k in gc.kinds}
        trainable = {"log_alpha": log_alpha, "params": params}
        self.workdir = Path(workdir).resolve()
        # a checkpoint holds the model's parameters only when they are trained
        saved = ("log_alpha", "opt_state") + (("params",) if gc.model_lr > 0 else ())
        self.run = Resumable(self.workdir, {**trainable, "opt_state": self.optimizer.init(trainable)},
                             {"step": 0, "epoch": 0, "batch_in_epoch": 0, "train_time_s": 0.0, "curve": []},
                             gc, extendable=("steps", "save_every"), saved_keys=saved)

    def save(self):
        self.run.save(self.meta["step"])

    @property
    def log_alpha(self) -> dict:
        return self.state["log_alpha"]

    @property
    def params(self) -> dict:
        return self.state["params"]

    def fit(self, progress: bool = True) -> list:
        """Train to ``gc.steps`` updates; returns the curve (task loss, penalty, heads kept).
        Ctrl-C or SIGTERM: a checkpoint after the current update, then ``KeyboardInterrupt``."""
        with stop_requests() as stop:
            return self._fit(progress, stop)

    def _fit(self, progress: bool, stop) -> list:
        from tqdm.auto import tqdm

        gc, m = self.gc, self.meta
        key = jax.random.key(gc.seed)
        bar = tqdm(total=gc.steps, initial=m["step"], disable=not progress, unit="upd", mininterval=5)
        window: list = []
        while m["step"] < gc.steps:
            batches = self.batches(m["epoch"])
            while m["step"] < gc.steps:
                t0 = time.perf_counter()
                self.state, out = train_step(
                    self.state,
                    batches[m["batch_in_epoch"]],
                    jax.random.fold_in(key, m["step"]),
                    jnp.float32(gc.lam),
                    config=self.config,
                    gc=self.static_gc,
                    optimizer=self.optimizer,
                )
                window.append({k: float(v) for k, v in out.items()})
                if not np.isfinite(window[-1]["loss"]):  # diverged: the last checkpoint stays as it was
                    raise ValueError(f"gate training diverged: the loss is {window[-1]['loss']} at update "
                                     f"{m['step'] + 1} (lr {gc.lr:g}, λ {gc.lam:g}). Fix: lower the learning rate, "
                                     f"then start again in a new work folder (or delete {self.workdir})")
                m["train_time_s"] += time.perf_counter() - t0
                m["step"] += 1
                m["batch_in_epoch"] += 1
                epoch_done = m["batch_in_epoch"] >= len(batches)
                if epoch_done:  # before any save, so that a resumed run starts the next epoch
                    m["epoch"] += 1
                    m["batch_in_epoch"] = 0
                bar.update(1)
                if m["step"] % 25 == 0 or m["step"] == gc.steps:
                    mean = {k: float(np.mean([w[k] for w in window])) for k in window[0]}
                    heads = {k: int(v.sum()) for k, v in kept(self.log_alpha).items()}
                    m["curve"].append({"step": m["step"], **mean, "heads_kept": heads,
                                       "train_time_s": round(m["train_time_s"], 1)})
                    bar.set_postfix(task=f"{mean['task']:.3f}", kept=sum(heads.values()), refresh=False)
                    window = []
                if m["step"] % gc.save_every == 0 or stop.requested:
                    self.save()
                if stop.requested:
                    raise KeyboardInterrupt
                if epoch_done:
                    break
        self.save()
        bar.close()
        return m["curve"]

    def evaluation_gates(self) -> dict:
        """Deterministic gates {kind: (L, H)} of every attention type (1 for ungated types)."""
        values = {k: np.ones(s, np.float32) for k, s in gate_shapes(self.config).items()}
        values.update({k: np.asarray(G.deterministic(a)) for k, a in self.log_alpha.items()})
        return values
