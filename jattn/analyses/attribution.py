"""Token-to-token attribution across layers from the same attention internals.

* Attention rollout and attention flow (Abnar & Zuidema 2020, §2): per layer the
  residual-augmented, head-averaged weights Â_l = ½ ᾱ_l + ½ I; rollout Ã_l = Â_l Ã_{l-1}
  (Eq. 1); flow = max-flow from an input token to an output token in the layered graph whose
  edges (l, i) → (l−1, j) have capacity Â_l[i, j], normalised over input tokens.
* GlobEnc (Modarressi et al. 2022, Eq. 6-8): per layer ‖N_ij‖ with N_ij the AttnResLn
  vector of Kobayashi et al. (2021) passed on through the second (FFN) LayerNorm, linearised
  with the variance of the real pre-LN2 vector (FFN output ignored, β and biases dropped);
  rows normalised to sum 1, then rolled out. (The released rollout leaves normalisation to
  its caller; we normalise so that every rolled-out map is row-stochastic, like the others.)
* ALTI (Ferrando et al. 2022, Eq. 7-9): T_i(x_j) = Z_ij, the LN-transformed contribution
  of x_j to the attention-LayerNorm output y_i; c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁),
  rows normalised, then rolled out. In a pre-LN block T_i(x_j) = R_ij, the AttnRes vector, and
  y_i the block's output (``alti_layer``; ``docs/METHODS.md``).

Rollout composes maps of the real tokens only; padding rows and columns are 0. Rolled-out
maps are (L, b, n, n): layer l's row i says how much each input token j (embedding layer)
contributes to token i's representation after layer l (0-based).

Memory: rollout and GlobEnc are n×n per layer (GlobEnc's off-diagonal norms go through a
head Gram matrix like ``jattn.analyses.norms``). ALTI's L1 distance does not factor through
a Gram matrix, so it forms T_i(x_j) for a chunk of queries at a time: (b, chunk, n, D).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.nn.token_classes import CLASS_NAMES
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.base import class_sums
from jattn.analyses.norms import (check_decomposable, diagonal_sum, head_gram, layer_major, layer_norm_map, over_layers,
                                  quadratic_norm)
from jattn.analyses.registry import register
from jattn.nn import state
from jattn.nn.attention import transformed_vectors
from jattn.nn.layers import ln_sigma, safe_norm

__all__ = ["attention_flow"]


def _pair_mask(mask: jax.Array) -> jax.Array:
    m = mask.astype(bool)  # (b, n)
    return m[:, :, None] & m[:, None, :]  # (b, n, n)


def row_normalize(maps: jax.Array) -> jax.Array:
    """Rows divided by their sums; all-zero rows (padding) stay 0. (..., n, n)."""
    s = maps.sum(-1, keepdims=True)
    return jnp.where(s > 0, maps / jnp.where(s > 0, s, 1.0), 0.0)


def rollout(maps: jax.Array, start: jax.Array | None = None) -> jax.Array:
    """Ã_0 = M_0 Ã_{-1}, Ã_l = M_l Ã_{l-1} (Abnar & Zuidema 2020, Eq. 1), Ã_{-1} = ``start`` (b, n, n)
    (the product of the layers below, I by default). maps (L, b, n, n) -> (L, b, n, n)."""
    def step(acc, m):
        acc = jnp.einsum("bij,bjk->bik", m, acc)  # (b, n, n)
        return acc, acc

    eye = jnp.broadcast_to(jnp.eye(maps.shape[-1], dtype=maps.dtype), maps.shape[1:])  # (b, n, n)
    return jax.lax.scan(step, eye if start is None else start, maps)[1]


def residual_attention(weights: jax.Array, mask: jax.Array) -> jax.Array:
    """Â = ½ ᾱ + ½ I on real tokens (Abnar & Zuidema 2020, §2). weights (L, b, H, n, n) -> (L, b, n, n)."""
    pair = _pair_mask(mask)  # (b, n, n)
    eye = jnp.eye(weights.shape[-1], dtype=bool)  # (n, n)
    a = weights.astype(jnp.float32).mean(2)  # (L, b, n, n)
    return jnp.where(pair, 0.5 * a + 0.5 * eye, 0.0)  # (L, b, n, n)


def attention_rollout(weights: jax.Array, mask: jax.Array) -> jax.Array:
    """Attention rollout (Abnar & Zuidema 2020). weights (L, b, H, n, n) -> (L, b, n, n)."""
    return rollout(residual_attention(weights, mask))


# ---------------------------------------------------------------- GlobEnc

def globenc_layer(layer: dict, view: dict, mask: jax.Array, eps: float) -> jax.Array:
    """‖N_ij‖ for one encoder layer (Modarressi et al. 2022, Eq. 6-7), padding 0.

    ``layer``: one layer's internals, with ``ffn_pre_ln`` (h + FFN(h), the real pre-LN2 vector,
    whose variance linearises the second LayerNorm); ``view``: the layer's W_O, γ₁ and γ₂.
    """
    alpha = layer["weights"].astype(jnp.float32) * _pair_mask(mask)[:, None]  # (b, H, n, n)
    values, w_o = layer["values"], view["out_kernel"].astype(jnp.float32)  # (b, H, n, d_h), (H, d_h, D)
    g1, g2 = view["ln_scale"].astype(jnp.float32), view["ffn_ln_scale"].astype(jnp.float32)  # (D,)
    sigma = ln_sigma(layer["pre_ln"], eps) * ln_sigma(layer["ffn_pre_ln"], eps)  # (b, n, 1)
    one = jnp.ones(())
    both = lambda v, s: layer_norm_map(layer_norm_map(v, g1, one), g2, s)  # LN2 ∘ LN1, linear (rows of v)
    off = quadratic_norm(alpha, head_gram(values, both(w_o, one))) / sigma  # (b, n, n)  j ≠ i
    r_ii = diagonal_sum(alpha, values, w_o) + layer["residual"].astype(jnp.float32)  # (b, n, D)
    on = safe_norm(both(r_ii, sigma), axis=-1)  # (b, n)
    eye = jnp.eye(alpha.shape[-1], dtype=bool)
    return jnp.where(eye, on[:, :, None], off) * _pair_mask(mask)  # (b, n, n)


# ---------------------------------------------------------------- ALTI

def alti_layer(layer: dict, view: dict, mask: jax.Array, eps: float, norm_position: str = "post",
               chunk: int = 8) -> jax.Array:
    """ALTI contributions c_ij of one layer (Ferrando et al. 2022, Eq. 7-9), rows sum to 1.

    Post-LN: T_i(x_j) = γ ⊙ C(Σ_h α f_h(x_j) + δ_ij x_i) / σ_i; y_i = the attention LayerNorm
    output. Pre-LN (``norm_position`` "pre"; Ferrando et al. 2022, §3, the LayerNorm folded into
    the value transformation): T_i(x_j) = Σ_h α f_h(x_j) + δ_ij x_i with f_h(x_j) = (LN(x_j) W_V^h +
    b_V^h) W_O^h, and y_i = x_i + Σ_j Σ_h α f_h(x_j) + b_O, the block's output.
    Queries are processed ``chunk`` at a time: peak (b, chunk, n, D).
    """
    pair = _pair_mask(mask)  # (b, n, n)
    alpha = layer["weights"].astype(jnp.float32) * pair[:, None]  # (b, H, n, n)
    x = layer["residual"].astype(jnp.float32)  # (b, n, D)
    if norm_position == "pre":
        sigma = jnp.ones(x.shape[:2] + (1,), jnp.float32)  # (b, n, 1)  no map after the residual sum
        g = transformed_vectors(layer["values"].astype(jnp.float32), view["out_kernel"].astype(jnp.float32))  # f
        gx, y = x, x + layer["output"].astype(jnp.float32)  # (b, n, D) x_i, the block's output h_i
    else:
        gamma = view["ln_scale"].astype(jnp.float32)  # (D,)
        sigma = ln_sigma(layer["pre_ln"], eps)  # (b, n, 1)
        w_ln = layer_norm_map(view["out_kernel"].astype(jnp.float32), gamma, jnp.ones(()))  # (H, d_h, D)
        g = transformed_vectors(layer["values"].astype(jnp.float32), w_ln)  # (b, H, n, D)  γ ⊙ C f
        gx = layer_norm_map(x, gamma, sigma)  # (b, n, D)  LN-map of x_i
        y = layer["attention_ln_out"].astype(jnp.float32)  # (b, n, D)
    n = alpha.shape[-1]

    def row(xs):
        a_i, s_i, y_i, gx_i, i = xs  # (b, H, n), (b, 1), (b, D), (b, D), ()
        t = jnp.einsum("bhj,bhjd->bjd", a_i, g) / s_i[:, :, None]  # (b, n, D)  T_i(x_j), j ≠ i
        t = t + (jnp.arange(n) == i)[None, :, None] * gx_i[:, None, :]  # (b, n, D)  + δ_ij (the map of) x_i
        d = jnp.abs(y_i[:, None, :] - t).sum(-1)  # (b, n)  ‖y_i − T_i(x_j)‖₁
        return jnp.maximum(jnp.abs(y_i).sum(-1, keepdims=True) - d, 0.0)  # (b, n)

    xs = (jnp.moveaxis(alpha, 2, 0), jnp.moveaxis(sigma, 1, 0), jnp.moveaxis(y, 1, 0),
          jnp.moveaxis(gx, 1, 0), jnp.arange(n))
    c = jnp.moveaxis(jax.lax.map(row, xs, batch_size=min(chunk, n)), 0, 1)  # (b, n, n)
    return row_normalize(c * pair)


# ---------------------------------------------------------------- one-call API

@partial(jax.jit, static_argnames=("config",))
def encoder_attributions(params, config, inputs):
    """Every per-layer map and rollout of ``attributions`` for an encoder batch, (L, b, n, n)."""
    from jattn.nn import encoder

    check_decomposable(config, "jattn.attributions (ALTI, GlobEnc)")

    def run(params, inputs):
        model = encoder.module(params, config)
        _, internals = model(inputs)
        mask, eps, view = inputs["attention_mask"], config.layer_norm_eps, model.view()  # (b, n)
        residual = residual_attention(internals["weights"], mask)  # (L, b, n, n)
        alti = over_layers(alti_layer, internals, view, mask, eps, config.norm_position)  # (L, b, n, n)
        out = {"residual_attention": residual, "rollout": rollout(residual), "alti_layers": alti, "alti": rollout(alti)}
        if config.norm_position == "post":  # GlobEnc linearises a post-LN block's two LayerNorms
            globenc = row_normalize(over_layers(globenc_layer, internals, view, mask, eps))  # (L, b, n, n)
            out.update(globenc_layers=globenc, globenc=rollout(globenc))
        return out

    return state.on_auto_axes(run, (params, inputs), inputs["attention_mask"], layer_major)


def attributions(model, examples) -> dict[str, dict[str, np.ndarray]]:
    """Context-mixing maps of ``model`` on ``examples`` (a list, or a tokenized batch; see
    ``ModuleModel.batch``), per attention type, numpy; padding is 0.

    Encoder: ``{"encoder": ...}`` with per-layer maps and their rollouts (L, b, n, n):
    ``residual_attention`` / ``rollout`` (Abnar & Zuidema), ``globenc_layers`` / ``globenc``
    (Modarressi et al.; post-LN models only: its linearisation is of a post-LN block's two
    LayerNorms), ``alti_layers`` / ``alti`` (Ferrando et al. 2022a; pre-LN as their §3). Attention flow is per
    example: ``attention_flow(out["encoder"]["residual_attention"][:, k, :n, :n])``.
    Translation model: ALTI+ (Ferrando et al. 2022b), ``jattn.analyses.context_mixing.alti_plus_maps``.
    """
    if not hasattr(model, "attribution_maps"):
        raise TypeError(f"jattn.attributions takes a model from jattn.load, got {type(model).__name__}")
    maps = model.attribution_maps(model.batch(examples))
    return {kind: jax.tree.map(np.asarray, maps[kind]) for kind in model.head_shapes if kind in maps}


# ---------------------------------------------------------------- the registered method

@dataclasses.dataclass(frozen=True)
class Alti(Method):
    """Per layer, the mean share of a token's ALTI row (rolled out to the input embeddings,
    Ferrando et al. 2022a) given to itself and to each token class ([CLS], [SEP], punctuation,
    other), and the share each layer alone keeps on the token itself. On a translation model the
    encoder's (its decoder: ``alti-plus``)."""

    name = "alti"
    families = ("encoder", "seq2seq")
    kinds = ("encoder",)
    layerwise = True  # inside the scan, the rolled-out map (b, n, n) carried from layer to layer

    def initial_state(self, batch: dict) -> jax.Array:
        """The rollout before the first layer: I. -> (b, n, n)"""
        b, n = batch["query_mask"].shape
        return jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), (b, n, n))

    def reduce(self, ctx: StepContext) -> tuple[dict, jax.Array]:
        check_decomposable(ctx.config, "the alti method")
        mask = ctx.batch["query_mask"] * (ctx.batch["example"] >= 0)[:, None]  # (b, n) real tokens of real rows
        layers = over_layers(alti_layer, ctx.internals, ctx.view, mask, ctx.config.layer_norm_eps,
                             ctx.config.norm_position)  # (L, b, n, n)
        rolled = rollout(layers, ctx.state)  # (L, b, n, n)
        real = mask.astype(jnp.float32)  # (b, n)
        per_class = class_sums(rolled[:, :, None], ctx.batch["key_class"])[:, :, :, 0]  # (C, L, b, n)
        diagonal = lambda m: jnp.einsum("lbn,bn->l", jnp.diagonal(m, axis1=-2, axis2=-1), real)  # (L,)
        return {"class": jnp.einsum("clbn,bn->lc", per_class, real), "self": diagonal(rolled),
                "layer_self": diagonal(layers), "n": real.sum()}, rolled[-1]

    def finalize(self, totals, meta):
        n = max(float(totals["n"]), 1.0)
        return {"alti_class": Statistic(totals["class"] / n, f"(L, {len(CLASS_NAMES)}) mean ALTI share (rolled out "
                                        f"to the embeddings) to {'/'.join(CLASS_NAMES)} (Ferrando et al. 2022a)"),
                "alti_self": Statistic(totals["self"] / n, "(L,) mean ALTI share (rolled out) to the token itself"),
                "alti_layer_self": Statistic(totals["layer_self"] / n, "(L,) mean share of each layer's own ALTI "
                                             "row on the token itself (its residual and self-attention)")}


