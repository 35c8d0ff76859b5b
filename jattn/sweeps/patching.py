"""Activation patching and attribution patching of attention heads, as compiled programs.

Activation patching (Vig et al. 2020; Meng et al. 2022; Wang et al. 2022, §3): run the model on
a *corrupted* input with head (l, h)'s output — its context Σ_j α v before W_O — replaced by the
head's output on the *clean* input, and measure the change of a metric:

    effect[l, h] = mean over examples of metric(corrupted, head (l, h) ← clean) − metric(corrupted).

``metric`` maps the model's outputs (a dict: ``last_hidden_state`` (b, n, D), ``pooler_output``,
``logits`` for an encoder; ``logits`` (b, t, V), ``encoder_last_hidden_state``,
``decoder_last_hidden_state`` for a translation model) to one number per example (b,). A metric
that reads per-example data (a position, a target token) takes it as a second argument,
``metric(outputs, rows)``: ``metric_inputs`` holds the arrays (N, ...) and each batch hands the
metric its rows of them. Clean and corrupted inputs are aligned position by position, so each
pair must tokenize to the same lengths.

Batched form. Patching layer l leaves layers 0..l−1 as in the corrupted run, so the corrupted
forward's layer inputs are computed once and each variant runs only layers l..L−1 (prefix reuse:
H·Σ_l (L − l) = H·L(L+1)/2 layers for all L·H heads instead of H·L², a bound of 2L/(L+1) on the
saving). The H variants of a layer (or H·n, one per head and query position) run in one
compiled call, ``heads_per_step`` of them at a time under ``vmap`` (``lax.map``'s batches).

Attribution patching (Nanda 2023; Syed et al. 2023): the first-order estimate
effect[l, h] ≈ (o_clean − o_corr) · ∂metric/∂o at the corrupted run, for every head at once from
one forward on each input and one backward. The patch blends o + t (o_clean − o) with t = 0, so
∂metric/∂t is that dot product (``Interventions.patch`` with a float ``where``).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn import encoder, seq2seq
from jattn.nn.engine import layer_slice, stacked_layers
from jattn.nn.config import Seq2SeqConfig
from jattn.nn.interventions import NONE, Interventions

__all__ = ["agreement", "attribution_patch_heads", "patch_heads"]


# ---------------------------------------------------------------- inputs

def paired_inputs(model, clean, corrupted) -> tuple[dict, dict]:
    """Tokenize (or check) ``clean`` and ``corrupted``; both padded to the same shape. Raises a
    ValueError naming the first example whose clean and corrupted versions differ in length."""
    a, b = model.batch(clean), model.batch(corrupted)
    if len(a["input_ids"]) != len(b["input_ids"]):
        raise ValueError(f"clean has {len(a['input_ids'])} examples, corrupted {len(b['input_ids'])}: patching "
                         "pairs them one to one")
    for mask in ("attention_mask", "decoder_attention_mask"):
        if mask not in a:
            continue
        la, lb = a[mask].sum(1), b[mask].sum(1)  # (b,)
        if (bad := np.nonzero(la != lb)[0]).size:
            i = int(bad[0])
            side = "target" if mask.startswith("decoder") else "input"
            texts = f": {clean[i]!r} vs {corrupted[i]!r}" if isinstance(clean, (list, tuple)) else ""
            raise ValueError(f"example {i} tokenizes to {la[i]} {side} tokens clean and {lb[i]} corrupted{texts}. "
                             "Patching replaces activations position by position, so the two must have equal "
                             "lengths. Fix: choose a corruption that keeps the token count (e.g. swap a name for "
                             "one of the same number of word pieces)")
    for key in a:  # pad both to the same length
        n = max(a[key].shape[1], b[key].shape[1])
        pad = 0 if "mask" in key or "type" in key else model.config.pad_token_id
        a[key], b[key] = (np.pad(x[key], ((0, 0), (0, n - x[key].shape[1])), constant_values=pad) for x in (a, b))
    return a, b


def check_metric_inputs(metric_inputs, n: int) -> dict | None:
    """``metric_inputs`` as numpy arrays, each with one row per example (n), or None."""
    if metric_inputs is None:
        return None
    if not isinstance(metric_inputs, dict):
        raise ValueError(f"metric_inputs must be a dict of per-example arrays, got {type(metric_inputs).__name__}")
    out = {k: np.asarray(v) for k, v in metric_inputs.items()}
    for k, v in out.items():
        if v.ndim == 0 or len(v) != n:
            raise ValueError(f"metric_inputs[{k!r}] has shape {v.shape}; it needs one row per example ({n}) on its "
                             f"first axis. Fix: stack the per-example values in the order of the examples")
    return out


def call_metric(metric, outputs, rows):
    """``metric(outputs)``, or ``metric(outputs, rows)`` when the metric reads per-example rows; a
    metric that leaves JAX (numpy on a traced array, ``float()``, a branch on a value) is an error
    saying so."""
    try:
        return metric(outputs) if rows is None else metric(outputs, rows)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
            jax.errors.TracerBoolConversionError) as e:
        raise ValueError(f"metric is called inside jax.jit on traced arrays, and it left JAX "
                         f"({e.__class__.__name__}: {str(e).splitlines()[0][:120]}). Fix: write it with jax.numpy "
                         "(jnp.take_along_axis, jnp.where) instead of numpy, float() or Python branches on "
                         "values") from None


def batch_rows(batch: dict, start: int, size: int) -> dict:
    """Rows start..start+size of a batch, the last batch filled with copies of its first row."""
    rows = np.arange(start, min(start + size, len(next(iter(batch.values())))))
    rows = np.concatenate([rows, np.repeat(rows[:1], size - len(rows))])
    return {k: v[rows] for k, v in batch.items()}


# ---------------------------------------------------------------- suffixes (layers start..L−1)

def _layer(stacked_module, i):
    graphdef, stacked = nnx.split(stacked_module)
    return nnx.merge(graphdef, layer_slice(stacked, i))


def metric_heads(config) -> tuple[str, ...]:
    """The heads whose outputs a metric sees beside the hidden states: a causal LM's next-token
    logits ``lm_logits`` (b, n, V); none for an encoder (its pooler and classifier come anyway)."""
    return ("lm_logits",) if getattr(config, "causal", False) else ()


def encoder_outputs(module, x) -> dict:
    """What ``metric`` sees from an encoder's last layer's output x (b, n, D) (``run_from``'s): the
    last hidden state (after the final LayerNorm, if any), pooler output and logits, and a causal
    LM's next-token logits (``metric_heads``)."""
    out = {"last_hidden_state": module.final(x)}
    out.update(module.task_outputs(out["last_hidden_state"], metric_heads(module.config)))  # (b, n, V) or nothing
    if module.pooler is not None:
        out["pooler_output"] = module.pool(x)  # (b, D)
    if module.classifier is not None:
        out["logits"] = module.head_logits(x)  # (b, C)
    return out


def encoder_suffix(module, x, allowed, start, patch: dict) -> dict:
    """An encoder's outputs from x (b, n, D), the input of layer ``start`` (traced), with the
    one-layer ``patch`` {site: (value, where)} applied in layer ``start``."""
    return encoder_outputs(module, module.run_from(x, allowed, start, Interventions(patch=patch)))


def _source_layers(module, x, allowed, start, iv: Interventions):
    position_bias = module.encoder.score_bias(x.shape[1])  # (H, s, s) or None: the stack's relative bias

    def run(i, x, iv):
        layer = _layer(module.encoder.layers, i)
        h, _ = layer.attend("self", x, x, allowed, iv, None, position_bias)  # (b, s, D)
        return layer.ffn(h, iv, None)[0]

    x = run(start, x, iv)  # (b, s, D)
    return jax.lax.fori_loop(start + 1, module.config.encoder_layers, lambda i, x: run(i, x, NONE), x)


def _target_layers(module, enc, batch, y, start, iv_self: Interventions, iv_cross: Interventions):
    dec_mask = batch["decoder_attention_mask"]  # (b, t)
    t = dec_mask.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))[None] & dec_mask.astype(bool)[:, None, :]  # (b, t, t)
    src = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, s)
    position_bias = module.decoder.score_bias(t)  # (H, t, t) or None: the stack's relative bias

    def run(i, y, iv_self, iv_cross):
        layer = _layer(module.decoder.layers, i)
        h, _ = layer.attend("self", y, y, causal, iv_self, None, position_bias)  # (b, t, D)
        h, _ = layer.attend("cross", h, enc, src, iv_cross, None)  # (b, t, D)
        return layer.ffn(h, iv_cross, None)[0]

    y = run(start, y, iv_self, iv_cross)  # (b, t, D)
    return jax.lax.fori_loop(start + 1, module.config.decoder_layers, lambda i, y: run(i, y, NONE, NONE), y)


