"""Attention-pattern types (Kovaleva et al. 2019, §3 and Fig. 1-2): vertical, diagonal,
vertical+diagonal, block, heterogeneous — a rule classifier over per-map statistics.

Each head's map of one example (real tokens only; rows of [CLS]/[SEP] left out, they are not
the body of the pattern) is summarised by masses, each a mean over the body rows i:

* ``vertical``  V = Σ_{j ∈ [CLS], [SEP]} α[i, j]               (Kovaleva's "vertical": special tokens)
* ``diagonal``  D = Σ_{j ∈ {i−1, i, i+1}, j not special} α[i, j]   (previous / self / next token)
* ``diagonal_share``  R = D / (1 − V): the share of the non-special mass on the ±1/0 diagonal
* ``block``     B = Σ_{j in i's segment, not special} α[i, j] / (1 − V)   (pairs only; share of the
  non-special mass that stays in the query's own sentence; segments are counted by the [SEP]s
  before a token, so BERT's and RoBERTa's pair layouts both work)

Rules (thresholds ``Thresholds``):

1. V ≥ ``vertical``: vertical+diagonal if R ≥ ``diagonal``, else vertical;
2. otherwise diagonal if R ≥ ``diagonal``;
3. otherwise block if the input is a pair and B ≥ ``block``;  4. heterogeneous otherwise.

The thresholds were chosen on 72 MiniLM maps labelled by eye
(``experiments/labels/kovaleva-patterns/hand_labels.json``, drawn in
``hand_labelled_maps_*.png``): the grid V ∈ {0.25, 0.30, …, 0.70} × R ∈ {0.15, 0.20, …, 0.80}
agrees best with the hand labels at V = 0.35, R = 0.45 (52/72 = 72 %, in sample). A map's eye
label follows where the *rest* of the mass goes once the [CLS] column is discounted, hence R
rather than D (absolute thresholds V ≥ 0.5, D ≥ 0.5 agreed on 45/72). Chance levels on a
uniform map of n tokens are V = 2/n and R ≈ 3/(n − 2) (0.1 and 0.17 at n = 20). Block: 0.9
(a diffuse pair map keeps about its segment's share, 0.5–0.65 on the sample; one hand-labelled
block map, at 0.79, is below it: block is rare in MiniLM on these single-sentence tasks).

``PatternTypes`` is the runner method (``jattn analyze --methods patterns``): counts of each
type per (layer, head), reduced layer by layer inside the scan. ``finetune_change``: Kovaleva et
al.'s §5 cosine between a head's maps before and after fine-tuning. ``synthetic_map`` draws
maps built to be each type (the tests; the CNN's sanity check).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn.token_classes import CLASS_NAMES, CLS, SEP
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.registry import register
from jattn.nn.layers import safe_sqrt

__all__ = ["classify", "finetune_change", "map_cosine", "map_statistics", "PatternTypes", "Thresholds", "TYPES"]

TYPES = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
VERTICAL, DIAGONAL, MIXED, BLOCK, HETEROGENEOUS = range(5)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    vertical: float = 0.35  # V: mass on [CLS]/[SEP]
    diagonal: float = 0.45  # R: share of the non-special mass on the ±1/0 diagonal
    block: float = 0.9  # B: in-segment share of the non-special mass (pairs)


def map_statistics(A: jax.Array, token_class: jax.Array) -> dict[str, jax.Array]:
    """Per-map masses V, D, B and the pair flag. A (..., b, H, n, n) attention weights,
    token_class (b, n) (``jattn.nn.token_classes``: CLS 0, SEP 1, -1 on padding) -> each (..., b, H),
    and ``pair`` (b,) bool, ``rows`` (b,) number of body rows (0: no statistic)."""
    real = token_class >= 0  # (b, n)
    special = (token_class == CLS) | (token_class == SEP)  # (b, n)
    body = real & ~special  # (b, n) rows and columns of the pattern's body
    bodyf, specialf = body.astype(A.dtype), special.astype(A.dtype)
    n = A.shape[-1]
    near = (jnp.abs(jnp.arange(n)[:, None] - jnp.arange(n)[None, :]) <= 1).astype(A.dtype)  # (n, n)
    segment = jnp.cumsum(token_class == SEP, axis=-1) - (token_class == SEP)  # (b, n) [SEP]s strictly before
    same = (segment[:, :, None] == segment[:, None, :]).astype(A.dtype) * bodyf[:, None, :]  # (b, n, n)
    v_row = jnp.einsum("...bhij,bj->...bhi", A, specialf)  # (..., b, H, n)
    d_row = jnp.einsum("...bhij,ij,bj->...bhi", A, near, bodyf)  # (..., b, H, n)
    s_row = jnp.einsum("...bhij,bij->...bhi", A, same)  # (..., b, H, n)
    b_row = s_row / jnp.maximum(1.0 - v_row, 1e-6)  # (..., b, H, n)
    rows = bodyf.sum(-1)  # (b,)

    def mean(x):  # over body rows
        return jnp.einsum("...bhi,bi->...bh", x, bodyf) / jnp.maximum(rows, 1.0)[:, None]  # (..., b, H)

    pair = (jnp.where(body, segment, 0).max(-1) > 0)  # (b,)
    V, D = mean(v_row), mean(d_row)  # (..., b, H)
    return {"vertical": V, "diagonal": D, "diagonal_share": D / jnp.maximum(1.0 - V, 1e-6), "block": mean(b_row),
            "pair": pair, "rows": rows}


def classify(stats: dict, t: Thresholds = Thresholds()) -> jax.Array:
    """The rule labels (indices into ``TYPES``) from ``map_statistics``: (..., b, H) int."""
    V, R, B = stats["vertical"], stats["diagonal_share"], stats["block"]  # (..., b, H)
    pair = jnp.broadcast_to(stats["pair"][:, None], V.shape[-2:])  # (b, H)
    diagonal = R >= t.diagonal
    label = jnp.where(pair & (B >= t.block), BLOCK, HETEROGENEOUS)
    label = jnp.where(diagonal, DIAGONAL, label)
    return jnp.where(V >= t.vertical, jnp.where(diagonal, MIXED, VERTICAL), label).astype(jnp.int32)  # (..., b, H)


@dataclasses.dataclass(frozen=True)
class PatternTypes(Method):
    """Kovaleva et al.'s pattern types per (layer, head): counts over examples with at least one
    body row; ``pattern_share`` (L, H, 5) and ``pattern_proportions`` (5,) over all maps."""

    thresholds: Thresholds = Thresholds()
    name = "patterns"
    layerwise = True

    def reduce(self, ctx: StepContext) -> dict:
        cls = ctx.batch["token_class"]  # (b, n)
        stats = map_statistics(ctx.internals["weights"], cls)  # each (L, b, H)
        label = classify(stats, self.thresholds)  # (L, b, H)
        used = (stats["rows"] > 0).astype(jnp.float32)  # (b,)
        onehot = jax.nn.one_hot(label, len(TYPES)) * used[:, None, None]  # (L, b, H, 5)
        return {"counts": onehot.sum(1), "vertical": jnp.einsum("lbh,b->lh", stats["vertical"], used),
                "diagonal": jnp.einsum("lbh,b->lh", stats["diagonal"], used), "maps": used.sum()}

    def finalize(self, totals, meta):
        counts, n = totals["counts"], max(totals["maps"], 1.0)  # (L, H, 5)
        out = {"pattern_share": Statistic(counts / n, f"(L, H, 5) share of each type {TYPES} per head"),
               "pattern_proportions": Statistic(counts.sum((0, 1)) / counts.sum(),
                                                f"(5,) share of all head maps of each type {TYPES}"),
               "pattern_vertical": Statistic(totals["vertical"] / n, "(L, H) mean vertical mass V"),
               "pattern_diagonal": Statistic(totals["diagonal"] / n, "(L, H) mean diagonal mass D")}
        return out


def map_cosine(A: jax.Array, B: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Kovaleva et al.'s §5 similarity: the cosine between two models' flattened maps of the same
    head and input over real rows and columns. A, B (L, b, H, n, n), attention_mask (b, n) -> (L, b, H);
    0 (with gradient 0, not NaN) where a map has no real entry (a padding-only row of the batch)."""
    real = attention_mask.astype(A.dtype)  # (b, n)
    pair = real[:, :, None] * real[:, None, :]  # (b, n, n) real rows and columns only
    dot = jnp.einsum("lbhij,lbhij,bij->lbh", A, B, pair)  # (L, b, H)
    norm_a = safe_sqrt(jnp.einsum("lbhij,bij->lbh", A * A, pair))  # (L, b, H)
    norm_b = safe_sqrt(jnp.einsum("lbhij,bij->lbh", B * B, pair))  # (L, b, H)
    den = norm_a * norm_b  # (L, b, H)
    return jnp.where(den > 0, dot / jnp.where(den > 0, den, 1.0), 0.0)