register("alti", "ALTI token contributions rolled out over the layers: share to self and token classes (Ferrando "
         "et al. 2022a; pre-LN blocks as their §3)", lambda model, options: Alti())


# ---------------------------------------------------------------- attention flow

def _max_flow(cap: np.ndarray, source: int, sink: int, tol: float = 1e-12) -> float:
    """Edmonds–Karp maximum flow on a dense capacity matrix (V, V)."""
    res = cap.astype(np.float64).copy()
    total = 0.0
    while True:
        parent = np.full(len(res), -1)
        parent[source] = source
        frontier = [source]
        while frontier and parent[sink] < 0:
            nxt = []
            for u in frontier:
                for v in np.nonzero((res[u] > tol) & (parent < 0))[0]:
                    parent[v] = u
                    nxt.append(v)
            frontier = nxt
        if parent[sink] < 0:
            return total
        path, v = [], sink
        while v != source:
            path.append((parent[v], v))
            v = parent[v]
        push = min(res[u, v] for u, v in path)
        for u, v in path:
            res[u, v] -= push
            res[v, u] += push
        total += push


def attention_flow(maps: np.ndarray) -> np.ndarray:
    """Attention flow to the last layer for one example (Abnar & Zuidema 2020, §2).

    maps (L, n, n): per-layer residual-augmented weights of the real tokens, e.g.
    ``residual_attention`` sliced to one example. Node (l, i) is token i after layer l
    (l = 0 the embeddings); edge (l, i) → (l−1, j) has capacity maps[l−1, i, j]. Returns
    (n, n): row i = max-flow from output token i to each input token j, normalised to sum 1.
    Cost: n² max-flow problems on (L+1)·n nodes — small inputs only, as in the paper.
    """
    maps = np.asarray(maps, np.float64)
    if maps.ndim != 3 or maps.shape[1] != maps.shape[2]:
        raise ValueError(f"attention_flow takes one example's maps (L, n, n), got shape {maps.shape}")
    L, n, _ = maps.shape
    cap = np.zeros(((L + 1) * n, (L + 1) * n))
    for l in range(1, L + 1):
        cap[l * n:(l + 1) * n, (l - 1) * n:l * n] = maps[l - 1]
    flow = np.array([[_max_flow(cap, L * n + i, j) for j in range(n)] for i in range(n)])
    return flow / flow.sum(1, keepdims=True)