def seq2seq_suffix(module, batch, kind: str, enc, x, start, patch: dict) -> dict:
    """A translation model's outputs when attention type ``kind`` is patched in layer ``start``:
    ``x`` is that layer's input (source side for "encoder", target side otherwise); ``enc`` the
    corrupted encoder output (b, s, D), recomputed when the encoder is patched."""
    iv = Interventions(patch=patch)
    if kind == "encoder":
        enc = module.encoder.final(_source_layers(module, x, batch["attention_mask"].astype(bool)[:, None, :], start,
                                                  iv))  # (b, s, D) after the final LayerNorm, if any
        y, _, _ = module.decoder_stack(enc, batch["attention_mask"], batch["decoder_input_ids"],
                                    batch["decoder_attention_mask"], {}, internals=None)  # (b, t, D)
    else:
        y = module.decoder.final(_target_layers(module, enc, batch, x, start, iv if kind == "decoder" else NONE,
                                                iv if kind == "cross" else NONE))  # (b, t, D)
    return {"logits": module.logits(y), "encoder_last_hidden_state": enc, "decoder_last_hidden_state": y}


# ---------------------------------------------------------------- the exact sweep

@partial(jax.jit, static_argnames=("config",))
def _runs(params, config, clean, corrupted):
    """Clean per-head outputs {kind: (L, b, H, q, d_h)}, the corrupted outputs and every layer's
    input {kind: (L, b, q, D)}."""
    f = seq2seq.forward if isinstance(config, Seq2SeqConfig) else partial(encoder.forward, heads=metric_heads(config))
    _, clean_int = f(params, config, clean, None, internals=("context",))
    out, corr_int = f(params, config, corrupted, None, internals=("residual",))
    if not isinstance(config, Seq2SeqConfig):
        clean_int, corr_int = {"encoder": clean_int}, {"encoder": corr_int}
    contexts = {k: v["context"] for k, v in clean_int.items()}
    return contexts, out, {k: v["residual"] for k, v in corr_int.items()}


