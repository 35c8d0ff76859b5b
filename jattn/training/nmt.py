"""NMT training with optax: label-smoothed cross-entropy, Adam with inverse-sqrt warm-up,
dropout, token-based batches, gradient accumulation, orbax checkpoints (latest for resuming,
best by validation BLEU), a tqdm bar with loss and tokens/s, and sacreBLEU evaluation.

Training stays on the split state (``nnx.split``'s parameters as a nested dict, optax over it)
rather than ``nnx.Optimizer``: one jitted, buffer-donating step, and orbax saves and restores
the same plain tree with the optimizer state beside it for exact resume.

References: Vaswani et al. 2017 (§5.3 Adam β=(0.9, 0.98), ε=1e-9, warm-up then inverse square
root decay, Eq. 3; §5.4 dropout and label smoothing ε_ls=0.1, Szegedy et al. 2016); Post 2018
(sacreBLEU); Ott et al. 2018 (token-based batching, accumulated gradients).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jattn.nn.config import Seq2SeqConfig
from jattn.runner.batcher import TrainingBatch, make_batch, token_batches
from jattn.nn import decode, seq2seq
from jattn.nn.seq2seq import Seq2Seq
from jattn.training.trainer import Checkpointed, Resumable, stop_requests

__all__ = ["device_batch", "TrainConfig", "Trainer", "translations"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    peak_lr: float = 1e-3
    warmup_steps: int = 1000
    max_tokens: int = 4096  # padded tokens per side per micro-batch
    accumulate: int = 1  # micro-batches per optimizer update
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    epochs: int = 20
    time_budget_s: float = float("inf")  # stop (and evaluate) after this much training time
    eval_every: int = 0  # optimizer updates between validations; 0 = once per epoch
    patience: int = 0  # stop after this many validations without a better BLEU (converged); 0 = never
    eval_beams: int = 1  # validation decoding (greedy is cheap; the final test uses beams)
    save_every_s: float = 600.0  # also checkpoint last/ after this much training time
    max_decode_length: int = 96
    seed: int = 0
    compute_dtype: str = "float32"
    depth_scaled_init: bool = False  # DS-Init (``init_params``)
    encoder_self_attention: bool = True  # False: no encoder self-attention (``init_params``, ``make_optimizer``)


def _is_encoder_self_attention(path) -> bool:
    """The leaf at ``path`` (a tree path of the parameters) is an encoder self-attention projection."""
    names = [getattr(k, "key", None) for k in path]
    return names[:3] == ["encoder", "layers", "self_attn"]


def init_params(config: Seq2SeqConfig, key, depth_scaled: bool = False, encoder_self_attention: bool = True) -> dict:
    """Random parameters of ``jattn.nn.seq2seq.Seq2Seq`` as a nested dict of arrays (what optax
    and orbax hold): Xavier-uniform kernels (Glorot & Bengio 2010), N(0, D^-1/2) embeddings with a
    zero pad row, zero biases, unit LayerNorm. ``depth_scaled``: DS-Init (Zhang, Titov & Sennrich
    2019, §4, Eq. 9 with α = 1), every kernel of encoder or decoder layer l = 1..L scaled by 1/√l,
    so that the residual branches of the upper layers start small and a deep post-LayerNorm stack
    trains without the slow start of plain Xavier initialisation. ``encoder_self_attention=False``:
    the encoder's query, key, value and output projections (kernels and biases) are zero — with
    ``make_optimizer`` keeping them there, each encoder position sees only itself (the control of
    an encoder with no self-attention for Voita et al. 2019's pruning claims); the model exports
    as an ordinary Marian folder whose encoder attention adds nothing."""
    params = nnx.to_pure_dict(nnx.state(Seq2Seq(config, rngs=nnx.Rngs(key)), nnx.Param))
    if not encoder_self_attention:
        params = jax.tree_util.tree_map_with_path(
            lambda path, x: jnp.zeros_like(x) if _is_encoder_self_attention(path) else x, params)
    if not depth_scaled:
        return params

    def scale(path, x):  # layer tensors are stacked: x (L, ...)
        names = [getattr(k, "key", None) for k in path]
        if "layers" not in names or names[-1] != "kernel":
            return x
        depth = jnp.arange(1, x.shape[0] + 1, dtype=x.dtype)  # (L,) l = 1..L
        return x / jnp.sqrt(depth).reshape(-1, *(1,) * (x.ndim - 1))

    return jax.tree_util.tree_map_with_path(scale, params)


def label_smoothed_loss(logits, labels, mask, eps: float):
    """Σ over target tokens of (1-ε)·(-log p_y) + ε·mean_v(-log p_v) (Szegedy et al. 2016),
    and Σ -log p_y. logits (b, t, V), labels/mask (b, t) -> two scalars."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # (b, t, V)
    nll = -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]  # (b, t)
    smooth = -logp.mean(-1)  # (b, t)
    loss = ((1.0 - eps) * nll + eps * smooth) * mask  # (b, t)
    return loss.sum(), (nll * mask).sum()


