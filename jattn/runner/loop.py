"""Streaming, sharded corpus runner: attention statistics over a corpus in flat memory.

Every model family runs here: an encoder (BERT, RoBERTa) on segments and segment pairs, a
translation model (Marian, FSMT) on (source, target) pairs teacher-forced, each method reduced
per attention type (``jattn.runner.translation``). A method says which families it reads
(``Method.families``); the runner refuses a mismatch before any work.

``run_corpus(model, examples, methods)`` reads examples in chunks, tokenizes them, sorts each
chunk by length and cuts it into batches of ``batch_size`` rows padded to the smallest of a
few bucket lengths (bounding recompiles to one per bucket). One jitted step per batch runs the
encoder and every method's ``reduce`` (``jattn.runner.protocol``), returning additive statistics
of a fixed shape; the host adds them in float64. Nothing of shape (examples, ..., n, n) is
kept, so memory does not grow with the corpus.

Parallelism. The batch axis is sharded over the ``data`` axis of a device mesh (``jax.make_mesh`` +
``NamedSharding(mesh, P('data'))``); XLA sums the per-device statistics. A 2-D ``data`` × ``model``
mesh also splits the parameters by their partitioning metadata (heads and FFN columns over
``model``, ``jattn.nn.state.partition_specs``) and JAX's SPMD partitioner does the rest. Over several
processes (``jax.distributed.initialize``), process p takes the examples whose corpus index
is ≡ p (mod process count), runs on its local devices, and the summed totals are gathered
once at the end (``process_allgather``, exact: float64 bits travel as int32) and added in
process order: the combine is the only communication.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from tqdm.auto import tqdm

from jattn.runner import translation as run_translation
from jattn.nn.config import Seq2SeqConfig
from jattn.runner.protocol import HostBatch, Statistic, StepContext, kept_internals, reduce_stacked, unstack_layers
from jattn.runner.batcher import batches
from jattn.runner.inputs import corpus, default_length, pad_token
from jattn.nn import encoder, state
from jattn.io.records import RecordWriter
from jattn.io.stops import check_stop

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


@dataclasses.dataclass
class RunResult:
    statistics: dict[str, Statistic]  # name -> finished statistic
    totals: dict[str, dict[str, np.ndarray]]  # method name -> summed additive statistics
    meta: dict  # model, segments, tokens, batch_size, devices, processes, ...


def self_attention_fields(batch: dict, causal: bool) -> dict:
    """The attention-type fields of ``jattn.runner.protocol`` for an encoder's self-attention; a
    causal LM's (``causal``) real query i may attend the real keys j ≤ i only."""
    real = batch["attention_mask"] > 0  # (b, n)
    allowed = real[:, :, None] & real[:, None, :]  # (b, n, n)
    if causal:
        n = real.shape[1]
        allowed = allowed & jnp.tril(jnp.ones((n, n), bool))[None]  # (b, n, n) keys j ≤ i
    return {"query_mask": batch["attention_mask"], "key_mask": batch["attention_mask"], "allowed": allowed,
            "query_class": batch["token_class"], "key_class": batch["token_class"]}


def make_step(model, methods: Sequence, mesh):
    """The jitted step: forward + every method's reduce; batch sharded over ``mesh``. Methods
    marked ``layerwise`` reduce each layer inside the encoder's scan (``layer_totals``); a
    translation model's step is ``jattn.runner.translation.make_step``."""
    if isinstance(model.config, Seq2SeqConfig):
        return run_translation.make_step(model.config, tuple(methods), mesh)
    return _step(model.config, tuple(methods), mesh)


