"""The method protocol of the streaming corpus runner (``jattn.runner.loop``).

A *method* turns one batch of attention internals into **additive sufficient statistics**:
arrays of a fixed shape (independent of batch size and padded length) whose sum over batches,
devices and processes is all the method needs. The runner sums them (in float64 on the host,
then once across processes) and hands the totals to ``finalize``. Addition is the only combine,
so results do not depend on batch size, device count or process count beyond float summation
order. Example: a per-sequence mean averaged over sequences is the pair
(Σ_sequences mean_s, number of sequences); ``finalize`` divides.

A method is any object with:

``name: str``
    Key of its totals; unique within a run.
``prepare(batch: HostBatch) -> dict[str, np.ndarray]``
    Host-side, optional per-example inputs (leading axis = batch), e.g. the positions masked
    for a masked-LM loss. Called once per batch before the step; return ``{}`` if unused. The
    arrays reach ``reduce`` as ``ctx.features``. Randomness must be seeded from
    ``batch.example`` (corpus indices), never from batch order, to keep results batch-size
    invariant.
``reduce(ctx: StepContext) -> dict[str, jax.Array]``
    Traced inside the runner's single jitted step. Reads ``ctx.internals`` (every entry of
    ``jattn.nn.encoder.forward``'s internals, stacked (L, b, ...)), ``ctx.view`` (the
    parameters the norm methods need, (L, ...)), ``ctx.batch`` (fields below) and may re-run
    the model with interventions via ``ctx.forward(interventions=Interventions(...))`` (e.g.
    under ``jax.grad``). Must return arrays whose leading axis is **not** the batch: reduce over
    examples inside. Padding rows, padding columns and padding examples (``example == -1``,
    all-zero ``attention_mask``) must contribute exactly zero.
``finalize(totals: dict[str, np.ndarray], meta: dict) -> dict[str, Statistic]``
    Host-side, once, on the summed totals (float64). Returns named statistics; the names are
    the keys written to ``results.json``. ``meta`` holds ``segments`` and ``tokens``.

``families: tuple[str, ...]`` (optional, default ``("encoder",)``)
    The model families the method reads: ``"encoder"`` (BERT, RoBERTa), ``"seq2seq"``
    (Marian, FSMT, the NMT model trained here) and/or ``"decoder"`` (a causal LM: GPT-2, Llama;
    ``allowed`` is then causal, keys j ≤ i). The runner refuses any other with a clear error,
    saying why from the optional ``needs: str`` (what the method needs that other families lack).
    On a translation model the runner streams (source, target) pairs through the teacher-forced
    forward and calls ``reduce`` once per attention type in ``kinds`` (default all three:
    ``"encoder"`` self, ``"decoder"`` causal self, ``"cross"``), each time with that type's
    internals, parameter view and batch fields (below); each type's totals are finalized
    alone and its statistics named ``<kind>_<name>`` (``cross_attn_to_sep``).

``joint: bool`` (optional, default False)
    On a translation model, a method that needs every attention type at once (head importance:
    one backward pass through the gates of all three) declares ``joint = True``: ``reduce`` is
    then called once per batch with ``ctx.kind == "all"``, ``ctx.internals`` every type's
    internals by type and ``ctx.view`` None, its totals are finalized once, and ``finalize``
    names the statistics itself (``<kind>_<name>``, as the runner names the others).

``records(ctx) -> dict[str, jax.Array]`` (optional) and ``record_axes: dict[str, tuple[int, ...]]``
    Per-example records (leading axis the batch), traced in the step beside ``reduce``, which
    ``run_corpus(..., records=folder)`` cuts to each example's length along ``record_axes[name]``
    and streams into npz shards (``jattn.io.records``), for studies that train on top (a probe).

``internals: str | tuple[str, ...]`` (optional, default "all")
    The internals a method reduced after the layer loop (not ``layerwise``) reads from
    ``ctx.internals``: "all", or names from ``jattn.nn.encoder.INTERNALS``; ``()`` for a method
    that reads none (it reads ``ctx.outputs``, whose hidden states (L+1, b, n, D) are every
    layer's input, or runs its own forwards through ``ctx.forward``). The runner's forward keeps
    the union of what its methods read, so with none it keeps no layer's internals and its
    memory stays within about one layer's working set.

``layerwise: bool`` (optional, default False)
    A promise that ``reduce`` treats the leading axis of every internal as independent layers
    and returns, per output, either an array with that layer axis first or a scalar that does
    not depend on the internals (a count). The runner then calls ``reduce`` inside the
    encoder's scan on each layer alone and, on CPU, on each chunk of the batch the layer is
    computed in (internals (1, s, ...), ``ctx.batch`` and ``ctx.features`` cut to the chunk's s
    rows, ``ctx.outputs`` and ``ctx.forward`` None), adds the chunks' results (they are sums over
    examples) and stacks the layers', so α is reduced while still in cache and the stacked
    (L, b, H, n, n) is never written (``jattn.nn.encoder.forward(..., layer_totals=...)``). On a
    translation model it calls ``reduce`` inside the encoder's and the decoder's loops, per layer
    and attention type in ``kinds``, on the whole batch (``jattn.nn.seq2seq.forward(...,
    layer_totals=...)``).

``initial_state(batch) -> per-example arrays (b, ...)`` (optional, layerwise methods)
    A state carried from layer to layer, for a statistic that composes the layers (a rollout's
    product so far, Abnar & Zuidema 2020 Eq. 1): its value before the first layer, from the
    step's batch (fields below). ``reduce`` then reads its rows in ``ctx.state`` and returns
    ``(statistics, state after ctx.internals' layers)``; inside the scan the runner carries one
    state, never one per layer (``jattn.nn.encoder.forward(..., layer_state=...)``). Reduced
    after the layer loop (``reduce_stacked``) it starts from ``initial_state`` and its last
    state is dropped.

Attention-type fields, in ``ctx.batch`` for every family (write new methods against these;
``ctx.kind`` names the type, ``"encoder"`` on an encoder model): ``query_mask`` (b, q) and
``key_mask`` (b, k) 1 on real tokens; ``allowed`` (b, q, k) bool, the keys each real query row
may attend (real keys, and causal in the decoder); ``query_class`` (b, q) and ``key_class``
(b, k) token classes. On a translation model ``SEP`` is ``</s>`` and ``CLS`` is the decoder's
start token (position 0 of the decoder input); the source has no ``CLS``.

Encoder batch fields available in ``ctx.batch`` (all (b, n) int32 unless stated):
``input_ids``, ``attention_mask`` (1 on real tokens), ``token_type_ids``; ``token_class``
(``CLS``=0, ``SEP``=1, ``PUNCT``=2 for "." and ",", ``OTHER``=3, -1 on padding); ``unit_ids``
(word-level unit of each token: every special token its own unit, each word one unit,
numbered 0.. in order; -1 on padding), or None when the input was not pre-split into words;
``example`` (b,) corpus index of each row, -1 for padding rows; ``labels`` the examples'
numeric labels (``jattn.io.readers.Example``) by name, (b,) per example or (b, n) per word
(word k of the segment at index k; -1 padded), {} when the corpus has none. ``prepare`` also
sees ``HostBatch.label_lists`` (labels that are strings, e.g. CoNLL-U relations, per row).
Translation batch fields (``TranslationHostBatch``): ``input_ids``, ``attention_mask`` (b, s),
``decoder_input_ids`` (start token + target[:-1]), ``decoder_attention_mask``, ``target_ids``
(what each decoder position predicts, -1 on padding) (b, t), ``source_class`` (b, s),
``target_class`` (b, t), ``example`` (b,), ``labels`` as for an encoder (gold alignment
``links`` (b, n, n): source word × target word, ``jattn.io.readers``).

Word level: a method with attribute ``level = "word"`` makes the runner require pre-split
words and fill ``unit_ids``; ``jattn.analyses.weights.view(ctx, "word")`` then gives the
word-level map (sum TO a word over its subword columns, mean FROM it over its rows).

A minimal method (mean attention weight on the diagonal, per layer and head)::

    @dataclasses.dataclass(frozen=True)
    class SelfAttention(Method):
        name = "self_attention"

        def reduce(self, ctx):
            real = ctx.batch["attention_mask"] > 0                              # (b, n)
            diag = jnp.diagonal(ctx.internals["weights"], axis1=-2, axis2=-1)  # (L, b, H, n)
            total, count = segment_mean(diag, real)                             # (L, H), ()
            return {"sum": total, "n": count}

        def finalize(self, totals, meta):
            return {"self_attention": Statistic(totals["sum"] / totals["n"], "(L, H) mean α[i, i]")}

To plug a method into the runner: ``jattn.runner.loop.run_corpus(model, examples, [MyMethod(...)])``;
to expose it on the command line, register it at the bottom of its module with
``jattn.analyses.registry.register(name, help, factory)`` (``jattn analyze --methods``
then lists it; ``name`` equals the method's ``name``) and its figures, if any, in ``jattn.viz.figures``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import jax
import numpy as np


@dataclasses.dataclass
class Statistic:
    """A finished statistic: its value and a one-line meaning (shape conventions included)."""

    value: np.ndarray
    description: str


@dataclasses.dataclass
class HostBatch:
    """One padded batch on the host, before it is sharded over devices."""

    input_ids: np.ndarray  # (b, n)
    attention_mask: np.ndarray  # (b, n)
    token_type_ids: np.ndarray  # (b, n)
    token_class: np.ndarray  # (b, n)
    unit_ids: np.ndarray | None  # (b, n)
    example: np.ndarray  # (b,)
    labels: dict = dataclasses.field(default_factory=dict)  # name -> (b,) | (b, n) | (b, n, n), -1 padded
    label_lists: dict = dataclasses.field(default_factory=dict)  # name -> per row a list of strings or None

    def arrays(self) -> dict:
        """The fields that go to the devices (``label_lists`` stays on the host)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "label_lists"}


