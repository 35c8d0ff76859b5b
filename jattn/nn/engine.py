"""The layer engine: an encoder's stacked layers run over a batch, each on strided chunks of it.

``run_stack`` is the layer loop (``jax.lax.scan`` over the stacked layers) that writes every
layer's output and kept internals straight into the stacked (L, b, ...) result; ``chunked``
runs one layer on ``chunk_count`` strided chunks of the batch (``over_chunks``), so that a
layer's activations stay in a CPU's caches between the products that write and read them. The
chunk size is an explicit argument (``EncoderConfig.chunk_rows``, resolved by ``chunk_rows``: a
per-backend default), never a module global. Results do not depend on it.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from jattn.nn import state
from jattn.nn.interventions import Interventions

CPU_CHUNK_ROWS = 1024  # token rows a layer processes at once on CPU (see ``chunk_count``)


def chunk_rows(rows: int | None) -> int:
    """The chunk size a config asks for (``EncoderConfig.chunk_rows``), its default resolved:
    ``$JATTN_CHUNK_ROWS`` when set, else ``CPU_CHUNK_ROWS`` on CPU and 0 (the whole batch) on
    GPU/TPU, whose kernels want the whole batch. Read when a forward is traced."""
    if rows is not None:
        return rows
    if os.environ.get("JATTN_CHUNK_ROWS"):
        return int(os.environ["JATTN_CHUNK_ROWS"])
    return CPU_CHUNK_ROWS if jax.default_backend() == "cpu" else 0


def chunk_count(b: int, n: int, rows: int) -> int:
    """How many chunks a layer splits a batch of b sequences of n tokens into, at about ``rows``
    token rows a chunk (0: no chunking).

    A layer's activations at 32 × 128 tokens (scores, FFN hidden: 25 MB each for MiniLM) do not
    stay in a CPU's caches between the products that write and read them; run on chunks of about
    1,024 token rows, they do, and the lean forward of MiniLM and of a bert-base shape takes ~15 %
    less time (``benchmarks/bench_encoder.py``). A chunk is s sequences, the largest divisor of b
    with s·n ≤ max(rows, n); no chunking (1) when that leaves fewer than rows / 4 rows a chunk (a
    prime b).
    """
    if rows <= 0:
        return 1
    s = max(d for d in range(1, b + 1) if b % d == 0 and d * n <= max(rows, n))  # sequences per chunk
    return b // s if s * n >= rows // 4 else 1


def over_chunks(fn, b: int, chunks: int, stacks=None, at=0):
    """``fn(i, take) -> (rows, stacked, totals)`` for chunk i = 0..chunks−1 of a batch of b rows,
    one chunk after another (``lax.scan``); returns ``(rows, stacks, totals)``:

    - ``rows`` (arrays (b / chunks, ...)) reassembled in batch order as (b, ...);
    - ``stacked`` (arrays (b / chunks, ...)) written in batch order into ``stacks`` (arrays
      (L, b, ...): a layer loop's outputs, carried through it) at index ``at`` of their leading
      axis, in place: a layer's internals reach the stacked result without passing through a
      (b, ...) buffer of their own (for α, 25 MB a layer of MiniLM at 32 × 128 that would be
      zero-filled and copied). Without ``stacks``, ``stacked`` must be ``{}``;
    - ``totals`` (any arrays, or None) added over the chunks.

    ``take(a)`` cuts an array whose leading axis is the batch, (b, ...), to chunk i's rows
    i, i + chunks, i + 2·chunks, … → (b / chunks, ...). Strided rather than contiguous: when the
    batch is sharded in blocks over a device mesh's ``data`` axis, every chunk holds rows of every
    device, so each device still works on its own rows. ``chunks == 1`` calls ``fn`` once.
    """
    stacks = {} if stacks is None else stacks
    if chunks == 1:
        rows, stacked, totals = fn(0, lambda a: a)
        return rows, jax.tree.map(lambda S, r: jax.lax.dynamic_update_index_in_dim(S, r, at, 0), stacks,
                                  stacked), totals
    s = b // chunks

    def take_from(i):
        return lambda a: jax.lax.dynamic_index_in_dim(a.reshape(s, chunks, *a.shape[1:]), i, axis=1, keepdims=False)

    rows_shape, _, totals_shape = jax.eval_shape(lambda: fn(0, take_from(0)))
    empty = jax.tree.map(lambda x: jnp.zeros((s, chunks, *x.shape[1:]), x.dtype), rows_shape)  # (s, chunks, ...)
    zero = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), totals_shape)
    columns = jax.tree.map(lambda S: S.reshape(S.shape[0], s, chunks, *S.shape[2:]), stacks)  # (L, s, chunks, ...)

    def put(carry, i):  # chunk i's rows written to column i of (s, chunks, ...) and (L, s, chunks, ...)
        buffers, columns, totals = carry
        rows, stacked, more = fn(i, take_from(i))
        buffers = jax.tree.map(lambda buf, r: jax.lax.dynamic_update_index_in_dim(buf, r, i, axis=1), buffers, rows)
        columns = jax.tree.map(lambda S, r: jax.lax.dynamic_update_slice(S, r[None, :, None],
                                                                          (at, 0, i, *(0,) * (r.ndim - 1))),
                               columns, stacked)
        return (buffers, columns, jax.tree.map(jnp.add, totals, more)), None

    (filled, columns, totals), _ = jax.lax.scan(put, (empty, columns, zero), jnp.arange(chunks))
    return (jax.tree.map(lambda a: a.reshape(b, *a.shape[2:]), filled),  # (b, ...)
            jax.tree.map(lambda S: S.reshape(S.shape[0], b, *S.shape[3:]), columns), totals)  # (L, b, ...), summed


def chunked(b: int, n: int, rows: int):
    """``run(layer, x, allowed, iv, rng, split, totals, stacks=None, at=0, score_bias=None, state=None)
    -> (local, stacks, totals)``: one layer on a batch (b, n, D), run in ``chunk_count(b, n, rows)``
    strided chunks of the batch (``over_chunks``). ``split(y, internals, take) -> (local, stacked)``
    sorts a chunk's output and internals into those reassembled as (b, ...) (``local``) and those
    written into ``stacks`` ((L, b, ...), the layer loop's outputs) at layer ``at``.
    ``totals(internals, take)`` (or None), additive statistics of a chunk's internals, is summed
    over the chunks; with a ``state`` (per-example arrays (b, ...) carried from layer to layer)
    ``totals(internals, take, take(state)) -> (totals, the chunk's next state)``, and ``local`` is
    then (local, the next state (b, ...)). Each chunk's dropout draws from ``rng`` folded with the
    chunk's index."""
    chunks = chunk_count(b, n, rows)

    def run(layer, x, allowed, iv: Interventions, rng, split, totals, stacks=None, at=0, score_bias=None,
            state=None):
        def one(i, take):  # score_bias (H, n, n) has no batch axis: every chunk reads all of it
            r = None if rng is None else jax.random.fold_in(rng, i)
            y, ints = layer(take(x), take(allowed), iv.take_rows(take), r, score_bias)  # (b / chunks, n, D)
            local, stacked = split(y, ints, take)
            if totals is None or state is None:
                return local, stacked, None if totals is None else totals(ints, take)
            more, following = totals(ints, take, jax.tree.map(take, state))
            return (local, following), stacked, more

        return over_chunks(one, b, chunks, stacks, at)

    return run


def layer_loop(step, carry, xs, unroll: bool = False, remat: bool = False):
    """``jax.lax.scan(step, carry, xs)`` over the stacked layers, or with ``unroll`` the same L
    steps as straight-line code, each on static slices of ``xs``, the per-step outputs stacked.
    ``remat``: each step under ``jax.checkpoint`` (Chen et al. 2016, "Training Deep Nets with
    Sublinear Memory Cost"): a gradient through the loop keeps each step's inputs only and
    recomputes one layer's activations at a time in the backward pass (one more forward's time),
    so its memory is one layer's working set, not L layers'. Values are unchanged. It is taken where
    it pays (``remat_pays``): at small shapes the L layers' residuals fit and the recomputation
    would only cost time.

    A loop compiles one layer and slices each layer's weights out of the stacks on every call.
    Unrolled on static slices of stacked weights, XLA:CPU copies them (~1.35× the time of a MiniLM
    forward); unrolled over ``layer_views`` (each layer's weights an argument of its own, no copy)
    a forward takes up to 7 % less time than the loop, never more beyond the noise
    (``Model.forward_params``, ``benchmarks/bench_layer_loop.py``) at 1–3× the compile time.
    Unrolled, a backward reads each layer's residuals where the forward left them instead of
    through (L, ...) stacks carried by the loop, and XLA drops the work no result needs from the
    first and last layer: attribution patching (a forward, a second forward and its backward, with
    its weights from ``layer_views``) takes 3.1 forwards' time unrolled, 3.9 as loops (MiniLM;
    MPNet 2.8, ``benchmarks/bench_patching.py``, ``docs/BENCHMARKS.md``).

    In the loop, stacks that ``held_whole`` marks (bfloat16 / float16 on CPU) are not scanned but
    sliced inside the step by ``layer_slice``, which keeps XLA:CPU from widening the whole stack
    to float32 before the loop; the step then runs under ``jax.checkpoint`` with a policy that
    saves everything but those slices, so a gradient recomputes a layer's slice from the stack
    (a slice is cheap) instead of keeping every layer's: an (L, ...) copy of the stacks."""
    remat = remat and remat_pays(step, carry, xs)
    if unroll:
        step = jax.checkpoint(step, prevent_cse=True) if remat else step
        ys = []
        for l in range(jax.tree.leaves(xs)[0].shape[0]):
            carry, y = step(carry, jax.tree.map(lambda a: a[l], xs))
            ys.append(y)
        return carry, jax.tree.map(lambda *a: jnp.stack(a), *ys)
    leaves, tree = jax.tree.flatten(xs)
    held = [held_whole(a) for a in leaves]
    if not any(held):
        return jax.lax.scan(jax.checkpoint(step, prevent_cse=False) if remat else step, carry, xs)
    whole = [a for a, h in zip(leaves, held) if h]  # the (L, ...) stacks sliced inside the step

    def body(carry, scanned):
        rest, l = scanned
        ones = iter(jax.tree.map(lambda a: checkpoint_name(a, SLICE), layer_slice(whole, l)))
        rest = iter(rest)
        return step(carry, tree.unflatten([next(ones) if h else next(rest) for h in held]))

    policy = None if remat else jax.checkpoint_policies.save_anything_except_these_names(SLICE)
    body = jax.checkpoint(body, prevent_cse=False, policy=policy)  # remat: nothing saved but the step's inputs
    L = leaves[0].shape[0]
    return jax.lax.scan(body, carry, ([a for a, h in zip(leaves, held) if not h], jnp.arange(L)))


SLICE = "jattn_layer_slice"  # the name of layer_loop's in-step slices (jax.ad_checkpoint.checkpoint_name)


def held_whole(a) -> bool:
    """Whether a stacked array (L, ...) is sliced with ``layer_slice``'s barrier rather than scanned:
    a bfloat16 or float16 stack on the CPU backend. XLA:CPU computes in float32: its
    ``float-normalization-bf16`` pass widens the per-layer dynamic-slice of a 16-bit float stack to
    a slice of the stack converted to float32, and while-loop invariant code motion then hoists
    that conversion out of the loop, so a program holds a float32 copy of the whole stack (2 GiB
    for a 0.67B model's bfloat16 layers). GPU and TPU slice 16-bit floats as they are."""
    return (jnp.issubdtype(a.dtype, jnp.floating) and jnp.dtype(a.dtype).itemsize == 2
            and jax.default_backend() == "cpu")


def layer_slice(stacked, l):
    """Layer ``l``'s (an int, or traced) slice of each stacked array (L, ...) of the pytree
    ``stacked`` -> arrays (...). The stacks that ``held_whole`` marks pass with ``l`` through one
    ``jax.lax.optimization_barrier`` first: to XLA the stack is then a value of the loop
    iteration, not loop-invariant, so the float32 conversion XLA:CPU puts before the slice is no
    longer hoisted out of the loop; it fuses with the slice and converts one layer's weights.
    The values, and gradients (the barrier is the identity to ``jax.grad``), are unchanged; the
    stacks stay in their own dtype. Every layer loop and layer lookup of the stacked layers goes
    through it (``layer_loop``, a traced layer index in the sweeps and the decoders)."""
    leaves, tree = jax.tree.flatten(stacked)
    held = [held_whole(a) for a in leaves]
    if any(held):
        barred, l = jax.lax.optimization_barrier(([a for a, h in zip(leaves, held) if h], jnp.asarray(l)))
        barred = iter(barred)
        leaves = [next(barred) if h else a for a, h in zip(leaves, held)]
    return tree.unflatten([jax.lax.dynamic_index_in_dim(a, l, keepdims=False) for a in leaves])


def available_bytes() -> int | None:
    """The memory free for a program's results now: on GPU/TPU the local devices' limits less what
    they hold (``Device.memory_stats``), on CPU the host's ``MemAvailable`` (/proc/meminfo); None
    where neither is known."""
    stats = [d.memory_stats() for d in jax.local_devices()]
    if all(s and "bytes_limit" in s for s in stats):
        return sum(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def remat_pays(step, carry, xs) -> bool:
    """Whether a gradient through ``layer_loop(step, carry, xs)`` should rematerialise: the residuals
    its backward keeps for all L steps exceed a sixteenth of ``available_bytes`` (always where that
    is unknown). One step's residuals are its VJP's (``jax.eval_shape`` of ``jax.vjp``: no compute)
    less its slice of ``xs`` (the layer's weights, held anyway); the carry's values a step saves
    (its input x) count, since the loop keeps one per step. A sixteenth leaves the rest of the
    memory to the parameters and one layer's working set while sparing small shapes (tiny models,
    short batches) a recomputed forward they would not need."""
    spec = lambda a, lead=0: jax.ShapeDtypeStruct(a.shape[lead:], a.dtype)  # noqa: E731
    one = jax.tree.map(lambda a: spec(a, 1), xs)  # one step's slice of the stacks
    L = jax.tree.leaves(xs)[0].shape[0]
    size = lambda tree: sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(tree))  # noqa: E731
    residuals = jax.eval_shape(lambda c, x: jax.vjp(step, c, x)[1], jax.tree.map(spec, carry), one)
    free = available_bytes()
    return free is None or L * (size(residuals) - size(one)) > free / 16


def check_fits(shapes, L: int, x0) -> None:
    """Refuse, while the program is traced (before any compute), a forward whose stacked result
    cannot fit: every layer's kept internals (``shapes``: one layer's, (b, ...)) and the hidden
    states (L+1, b, n, D), against ``available_bytes``. Every layer's α alone is L·b·H·n²·4 bytes
    (12 layers × 32 heads at 8,192 tokens: 103 GiB), where a layerwise reduction holds one layer's."""
    kept = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(shapes))  # one layer's, bytes
    needed = L * kept + (L + 1) * x0.size * x0.dtype.itemsize
    free = available_bytes()
    if free is None or needed <= free:
        return
    gib = lambda v: f"{v / 2**30:.2f} GiB"
    names = ", ".join(sorted(k for k in shapes if jax.tree.leaves(shapes[k]))) or "none"
    raise ValueError(f"this forward keeps every layer's internals ({names}) and hidden states: {gib(needed)} for "
                     f"{L} layers of a batch {tuple(x0.shape[:2])}, more than the {gib(free)} of memory available. "
                     "Fix: internals=None (or only the internals you need: without 'weights'), fewer or shorter "
                     "examples a call, or stream the layers: run_corpus with a layerwise method, or a forward's "
                     "layer_totals= / layer_rows= callbacks that reduce each layer inside the layer loop")


def _is_stacked(path) -> bool:
    """A leaf of the stacked layers: the layer stacks live in modules named ``layers``."""
    return any(getattr(k, "key", None) == "layers" for k in path)


def on_one_cpu(params) -> bool:
    """Every array of ``params`` (a pytree, or one array) on one and the same CPU device: where
    ``layer_views`` are views (no copy) and a forward runs fastest unrolled over them (``unrolled``)."""
    devices = {d for a in jax.tree.leaves(params) for d in a.sharding.device_set}
    return len(devices) == 1 and next(iter(devices)).platform == "cpu"


def layer_views(params):
    """``params`` with each stacked-layer leaf (L, ...) as the list of its L layers, for a program
    that runs its layers unrolled (``layer_loop``): each layer's weights then enter the program
    as arguments of their own, where the static slices of a stacked argument are copies
    (XLA:CPU). On one CPU device each layer is a view of the stacked array (no copy); elsewhere
    a slice. ``stacked_layers`` undoes it inside the program."""
    import numpy as np

    def split(path, a):
        if not _is_stacked(path):
            return a
        if on_one_cpu(a):  # L views of the host buffer, on the stack's device (its mesh, if any: of one device)
            sharding = a.sharding
            if isinstance(sharding, jax.sharding.NamedSharding):  # a layer has one axis fewer than the stack
                sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
            return jax.device_put(list(np.asarray(a)), sharding)
        return [a[l] for l in range(a.shape[0])]

    return jax.tree_util.tree_map_with_path(split, params)


def unrolled(params):
    """(stacked parameters, unroll), inside a jitted program: ``stacked_layers`` of ``layer_views``
    and True (the layers run as straight-line code, each on its own weights), or the stacked
    parameters as given and False (the layer loop). Whether ``params`` are views is their tree
    structure, static under ``jit``: one program for each form."""
    views = any(isinstance(x, list) for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, list)))
    return (stacked_layers(params), True) if views else (params, False)


