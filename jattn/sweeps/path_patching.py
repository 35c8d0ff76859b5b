"""Path patching (Wang et al. 2022, §3.1 and App. B; Goldowsky-Dill et al. 2023): the effect of a
*sender* head's clean output along the paths that reach chosen *receivers* only.

The three-pass definition, for every sender head s at once (``lax.map`` over senders):

1. the clean and the corrupted run give every head's output (context before W_O);
2. the *sender pass*: the corrupted input with every head's output frozen to its corrupted value
   except the sender's, which takes its clean value; the FFNs and LayerNorms are recomputed, so
   the residual stream after the sender carries the sender's change and nothing else;
3. the *receiver pass*: the corrupted input, with each receiver head computing its query, key or
   value (``roles``) from the sender pass's stream at its layer (the attention's input: the block
   input of a post-LN block, its LayerNorm's output in a pre-LN one) (for a cross-attention receiver's
   keys and values: the sender pass's encoder output); everything else reads the corrupted run.

effect[s] = mean over examples of metric(receiver pass) − metric(corrupted). The receiver
``"output"`` reads the sender pass's own outputs: the sender's direct effect on the metric.
Both passes are ``Interventions.patch`` (sites ``context`` and ``query_input`` / ``key_input`` /
``value_input``) on the model's pure forward.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn import encoder, seq2seq
from jattn.nn.config import Seq2SeqConfig
from jattn.nn.interventions import Interventions
from jattn.sweeps.patching import batch_rows, check_metric_inputs, metric_heads, metric_rows, paired_inputs

__all__ = ["path_patch"]

ROLES = {"q": "query_input", "k": "key_input", "v": "value_input"}
# the internal that is an attention's input: the block input of a post-LN block, LN(block input) of a pre-LN one
ATTENTION_INPUT = {"post": "residual", "pre": "attention_ln_out"}


def receiver_masks(model, receivers) -> dict:
    """{kind: {site: (L, 1, H) bool}} from receivers [(kind, layer, head, roles)] (an encoder
    also takes (layer, head, roles)); roles a string over "qkv"."""
    out, shapes = {}, model.head_shapes
    for r in receivers:
        r = (*shapes, *r) if len(r) == 3 and len(shapes) == 1 else tuple(r)
        if len(r) != 4 or r[0] not in shapes or not set(r[3]) <= set(ROLES) or not r[3]:
            raise ValueError(f"receiver {r!r}: give (kind, layer, head, roles) with kind in {tuple(shapes)} and "
                             "roles a non-empty string over 'qkv' (an encoder also takes (layer, head, roles)); or "
                             "receivers='output'")
        kind, l, h, roles = r
        L, H = shapes[kind]
        if not (0 <= l < L and 0 <= h < H):
            raise ValueError(f"receiver {r!r}: {kind} has layers 0..{L - 1} and heads 0..{H - 1}")
        for role in roles:
            site = out.setdefault(kind, {}).setdefault(ROLES[role], np.zeros((L, 1, H), bool))
            site[l, 0, h] = True
    return out


def _forward(params, config, batch, patches: dict, internals):
    if isinstance(config, Seq2SeqConfig):
        return seq2seq.forward(params, config, batch, {k: Interventions(patch=p) for k, p in patches.items()},
                               internals=internals)
    out, ints = encoder.forward(params, config, batch, Interventions(patch=patches.get("encoder")), internals=internals,
                                heads=metric_heads(config))
    return out, {"encoder": ints}


@partial(jax.jit, static_argnames=("config", "metric", "senders_per_step"))
def _path_effects(params, config, clean, corrupted, senders, receivers, metric, senders_per_step, rows=None):
    """metric (S, b) of the receiver pass for each sender one-hot {kind: (S, L, 1, H, 1)};
    ``receivers`` {kind: {site: (L, 1, H)}}, or None for the output; ``rows``: the metric's
    per-example inputs (``call_metric``)."""
    stream_name = ATTENTION_INPUT[config.norm_position]
    _, clean_int = _forward(params, config, clean, {}, ("context",))
    _, corr_int = _forward(params, config, corrupted, {}, ("context",))

    def one(sender):
        frozen = {k: {"context": (jnp.where(sender[k][..., None], clean_int[k]["context"], corr_int[k]["context"]),
                                  jnp.ones(sender[k].shape, bool))} for k in sender}  # (L, b, H, q, d_h), (L, 1, H, 1)
        out, streams = _forward(params, config, corrupted, frozen, (stream_name,))  # the sender pass
        if receivers is None:
            return metric_rows(metric, out, corrupted["input_ids"].shape[0], rows)  # (b,)
        patches = {}
        for kind, sites in receivers.items():
            patches[kind] = {}
            for site, where in sites.items():
                stream = streams[kind][stream_name]  # (L, b, q, D) each layer's attention input
                if kind == "cross" and site != "query_input":  # keys and values read the encoder output
                    stream = jnp.broadcast_to(out["encoder_last_hidden_state"], (stream.shape[0],
                                              *out["encoder_last_hidden_state"].shape))  # (L, b, s, D)
                patches[kind][site] = (stream, where)
        return metric_rows(
            metric, _forward(params, config, corrupted, patches, None)[0], corrupted["input_ids"].shape[0], rows
        )  # (b,)

    return jax.lax.map(one, senders, batch_size=senders_per_step)  # (S, b)


def sender_onehots(model) -> tuple[dict, list]:
    """Every head of every attention type as a sender: ({kind: (S, L, 1, H, 1) bool}, [(kind, l, h)])."""
    names = [(k, l, h) for k, (L, H) in model.head_shapes.items() for l in range(L) for h in range(H)]
    onehots = {}
    for k, (L, H) in model.head_shapes.items():
        a = np.zeros((len(names), L, 1, H, 1), bool)
        for s, (kind, l, h) in enumerate(names):
            if kind == k:
                a[s, l, 0, h, 0] = True
        onehots[k] = a
    return onehots, names


def senders_that_fit(model, b: int, n: int) -> int:
    """How many sender passes ``path_patch`` runs at once by default: as many of its L·H senders as
    fit a sixteenth of the free memory (``jattn.nn.engine.available_bytes``; one where that is
    unknown), each pass holding about one layer's scores and α (b, H, n, n) per attention type and
    its every layer's head outputs and attention inputs (L, b, n, D) twice. The effects do not
    depend on it; the memory does: all senders at once hold one layer's α per sender."""
    from jattn.nn import engine

    width = getattr(model.config, "d_model", None) or model.config.hidden_size
    shapes = model.head_shapes.values()
    per_sender = 4 * b * sum(2 * H * n * n + 2 * L * n * width for L, H in shapes)  # bytes
    free = engine.available_bytes()
    senders = sum(L * H for L, H in shapes)
    return 1 if free is None else int(max(1, min(senders, free // 16 // per_sender)))


def path_patch(model, clean, corrupted, metric, receivers, *, batch_size: int = 16,
               senders_per_step: int | None = None, metric_inputs: dict | None = None, per_example: bool = False):
    """Path patching from every head to ``receivers`` (module docstring): "output", or a list of
    (kind, layer, head, roles) ((layer, head, roles) for an encoder), roles over "qkv".
    ``clean``, ``corrupted``, ``metric``, ``metric_inputs`` as ``jattn.patch_heads``. Returns
    {attention type: (L, H)} over sender heads, as ``jattn.patch_heads``; ``per_example``: the
    effects of each example, (N, L, H), instead of their mean. ``senders_per_step``: the sender
    passes run at once (default: as many as fit, ``senders_that_fit``)."""
    masks = None if isinstance(receivers, str) and receivers == "output" else receiver_masks(model, receivers)
    a, b = paired_inputs(model, clean, corrupted)
    onehots, names = sender_onehots(model)
    N = len(a["input_ids"])
    extra = check_metric_inputs(metric_inputs, N)
    each = np.zeros((N, len(names)))  # (N, S)
    base_fn = jax.jit(lambda p, batch, rows: metric_rows(metric, _forward(p, model.config, batch, {}, None)[0],
                                                         batch["input_ids"].shape[0], rows))
    for start in range(0, N, batch_size):
        real = min(batch_size, N - start)
        ca, cb = batch_rows(a, start, batch_size), batch_rows(b, start, batch_size)
        rows = None if extra is None else batch_rows(extra, start, batch_size)
        step = senders_per_step or senders_that_fit(model, *cb["input_ids"].shape)
        m = _path_effects(model.params, model.config, ca, cb, onehots, masks, metric, step, rows)  # (S, b)
        base = np.asarray(base_fn(model.params, cb, rows), np.float64)[:real]  # (real,)
        each[start:start + real] = (np.asarray(m, np.float64)[:, :real] - base).T  # (real, S)
    result = {k: np.zeros((N, *shape)) for k, shape in model.head_shapes.items()}
    for s, (k, l, h) in enumerate(names):
        result[k][:, l, h] = each[:, s]
    return result if per_example else {k: v.mean(0) for k, v in result.items()}


def path_patch_matrix(model, clean, corrupted, metric, *, roles: str = "qkv", batch_size: int = 16) -> np.ndarray:
    """Sender × receiver path patching for an encoder: (L, H, L, H), entry [l, h, l', h'] the
    effect of sender (l, h) through receiver (l', h')'s ``roles`` alone; 0 unless l < l'."""
    if tuple(model.head_shapes) != ("encoder",):
        raise ValueError("path_patch_matrix covers encoders; for a translation model call path_patch with "
                         "(kind, layer, head, roles) receivers")
    L, H = model.head_shapes["encoder"]
    out = np.zeros((L, H, L, H))
    for lr in range(1, L):
        for hr in range(H):
            out[:, :, lr, hr] = path_patch(model, clean, corrupted, metric, [(lr, hr, roles)],
                                           batch_size=batch_size)["encoder"]
    return out