def inverse_sqrt_schedule(peak_lr: float, warmup: int):
    """lr(s) = peak · min(s / warmup, sqrt(warmup / s)) (Vaswani et al. 2017, Eq. 3, rescaled
    so that the peak is ``peak_lr`` at s = warmup)."""
    def schedule(step):
        s = jnp.maximum(step, 1).astype(jnp.float32)
        return peak_lr * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))
    return schedule


@functools.lru_cache(maxsize=8)  # one object per config: a resumed Trainer reuses the compiled step
def make_optimizer(tc: TrainConfig):
    """Adam(0.9, 0.98, 1e-9) with the inverse-sqrt schedule and global-norm clipping; the update
    is applied every ``accumulate`` micro-batches (``optax.MultiSteps``). Without
    ``encoder_self_attention`` the encoder's self-attention projections get no update
    (``optax.multi_transform``: they stay at the zeros ``init_params`` gives them)."""
    opt = optax.chain(optax.clip_by_global_norm(tc.clip_norm),
                      optax.adam(inverse_sqrt_schedule(tc.peak_lr, tc.warmup_steps), b1=0.9, b2=0.98, eps=1e-9))
    if not tc.encoder_self_attention:
        label = lambda params: jax.tree_util.tree_map_with_path(  # noqa: E731
            lambda path, _: "frozen" if _is_encoder_self_attention(path) else "trained", params)
        opt = optax.multi_transform({"trained": opt, "frozen": optax.set_to_zero()}, label)
    return optax.MultiSteps(opt, every_k_schedule=tc.accumulate) if tc.accumulate > 1 else opt


@partial(jax.jit, static_argnames=("config", "tc", "optimizer"), donate_argnums=(0, 1))
def train_step(params, opt_state, batch: dict, key, *, config: Seq2SeqConfig, tc: TrainConfig, optimizer):
    """One micro-batch: gradient of the per-token label-smoothed loss, optimizer update."""
    dtype = jnp.dtype(tc.compute_dtype)

    def loss_fn(p):
        outputs, _ = seq2seq.forward(p, config, batch, dropout_rng=key, compute_dtype=dtype)
        loss, nll = label_smoothed_loss(outputs["logits"], batch["labels"], batch["label_mask"], tc.label_smoothing)
        n = jnp.maximum(batch["label_mask"].sum(), 1)
        return loss / n, nll

    (loss, nll), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, {"loss": loss, "nll_sum": nll}


def device_batch(b: TrainingBatch) -> dict:
    return {"input_ids": b.input_ids, "attention_mask": b.attention_mask, "decoder_input_ids": b.decoder_input_ids,
            "labels": b.labels, "label_mask": b.label_mask}


def translate_ids(params, config: Seq2SeqConfig, src: list[np.ndarray], *, num_beams: int, max_length: int,
                  rows: int = 64, dtype=jnp.float32) -> list[np.ndarray]:
    """Decode token-id sentences in length-sorted batches of ``rows`` (padded, few shapes)."""
    order = np.argsort([len(x) for x in src])
    out: list = [None] * len(src)
    iv = seq2seq.check_interventions(config, None)
    for k in range(0, len(order), rows):
        idx = order[k:k + rows]
        chunk = [src[i] for i in idx] + [src[idx[0]]] * (rows - len(idx))  # filler: repeat a sentence
        b = make_batch(chunk, [np.zeros(1, np.int32)] * rows, config.pad_token_id, config.decoder_start_token_id)
        args = (params, config, jnp.asarray(b.input_ids), jnp.asarray(b.attention_mask), iv)
        if num_beams == 1:
            ids, lengths = decode.greedy(*args, max_length=max_length, dtype=dtype)
        else:
            ids, lengths = decode.beam_search(*args, num_beams=num_beams, max_length=max_length, dtype=dtype)
        ids = np.asarray(ids)
        for j, i in enumerate(idx):
            out[i] = ids[j]
    return out