@partial(jax.jit, static_argnames=("config", "metric", "kind", "heads_per_step"))
def _layer_variants(params, config, batch, kind, enc, x, start, context, wheres, metric, rows, heads_per_step):
    """metric (V, b) for each variant: layer ``start``'s context patched to ``context``
    (b, H, q, d_h) where ``wheres`` (V, 1, H, 1|q) says."""
    module = encoder.module(params, config) if not isinstance(config, Seq2SeqConfig) else seq2seq.module(params, config)

    def one(where):
        patch = {"context": (context, where)}
        if isinstance(config, Seq2SeqConfig):
            return call_metric(metric, seq2seq_suffix(module, batch, kind, enc, x, start, patch), rows)  # (b,)
        return call_metric(metric, encoder_suffix(module, x, batch["attention_mask"].astype(bool)[:, None, :], start,
                                                  patch), rows)

    return jax.lax.map(one, wheres, batch_size=heads_per_step)  # (V, b)


def variant_wheres(H: int, n: int, per_position: bool) -> np.ndarray:
    """One-hot patch masks (V, 1, H, 1|n): V = H heads, or H·n (head, position) pairs."""
    if not per_position:
        return np.eye(H, dtype=bool)[:, None, :, None]  # (H, 1, H, 1)
    return np.eye(H * n, dtype=bool).reshape(H * n, 1, H, n)  # (H·n, 1, H, n)


