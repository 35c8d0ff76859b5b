"""Streaming, sharded corpus runner: attention statistics over a corpus in flat memory.

Every model family runs here: an encoder (BERT, RoBERTa) on segments and segment pairs, a
translation model (Marian, FSMT) on (source, target) pairs teacher-forced, each method reduced
per attention type (``jattn.run_translation``). A method says which families it reads
(``Method.families``); the runner refuses a mismatch before any work.

``run_corpus(model, examples, methods)`` reads examples in chunks, tokenizes them, sorts each
chunk by length and cuts it into batches of ``batch_size`` rows padded to the smallest of a
few bucket lengths (bounding recompiles to one per bucket). One jitted step per batch runs the
encoder and every method's ``reduce`` (``jattn.methods.base``), returning additive statistics
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
import itertools
from typing import Iterable, Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from tqdm.auto import tqdm

from jattn.data.readers import Example, as_example
from jattn.data.tokenize import SequenceTooLongError, tokenize
from jattn import run_translation
from jattn.config import Seq2SeqConfig
from jattn.methods.base import CLS, OTHER, PUNCT, SEP, HostBatch, Statistic, StepContext
from jattn.nn import encoder, state
from jattn.records import RecordWriter

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


@dataclasses.dataclass
class RunResult:
    statistics: dict[str, Statistic]  # name -> finished statistic
    totals: dict[str, dict[str, np.ndarray]]  # method name -> summed additive statistics
    meta: dict  # model, segments, tokens, batch_size, devices, processes, ...


BUCKETS = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)


def buckets(max_length: int) -> tuple[int, ...]:
    """Padded lengths used: ``BUCKETS`` below max_length, and it. Steps of at most 1.5× (at most
    1.33× from 24 on) pad a batch longer than 16 tokens to under 1.5× its longest row while keeping the number of compiled
    shapes small (9 up to 128). Halving the steps of the earlier 16/32/64/96/128 grid
    cut warm gradient importance over SST-2 dev (MiniLM, batch 32) from 10.6 to 8.1 s: with
    sentences of 10-60 tokens, most rows were padded to 32 or 64; every 8 tokens was 8.7 s."""
    return (*(s for s in BUCKETS if s < max_length), max_length)


def token_classes(tokenizer, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """(b, n) CLS / SEP / PUNCT ("." and ",", also BPE's "Ġ." "Ġ,") / OTHER, -1 on padding."""
    punct = [i for i in tokenizer.convert_tokens_to_ids([".", ",", "Ġ.", "Ġ,"])
             if i is not None and i != tokenizer.unk_token_id]
    cls = np.full(input_ids.shape, OTHER, np.int32)  # (b, n)
    cls[np.isin(input_ids, punct)] = PUNCT
    cls[input_ids == tokenizer.sep_token_id] = SEP
    cls[input_ids == tokenizer.cls_token_id] = CLS
    cls[attention_mask == 0] = -1
    return cls


def unit_ids(word_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """(b, n) word-level unit of each token: each special token (word id -1) its own unit, the
    subwords of a word one unit, numbered in order; -1 on padding."""
    units = np.full(word_ids.shape, -1, np.int32)  # (b, n)
    for r in range(word_ids.shape[0]):
        u, prev = -1, None
        for t in np.flatnonzero(attention_mask[r]):
            w = word_ids[r, t]
            if w < 0 or w != prev:
                u += 1
            units[r, t], prev = u, (w if w >= 0 else None)
    return units


def _tokenize_rows(model, examples: list[tuple[int, Example]], max_length: int, truncate: bool,
                   words: bool, dropped: dict | None = None) -> list[tuple[int, dict]]:
    """Tokenize one chunk; -> [(corpus index, {input_ids, token_type_ids, word_ids, labels} unpadded)].
    With ``dropped`` (a dict of lists), over-long examples are skipped into ``dropped["too_long"]``
    instead of raising, and labelled word lists with a word that gives no subword (its labels
    would land on the wrong unit) into ``dropped["unmappable"]``."""
    rows = []
    key = lambda item: (item[1].is_pair, item[1].is_words)
    for (pair, split), group in itertools.groupby(sorted(examples, key=key), key=key):
        group = list(group)
        if words and not split:
            raise ValueError(f"{group[0][1].source}: word-level methods need input pre-split into "
                             "words. Fix: use --format conllu (or gap), or drop the word-level methods")
        text = lambda ex: (ex.a, ex.b) if pair else ex.a  # noqa: E731
        if dropped is not None and not truncate:
            full = tokenize(model.tokenizer, [text(ex) for _, ex in group], max_length=10**9)
            fits = full.attention_mask.sum(1) <= max_length  # (g,)
            dropped["too_long"] += [i for (i, _), ok in zip(group, fits) if not ok]
            group = [item for item, ok in zip(group, fits) if ok]
            if not group:
                continue
        texts = [text(ex) for _, ex in group]
        try:
            batch = model.tokenize(texts, max_length=max_length, truncate=truncate)
        except SequenceTooLongError:
            for (_, ex), one in zip(group, texts):
                n = len(tokenize(model.tokenizer, [one], max_length=10**9).input_ids[0])
                if n > max_length:
                    raise SequenceTooLongError(
                        f"{ex.source}: {n} tokens, more than --max-length {max_length}. Fix: raise "
                        "--max-length (up to the model's maximum), shorten the segment, pass "
                        "--truncate to cut over-long segments explicitly, or --skip-too-long") from None
            raise
        for r, (index, ex) in enumerate(group):
            n = int(batch.attention_mask[r].sum())
            wids = None if batch.word_ids is None else batch.word_ids[r, :n]
            if ex.labels is not None and wids is not None:
                count = len(ex.a) + (len(ex.b) if pair else 0)
                if len(set(wids[wids >= 0].tolist())) != count:
                    if dropped is None:
                        raise ValueError(f"{ex.source}: a word gives no subword token, so its labels cannot be "
                                         "placed. Fix: remove the word, or run with --skip-too-long to skip "
                                         "such examples with a count")
                    dropped["unmappable"].append(index)
                    continue
            rows.append((index, {"input_ids": batch.input_ids[r, :n], "token_type_ids": batch.token_type_ids[r, :n],
                                 "word_ids": wids, "labels": ex.labels}))
    return rows


def pad_labels(rows: list[tuple[int, dict]], batch_size: int, length: int) -> tuple[dict, dict]:
    """Examples' labels as batch arrays: numbers padded to (b,), (b, n) or (b, n, n) with -1
    (False for booleans) — word k at index k —, lists of strings as per-row lists (None on
    padding rows). -> (labels, label_lists)."""
    labelled = [r["labels"] for _, r in rows]
    if all(x is None for x in labelled):
        return {}, {}
    keys = set(labelled[0] or ())
    if any(set(x or ()) != keys for x in labelled):
        raise ValueError("examples of one run carry different label names "
                         f"({sorted(keys)} vs {sorted(set(next(x or {} for x in labelled if set(x or ()) != keys)))}). "
                         "Fix: give every example the same labels")
    arrays, lists = {}, {}
    for key in sorted(keys):
        first = labelled[0][key]
        if isinstance(first, list):
            lists[key] = [x[key] for x in labelled] + [None] * (batch_size - len(rows))
            continue
        first = np.asarray(first)
        fill = False if first.dtype == bool else -1
        out = np.full((batch_size,) + (length,) * first.ndim, fill, first.dtype)  # (b,) | (b, n) | (b, n, n)
        for r, x in enumerate(labelled):
            value = np.asarray(x[key])
            if value.ndim != first.ndim or max(value.shape, default=0) > length:
                raise ValueError(f"label {key!r}: shape {value.shape} does not fit a batch of length {length} "
                                 f"(the first example's has {first.ndim} axes). Fix: one value per word")
            out[(r,) + tuple(slice(0, d) for d in value.shape)] = value
        arrays[key] = out
    return arrays, lists


def self_attention_fields(batch: dict) -> dict:
    """The attention-type fields of ``jattn.methods.base`` for an encoder's self-attention."""
    real = batch["attention_mask"] > 0  # (b, n)
    allowed = real[:, :, None] & real[:, None, :]  # (b, n, n)
    return {"query_mask": batch["attention_mask"], "key_mask": batch["attention_mask"], "allowed": allowed,
            "query_class": batch["token_class"], "key_class": batch["token_class"]}


def _pad_batch(model, rows: list[tuple[int, dict]], batch_size: int, length: int, words: bool) -> HostBatch:
    ids = np.full((batch_size, length), model.tokenizer.pad_token_id, np.int32)  # (b, n)
    mask = np.zeros((batch_size, length), np.int32)  # (b, n)
    types = np.zeros((batch_size, length), np.int32)  # (b, n)
    wids = np.full((batch_size, length), -1, np.int32)  # (b, n)
    example = np.full((batch_size,), -1, np.int32)  # (b,)
    for r, (index, row) in enumerate(rows):
        n = len(row["input_ids"])
        ids[r, :n], mask[r, :n], types[r, :n], example[r] = row["input_ids"], 1, row["token_type_ids"], index
        if words:
            wids[r, :n] = row["word_ids"]
    labels, lists = pad_labels(rows, batch_size, length)
    return HostBatch(ids, mask, types, token_classes(model.tokenizer, ids, mask),
                     unit_ids(wids, mask) if words else None, example, labels, lists)


def _batches(model, examples: Iterable, batch_size: int, max_length: int, truncate: bool, words: bool,
             shard: tuple[int, int], chunk: int, skipped: list, dropped: dict | None = None):
    """Yield (host batch, number of real rows): chunks of ``chunk`` examples, length-sorted, cut
    into batches of ``batch_size`` rows from the longest down (a partial batch is the shortest).
    Empty examples (no text) are left out; their corpus indices are appended to ``skipped``;
    with ``dropped``, so are over-long and unmappable ones (``_tokenize_rows``)."""
    translation = isinstance(model.config, Seq2SeqConfig)
    index, count = shard
    mine = ((i, as_example(x, i)) for i, x in enumerate(examples) if i % count == index)
    mine = (item for item in mine if not (item[1].is_empty and not skipped.append(item[0])))
    sizes = buckets(max_length)
    while True:
        part = list(itertools.islice(mine, chunk))
        if not part:
            return
        if translation:
            rows = run_translation.tokenize_pairs(model, part, max_length, truncate)
            rows.sort(key=lambda r: (run_translation.row_length(r[1]), r[0]))
        else:
            rows = _tokenize_rows(model, part, max_length, truncate, words, dropped)
            rows.sort(key=lambda r: (len(r[1]["input_ids"]), r[0]))
        if not rows:
            continue
        first = len(rows) % batch_size or batch_size  # the partial batch holds the shortest rows,
        for start in (0, *range(first, len(rows), batch_size)):  # so its filler rows are short too
            group = rows[start:start + (first if start == 0 else batch_size)]
            if translation:
                yield run_translation.pad_batch(model, group, batch_size, sizes), len(group)
                continue
            length = next(s for s in sizes if s >= len(group[-1][1]["input_ids"]))
            yield _pad_batch(model, group, batch_size, length, words), len(group)


def make_step(model, methods: Sequence, mesh):
    """The jitted step: forward + every method's reduce; batch sharded over ``mesh``. Methods
    marked ``layerwise`` reduce each layer inside the encoder's scan (``layer_totals``); a
    translation model's step is ``jattn.run_translation.make_step``."""
    if isinstance(model.config, Seq2SeqConfig):
        return run_translation.make_step(model.config, tuple(methods), mesh)
    return _step(model.config, tuple(methods), mesh)


@functools.lru_cache(maxsize=16)
def _step(config, methods: tuple, mesh):
    """``make_step``, kept per (config, method objects, mesh): calling ``run_corpus`` again with
    the same methods reuses the compiled step instead of tracing and compiling every bucket."""
    layerwise = [m for m in methods if getattr(m, "layerwise", False)]

    def step(params, batch, features):
        inputs = {k: batch[k] for k in INPUT_KEYS}
        batch = dict(batch, **self_attention_fields(batch))

        def forward(input_ids=None, interventions=None, **kwargs):
            b = inputs if input_ids is None else dict(inputs, input_ids=input_ids)
            return encoder.forward(params, config, b, interventions, **kwargs)

        def per_layer(layer, view, take):  # one layer's internals for a chunk of the batch (s, ...) -> the
            # layerwise methods' statistics, sums over the chunk's examples (added over chunks by the encoder)
            one, one_view = jax.tree.map(lambda x: x[None], (layer, view))  # (1, s, ...), (1, ...)
            rows = lambda tree: jax.tree.map(take, tree)  # batch fields and features (b, ...) -> (s, ...)
            return {m.name: m.reduce(StepContext(params, config, rows(batch), rows(features[m.name]), None, one, None,
                                                 one_view)) for m in layerwise}

        stacked = [m for m in methods if m not in layerwise]
        recording = [m for m in methods if hasattr(m, "records")]
        outputs, internals = forward(layer_totals=per_layer if layerwise else None,
                                     internals="all" if stacked or recording else None)
        stats = {name: jax.tree.map(unstack_layers, per) for name, per in outputs.pop("layer_totals", {}).items()}
        view = encoder.module(params, config).view()  # (L, ...)
        stats.update({m.name: m.reduce(StepContext(params, config, batch, features[m.name], outputs, internals,
                                                   forward, view)) for m in stacked})
        if recording:
            stats["_records"] = {m.name: m.records(StepContext(params, config, batch, features[m.name], outputs,
                                                               internals, forward, view)) for m in recording}
        mask = batch["attention_mask"]  # (b, n)
        stats["_meta"] = {"segments": (mask.sum(1) > 0).sum(), "tokens": mask.sum()}
        return stats

    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    placed = jax.tree.map(lambda s: NamedSharding(mesh, s), state.partition_specs(state.abstract(config), mesh))
    return jax.jit(step, in_shardings=(placed, data, data), out_shardings=replicated), data, replicated


def unstack_layers(x: jax.Array) -> jax.Array:
    """A layerwise statistic stacked by the scan: (L, 1, ...) -> (L, ...); a scalar, which by
    the protocol does not depend on the layer, (L,) -> its layer-0 value."""
    return x[0] if x.ndim == 1 else x.reshape(x.shape[:1] + x.shape[2:])


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
    """"seq2seq" for a translation model, else "encoder"."""
    return "seq2seq" if isinstance(model.config, Seq2SeqConfig) else "encoder"


def check_methods(model, methods: Sequence) -> None:
    """Refuse methods that cannot read ``model``'s family, naming the ones that can."""
    fam = family(model)
    for m in methods:
        families = getattr(m, "families", ("encoder",))
        if fam not in families:
            what = "a translation (seq2seq) model" if fam == "seq2seq" else "an encoder model"
            raise ValueError(f"method {m.name!r} reads {' and '.join(families)} models, and {model.source or 'the model'} "
                             f"is {what}. Fix: choose methods that declare families including {fam!r}"
                             + (" (jattn analyze --help lists them)" if fam == "seq2seq" else ""))
        if fam == "seq2seq" and getattr(m, "level", "token") != "token":
            raise ValueError(f"method {m.name!r} is word-level; a translation model runs token-level methods only. "
                             "Fix: drop the word-level methods")
        if fam == "seq2seq" and (bad := set(getattr(m, "kinds", ())) - {"encoder", "decoder", "cross"}):
            raise ValueError(f"method {m.name!r} declares unknown attention types {sorted(bad)}")


def run_corpus(model, examples: Iterable, methods: Sequence, *, batch_size: int = 32, max_length: int = 128,
               truncate: bool = False, devices=None, mesh=None, progress: bool = True,
               chunk_batches: int = 16, skip_too_long: bool = False, records=None,
               records_shard_size: int = 1000) -> RunResult:
    """Run ``methods`` over ``examples`` (Examples, strings, (A, B) pairs or word lists; for a
    translation model, (source, target) pairs).

    ``devices``: the local devices to shard the batch over (default all); ``batch_size`` must
    be a multiple of their number. In a multi-process run every process calls this with the
    same corpus and reads its own shard. ``mesh``: instead of ``devices``, a local mesh with a
    ``data`` axis (the batch) and optionally a ``model`` axis (the parameters, by their
    partitioning metadata), e.g. ``jax.make_mesh((2, 4), ("data", "model"))``.

    ``skip_too_long``: skip (and count in ``meta``) examples over ``max_length`` tokens, and
    labelled word lists whose labels cannot be placed, instead of raising — never cut.
    Examples' ``labels`` reach the methods padded (``jattn.methods.base.HostBatch``).
    ``records``: a folder for the per-example records of methods that define ``records``
    (``jattn.records``: npz shards of ``records_shard_size`` examples, one folder per method).
    """
    names = [m.name for m in methods]
    if len(set(names)) != len(names) or "_meta" in names:
        raise ValueError(f"method names must be unique and not '_meta': {names}")
    if mesh is not None and (devices is not None or "data" not in mesh.axis_names):
        raise ValueError(f"mesh axes {mesh.axis_names}: pass devices or a mesh with a 'data' axis, not both. "
                         "Fix: jax.make_mesh((data, model), ('data', 'model'))")
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
    for host, real in _batches(model, examples, batch_size, max_length, truncate, words, shard,
                               batch_size * chunk_batches, skipped, dropped):
        features = {m.name: m.prepare(host) for m in methods}
        arrays = {k: v for k, v in host.arrays().items() if v is not None}
        out = step(params, jax.device_put(arrays, data), jax.device_put(features, data))
        if pending is not None:  # fetch the previous batch while this one runs
            accumulate(pending)
        pending = (out, host)
        bar.update(real)
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
                         "examples skipped). Fix: check the input file and --format")
    statistics = {}
    finished = (run_translation.finalize([m], totals, meta) if family(model) == "seq2seq"
                else m.finalize(totals[m.name], meta) for m in methods)
    for stats in finished:
        for name, stat in stats.items():
            if name in statistics:
                raise ValueError(f"two methods produce a statistic named {name!r}")
            statistics[name] = stat
    return RunResult(statistics, totals, meta)


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
    host.input_ids[:] = model.tokenizer.pad_token_id
    features = {m.name: m.prepare(host) for m in methods}
    arrays = {k: v for k, v in host.arrays().items() if v is not None}
    shapes = jax.eval_shape(step, model.params, arrays, features)
    return jax.tree.map(lambda s: np.zeros(s.shape, np.float64), shapes)