@partial(jax.jit, static_argnames=("config_a", "config_b"))
def _change_step(params_a, config_a, params_b, config_b, batch, token_class, iv_b):
    """Per example and head: cosine of the two models' maps over real tokens (L, b, H), and the
    last layer's [CLS] row mass per token class for each model (2, C, b, H)."""
    from jattn.nn.encoder import forward

    A = forward(params_a, config_a, batch, None, internals=("weights",))[1]["weights"]  # (L, b, H, n, n)
    B = forward(params_b, config_b, batch, iv_b, internals=("weights",))[1]["weights"]  # (L, b, H, n, n)
    onehot = (token_class[:, :, None] == jnp.arange(len(CLASS_NAMES))).astype(A.dtype)  # (b, n, C)
    cls_rows = jnp.stack([jnp.einsum("bhj,bjc->cbh", M[-1, :, :, 0], onehot) for M in (A, B)])  # (2, C, b, H)
    return map_cosine(A, B, batch["attention_mask"]), cls_rows


def finetune_change(model_a, model_b, examples, *, interventions_b=None, batch_size: int = 32,
                    max_length: int = 128, progress: bool = True) -> dict:
    """Kovaleva et al. 2019 §5 (Fig. 5): per head, the cosine similarity between the flattened
    attention maps of ``model_a`` (e.g. pretrained) and ``model_b`` (fine-tuned) on the same
    input — over real tokens only (the released code used the padded map) — averaged over the
    examples; and the last layer's [CLS] row: its mass on [CLS] / [SEP] / punctuation / other
    per head for each model. ``examples``: texts, (A, B) pairs, or (text, label) tuples.
    Returns ``cosine`` (L, H), ``cls_to_class`` {"a", "b"} each {class: (H,)}."""
    from tqdm.auto import tqdm

    from jattn.runner.batcher import model_batches, token_classes

    if model_a.config.num_layers != model_b.config.num_layers or model_a.config.num_heads != model_b.config.num_heads:
        raise ValueError("the two models must have the same number of layers and heads to compare their maps")
    vocabularies = [m.tokenizer.get_vocab() for m in (model_a, model_b) if m.tokenizer is not None]
    if len(vocabularies) == 2 and vocabularies[0] != vocabularies[1]:
        raise ValueError(f"{model_a.source or 'the first model'} and {model_b.source or 'the second'} tokenize "
                         "differently (their vocabularies differ), so one's token ids mean other words to the other "
                         "and their maps do not compare position by position. Fix: compare a fine-tuned model with "
                         "the pretrained model it was fine-tuned from")
    labelled = [x if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], (int, np.integer)) else (x, 0)
                for x in examples]
    texts = [t if isinstance(t, str) else tuple(t) for t, _ in labelled]
    iv = model_b.check_interventions(interventions_b)
    cos_sum, cls_sum, count = 0.0, 0.0, 0
    bar = tqdm(total=len(labelled), unit="ex", desc="fine-tuning change", disable=not progress)
    for inputs, idx in model_batches(model_a, texts, batch_size, max_length):
        batch = model_a.check_batch(inputs)
        cls = token_classes(model_a.tokenizer, np.asarray(batch["input_ids"]), np.asarray(batch["attention_mask"]))
        cos, rows = _change_step(model_a.params, model_a.config, model_b.params, model_b.config, batch,
                                 jnp.asarray(cls), iv)  # (L, b, H), (2, C, b, H)
        cos_sum = cos_sum + np.asarray(cos, np.float64)[:, :len(idx)].sum(1)  # (L, H)
        cls_sum = cls_sum + np.asarray(rows, np.float64)[:, :, :len(idx)].sum(2)  # (2, C, H)
        count += len(idx)
        bar.update(len(idx))
    bar.close()
    cls_mean = cls_sum / count
    return {"cosine": cos_sum / count,
            "cls_to_class": {m: {c: cls_mean[k, i] for i, c in enumerate(CLASS_NAMES)} for k, m in enumerate("ab")}}


