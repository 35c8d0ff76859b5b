"""``EncoderModel``: a converted BERT/RoBERTa checkpoint as its NNX module (``.module``) with its
tokenizer, input checks and a jitted forward."""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn.config import EncoderConfig
from jattn.io import validate
from jattn.io.tokenize import TokenBatch, tokenize
from jattn.nn.interventions import NONE, Interventions
from jattn.models.base import ModuleModel, as_int32, check_traced, concrete
from jattn.nn import encoder
from jattn.nn.engine import unrolled


HIDDEN = "hidden_states"  # the (L+1) stack of layer outputs, returned when ``internals`` is "all" or names it


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class EncoderResult:
    """A forward's outputs; a pytree (``jax.tree.map``, ``jax.device_get``, returned from ``jax.jit``)
    whose None fields are empty subtrees."""

    last_hidden_state: jax.Array  # (b, n, D)
    stack: jax.Array | None  # (L+1, b, n, D) embeddings, then each layer's output; None when not asked for
    internals: dict  # per-layer attention internals, each (L, b, ...); see jattn.nn.encoder
    pooler_output: jax.Array | None  # (b, D) when the checkpoint has a pooler
    # the checkpoint's task logits, as HF's model returns them: (b, C) a classifier's, (b, n, V) a causal LM's
    # next-token logits (``DecoderModel.forward``: by default; its head "lm_logits")
    logits: jax.Array | None = None
    mlm_logits: jax.Array | None = None  # (b, n, V) when asked: forward(heads=("mlm_logits",))
    replaced_token_logits: jax.Array | None = None  # (b, n) when asked: forward(heads=("replaced_token_logits",))

    @property
    def hidden_states(self) -> jax.Array:  # (L+1, b, n, D)
        if self.stack is None:
            raise ValueError(f"this forward did not return the hidden states: pass internals='all' or a tuple "
                             f"including {HIDDEN!r}")
        return self.stack

    @property
    def attentions(self) -> jax.Array:  # (L, b, H, n, n)
        if "weights" not in self.internals:
            raise ValueError("this forward did not return the attention weights: pass internals='all' "
                             "or a tuple including 'weights'")
        return self.internals["weights"]


@partial(jax.jit, static_argnames=("config", "compute_dtype", "internals", "heads"))
def _forward(params, config, batch, interventions, compute_dtype, internals, heads=()):
    """``encoder.forward`` on stacked parameters (the layer loop) or on ``layer_views`` (unrolled),
    its (L+1) hidden-state stack left out unless ``internals`` is "all" or names it: then it is
    never written (40 MB a call for MPNet at 8 × 128, 4 % of the lean forward's time). On a mesh
    with Explicit axes it runs with them Auto, its results sharded over the batch as
    ``attention_mask`` is (``jattn.nn.state.pure_call``)."""
    params, unroll = unrolled(params)
    names = internals if internals == "all" else tuple(n for n in internals if n != HIDDEN)
    outputs, kept = encoder.forward(params, config, batch, interventions, compute_dtype=compute_dtype,
                                    internals=names, unroll=unroll, heads=heads)
    if internals != "all" and HIDDEN not in internals:
        outputs = {k: v for k, v in outputs.items() if k != HIDDEN}
    return outputs, kept


@partial(jax.jit, static_argnames=("config", "compute_dtype", "internals", "heads"), donate_argnames=("recycled",),
         keep_unused=True)
def _forward_into(params, config, batch, interventions, compute_dtype, internals, recycled, heads=()):
    """``_forward`` whose outputs take the memory of ``recycled`` (a previous result's arrays of
    the same shapes, donated; XLA pairs donated buffers with outputs by shape and dtype)."""
    return _forward(params, config, batch, interventions, compute_dtype, internals, heads)


@partial(jax.jit, static_argnames=("config",))
def _classify(params, config, batch, interventions):
    return encoder.classify(params, config, batch, interventions)


def check_dtype(compute_dtype):
    """A float compute dtype, or a clear error."""
    try:
        dt = jnp.dtype(compute_dtype)
    except TypeError:
        dt = None
    if dt is None or not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"compute_dtype must be a float type (float32, bfloat16, float16), got {compute_dtype!r}")
    return dt


def internals_arg(internals):
    """``internals`` as a hashable static argument: "all", () or a tuple of names."""
    if internals == "all":
        return "all"
    if isinstance(internals, str):
        return (internals,)
    return () if internals is None else tuple(internals)