@functools.lru_cache(maxsize=16)
def _step(config, methods: tuple, mesh):
    """``make_step``, kept per (config, method objects, mesh): calling ``run_corpus`` again with
    the same methods reuses the compiled step instead of tracing and compiling every bucket."""
    layerwise = [m for m in methods if getattr(m, "layerwise", False)]
    carrying = [m.name for m in layerwise if hasattr(m, "initial_state")]  # a state carried from layer to layer

    def step(params, batch, features):
        inputs = {k: batch[k] for k in INPUT_KEYS}
        batch = dict(batch, **self_attention_fields(batch, getattr(config, "causal", False)))

        def forward(input_ids=None, interventions=None, **kwargs):
            b = inputs if input_ids is None else dict(inputs, input_ids=input_ids)
            return encoder.forward(params, config, b, interventions, **kwargs)

        def per_layer(layer, view, take, states=None):  # one layer's internals for a chunk of the batch (s, ...)
            # -> the layerwise methods' statistics, sums over the chunk's examples (added over chunks by the
            # encoder), and with ``states`` (the carrying methods' rows (s, ...)) their states after the layer
            one, one_view = jax.tree.map(lambda x: x[None], (layer, view))  # (1, s, ...), (1, ...)
            rows = lambda tree: jax.tree.map(take, tree)  # batch fields and features (b, ...) -> (s, ...)
            totals, following = {}, {}
            for m in layerwise:
                totals[m.name] = m.reduce(StepContext(params, config, rows(batch), rows(features[m.name]), None, one,
                                                      None, one_view, state=(states or {}).get(m.name)))
                if m.name in carrying:
                    totals[m.name], following[m.name] = totals[m.name]
            return totals if states is None else (totals, following)

        stacked = [m for m in methods if m not in layerwise]
        recording = [m for m in methods if hasattr(m, "records")]
        start = {m.name: m.initial_state(batch) for m in layerwise if m.name in carrying}  # (b, ...) each
        outputs, internals = forward(layer_totals=per_layer if layerwise else None, layer_state=start or None,
                                     internals=kept_internals(stacked + recording))
        stats = {name: jax.tree.map(unstack_layers, per) for name, per in outputs.pop("layer_totals", {}).items()}
        view = encoder.module(params, config).view()  # (L, ...)
        stats.update({m.name: reduce_stacked(m, StepContext(params, config, batch, features[m.name], outputs,
                                                            internals, forward, view)) for m in stacked})
        if recording:
            stats["_records"] = {m.name: m.records(StepContext(params, config, batch, features[m.name], outputs,
                                                               internals, forward, view)) for m in recording}
        mask = batch["attention_mask"]  # (b, n)
        stats["_meta"] = {"segments": (mask.sum(1) > 0).sum(), "tokens": mask.sum()}
        return stats

    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    placed = jax.tree.map(lambda s: NamedSharding(mesh, s), state.partition_specs(state.abstract(config), mesh))
    return jax.jit(step, in_shardings=(placed, data, data), out_shardings=replicated), data, replicated


def combine_processes(totals: dict) -> dict:
    """Sum host totals over all processes (exact gather of float64 bits, summed in process order)."""
    if jax.process_count() == 1:
        return totals
    from jax.experimental import multihost_utils

    leaves, tree = jax.tree.flatten(totals)
    bits = [np.ascontiguousarray(x, np.float64).reshape(-1).view(np.int32) for x in leaves]
    gathered = multihost_utils.process_allgather(bits)  # each (processes, 2·size)
    summed = [np.asarray(g).view(np.float64).sum(0).reshape(np.shape(x)) for g, x in zip(gathered, leaves)]
    return jax.tree.unflatten(tree, summed)


def family(model) -> str:
    """"seq2seq" for a translation model, "decoder" for a causal (decoder-only) LM, else "encoder"."""
    if isinstance(model.config, Seq2SeqConfig):
        return "seq2seq"
    return "decoder" if getattr(model.config, "causal", False) else "encoder"


FAMILY_TERMS = {"encoder": "a bidirectional encoder", "seq2seq": "a translation (seq2seq) model",
                "decoder": "a causal (decoder-only) language model"}


def check_methods(model, methods: Sequence) -> None:
    """Refuse methods that cannot read ``model``'s family, saying why (``Method.needs``) and
    naming the family the methods to choose must declare."""
    fam = family(model)
    for m in methods:
        families = getattr(m, "families", ("encoder",))
        if fam not in families:
            needs = getattr(m, "needs", "")
            raise ValueError(f"method {m.name!r} reads {' and '.join(families)} models"
                             + (f" (it needs {needs})" if needs else "")
                             + f", and {model.source or 'the model'} is {FAMILY_TERMS[fam]}. Fix: choose methods "
                             f"that declare families including {fam!r}"
                             + (" (jattn.analyses.registry.entries() lists them)" if fam != "encoder" else "")
                             + ("; lm-attention gives a causal LM's first-token, previous-token and self shares "
                                "and entropy" if fam == "decoder" else ""))
        if fam != "encoder" and getattr(m, "level", "token") != "token":
            raise ValueError(f"method {m.name!r} is word-level; {FAMILY_TERMS[fam]} runs token-level methods only. "
                             "Fix: drop the word-level methods")
        if fam == "seq2seq" and (bad := set(getattr(m, "kinds", ())) - {"encoder", "decoder", "cross"}):
            raise ValueError(f"method {m.name!r} declares unknown attention types {sorted(bad)}")


def model_mesh(model):
    """The mesh ``model``'s parameters are sharded on (``jattn.load(..., mesh=)``, ``model.shard``)
    when it is local (this process's devices), has a ``data`` axis and more than one device, else
    None. The runner's default: a model split over a ``model`` axis keeps its split (the default
    devices, all data-parallel, would hold a whole copy of the parameters each) and the batch is
    split over ``data`` alone."""
    for leaf in jax.tree.leaves(model.params):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding):
            found = sharding.mesh
            local = all(d.process_index == jax.process_index() for d in found.devices.flat)
            return found if local and found.size > 1 and "data" in found.axis_names else None
    return None