def metric_rows(metric, outputs, b: int, rows):
    """``call_metric``, refusing a result that is not one number per example (b,)."""
    m = call_metric(metric, outputs, rows)
    if getattr(m, "shape", None) != (b,):
        raise ValueError(f"metric must map the outputs to one number per example, shape ({b},); got shape "
                         f"{getattr(m, 'shape', type(m).__name__)}")
    return m


def patch_heads(model, clean, corrupted, metric, *, per_position: bool = False, batch_size: int = 16,
                heads_per_step: int | None = None, metric_inputs: dict | None = None, per_example: bool = False):
    """Activation patching of every head (module docstring): mean over examples of
    metric(corrupted with head (l, h)'s output ← the clean run's) − metric(corrupted).

    ``clean``, ``corrupted``: lists of texts (encoder; (A, B) pairs allowed) or (source, target)
    pairs (translation), or tokenized batches; pair i must tokenize to equal lengths.
    ``metric(outputs) -> (b,)``: jit-traceable. Returns {attention type: (L, H)}: ``"encoder"``
    for an encoder; ``"encoder"`` self, ``"decoder"`` causal self, ``"cross"`` for a translation
    model; with ``per_position`` (L, H, n): the head patched at query position i only, averaged
    over the examples whose position i is a real token (NaN where none is). ``metric_inputs``:
    per-example arrays (N, ...) the metric reads as ``metric(outputs, rows)`` (module docstring).
    ``per_example``: the effects of each example, (N, L, H), instead of their mean."""
    if per_example and per_position:
        raise ValueError("per_example=True gives (N, L, H) head effects; per_position=True is not combined with it. "
                         "Fix: ask for one of the two")
    a, b = paired_inputs(model, clean, corrupted)
    N, c = len(a["input_ids"]), model.config
    extra = check_metric_inputs(metric_inputs, N)
    sums, counts, each = {}, {}, {}
    for start in range(0, N, batch_size):
        ca, cb = batch_rows(a, start, batch_size), batch_rows(b, start, batch_size)
        rows = None if extra is None else batch_rows(extra, start, batch_size)
        real = min(batch_size, N - start)
        contexts, out, inputs = _runs(model.params, c, ca, cb)
        base = np.asarray(metric_rows(metric, out, batch_size, rows))[:real]  # (real,)
        for kind, (L, H) in model.head_shapes.items():
            q = contexts[kind].shape[3]
            query_mask = cb["decoder_attention_mask" if kind != "encoder" else "attention_mask"][:real]  # (real, q)
            counts[kind] = counts.get(kind, 0) + query_mask.sum(0)  # (q,) examples with position i real
            wheres = jnp.asarray(variant_wheres(H, q, per_position))
            layer_inputs = inputs["encoder" if kind == "encoder" else "decoder"]  # (L, b, q, D)
            for l in range(L):
                m = _layer_variants(model.params, c, cb, kind, out.get("encoder_last_hidden_state"),
                                    layer_inputs[l], jnp.int32(l), contexts[kind][l], wheres, metric, rows,
                                    heads_per_step or H)  # (V, b)
                delta = np.asarray(m, np.float64)[:, :real] - base  # (V, real)
                if per_example:
                    each.setdefault(kind, np.zeros((N, L, H)))[start:start + real, l] = delta.T  # (real, H)
                if per_position:
                    delta = delta.reshape(H, q, real) * query_mask.T[None]  # (H, q, real)
                sums.setdefault(kind, np.zeros((L, *delta.shape[:-1])))[l] += delta.sum(-1)
    if per_example:
        result = each
    elif per_position:
        result = {k: np.where(counts[k] > 0, s / np.maximum(counts[k], 1), np.nan) for k, s in sums.items()}
    else:
        result = {k: s / N for k, s in sums.items()}
    return result