def synthetic_map(kind: int, n: int, rng: np.random.Generator, pair: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A map built to be of type ``kind`` (index into ``TYPES``) on a sequence of n tokens
    ([CLS] … [SEP], or [CLS] A [SEP] B [SEP] when ``pair``), rows normalised, with random
    jitter. Returns (map (n, n), token_class (n,))."""
    cls = np.full(n, 3, np.int32)
    cls[0], cls[-1] = CLS, SEP
    mid = n // 2
    if pair:
        cls[mid] = SEP
    noise = rng.dirichlet(np.ones(n), size=n)  # (n, n) diffuse rows
    i = np.arange(n)
    diag = np.zeros((n, n))
    off = rng.choice([-1, 0, 1])
    diag[i, np.clip(i + off, 0, n - 1)] = 1.0
    vert = np.zeros((n, n))
    vert[:, rng.choice(np.flatnonzero(cls <= SEP))] = 1.0
    seg = np.cumsum(cls == SEP) - (cls == SEP)
    block = (seg[:, None] == seg[None, :]) & (cls > SEP)[None, :]
    block = block / np.maximum(block.sum(1, keepdims=True), 1)
    w = rng.uniform(0.85, 0.97)
    A = {VERTICAL: w * vert + (1 - w) * noise, DIAGONAL: w * diag + (1 - w) * noise,
         MIXED: 0.45 * vert + 0.45 * diag + 0.1 * noise, BLOCK: w * block + (1 - w) * noise,
         HETEROGENEOUS: noise}[kind]
    return (A / A.sum(1, keepdims=True)).astype(np.float32), cls


register("patterns", "Kovaleva et al. pattern types per head (vertical/diagonal/mixed/block/heterogeneous)",
         lambda model, options: PatternTypes())