def int_array(x, name: str, what: str = "a batch") -> np.ndarray:
    """An integer array, or a clear error (strings, floats): host data as a numpy array, a jax array
    (sharded, or a tracer) as it is, so that its placement reaches the forward."""
    if isinstance(x, str) or (isinstance(x, (list, tuple)) and x and isinstance(x[0], str)):
        raise ValueError(f"{name} holds strings: {what} needs token ids. Fix: call model.tokenize(texts) first")
    a = x if isinstance(x, jax.Array) else np.asarray(x)
    if not np.issubdtype(a.dtype, np.integer) and not (a.dtype == bool and name.endswith("mask")):
        raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}. Fix: pass token ids as "
                         "int32/int64 (float ids would be truncated silently)")
    return a


def _recyclable(result, shape: tuple, internals) -> list:
    """The arrays of ``result`` (an ``EncoderResult``) to donate to a forward on a batch of
    ``shape`` (b, n) returning ``internals``, or a clear error."""
    if not isinstance(result, EncoderResult):
        raise ValueError(f"recycle takes a previous EncoderResult of this model, got {type(result).__name__}")
    names = (*encoder.INTERNALS, HIDDEN) if internals == "all" else internals
    has = (*result.internals, *((HIDDEN,) if result.stack is not None else ()))
    if result.last_hidden_state.shape[:2] != shape or set(has) != set(names):
        raise ValueError(f"recycle needs a result of the same batch shape and internals: it has shape "
                         f"{tuple(result.last_hidden_state.shape[:2])} and {sorted(has)}, this call "
                         f"{shape} and {sorted(names)}. Fix: recycle the previous result of the same call")
    arrays = jax.tree.leaves((result.last_hidden_state, result.stack, result.internals, result.pooler_output,
                              result.logits, result.mlm_logits, result.replaced_token_logits))
    if any(a.is_deleted() for a in arrays):
        raise ValueError("this result was already recycled (its arrays are deleted): recycle each result once")
    return arrays