def translations(params, config: Seq2SeqConfig, tokenizer, src: list[np.ndarray], *, num_beams: int,
                 max_length: int) -> list[str]:
    """``translate_ids`` decoded to text (special tokens dropped), one string per source sentence."""
    ids = translate_ids(params, config, src, num_beams=num_beams, max_length=max_length)
    return tokenizer.batch_decode([x.tolist() for x in ids], skip_special_tokens=True)


def bleu(tokenizer, hyp_ids: list[np.ndarray], refs: list[str]) -> tuple[float, list[str]]:
    """Corpus sacreBLEU (13a tokenisation) of decoded hypotheses against reference strings."""
    import sacrebleu

    hyps = tokenizer.batch_decode([h.tolist() for h in hyp_ids], skip_special_tokens=True)
    return sacrebleu.corpus_bleu(hyps, [refs]).score, hyps


class Trainer(Checkpointed):
    """Runs ``TrainConfig`` on (src, tgt) token-id lists; checkpoints under ``workdir``:
    ``last/`` (resume: params, optimizer, step, data position, curve, the run's arguments;
    ``jattn.training.trainer.Resumable``) and ``best/`` (best validation BLEU). Constructing a
    Trainer on an existing workdir resumes from ``last/``; the number of epochs, the time budget
    and the validation schedule may change on resume, the other arguments may not."""

    EXTENDABLE = ("epochs", "time_budget_s", "eval_every", "eval_beams", "save_every_s", "max_decode_length",
                  "patience")

    def __init__(self, config: Seq2SeqConfig, tc: TrainConfig, workdir, tokenizer=None):
        import orbax.checkpoint as ocp

        self.config, self.tc, self.tokenizer = config, tc, tokenizer
        self.workdir = Path(workdir).resolve()
        self.optimizer = make_optimizer(tc)
        params = init_params(config, jax.random.key(tc.seed), tc.depth_scaled_init, tc.encoder_self_attention)
        self.run = Resumable(self.workdir, {"params": params, "opt_state": self.optimizer.init(params)},
                             {"step": 0, "micro_step": 0, "epoch": 0, "batch_in_epoch": 0, "train_time_s": 0.0,
                              "curve": [], "best_bleu": None, "since_best": 0}, tc, self.EXTENDABLE)
        self.best = ocp.CheckpointManager(self.workdir / "best", options=ocp.CheckpointManagerOptions(
            max_to_keep=1, create=True, best_fn=lambda m: m["bleu"], best_mode="max"))

    def save(self, bleu_score: float | None = None):
        import orbax.checkpoint as ocp

        step = self.meta["micro_step"]
        self.meta["saved_at_s"] = self.meta["train_time_s"]
        if step in self.run.manager.all_steps():  # already saved (e.g. an epoch end followed by the budget stop)
            return
        self.run.save(step)
        if bleu_score is not None and step not in self.best.all_steps():
            self.best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave({"params": self.state["params"]})),
                           metrics={"bleu": bleu_score}, force=True)
            self.best.wait_until_finished()

    def best_params(self):
        import orbax.checkpoint as ocp

        step = self.best.best_step()
        if step is None:
            return self.state["params"]
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, {"params": self.state["params"]})
        got = self.best.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
        return got["state"]["params"]

    def evaluate(self, src, refs, num_beams=None) -> float:
        hyps = translate_ids(self.state["params"], self.config, src, num_beams=num_beams or self.tc.eval_beams,
                             max_length=self.tc.max_decode_length, dtype=jnp.dtype(self.tc.compute_dtype))
        return bleu(self.tokenizer, hyps, refs)[0]

    def converged(self) -> bool:
        """``patience`` validations in a row without a better BLEU than the best before them."""
        return bool(self.tc.patience) and self.meta.get("since_best", 0) >= self.tc.patience

    def fit(self, train_src, train_tgt, val_src=None, val_refs=None, max_updates: int | None = None,
            progress: bool = True):
        """Train until ``epochs``, ``time_budget_s``, ``max_updates`` or convergence (``patience``);
        validate (BLEU) and checkpoint every ``eval_every`` updates / epoch. Ctrl-C or SIGTERM: a checkpoint after the
        current micro-batch, then ``KeyboardInterrupt``. Returns the curve (list of dicts)."""
        with stop_requests() as stop:
            return self._fit(train_src, train_tgt, val_src, val_refs, max_updates, progress, stop)

    def _fit(self, train_src, train_tgt, val_src, val_refs, max_updates, progress, stop):
        from tqdm.auto import tqdm

        tc, m = self.tc, self.meta
        key = jax.random.key(tc.seed + 1)
        bar = tqdm(total=None, disable=not progress, initial=m["step"], unit="upd", mininterval=5)
        window = {"tokens": 0, "loss": 0.0, "n": 0, "t": time.perf_counter()}
        while m["epoch"] < tc.epochs and not self.converged():
            batches = token_batches(train_src, train_tgt, tc.max_tokens, self.config.pad_token_id,
                                    self.config.decoder_start_token_id, np.random.default_rng(tc.seed + m["epoch"]))
            while m["batch_in_epoch"] < len(batches):
                if m["train_time_s"] >= tc.time_budget_s or (max_updates is not None and m["step"] >= max_updates):
                    return self._finish_budget(val_src, val_refs)
                b = batches[m["batch_in_epoch"]]
                t0 = time.perf_counter()
                params, opt_state, out = train_step(
                    self.state["params"], self.state["opt_state"], device_batch(b),
                    jax.random.fold_in(key, m["micro_step"]), config=self.config, tc=tc, optimizer=self.optimizer)
                self.state = {"params": params, "opt_state": opt_state}
                loss = float(out["loss"])
                m["train_time_s"] += time.perf_counter() - t0
                m["micro_step"] += 1
                m["batch_in_epoch"] += 1
                window["tokens"] += b.num_tokens
                window["loss"] += loss
                window["n"] += 1
                if stop.requested:
                    self.save()
                    raise KeyboardInterrupt
                if m["micro_step"] % tc.accumulate:
                    continue
                m["step"] += 1
                bar.update(1)
                now = time.perf_counter()
                if window["n"] and now - window["t"] > 5:
                    rate = window["tokens"] / (now - window["t"])
                    bar.set_postfix(loss=f"{window['loss'] / window['n']:.3f}", tok_s=f"{rate:.0f}",
                                    epoch=m["epoch"], refresh=False)
                    m["curve"].append(
                        {
                            "step": m["step"],
                            "epoch": m["epoch"],
                            "train_loss": window["loss"] / window["n"],
                            "target_tokens_per_s": rate,
                            "train_time_s": round(m["train_time_s"], 1),
                        }
                    )
                    window = {"tokens": 0, "loss": 0.0, "n": 0, "t": now}
                if tc.eval_every and m["step"] % tc.eval_every == 0:
                    self._validate(val_src, val_refs)
                    if self.converged():
                        break
                elif m["train_time_s"] - m.get("saved_at_s", 0.0) >= tc.save_every_s:
                    self.save()
            if self.converged():
                break
            m["epoch"] += 1
            m["batch_in_epoch"] = 0
            if val_src is not None:
                self._validate(val_src, val_refs)
            elif m["train_time_s"] - m.get("saved_at_s", 0.0) >= tc.save_every_s:
                self.save()
        self.save()  # the final state (a no-op when the last validation saved it)
        bar.close()
        return m["curve"]

    def _finish_budget(self, val_src, val_refs):
        self._validate(val_src, val_refs)
        return self.meta["curve"]

    def _validate(self, val_src, val_refs):
        m = self.meta
        score = None
        if val_src is not None and self.tokenizer is not None:
            t0 = time.perf_counter()
            score = self.evaluate(val_src, val_refs)
            m["curve"].append({"step": m["step"], "epoch": m["epoch"], "val_bleu": score,
                               "train_time_s": round(m["train_time_s"], 1),
                               "eval_time_s": round(time.perf_counter() - t0, 1)})
            better = m["best_bleu"] is None or score > m["best_bleu"]
            m["best_bleu"] = score if better else m["best_bleu"]
            m["since_best"] = 0 if better else m.get("since_best", 0) + 1
            print(f"[step {m['step']} epoch {m['epoch']}] val BLEU {score:.2f} (best {m['best_bleu']:.2f})",
                  flush=True)
        self.save(score)