def run_corpus(model, examples: Iterable, methods: Sequence, *, batch_size: int = 32, max_length: int | None = None,
               truncate: bool = False, devices=None, mesh=None, progress: bool = True,
               chunk_batches: int = 16, skip_too_long: bool = False, records=None,
               records_shard_size: int = 1000) -> RunResult:
    """Run ``methods`` over ``examples`` (Examples, strings, (A, B) pairs or word lists; for a
    translation model, (source, target) pairs), or over the same examples tokenized: a
    ``TokenBatch`` or a dict of token ids as ``model.batch`` returns (``jattn.runner.inputs``).

    ``devices``: the local devices to shard the batch over (default: the mesh the model is
    placed on, ``model_mesh``, else all); ``batch_size`` must be a multiple of their number. In
    a multi-process run every process calls this with the same corpus and reads its own shard.
    ``mesh``: instead of ``devices``, a local mesh with a
    ``data`` axis (the batch) and optionally a ``model`` axis (the parameters, by their
    partitioning metadata), e.g. ``jax.make_mesh((2, 4), ("data", "model"))``; Explicit or Auto
    axes alike: the runner's step places batches and parameters on the mesh's Auto form
    (``jattn.nn.state.auto_mesh``), and a ``model`` axis must divide the heads and FFN columns
    (``jattn.nn.state.partition_specs``: else an error).

    ``max_length``: the longest example, in tokens (default 128, or the model's positions where fewer).
    ``skip_too_long``: skip (and count in ``meta``) examples over ``max_length`` tokens, and
    labelled word lists whose labels cannot be placed, instead of raising — never cut.
    Examples' ``labels`` reach the methods padded (``jattn.runner.protocol.HostBatch``).
    ``records``: a folder for the per-example records of methods that define ``records``
    (``jattn.io.records``: npz shards of ``records_shard_size`` examples, one folder per method).
    """
    examples = corpus(model, examples, False)  # a tokenized batch: one ``Tokens`` per row
    max_length = default_length(model, max_length)
    names = [m.name for m in methods]
    if len(set(names)) != len(names) or "_meta" in names:
        raise ValueError(f"method names must be unique and not '_meta': {names}")
    if mesh is not None and (devices is not None or "data" not in mesh.axis_names):
        raise ValueError(f"mesh axes {mesh.axis_names}: pass devices or a mesh with a 'data' axis, not both. "
                         "Fix: jax.make_mesh((data, model), ('data', 'model'))")
    if mesh is None and devices is None:
        mesh = model_mesh(model)  # a model placed on a mesh runs on it: never replicated onto every device
    devices = list(mesh.devices.flat) if mesh is not None else list(devices or jax.local_devices())
    parts = mesh.shape["data"] if mesh is not None else len(devices)
    if batch_size % parts:
        raise ValueError(f"batch_size={batch_size} is not a multiple of the {parts} data-parallel devices. "
                         f"Fix: use a batch size like {parts * max(1, batch_size // parts)}")
    if max_length > model.config.max_length:
        raise ValueError(f"max_length={max_length} exceeds the model's {model.config.max_length} positions")
    check_methods(model, methods)
    recording = [m for m in methods if hasattr(m, "records")]
    if recording and (records is None or family(model) == "seq2seq"):
        raise ValueError(f"method(s) {[m.name for m in recording]} write per-example records: "
                         + ("pass records=FOLDER" if records is None else "an encoder model only for now")
                         + ". Fix: give run_corpus a records folder (encoder models)")
    words = any(getattr(m, "level", "token") == "word" for m in methods)
    shard = (jax.process_index(), jax.process_count())
    if mesh is None:
        mesh = jax.make_mesh((len(devices),), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devices)
    mesh = state.auto_mesh(mesh)
    step, data, replicated = make_step(model, methods, mesh)
    params = state.shard(model.params, mesh)  # replicated on a 1-D data mesh
    total = len(examples) if hasattr(examples, "__len__") else None
    if total is not None:
        total = len(range(shard[0], total, shard[1]))
    totals, pending = None, None
    writers = {m.name: RecordWriter(records, m, records_shard_size, shard[0]) for m in recording}

    def accumulate(result):
        nonlocal totals
        result, host = result
        for name, rec in result.pop("_records", {}).items():
            writers[name].add(jax.tree.map(np.asarray, rec), host)
        result = jax.tree.map(lambda x: np.asarray(x, np.float64), result)
        totals = result if totals is None else jax.tree.map(np.add, totals, result)

    bar = tqdm(total=total, unit="ex", desc="analyze", disable=not progress, dynamic_ncols=True)
    skipped = []
    dropped = {"too_long": [], "unmappable": []} if skip_too_long else None
    for host, real in batches(model, examples, batch_size, max_length, truncate, words, shard,
                              batch_size * chunk_batches, skipped, dropped):
        features = {m.name: m.prepare(host) for m in methods}
        arrays = {k: v for k, v in host.arrays().items() if v is not None}
        arrays, features = jax.device_put(arrays, data), jax.device_put(features, data)
        if totals is None and pending is None:  # the first batch: what needs no run is checked before any
            check_statistic_names(model, methods, step.trace(params, arrays, features).out_info, len(devices))
        out = step(params, arrays, features)
        if pending is not None:  # fetch the previous batch while this one runs
            accumulate(pending)
        pending = (out, host)
        bar.update(real)
        check_stop()  # a SIGINT/SIGTERM whose exception was dropped (jattn.cli)
    bar.close()
    if pending is not None:
        accumulate(pending)
    for w in writers.values():
        w.flush()
    if totals is None:
        totals = _zeros(model, methods, step, devices, words)
        totals.pop("_records", None)
    totals["_meta"]["skipped_empty"] = np.float64(len(skipped))
    for key, items in (dropped or {}).items():
        totals["_meta"][f"skipped_{key}"] = np.float64(len(items))
    totals = combine_processes(totals)
    meta = {"model": model.source, "segments": int(totals["_meta"]["segments"]),
            "tokens": int(totals["_meta"]["tokens"]), "batch_size": batch_size, "max_length": max_length,
            "devices": len(devices), "processes": shard[1], "skipped_empty": int(totals["_meta"]["skipped_empty"]),
            **{f"skipped_{k}": int(totals["_meta"][f"skipped_{k}"]) for k in (dropped or {})}}
    if meta["segments"] == 0:
        raise ValueError(f"the corpus is empty: no example reached the model ({meta['skipped_empty']} empty "
                         "examples skipped). Fix: check the examples (and the input file's format)")
    statistics = {}
    for m in methods:
        for name, stat in finalize(model, m, totals, meta).items():
            if name in statistics:
                raise ValueError(f"two methods produce a statistic named {name!r}")
            statistics[name] = stat
    return RunResult(statistics, totals, meta)


