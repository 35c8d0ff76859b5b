"""Fine-tuning an encoder as a sequence classifier (Devlin et al. 2019 §4.1), the set-up of
Kovaleva et al. 2019 §3 and Michel et al. 2019 §3 (GLUE tasks, BERT's classification head).

The head is BERT's (pooled [CLS] -> dropout -> linear; RoBERTa: its dense-tanh head), trained
with AdamW (decoupled weight decay 0.01, not on biases and LayerNorm parameters), a linear
warm-up over the first ``warmup_fraction`` of updates then linear decay to 0, dropout as the
checkpoint's config says, length-bucketed batches and optional gradient accumulation.

Training runs on the split state (a nested dict of arrays, what optax and orbax hold) through the
pure face ``jattn.nn.encoder.forward``; the result is an ``EncoderModel`` again and can be
exported as a Hugging Face ``BertForSequenceClassification`` folder (``save_classifier``) that
``jattn.load`` and HF PyTorch both read. Checkpoints (orbax) hold parameters, optimizer state
and the data position, so a stopped run resumes bit for bit. A causal LM is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jattn.io import validate
from jattn.nn.losses import classification_loss
from jattn.nn import encoder
from jattn.nn import state as nn_state
from jattn.training.batches import encode, length_batches, pad_batch  # noqa: F401  (public here)
from jattn.training.trainer import Checkpointed, Resumable, stop_requests

__all__ = ["encode", "finetune", "finetune_task", "FinetuneConfig", "length_batches", "pad_batch"]


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    epochs: int = 3
    batch_size: int = 32  # examples per micro-batch
    accumulation: int = 1  # micro-batches per update: effective batch = batch_size · accumulation
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128
    seed: int = 0
    save_every: int = 500  # micro-batches between resume checkpoints (and at every epoch end)
    save_every_s: float = 600.0  # also a checkpoint after this much training time since the last one
    train_examples: int = 0  # finetune_task: 0 = the whole train split, else a random subset of this size

    def __post_init__(self):
        for name, option in (("epochs", "--epochs"), ("batch_size", "--batch-size"), ("accumulation", "--accumulation"),
                             ("max_length", "--max-length"), ("save_every", None)):
            validate.number(f"{name} ({option})" if option else name, getattr(self, name), low=1, integer=True)
        validate.number("seed (--seed)", self.seed, integer=True)
        validate.number("train_examples", self.train_examples, low=0, integer=True)
        validate.number("learning_rate (--lr)", self.learning_rate, low=0, low_open=True,
                        fix="pass a positive learning rate, e.g. --lr 5e-5")
        validate.number("warmup_fraction", self.warmup_fraction, low=0, high=1)
        validate.number("save_every_s", self.save_every_s, low=0, low_open=True)
        validate.number("weight_decay", self.weight_decay, low=0)


def check_bidirectional(model, argument: str = "model") -> None:
    """Refuse a causal LM: the classifier reads the first token, which under a causal mask sees no other."""
    if getattr(model.config, "causal", False):
        raise validate.BadArgument(argument, getattr(model, "source", "") or "the model", "a bidirectional encoder, "
                                   "not a causal (decoder-only) LM, for fine-tuning a classifier", "fine-tune an "
                                   "encoder (the default model is one); a causal LM trains with jattn.training.lm")


def with_classifier(model, num_labels: int, seed: int = 0):
    """``model`` (an ``EncoderModel``, not a causal LM) with a fresh classification head of ``num_labels``
    classes (weights N(0, 0.02), zero bias, as HF does); every other parameter is kept. A BERT
    checkpoint whose head reads the pooler gets a fresh pooler when it has none (HF does the same)."""
    from jattn.models.encoder import EncoderModel

    check_bidirectional(model)
    if num_labels < 2:
        raise ValueError(f"a classifier needs at least 2 labels, got {num_labels}")
    config = dataclasses.replace(model.config, num_labels=num_labels,
                                 with_pooler=model.config.with_pooler or model.config.classifier == "pooler")
    fresh = nn_state.to_arrays(nn_state.init(config, seed))
    old = nn_state.to_arrays(model.params)
    params = {k: (old[k] if k in old else v) for k, v in fresh.items() if k != "classifier"}
    params["classifier"] = fresh["classifier"]
    return EncoderModel(config, nn_state.from_arrays(config, params), model.tokenizer, model.source)


@functools.lru_cache(maxsize=8)
def make_optimizer(fc: FinetuneConfig, total_updates: int) -> optax.GradientTransformation:
    """AdamW with linear warm-up and linear decay; no decay on biases and LayerNorm scales.
    Cached: the optimizer is a static argument of the jitted step, so equal settings share one
    compiled program."""
    warmup = int(fc.warmup_fraction * total_updates)
    schedule = optax.join_schedules([optax.linear_schedule(0.0, fc.learning_rate, max(warmup, 1)),
                                     optax.linear_schedule(fc.learning_rate, 0.0, max(total_updates - warmup, 1))],
                                    [warmup])
    decays = partial(jax.tree.map_with_path, lambda path, _: path[-1].key not in ("bias", "scale"))
    opt = optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=fc.weight_decay, mask=decays)
    return optax.MultiSteps(opt, every_k_schedule=fc.accumulation) if fc.accumulation > 1 else opt


def _model_inputs(batch: dict) -> dict:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


@partial(jax.jit, static_argnames=("config", "optimizer"), donate_argnums=(0, 1))
def train_step(params, opt_state, batch: dict, rng, *, config, optimizer):
    """One micro-batch: loss, gradient, optimizer update (applied every ``accumulation`` calls)."""
    def loss_fn(p):
        outputs, _ = encoder.forward(p, config, _model_inputs(batch), dropout_rng=rng, internals=None)
        return classification_loss(outputs["logits"], batch["labels"], batch["weights"])

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@partial(jax.jit, static_argnames=("config",))
def predict_logits(params, config, batch: dict) -> jax.Array:
    """Evaluation logits (b, C), no dropout (the last layer on [CLS] only: ``encoder.classify``)."""
    return encoder.classify(params, config, _model_inputs(batch))


def evaluate(params, config, ids: list[np.ndarray], labels: np.ndarray, metric, *, batch_size: int,
             max_length: int, pad_id: int) -> tuple[float, np.ndarray]:
    """(metric, predictions) over a labelled set, batches sorted by length."""
    order = np.argsort([len(x) for x in ids], kind="stable")
    preds = np.zeros(len(ids), np.int64)
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
        batch = pad_batch(ids, labels, idx, batch_size, pad_id, max_length)
        preds[idx] = np.asarray(predict_logits(params, config, batch)).argmax(-1)[: len(idx)]
    return metric(preds, labels), preds


class ClassifierTrainer(Checkpointed):
    """Fine-tunes ``model`` (an ``EncoderModel`` with a classification head) on (text, label)
    pairs. ``workdir/last`` holds the resume checkpoint with the run's arguments
    (``jattn.training.trainer.Resumable``); constructing a trainer on a workdir that has one
    resumes from it, and refuses other arguments (the learning-rate schedule depends on all of
    them)."""

    def __init__(self, model, fc: FinetuneConfig, workdir, train: list[tuple[str, int]], dev=None, metric=None):
        if not model.config.num_labels:
            raise ValueError("the model has no classification head. Fix: with_classifier(model, n) first")
        self.model, self.fc, self.metric = model, fc, metric
        self.config, self.pad_id = model.config, model.config.pad_token_id
        self.ids = encode(model.tokenizer, [t for t, _ in train], fc.max_length)
        self.labels = np.asarray([y for _, y in train], np.int32)
        if self.labels.min() < 0 or self.labels.max() >= model.config.num_labels:
            raise ValueError(f"labels must lie in 0..{model.config.num_labels - 1}, got {self.labels.min()}.."
                             f"{self.labels.max()}")
        self.dev = None if dev is None else (encode(model.tokenizer, [t for t, _ in dev], fc.max_length),
                                             np.asarray([y for _, y in dev], np.int32))
        self.lengths = np.asarray([len(x) for x in self.ids])
        self.batches_per_epoch = -(-len(self.ids) // fc.batch_size)
        self.total_updates = fc.epochs * self.batches_per_epoch // fc.accumulation
        self.optimizer = make_optimizer(fc, self.total_updates)
        params = jax.tree.map(jnp.asarray, nn_state.to_arrays(model.params))
        self.run = Resumable(
            workdir,
            {"params": params, "opt_state": self.optimizer.init(params)},
            {"micro_step": 0, "epoch": 0, "batch_in_epoch": 0, "train_seconds": 0.0, "history": []},
            {**dataclasses.asdict(fc), "train_examples": len(train), "labels": model.config.num_labels},
            extendable=("save_every", "save_every_s"),
        )

    def save(self):
        self.meta["saved_at_s"] = self.meta["train_seconds"]
        self.run.save(self.meta["micro_step"])

    def fit(self, max_steps: int | None = None, progress: bool = True) -> list[dict]:
        """Train to ``epochs`` (or stop after ``max_steps`` micro-batches in this call, saving a
        checkpoint); evaluate on dev after every epoch. Ctrl-C or SIGTERM: a checkpoint after the
        current micro-batch, then ``KeyboardInterrupt``. Returns the per-epoch history."""
        with stop_requests() as stop:
            return self._fit(max_steps, progress, stop)

    def _fit(self, max_steps, progress, stop) -> list[dict]:
        from tqdm.auto import tqdm

        fc, key = self.fc, jax.random.key(self.fc.seed)
        total = fc.epochs * self.batches_per_epoch
        bar = tqdm(total=total, initial=self.meta["micro_step"], disable=not progress, unit="batch",
                   desc="fine-tuning")
        done, smooth = 0, None
        while self.meta["epoch"] < fc.epochs:
            order = length_batches(self.lengths, fc.batch_size, fc.seed, self.meta["epoch"])
            for idx in order[self.meta["batch_in_epoch"]:]:
                if max_steps is not None and done >= max_steps:
                    self.save()
                    bar.close()
                    return self.meta["history"]
                batch = pad_batch(self.ids, self.labels, idx, fc.batch_size, self.pad_id, fc.max_length)
                t = time.perf_counter()
                params, opt_state, loss = train_step(
                    self.state["params"], self.state["opt_state"], batch,
                    jax.random.fold_in(key, self.meta["micro_step"]), config=self.config, optimizer=self.optimizer)
                loss = float(loss)
                if not np.isfinite(loss):  # the run diverged: keep the last sound checkpoint, export nothing
                    raise ValueError(f"fine-tuning diverged: the training loss is {loss} at micro-batch "
                                     f"{self.meta['micro_step'] + 1} (learning rate {fc.learning_rate:g}). Fix: lower "
                                     f"--lr, then start again in a new work folder (or delete {self.run.workdir})")
                self.state = {"params": params, "opt_state": opt_state}
                self.meta["train_seconds"] += time.perf_counter() - t
                self.meta["micro_step"] += 1
                self.meta["batch_in_epoch"] += 1
                done += 1
                smooth = loss if smooth is None else 0.98 * smooth + 0.02 * loss
                bar.update(1)
                bar.set_postfix(loss=f"{smooth:.4f}", epoch=self.meta["epoch"])
                if stop.requested:
                    self.save()
                    raise KeyboardInterrupt
                if (self.meta["micro_step"] % fc.save_every == 0
                        or self.meta["train_seconds"] - self.meta.get("saved_at_s", 0.0) >= fc.save_every_s):
                    self.save()
            self.meta["epoch"] += 1
            self.meta["batch_in_epoch"] = 0
            record = {"epoch": self.meta["epoch"], "micro_step": self.meta["micro_step"], "train_loss": smooth,
                      "train_seconds": round(self.meta["train_seconds"], 1)}
            if self.dev is not None and self.metric is not None:
                record["dev_metric"] = self.evaluate()
                bar.write(f"epoch {self.meta['epoch']}: dev {record['dev_metric']:.4f}")
            self.meta["history"].append(record)
            self.save()
        bar.close()
        return self.meta["history"]

    def evaluate(self, data=None) -> float:
        ids, labels = self.dev if data is None else data
        return evaluate(self.state["params"], self.config, ids, labels, self.metric, batch_size=64,
                        max_length=self.fc.max_length, pad_id=self.pad_id)[0]

    def trained_model(self):
        """The current parameters as an ``EncoderModel``."""
        from jattn.models.encoder import EncoderModel

        params = nn_state.from_arrays(self.config, self.state["params"])
        return EncoderModel(self.config, params, self.model.tokenizer, self.model.source)


def save_classifier(model, folder, label_names: list[str] | None = None) -> Path:
    """Export an ``EncoderModel`` with a classification head as a Hugging Face folder
    (config.json, model.safetensors, tokenizer files) that ``jattn.load`` and
    ``AutoModelForSequenceClassification.from_pretrained`` read."""
    from safetensors.numpy import save_file

    from jattn import families

    spec = families.get(model.config.model_type)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf_config = spec.to_hf_config(model.config, label_names)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    save_file(spec.to_hf_state_dict(nn_state.to_arrays(model.params), model.config), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    model.tokenizer.save_pretrained(str(folder))
    return folder


def check_exportable(model, n_labels: int, label_names=None) -> None:
    """Refuse, before any training, a family whose export has no classification head to load."""
    from jattn import families

    export = families.get(model.config.model_type).to_hf_config
    config = dataclasses.replace(model.config, num_labels=n_labels)
    architecture = export(config, label_names)["architectures"][0] if export else "no export"
    if not architecture.endswith("ForSequenceClassification"):
        raise ValueError(f"{model.config.model_type} models are exported as {architecture}, without a classification "
                         "head, so the fine-tuned classifier could not be loaded. Fix: fine-tune an encoder of "
                         "another family (the default model is one)")


def check_labels(train, dev, label_names=None) -> int:
    """The number of classes: ``len(label_names)``, else 0..max of the training labels, every one of
    which must occur (a gap means a mislabelled file); dev labels must lie in that range."""
    if not train:
        raise ValueError("no training examples. Fix: pass a non-empty 'text<TAB>label' file")
    for name, data in (("train", train), ("dev", dev or [])):
        for i, x in enumerate(data):
            if not (isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[1], (int, np.integer))):
                raise ValueError(f"{name} example {i} is {str(x)[:60]!r}: expected (text, integer label)")
    train_labels = np.asarray([y for _, y in train])
    n = len(label_names) if label_names else int(train_labels.max()) + 1
    validate.labels("train labels", train_labels, n)
    if not label_names and (missing := sorted(set(range(n)) - set(train_labels.tolist()))):
        raise validate.BadArgument("train labels", f"0..{n - 1} without {missing[:5]}",
                                   "class indices 0..K-1, each one present in the training data",
                                   "renumber the classes from 0 without gaps, or fix the mislabelled lines")
    if n < 2:
        raise validate.BadArgument("train labels", f"only class {train_labels[0]}", "at least 2 classes",
                                   "pass training data of two or more classes")
    if dev:
        validate.labels("dev labels", [y for _, y in dev], n)
    return n


LABEL_NAMES = {"sst2": ["negative", "positive"], "cola": ["unacceptable", "acceptable"]}


def finetune(base, train: list[tuple[str, int]] | None = None, dev: list[tuple[str, int]] | None = None, out=None, *,
             task: str | None = None, metric_name="accuracy", label_names: list[str] | None = None,
             fc: FinetuneConfig = FinetuneConfig(), workdir=None, max_steps: int | None = None, progress: bool = True,
             report=None) -> dict:
    """Fine-tune ``base`` (a path, hub id, ``EncoderModel``, or None for the embedded MiniLM) as a sequence
    classifier, ``jattn finetune`` from Python (public as ``jattn.finetune``): on GLUE ``task`` ("sst2" |
    "cola", ``finetune_task``: its splits, metric and label names) or on (text, label) pairs ``train``
    and ``dev`` (``metric_name``, ``label_names``: the classes' names, default LABEL_0, ...). Exports the
    final model to ``out`` as a HF folder that ``jattn.load`` and transformers'
    ``AutoModelForSequenceClassification.from_pretrained`` read with its head (``<Family>ForSequence
    Classification``, ``id2label``, ``label2id``), with a ``DONE`` marker and ``finetune.json`` (dev
    metric per epoch, train seconds), and returns that record. Resumes from ``workdir`` (default:
    ``out`` + "-work"); an ``out`` that is already ``DONE`` is returned as it is. ``report(folder,
    record)``, if given, writes more files into the finished folder before it is published."""
    if out is None:
        raise ValueError("out= is required: the folder the fine-tuned classifier is exported to")
    if task is not None:
        if train is not None or dev is not None:
            raise ValueError("task= and train=/dev= both given. Fix: give a GLUE task, or your own train and dev")
        return finetune_task(task, out, base=base, fc=fc, workdir=workdir, max_steps=max_steps, progress=progress,
                             report=report)
    if train is None or dev is None:
        raise ValueError("no data: give task= ('sst2' or 'cola'), or train= and dev=, lists of (text, label)")
    from jattn.io import glue, results
    from jattn.models.load import load

    out = Path(out)
    if not isinstance(fc, FinetuneConfig):
        raise TypeError(f"fc must be a FinetuneConfig, got {type(fc).__name__}")
    if (out / "DONE").is_file():
        record = json.loads((out / "finetune.json").read_text())
        if record.get("config") != dataclasses.asdict(fc) or record.get("metric_name") != metric_name:
            raise validate.BadArgument("--out", str(out), "a new folder, or one fine-tuned with these arguments (it "
                                       f"holds a finished run with {record.get('config')})",
                                       "choose another --out, or rerun with the recorded arguments to get it back")
        return record
    if metric_name not in ("accuracy", "matthews_corr"):
        raise ValueError(f"metric_name must be accuracy or matthews_corr, got {metric_name!r}")
    n_labels = check_labels(train, dev, label_names)
    model = base if hasattr(base, "config") else load(base)
    validate.model_kind(model, "encoder", "fine-tuning a classifier")
    check_bidirectional(model, "base (--model)")
    check_exportable(model, n_labels, label_names)
    with results.Output(out, option="out", switch=None) as output:  # locked: one run per folder; replaced whole
        model = with_classifier(model, n_labels, fc.seed)
        trainer = ClassifierTrainer(model, fc, workdir or out.with_name(out.name + "-work"), train, dev,
                                    getattr(glue, metric_name))
        history = trainer.fit(max_steps=max_steps, progress=progress)
        record = {"metric_name": metric_name, "config": dataclasses.asdict(fc), "history": history,
                  "train_seconds": round(trainer.meta["train_seconds"], 1),
                  "complete": trainer.meta["epoch"] >= fc.epochs}
        if record["complete"]:
            record["dev_metric"] = history[-1]["dev_metric"]

            def fill(folder):
                save_classifier(trainer.trained_model(), folder, label_names)
                (folder / "finetune.json").write_text(json.dumps(record, indent=2) + "\n")
                meta = results.run_meta(base=str(getattr(model, "source", base)), metric=metric_name,
                                        train_examples=len(train), dev_examples=len(dev or []),
                                        arguments=dataclasses.asdict(fc), complete=True)
                (folder / "results.json").write_text(json.dumps({"meta": meta}, indent=1))
                if report is not None:
                    report(folder, {**record, "meta": meta})
                (folder / "DONE").write_text("fine-tuning finished\n")

            output.write(fill)
    return record


def finetune_task(task: str, out, *, base=None, fc: FinetuneConfig = FinetuneConfig(), **kwargs) -> dict:
    """``finetune`` on GLUE ``task`` ("sst2" | "cola", from ``jattn.io.glue``): train split (or
    ``fc.train_examples`` of it, drawn with seed 0 for every training seed), dev split, the task's
    metric and label names."""
    from jattn.io import glue

    train = glue.read_task(task, "train")
    if fc.train_examples:
        if fc.train_examples > len(train):
            raise validate.BadArgument("train_examples", fc.train_examples, f"at most the {len(train):,} examples of "
                                       f"{task}'s train split", "pass a smaller subset, or 0 for all of it")
        # one subset for every training seed (drawn with seed 0), in the split's order
        keep = np.sort(np.random.default_rng(0).choice(len(train), fc.train_examples, replace=False))
        train = [train[i] for i in keep]
    record = finetune(base, train, glue.read_task(task, "dev"), out,
                      metric_name=glue.METRICS[task], label_names=LABEL_NAMES[task], fc=fc, **kwargs)
    return {"task": task, **record}
