"""The corpus runner's translation-model path: (source, target) pairs through the teacher-forced
encoder–decoder forward, every method reduced per attention type (``jattn.runner.loop.run_corpus``
dispatches here for Marian / FSMT models; batching, sharding, processes and the combine are
the runner's).

A pair is tokenized as in training: source ids ending in ``</s>``, target ids (``text_target``)
ending in ``</s>``; the decoder reads the start token + target[:-1] and each of its positions
predicts the next target id (``target_ids``). Source and target are padded to one bucket length
(the smallest that fits both), so each bucket compiles once, as for an encoder. Filler rows
(``example == -1``) see one source token so no softmax row is empty; every mask of theirs is
zero, so they contribute nothing.

Per attention type the methods see (``jattn.runner.protocol``): ``encoder`` — source queries ×
source keys; ``decoder`` — target queries × target keys, causal; ``cross`` — target queries ×
source keys.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from jattn.nn.token_classes import CLASS_NAMES
from jattn.runner.protocol import StepContext, TranslationHostBatch, kept_internals, reduce_stacked, unstack_layers
from jattn.nn import seq2seq, state
from jattn.runner.batcher import pad_pairs

INPUT_KEYS = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
def attention_fields(batch: dict, kind: str) -> dict:
    """The attention-type fields of ``jattn.runner.protocol`` for ``kind``, from a translation batch."""
    real_src = (batch["attention_mask"] > 0) & (batch["example"] >= 0)[:, None]  # (b, s)
    real_tgt = batch["decoder_attention_mask"] > 0  # (b, t)
    query, key, q_class, k_class = {
        "encoder": (real_src, real_src, batch["source_class"], batch["source_class"]),
        "decoder": (real_tgt, real_tgt, batch["target_class"], batch["target_class"]),
        "cross": (real_tgt, real_src, batch["target_class"], batch["source_class"]),
    }[kind]
    allowed = query[:, :, None] & key[:, None, :]  # (b, q, k)
    if kind == "decoder":
        t = query.shape[1]
        allowed = allowed & jnp.tril(jnp.ones((t, t), bool))[None]  # (b, t, t)
    fields = {"query_mask": query.astype(jnp.int32), "key_mask": key.astype(jnp.int32), "allowed": allowed,
              "query_class": q_class, "key_class": k_class}
    if kind != "cross":  # the square types also answer to the encoder's field names
        fields.update(attention_mask=fields["query_mask"], token_class=q_class)
    return fields


def kinds_of(method) -> tuple[str, ...]:
    return tuple(getattr(method, "kinds", seq2seq.KINDS))


@functools.lru_cache(maxsize=16)
def make_step(config, methods: tuple, mesh):
    """The jitted step: teacher-forced forward + every method's ``reduce`` per attention type.
    -> (step, data sharding, replicated sharding); statistics keyed ``<kind>-<method name>``.
    As an encoder's step (``jattn.runner.loop``): ``layerwise`` methods reduce each layer of each
    type inside the layer loops (``seq2seq.forward(..., layer_totals=...)``, a state carried
    where a method has ``initial_state``), and the forward keeps only the internals the others
    read (``Method.internals``)."""

    layerwise = [m for m in methods if getattr(m, "layerwise", False) and not getattr(m, "joint", False)]
    stacked = [m for m in methods if m not in layerwise]

    def step(params, batch, features):
        inputs = {k: batch[k] for k in INPUT_KEYS}
        fields = {kind: dict(batch, **attention_fields(batch, kind)) for kind in seq2seq.KINDS}

        def forward(interventions=None, **kwargs):
            overrides = {k: kwargs.pop(k) for k in INPUT_KEYS if k in kwargs}
            return seq2seq.forward(params, config, dict(inputs, **overrides), interventions, **kwargs)

        def per_layer(kind, layer, view, states):  # one layer's internals of type ``kind`` (b, ...), states by
            # "<kind>-<method name>" -> the layerwise methods' statistics of the layer, and the states after it
            one, one_view = jax.tree.map(lambda x: x[None], (layer, view))  # (1, b, ...), (1, ...)
            totals, states = {}, dict(states)
            for m in (m for m in layerwise if kind in kinds_of(m)):
                key = f"{kind}-{m.name}"
                totals[key] = m.reduce(StepContext(params, config, fields[kind], features[m.name], None, one, None,
                                                   one_view, kind, states.get(key)))
                if key in states:  # a state carried from layer to layer (``Method.initial_state``)
                    totals[key], states[key] = totals[key]
            return totals, states

        start = {f"{kind}-{m.name}": m.initial_state(fields[kind]) for m in layerwise if hasattr(m, "initial_state")
                 for kind in kinds_of(m)}  # (b, ...) each
        outputs, internals = forward(internals=kept_internals(stacked), layer_totals=per_layer if layerwise else None,
                                     layer_state=start)
        per_kind, _ = outputs.pop("layer_totals", {}), outputs.pop("layer_state", None)
        stats = {key: jax.tree.map(unstack_layers, per) for kind in per_kind for key, per in per_kind[kind].items()}
        module = seq2seq.module(params, config)
        for m in stacked:
            if getattr(m, "joint", False):  # every attention type at once (``Method.joint``)
                stats[m.name] = m.reduce(StepContext(params, config, batch, features[m.name], outputs, internals,
                                                     forward, None, "all"))
                continue
            for kind in kinds_of(m):
                ctx = StepContext(params, config, fields[kind], features[m.name], outputs, internals[kind], forward,
                                  module.view(kind), kind)
                stats[f"{kind}-{m.name}"] = reduce_stacked(m, ctx)
        real = batch["example"] >= 0  # (b,)
        stats["_meta"] = {"segments": real.sum(), "tokens": (batch["attention_mask"] * real[:, None]).sum()
                          + batch["decoder_attention_mask"].sum(),
                          **{f"{side}_classes": class_counts(batch[f"{side}_class"], real) for side in SIDES}}
        return stats

    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    placed = jax.tree.map(lambda s: NamedSharding(mesh, s), state.partition_specs(state.abstract(config), mesh))
    return jax.jit(step, in_shardings=(placed, data, data), out_shardings=replicated), data, replicated


SIDES = ("source", "target")
QUERY_SIDE = {"encoder": "source", "decoder": "target", "cross": "target"}
KEY_SIDE = {"encoder": "source", "decoder": "target", "cross": "source"}
# a translation model's names for the encoder's classes: SEP is </s>, CLS the start token (the
# decoder input's first position, or a source's leading <s>)
LABELS = {"the [CLS]": "the start token's", "[CLS]": "the start token", "[SEP]": "</s>"}
KEY_STATISTIC = re.compile(r"(?:^|_)(?:to|fnorm|received)_(cls|sep)$")  # about the keys of a class
QUERY_STATISTIC = re.compile(r"^(?:entropy_(cls)|(sep)_to_sep)$")  # about the rows (queries) of a class


def class_counts(token_class, real) -> jax.Array:
    """Real tokens of each class in a batch, (C,)."""
    onehot = token_class[:, :, None] == jnp.arange(len(CLASS_NAMES))  # (b, n, C)
    return (onehot & real[:, None, None]).sum((0, 1))


def present(totals: dict, kind: str) -> dict[str, set]:
    """The token classes the queries and the keys of attention type ``kind`` hold in the corpus."""
    meta = totals.get("_meta", {})
    side = lambda s: {c for c, n in zip(CLASS_NAMES, meta.get(f"{s}_classes", [1] * len(CLASS_NAMES))) if n > 0}
    return {"queries": side(QUERY_SIDE[kind]), "keys": side(KEY_SIDE[kind])}


def absent(totals: dict, names) -> list[str]:
    """The statistics among ``names`` (``<kind>_<name>``) about a token class the attention type's
    keys (or rows) never hold in the corpus: a [CLS] share of 0 in a source without a start
    token, the NaN entropy of start-token rows that do not exist, an ``</s>`` share in a decoder
    input that holds none. The corpus runner keeps them (a fixed set of names per method);
    reports leave them out."""
    out = []
    for full in names:
        kind, _, name = full.partition("_")
        if kind not in QUERY_SIDE:
            continue
        classes = present(totals, kind)
        key, query = KEY_STATISTIC.search(name), QUERY_STATISTIC.search(name)
        if (key and key.group(1) not in classes["keys"]) or \
                (query and (query.group(1) or query.group(2)) not in classes["queries"]):
            out.append(full)
    return out


def finalize(methods, totals: dict, meta: dict) -> dict:
    """Each method's totals finalized per attention type; statistics named ``<kind>_<name>``,
    described in the translation model's own terms (``LABELS``)."""
    out = {}
    for m in methods:
        if getattr(m, "joint", False):  # its statistics named by itself (``Method.joint``)
            out.update(m.finalize(totals[m.name], meta))
            continue
        for kind in kinds_of(m):
            for name, stat in m.finalize(totals[f"{kind}-{m.name}"], dict(meta, kind=kind)).items():
                text = stat.description
                for theirs, own in LABELS.items():
                    text = text.replace(theirs, own)
                stat.description = f"{kind} attention: {text}"
                out[f"{kind}_{name}"] = stat
    return out


def empty_batch(model, rows: int) -> TranslationHostBatch:
    """A batch of filler rows only (the shapes of a process whose shard is empty)."""
    return pad_pairs(model, [], rows, (16,))