def stacked_layers(views):
    """``layer_views``'s inverse, inside a jitted program: each stacked leaf as ``jnp.stack`` of its
    layers, which XLA folds into the per-layer slices an unrolled ``layer_loop`` takes (no copy)."""
    return jax.tree_util.tree_map_with_path(lambda path, a: jnp.stack(a) if _is_stacked(path) else a, views,
                                            is_leaf=lambda x: isinstance(x, list))


def run_stack(layers, x0: jax.Array, allowed: jax.Array, iv: Interventions, layer_rngs, rows: int, written,
              layer_totals, score_bias, unroll: bool = False, remat: bool = False, layer_state=None):
    """Run the stacked ``layers`` (an ``nnx`` module with a leading layer axis) on x0 (b, n, D).

    ``written(view, internals, take)`` -> the entries a layer writes to the stacked result for a
    chunk's rows (b', ...); ``layer_totals(internals, view, take)`` (or None) -> sums over a
    chunk's examples, added over the chunks; with ``layer_state`` (per-example arrays (b, ...),
    the state before the first layer, e.g. a rollout's identity) ``layer_totals(internals, view,
    take, state) -> (sums, next state)`` on the chunk's rows of the state, carried from layer to
    layer (one state, never one per layer); ``score_bias(l)`` -> layer l's additive score bias
    (H, n, n) or None; ``layer_rngs`` (L,) keys or None; ``unroll``, ``remat``: see ``layer_loop``.
    -> (last output (b, n, D), {name: (L, b, ...)} with ``"hidden"`` (L+1, b, n, D): x0, then each
    layer's output, written in place (no concatenation), totals (L, ...) or None, the state after
    the last layer or None).

    On a mesh with Explicit axes (``jax.make_mesh``'s default) the layers run with those axes Auto
    (``jattn.nn.state.on_auto_axes``), every result sharded over the batch as x0 is; the score
    biases then enter as one (L, H, n, n) argument, and ``written`` / ``layer_totals`` must not
    close over arrays placed on that mesh (inside the Auto region they are an error; the model
    methods, which run wholly with Auto axes, have no such limit)."""
    graphdef, stacked = nnx.split(layers)
    L = jax.tree.leaves(stacked)[0].shape[0]
    explicit = any(state.explicit(a) for a in jax.tree.leaves((stacked, x0)))
    biases = jax.vmap(score_bias)(jnp.arange(L)) if explicit else None  # (L, H, n, n) or None

    def run(stacked, x0, allowed, iv, layer_rngs, biases, layer_state):
        bias = score_bias if biases is None else (lambda l: jax.tree.map(lambda a: a[l], biases))  # arrays or pytrees
        return _run_stack(nnx.merge(graphdef, stacked), x0, allowed, iv, layer_rngs, rows, written, layer_totals,
                          bias, unroll, remat, layer_state)

    return state.on_auto_axes(run, (stacked, x0, allowed, iv, layer_rngs, biases, layer_state), x0,
                              lambda path: (0, 1, None, 0)[path[0].idx])  # x, stacks (L, b, ...), totals, state