def finalize(model, method, totals: dict, meta: dict) -> dict:
    """``method``'s statistics from the corpus totals."""
    if family(model) == "seq2seq":
        return run_translation.finalize([method], totals, meta)
    return method.finalize(totals[method.name], meta)


def check_statistic_names(model, methods, shapes, devices: int) -> None:
    """Two methods that name a statistic alike (a user's ``Method`` and a built-in one) are an
    error before the first batch runs, not after the corpus: each method's ``finalize`` on
    all-zero totals of the step's output ``shapes`` (the ``out_info`` of the step's trace, which
    its first call reuses: traced once, not run) names its statistics. A ``finalize`` that cannot
    run on zeros is left to the same check after the corpus."""
    totals = jax.tree.map(lambda s: np.zeros(s.shape, np.float64), shapes)
    totals.pop("_records", None)
    meta = {"model": model.source, "segments": 0, "tokens": 0, "batch_size": devices, "max_length": 16,
            "devices": devices, "processes": 1, "skipped_empty": 0}
    owner = {}
    for m in methods:
        try:
            with np.errstate(all="ignore"):
                names = finalize(model, m, totals, meta)
        except Exception:  # noqa: BLE001 — e.g. a statistic that needs data; checked after the corpus
            continue
        for name in names:
            if name in owner:
                raise ValueError(f"methods {owner[name]!r} and {m.name!r} both produce a statistic named {name!r}. "
                                 "Fix: rename the statistic your Method's finalize returns")
            owner[name] = m.name


def _zeros(model, methods, step, devices, words):
    """Totals of a process whose shard is empty: the step's output shapes, all zeros."""
    if family(model) == "seq2seq":
        host = run_translation.empty_batch(model, len(devices))
        features = {m.name: m.prepare(host) for m in methods}
        shapes = jax.eval_shape(step, model.params, host.arrays(), features)
        return jax.tree.map(lambda s: np.zeros(s.shape, np.float64), shapes)
    n = 16
    host = HostBatch(*(np.zeros((len(devices), n), np.int32) for _ in range(3)),
                     np.full((len(devices), n), -1, np.int32),
                     np.full((len(devices), n), -1, np.int32) if words else None,
                     np.full((len(devices),), -1, np.int32))
    host.input_ids[:] = pad_token(model)
    features = {m.name: m.prepare(host) for m in methods}
    arrays = {k: v for k, v in host.arrays().items() if v is not None}
    shapes = jax.eval_shape(step, model.params, arrays, features)
    return jax.tree.map(lambda s: np.zeros(s.shape, np.float64), shapes)