# ---------------------------------------------------------------- attribution patching

@partial(jax.jit, static_argnames=("config", "metric", "remat"))
def _attribution(views, config, clean, corrupted, metric, rows, remat=True):
    """Σ over examples of ∂metric/∂t_{l,h} at t = 0, {kind: (L, H)}, from the parameters as
    ``Model.layer_views`` gives them (each layer's weights an argument of its own). Both
    passes unrolled (``jattn.nn.engine.layer_loop``): the backward reads the residuals where the
    forward left them, and XLA drops the work no result needs (``docs/BENCHMARKS.md``). ``remat``:
    the differentiated pass keeps one layer's activations at a time (Chen et al. 2016) where the
    layers' residuals would not fit (``jattn.nn.engine.remat_pays``), the same values for one more
    forward's time."""
    params = stacked_layers(views)
    f = seq2seq.forward if isinstance(config, Seq2SeqConfig) else partial(encoder.forward, heads=metric_heads(config))
    _, ints = f(params, config, clean, None, internals=("context",), unroll=True)
    ints = ints if isinstance(config, Seq2SeqConfig) else {"encoder": ints}
    contexts = {k: v["context"] for k, v in ints.items()}  # {kind: (L, b, H, q, d_h)}

    def total(ts):
        patch = {k: Interventions(patch={"context": (contexts[k], t)}) for k, t in ts.items()}
        iv = patch if isinstance(config, Seq2SeqConfig) else patch["encoder"]
        out, _ = f(params, config, corrupted, iv, internals=None, unroll=True, remat=remat)
        return metric_rows(metric, out, corrupted["input_ids"].shape[0], rows).sum()

    ts = {k: jnp.zeros((*v.shape[:3], 1), v.dtype) for k, v in contexts.items()}  # (L, b, H, 1)
    return {k: g[..., 0] for k, g in jax.grad(total)(ts).items()}  # (L, b, H)


def attribution_patch_heads(model, clean, corrupted, metric, *, batch_size: int = 16,
                            metric_inputs: dict | None = None, per_example: bool = False):
    """Attribution patching (module docstring): the first-order estimate of ``patch_heads`` for
    every head from one forward on each input and one backward. Same arguments and result shape
    (``per_example``: (N, L, H))."""
    a, b = paired_inputs(model, clean, corrupted)
    N, sums = len(a["input_ids"]), {}
    extra = check_metric_inputs(metric_inputs, N)
    views = model.layer_views()
    for start in range(0, N, batch_size):
        real = min(batch_size, N - start)
        grads = _attribution(views, model.config, batch_rows(a, start, batch_size),
                             batch_rows(b, start, batch_size), metric,
                             None if extra is None else batch_rows(extra, start, batch_size))
        for kind, g in grads.items():
            g = np.moveaxis(np.asarray(g, np.float64)[:, :real], 1, 0)  # (real, L, H)
            sums[kind] = np.concatenate([sums[kind], g]) if kind in sums else g
    return {k: sums[k] if per_example else sums[k].mean(0) for k in model.head_shapes}


def agreement(estimate, exact) -> dict:
    """How well an estimate ranks and scales like the exact effects: Pearson and Spearman
    correlation over all heads (of every attention type when given dicts)."""
    from scipy import stats

    flat = lambda r: np.concatenate([np.ravel(r[k]) for k in sorted(r)]) if isinstance(r, dict) else np.ravel(r)  # noqa: E731
    x, y = flat(estimate), flat(exact)
    return {
        "pearson": float(stats.pearsonr(x, y)[0]),
        "spearman": float(stats.spearmanr(x, y)[0]),
        "heads": int(x.size),
    }