class EncoderModel(ModuleModel):
    """A BERT-family encoder: ``.module`` (the ``jattn.nn.encoder.Encoder``), ``.config``,
    ``.params`` (its ``nnx.Param`` state), ``.tokenizer``, ``.tokenize``, ``.forward``."""

    def __init__(self, config: EncoderConfig, params, tokenizer, source: str = ""):
        if not isinstance(params, nnx.State):  # converted arrays: the heads present decide the module
            config = encoder.with_heads(config, params)
        super().__init__(config, params)
        self.tokenizer, self.source = tokenizer, source

    def __repr__(self) -> str:
        c = self.config
        return (f"EncoderModel({c.model_type}, L={c.num_layers}, H={c.num_heads}, D={c.hidden_size}, "
                f"source={self.source!r})")

    def tokenize(self, examples, max_length: int | None = None, truncate: bool = False,
                 pad_to: int | None = None) -> TokenBatch:
        """Tokenize strings, (A, B) pairs or pre-split words; see ``jattn.io.tokenize``. ``max_length``:
        at most the model's positions; by default 128, or the model's positions where it has fewer."""
        if max_length is None:
            max_length = min(128, self.config.max_length)
        elif isinstance(max_length, int) and max_length > self.config.max_length:
            raise ValueError(f"max_length={max_length} exceeds the model's {self.config.max_length} positions. Fix: "
                             f"max_length={self.config.max_length} or less (or leave it out)")
        return tokenize(self.tokenizer, examples, max_length=max_length, truncate=truncate, pad_to=pad_to)

    @property
    def head_shapes(self) -> dict[str, tuple[int, int]]:
        return {"encoder": (self.config.num_layers, self.config.num_heads)}

    def tokenize_examples(self, examples: list):
        """Texts or (A, B) pairs at the model's full length, nothing cut."""
        return self.tokenize(examples, max_length=self.config.max_length)

    def check_batch(self, batch) -> dict:
        """Validate a TokenBatch or dict of (b, n) arrays; return the forward's input dict. Shapes and
        dtypes are always checked, values (vocabulary, mask) where they are concrete: not inside
        ``jax.jit``, ``grad`` or ``vmap``. Jax arrays stay jax arrays, sharded as they are."""
        if isinstance(batch, (str, list, tuple)):
            raise ValueError("forward takes a tokenized batch, not text. Fix: batch = model.tokenize(texts)")
        inputs = batch.inputs() if isinstance(batch, TokenBatch) else dict(batch)
        source = "inputs_embeds" if "inputs_embeds" in inputs else "input_ids"
        if source not in inputs or "attention_mask" not in inputs:
            raise ValueError("a batch needs input_ids and attention_mask (b, n). Fix: use model.tokenize(texts)")
        ids = self._check_embeds(inputs) if source == "inputs_embeds" else int_array(inputs["input_ids"], "input_ids")
        if ids.ndim != 2 or 0 in ids.shape:
            raise ValueError(f"input_ids must be a non-empty (batch, length) array, got shape {ids.shape}")
        if ids.shape[1] > self.config.max_length:
            raise ValueError(f"sequences of {ids.shape[1]} tokens exceed the model's "
                             f"{self.config.max_length} positions")
        # values read on the host: a concrete jax array closed over by a jitted function would give tracers
        if concrete(ids) and ((v := np.asarray(ids)).min() < 0 or v.max() >= self.config.vocab_size):
            raise ValueError(f"input_ids outside the vocabulary [0, {self.config.vocab_size}): "
                             "was the batch made with another model's tokenizer?")
        inputs.setdefault("token_type_ids", np.zeros(ids.shape, np.int32))
        for k in ("attention_mask", "token_type_ids"):
            a = int_array(inputs[k], k)
            if a.shape != ids.shape:
                raise ValueError(f"{k} has shape {a.shape}, input_ids has {ids.shape}")
            inputs[k] = a
        if concrete(inputs["attention_mask"]) and not np.isin(inputs["attention_mask"], (0, 1)).all():
            raise ValueError("attention_mask must hold 0 (padding) and 1 (real token) only, got values "
                             f"{np.unique(inputs['attention_mask'])[:6].tolist()}")
        types = inputs["token_type_ids"]  # ignored by a model without token types (type_vocab_size 0)
        if self.config.type_vocab_size and concrete(types) and ((t := np.asarray(types)).min() < 0 or
                                                                t.max() >= self.config.type_vocab_size):
            raise ValueError(f"token_type_ids must be in [0, {self.config.type_vocab_size}) for this model, got "
                             f"values from {t.min()} to {t.max()}")
        checked = {k: as_int32(inputs[k]) for k in ("attention_mask", "token_type_ids")}
        return {**checked, source: inputs[source] if source == "inputs_embeds" else as_int32(ids)}

    def _check_embeds(self, inputs: dict) -> np.ndarray:
        """``inputs_embeds`` (b, n, E) checked (and replaced by a float32 array in ``inputs``); returns
        zero ids (b, n), what the checks of the batch's shape read."""
        if "input_ids" in inputs:
            raise ValueError("a batch has both input_ids and inputs_embeds. Fix: give one (inputs_embeds = "
                             "jattn.nn.encoder.word_embeddings(model.params, model.config, input_ids))")
        x, E = inputs["inputs_embeds"], self.config.embedding_size or self.config.hidden_size
        x = x if isinstance(x, jax.Array) else np.asarray(x)
        if x.ndim != 3 or 0 in x.shape or x.shape[2] != E or not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"inputs_embeds must be a float (batch, length, {E}) array, got {x.dtype} {x.shape}")
        if concrete(x) and not np.isfinite(x).all():
            raise ValueError("inputs_embeds holds NaN or inf. Fix: pass finite embeddings")
        inputs["inputs_embeds"] = x.astype(jnp.float32)
        return np.zeros(x.shape[:2], np.int32)

    def check_interventions(self, interventions, shape: tuple[int, int] | None = None) -> Interventions:
        """``interventions`` checked for this model; with the batch ``shape`` (b, n) on every axis
        and every value (``jattn.io.validate.interventions``: nothing is broadcast or cut); a traced
        array's values are unknown, its shape and dtype are checked."""
        if interventions is None:
            return NONE
        if isinstance(interventions, dict):  # the per-attention-type form every model takes
            if unknown := sorted(set(interventions) - set(self.head_shapes)):
                raise ValueError(
                    f"interventions must be a jattn.Interventions or {{attention type: "
                    f"jattn.Interventions}} over {tuple(self.head_shapes)}; got a dict with keys {unknown}"
                )
            interventions = interventions.get("encoder", NONE)
        if not isinstance(interventions, Interventions):
            raise ValueError(f"interventions must be a jattn.Interventions, got {type(interventions).__name__}")
        c = self.config
        if shape is not None:
            validate.interventions(interventions, "interventions", c.num_layers, c.num_heads, *shape, shape[1])
        return check_traced(lambda iv: iv.check(c.num_layers, c.num_heads), interventions)

    def forward(self, batch, interventions: Interventions | None = None, *, compute_dtype=jnp.float32,
                internals="all", recycle: EncoderResult | None = None, heads=()) -> EncoderResult:
        """Jitted forward; one compile per padded shape and ``internals`` choice (gates are
        arguments: new values never recompile). ``internals``: "all", None or names (see
        ``jattn.nn.encoder.INTERNALS``, and ``"hidden_states"`` for the (L+1, b, n, D) stack of
        layer outputs); those not asked for are never written. None: the lean forward, the last
        hidden state (and pooler output, logits) only, as HF's model returns by default.
        ``heads``: names from ``jattn.nn.encoder.HEADS`` ("mlm_logits" (b, n, V),
        "replaced_token_logits" (b, n), a causal LM's "lm_logits" (b, n, V), returned as ``logits``),
        the checkpoint's own heads' outputs, computed only when named.
        ``compute_dtype``: float32 (default) or bfloat16 / float16 for the products and activations,
        the softmax kept in float32 (``docs/GUIDE.md``, Precision: bfloat16 moves α by up to ≈ 0.02).

        ``recycle``: a previous result of this batch shape and ``internals`` choice that the
        caller is done with; its arrays are donated and this call's outputs are written into
        their memory (they are deleted then; while a numpy view of one is alive, that one is
        left alone and fresh memory used instead). For loops that consume each result before
        the next call where ``malloc`` gives freed memory back to the kernel (with
        ``JATTN_KEEP_FREED_MEMORY=0`` or a C library other than glibc; ``jattn.host_memory``):
        fresh output memory is then faulted in page by page, for MiniLM's α at 32 × 128
        (151 MB) 36,865 faults and 14 % of the forward on a 2-core CPU. With freed memory kept
        (the default) a fresh result reuses the last one's memory and recycling is slower than
        not (``benchmarks/bench_output_memory.py``)."""
        inputs, internals = self.check_batch(batch), internals_arg(internals)
        self.check_placement(inputs)
        heads = (heads,) if isinstance(heads, str) else tuple(heads or ())
        shape = inputs["attention_mask"].shape  # (b, n)
        iv = self.check_interventions(interventions, shape)
        args = (self.forward_params(), self.config, inputs, iv, check_dtype(compute_dtype), internals)
        if recycle is None:
            outputs, kept = _forward(*args, heads=heads)
        else:
            outputs, kept = _forward_into(*args, _recyclable(recycle, shape, internals), heads=heads)
        logits = outputs.get("logits", outputs.get("lm_logits"))  # a classifier's (b, C) or a causal LM's (b, n, V)
        return EncoderResult(outputs["last_hidden_state"], outputs.get(HIDDEN), kept, outputs.get("pooler_output"),
                             logits, outputs.get("mlm_logits"), outputs.get("replaced_token_logits"))

    def classify(self, batch, interventions: Interventions | None = None) -> jax.Array:
        """A classifier's logits (b, C), jitted, evaluation mode: ``jattn.nn.encoder.classify``
        (the last layer on [CLS] only), equal to ``forward(...).logits`` at less cost."""
        if not self.config.num_labels:
            raise ValueError(f"{self.source or 'this model'} has no classification head (num_labels = 0). Fix: "
                             "load a fine-tuned classifier, or fine-tune one: jattn.finetune(model, task='sst2', "
                             "out=FOLDER)")
        inputs = self.check_batch(batch)
        self.check_placement(inputs)
        return _classify(self.params, self.config, inputs, self.check_interventions(interventions,
                                                                                     inputs["attention_mask"].shape))

    def norm_maps(self, batch, residual: bool) -> dict:
        """``jattn.norms`` for this family (Kobayashi et al. 2020/2021): {"encoder": arrays}, on device."""
        from jattn.analyses.norms import encoder_norms

        return {"encoder": encoder_norms(self.params, self.config, self.check_batch(batch), residual)}

    def attribution_maps(self, batch) -> dict:
        """``jattn.attributions`` for this family: {"encoder": arrays}, on device."""
        from jattn.analyses.attribution import encoder_attributions

        return {"encoder": encoder_attributions(self.params, self.config, self.check_batch(batch))}