def _run_stack(layers, x0: jax.Array, allowed: jax.Array, iv: Interventions, layer_rngs, rows: int, written,
               layer_totals, score_bias, unroll: bool, remat: bool, layer_state):
    """``run_stack`` with every array at hand."""
    graphdef, stacked = nnx.split(layers)
    run = chunked(*x0.shape[:2], rows)

    def first_layer(state, slices):  # shapes of the stacked result's entries, at the full batch
        layer = nnx.merge(graphdef, state)
        _, ints = layer(x0, allowed, iv.for_layer(*slices), None, score_bias(0))
        return written(layer.view(), ints, lambda a: a)

    shapes = jax.eval_shape(first_layer, *jax.tree.map(lambda a: a[0], (stacked, iv.layer_slices())))
    if "layer_rows" in shapes and any(a.shape[:1] != x0.shape[:1] for a in jax.tree.leaves(shapes["layer_rows"])):
        raise ValueError("layer_rows must return per-example arrays (b', ...) for a chunk of b' examples, got "
                         f"shapes {jax.tree.map(lambda a: a.shape, shapes['layer_rows'])} for a batch of "
                         f"{x0.shape[0]}. Fix: sums over the examples go to layer_totals")
    L = jax.tree.leaves(stacked)[0].shape[0]
    check_fits(shapes, L, x0)
    stacks = jax.tree.map(lambda a: jnp.zeros((L, *a.shape), a.dtype), shapes)  # (L, b, ...)
    hidden = jnp.zeros((L + 1, *x0.shape), x0.dtype).at[0].set(x0)  # (L+1, b, n, D)

    def step(carry, xs):
        x, hidden, stacks, carried = carry
        state, slices, rng, l = xs
        layer = nnx.merge(graphdef, state)
        view = layer.view()

        def split(y, ints, take):  # a chunk's output is reassembled as (b, n, D); its internals go to the stacks
            return y, written(view, ints, take)

        chunk_totals = None if layer_totals is None else (lambda ints, take, *s: layer_totals(ints, view, take, *s))
        y, stacks, totals = run(layer, x, allowed, iv.for_layer(*slices), rng, split, chunk_totals, stacks, l,
                                score_bias(l), carried)
        if carried is not None:  # (the layer's output, the state after it), each (b, ...)
            y, carried = y
        return (y, jax.lax.dynamic_update_index_in_dim(hidden, y, l + 1, 0), stacks, carried), totals  # y: next input

    (x, hidden, kept, carried), totals = layer_loop(step, (x0, hidden, stacks, layer_state),
                                                   (stacked, iv.layer_slices(), layer_rngs, jnp.arange(L)), unroll,
                                                   remat)
    return x, {**kept, "hidden": hidden}, totals, carried