@dataclasses.dataclass
class TranslationHostBatch:
    """One padded batch of (source, target) pairs for a translation model, on the host."""

    input_ids: np.ndarray  # (b, s) source ids, ending in </s>
    attention_mask: np.ndarray  # (b, s)
    decoder_input_ids: np.ndarray  # (b, t) start token + target[:-1] (teacher forcing)
    decoder_attention_mask: np.ndarray  # (b, t)
    target_ids: np.ndarray  # (b, t) target ids (what each decoder position predicts), -1 on padding
    source_class: np.ndarray  # (b, s) token classes, -1 on padding
    target_class: np.ndarray  # (b, t) token classes of the decoder input, -1 on padding
    example: np.ndarray  # (b,) corpus index, -1 on padding rows
    labels: dict = dataclasses.field(default_factory=dict)  # as HostBatch.labels, e.g. gold "links" (b, s, t)
    label_lists: dict = dataclasses.field(default_factory=dict)

    def arrays(self) -> dict:
        """The fields that go to the devices (``label_lists`` stays on the host)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "label_lists"}


@dataclasses.dataclass
class StepContext:
    """What ``reduce`` sees inside the jitted step (all arrays traced)."""

    params: dict
    config: object
    batch: dict  # HostBatch fields as arrays
    features: dict  # this method's ``prepare`` output
    outputs: dict  # encoder outputs: last_hidden_state (b, n, D), hidden_states (L+1, b, n, D)
    internals: dict  # encoder internals (activations), each (L, b, ...)
    forward: Callable  # forward(**overrides) -> (outputs, internals); overrides batch fields
    # (e.g. input_ids=...) or encoder.forward keywords (interventions=Interventions(...), internals=...)
    view: dict  # the attention blocks' parameters (W_O, b_O, LayerNorm γ), each (L, ...)
    kind: str = "encoder"  # attention type: "encoder" (self), or on a translation model "decoder" / "cross"
    state: object = None  # a method's state before these layers (``initial_state``), its rows (b, ...)


@dataclasses.dataclass(frozen=True, eq=False)
class Method:
    """Base of the runner's methods (protocol above), with its defaults: ``prepare`` returns
    ``{}``, ``layerwise = False``, ``internals = "all"``, ``level = "token"``, ``families =
    ("encoder",)``, ``needs = ""``, on a translation model all three attention ``kinds``.

    Declare a subclass as ``@dataclasses.dataclass(frozen=True)`` with its configuration as
    fields: it then compares and hashes by value, so the runner's compiled step (cached per
    method objects) is reused for an equal configuration and never for a different one. A
    subclass that is not itself a dataclass keeps identity semantics (equal only to itself).
    """

    name: ClassVar[str]
    layerwise: ClassVar[bool] = False
    internals: ClassVar[str | tuple[str, ...]] = "all"  # what a reduce after the layer loop reads of ctx.internals
    level: ClassVar[str] = "token"
    families: ClassVar[tuple[str, ...]] = ("encoder",)
    needs: ClassVar[str] = ""  # why other families are refused, e.g. "[CLS] and [SEP] tokens"
    kinds: ClassVar[tuple[str, ...]] = ("encoder", "decoder", "cross")  # attention types read on a seq2seq model
    joint: ClassVar[bool] = False  # on a seq2seq model: one reduce over every attention type at once

    def prepare(self, batch: HostBatch) -> dict[str, np.ndarray]:
        return {}

    def reduce(self, ctx: StepContext) -> dict[str, jax.Array]:
        raise NotImplementedError

    def finalize(self, totals: dict[str, np.ndarray], meta: dict) -> dict[str, Statistic]:
        raise NotImplementedError


def reduce_stacked(method, ctx: StepContext) -> dict:
    """``method.reduce`` on every layer's internals at once (after the layer loop): a method that
    carries a state from layer to layer (``initial_state``) starts from it, and only its
    statistics are kept."""
    if not hasattr(method, "initial_state"):
        return method.reduce(ctx)
    return method.reduce(dataclasses.replace(ctx, state=method.initial_state(ctx.batch)))[0]


def kept_internals(methods) -> str | tuple | None:
    """The internals the runner's forward keeps: the union of what ``methods`` read after the
    layer loop (``Method.internals``), None where they read none."""
    reads = [getattr(m, "internals", "all") for m in methods]
    if "all" in reads:
        return "all"
    return tuple(sorted({name for names in reads for name in names})) or None


def unstack_layers(x: jax.Array) -> jax.Array:
    """A layerwise statistic stacked by the scan: (L, 1, ...) -> (L, ...); a scalar, which by
    the protocol does not depend on the layer, (L,) -> its layer-0 value."""
    return x[0] if x.ndim == 1 else x.reshape(x.shape[:1] + x.shape[2:])
