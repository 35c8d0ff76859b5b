"""Layer-wise relevance propagation (LRP) head relevance (Voita et al. 2019, §4.2; Bach et al. 2015;
Ding et al. 2017).

The relevance of the model's top-1 prediction (one unit of relevance per prediction: the class logit of
a classifier, the top-1 logit at every real target position of a translation model) is propagated back
to the output of each head of every encoder layer; a head's relevance is the sum over its units and
over tokens, and each layer's head relevances are normalised to sum to 1.

Rule (the released code's α-β rule, α = β = 0.5, reference input 0): for a function o = f(x) with
inputs x_i, each output o's contributions are z_{o←i} = ∂o/∂x_i · x_i + f(0)_o / N (the value at the
reference point shared equally by the N inputs). Positive and negative contributions are normalised
separately, R_i = Σ_o R_o (α z⁺_{o←i} / Σ_i z⁺_{o←i} + β z⁻_{o←i} / Σ_i z⁻_{o←i}), and the input
relevances are rescaled so that Σ|R_in| = Σ|R_out| (conservation). With α + β = 1 every transition is a
distribution over the inputs, so non-negative relevance stays non-negative. For a linear f the
contributions are exact (the analytic decomposition); for a non-linear one they are first order.

How the network is cut into relprop steps (all per example, padding excluded):
  * the top: o = top-1 logit as a function of the last encoder state h_L (n, D): the classifier head
    (pooler, dense layers) or, for a translation model, the whole teacher-forced decoder, one step per
    target position t (the decoder is not propagated layer by layer; the relevance that would stay on the
    target prefix in a full decoder LRP is not separated out, so all relevance reaches the source side);
  * each encoder layer l, top to bottom, in two steps. (1) The token-wise part
    x_{l+1,i} = LN_2(h + FFN(h)), h = LN_1(x_{l,i} + Σ_h c_{h,i} W_O^h + b_O) as a function of the
    layer input x_{l,i} (the residual) and the head outputs c_{h,i} (d_h units each): z from its
    per-token Jacobian, N = D + H d_h; head relevance = Σ_{i, units} R(c_h). (2) The attention
    value path c_{h,i} = Σ_j α_{h,i,j} (x_j W_V^h + b_V^h) with α held constant (as the released code's
    ``consider_attn_constant``): linear in x, contributions exact, N = (real tokens)·D;
    R(x_l) = R_residual + R_values.

Why a separate jitted function rather than a streaming reducer: relevance flows top-down, from the
prediction through layer L to layer 1, after the whole forward; the runner's reducers see the internals
of one forward and reduce bottom-up inside the scan. ``head_relevance`` still returns additive totals
per batch (the sum over examples of per-layer relevance), so batches combine by addition. The forward
keeps each layer's input and head outputs (L, b, n, D) only; each layer's α is recomputed from its input
for one example at a time as the pass reaches it (``jattn.nn.recompute``), never every layer's α.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn.config import EncoderConfig
from jattn.nn.interventions import NONE
from jattn.nn import state
from jattn.nn.attention import post_ln_ffn
from jattn.nn.engine import layer_slice
from jattn.nn.recompute import layer_weights

__all__ = ["head_gradient_x_input", "head_relevance"]

ALPHA, BETA, EPS = 0.5, 0.5, 1e-5


def transition(z: jax.Array, n_in_axes: int = 1) -> jax.Array:
    """α-β shares of each output's relevance over its inputs. z (..., *inputs) contributions, the last
    ``n_in_axes`` axes the inputs -> same shape; for each output the shares sum to α + β (= 1) when it
    has positive and negative contributions."""
    axes = tuple(range(z.ndim - n_in_axes, z.ndim))
    pos, neg = jnp.maximum(z, 0.0), jnp.minimum(z, 0.0)
    return (ALPHA * pos / (pos.sum(axes, keepdims=True) + EPS)
            + BETA * neg / (neg.sum(axes, keepdims=True) - EPS))


def rescale(total: jax.Array, *relevances: jax.Array) -> list[jax.Array]:
    """Scale ``relevances`` together so that Σ|R_in| = ``total`` (= Σ|R_out|): conservation (exact; the
    released code adds ε to the denominator instead of guarding it, losing ~ε per step)."""
    size = jnp.maximum(sum(jnp.abs(r).sum() for r in relevances), 1e-30)
    return [r * (total / size) for r in relevances]


def relprop_scalar(f, x: jax.Array, mask: jax.Array, relevance=1.0) -> jax.Array:
    """Relevance of the inputs x (n, D) of a scalar function o = f(x); ``mask`` (n,) marks real tokens
    (padding gets none). Contributions z_i = ∂o/∂x_i x_i + f(0)/N, N = real tokens · D."""
    keep = mask[:, None].astype(x.dtype)  # (n, 1)
    n_inputs = keep.sum() * x.shape[1]
    z = (jax.grad(f)(x) * x + f(jnp.zeros_like(x)) / n_inputs) * keep  # (n, D)
    r = relevance * transition(z[None], 2)[0]  # (n, D)
    return rescale(jnp.abs(relevance), r)[0]


def relprop_tokenwise(g, relevance: jax.Array, x: jax.Array, c: jax.Array, mask: jax.Array):
    """Step (1): per token i, out_i = g(x_i (D,), c_i (H, d_h)) (D,). relevance (n, D) at the outputs
    -> (R(x) (n, D), R(c) (n, H, d_h)), conserved in total."""
    n, H, d_h = c.shape
    D = x.shape[1]
    flat = lambda xi, ci: g(xi, ci.reshape(H, d_h))  # (D,), (H d_h,) -> (D,)
    inputs = jnp.concatenate([x, c.reshape(n, H * d_h)], -1)  # (n, P)
    jac = jax.vmap(jax.jacrev(lambda v: flat(v[:D], v[D:])))(inputs)  # (n, D, P)
    f0 = flat(jnp.zeros(D, x.dtype), jnp.zeros(H * d_h, x.dtype))  # (D,)
    z = jac * inputs[:, None, :] + f0[None, :, None] / inputs.shape[1]  # (n, D, P)
    share = transition(z) * mask[:, None, None]  # (n, D, P)
    r = jnp.einsum("no,nop->np", relevance, share)  # (n, P)
    r_x, r_c = rescale(jnp.abs(relevance).sum(), r[:, :D], r[:, D:])
    return r_x, r_c.reshape(n, H, d_h)


def relprop_values(relevance: jax.Array, weights: jax.Array, x: jax.Array, w_v: jax.Array, b_v: jax.Array,
                   mask: jax.Array) -> jax.Array:
    """Step (2): c_{h,i,e} = Σ_j α_{h,i,j} (Σ_k x_{j,k} W_V[k,h,e] + b_V[h,e]), α constant.
    relevance (n, H, d_h) of c, weights (H, n, n), x (n, D), w_v (D, H, d_h), b_v (H, d_h) -> R(x) (n, D).
    Exact contributions; one head at a time (memory n·d_h·n·D)."""
    n, D = x.shape
    keep = mask.astype(x.dtype)  # (n,)
    n_inputs = keep.sum() * D

    def head(args):
        r_h, a, w, b = args  # (n, d_h), (n, n), (D, d_h), (d_h,)
        xw = jnp.einsum("jk,ke->ejk", x, w)  # (d_h, n, D)
        z = a[:, None, :, None] * xw[None] + (b / n_inputs)[None, :, None, None]  # (n, d_h, n, D)
        z = z * keep[None, None, :, None] * keep[:, None, None, None]  # padded keys and queries: no share
        return jnp.einsum("ie,iejk->jk", r_h, transition(z, 2))  # (n, D)

    per_head = jax.lax.map(head, (jnp.moveaxis(relevance, 1, 0), weights, jnp.moveaxis(w_v, 1, 0), b_v))  # (H, n, D)
    return rescale(jnp.abs(relevance).sum(), per_head.sum(0))[0]


def _encoder_layers(module, config):
    """(stacked layer module, names of its attention and LayerNorm, the FFN sublayer function)."""
    if isinstance(config, EncoderConfig):
        ffn = lambda layer, h: post_ln_ffn(layer.ffn_in, layer.ffn_out, layer.ffn_ln, h, NONE,
                                           activation=config.hidden_act, activation_dropout=0.0,
                                           dropout_rate=0.0)[0]
        return module.layers, "attention", "attention_ln", ffn
    return module.encoder.layers, "self_attn", "self_attn_ln", lambda layer, h: layer.ffn(h, NONE, None)[0]


def _top_relevance(module, config, batch: dict, i: int, last: jax.Array) -> jax.Array:
    """Relevance of example i's last encoder state (n, D) for its top-1 prediction(s)."""
    src_mask = batch["attention_mask"][i]  # (n,)
    if isinstance(config, EncoderConfig):
        if module.classifier is None:
            raise ValueError("LRP head relevance needs a prediction: load a classifier (num_labels > 0) or a "
                             "translation model")

        def logits(h):  # (n, D) -> (C,)
            features = module.pool(h[None]) if config.classifier == "pooler" else h[None, 0]  # (1, D)
            return module.classifier(features, None)[0]  # (C,)

        top = jnp.argmax(logits(last))
        return relprop_scalar(lambda h: logits(h)[top], last, src_mask)
    dec_ids, dec_mask = batch["decoder_input_ids"][i], batch["decoder_attention_mask"][i]  # (t,)

    def all_logits(h):  # (n, D) -> (t, V)
        y, _, _ = module.decoder_stack(h[None], src_mask[None], dec_ids[None], dec_mask[None], {}, internals=None)
        return module.logits(y)[0]  # (t, V)

    tops = jnp.argmax(all_logits(last), -1)  # (t,)
    per_position = jax.vmap(lambda t: relprop_scalar(lambda h: all_logits(h)[t, tops[t]], last, src_mask))(
        jnp.arange(dec_ids.shape[0]))  # (t, n, D)
    return jnp.einsum("t,tnd->nd", batch["target_mask"][i].astype(last.dtype), per_position)  # (n, D)


@partial(jax.jit, static_argnames=("config",))
def head_relevance(params, config, batch: dict) -> dict:
    """LRP relevance of every encoder head for the top-1 prediction(s), per example.

    batch: ``input_ids``, ``attention_mask`` (b, n); for a translation model also ``decoder_input_ids``,
    ``decoder_attention_mask`` and ``target_mask`` (b, t) (1 on the target positions whose top-1 logit
    is explained). Returns ``heads`` (b, L, H) relevance per head (un-normalised; the example's total is
    its number of predictions), ``residual`` (b, L) relevance passed on through the residual at each
    layer, ``layer_input`` (b, L) Σ R(x_l) (conservation: equal to the total at every layer)."""
    if config.norm_position != "post":
        raise ValueError("head_relevance propagates relevance through post-LN blocks (x -> LN_2(h + FFN(h)), "
                         "h = LN_1(x + attention)); this model's blocks are pre-LN, whose relprop steps it does not "
                         "implement. Fix: head_gradient_x_input (gradient × input of each head) applies to any block")
    module = state.merge(params, config)
    outputs, internals = module(batch, internals=("residual", "context"))  # each (L, b, n, D): no layer's α kept
    if not isinstance(config, EncoderConfig):
        outputs = {"last_hidden_state": outputs["encoder_last_hidden_state"]}
        internals = internals["encoder"]
    layers, attn_name, ln_name, ffn = _encoder_layers(module, config)
    graphdef, stacked = nnx.split(layers)
    L = internals["residual"].shape[0]

    def one(i):
        mask = batch["attention_mask"][i]  # (n,)
        weights = layer_weights(params, config, "encoder", {"attention_mask": mask[None]}, outputs)  # α (1, H, n, n)
        r = _top_relevance(module, config, batch, i, outputs["last_hidden_state"][i])  # (n, D)
        heads, residual, totals = [], [], []
        for l in reversed(range(L)):  # top-down
            layer = nnx.merge(graphdef, layer_slice(stacked, l))
            attn, ln = getattr(layer, attn_name), getattr(layer, ln_name)

            def g(x_i, c_i):  # one token: (D,), (H, d_h) -> (D,)
                return ffn(layer, ln(x_i[None] + attn.out(c_i[None]))[0][None])[0]

            x = internals["residual"][l, i]  # (n, D)
            context = jnp.moveaxis(internals["context"][l, i], 0, 1)  # (n, H, d_h)
            r_x, r_c = relprop_tokenwise(g, r, x, context, mask)
            heads.append(r_c.sum((0, 2)))  # (H,)
            residual.append(r_x.sum())
            alpha = weights(l, x[None])[0]  # (H, n, n) layer l's α recomputed from its input
            r = r_x + relprop_values(r_c, alpha, x, attn.value.kernel[...], attn.value.bias[...], mask)  # (n, D)
            totals.append(r.sum())
        return jnp.stack(heads[::-1]), jnp.stack(residual[::-1]), jnp.stack(totals[::-1])

    heads, residual, totals = jax.lax.map(one, jnp.arange(batch["input_ids"].shape[0]))
    real = (batch["attention_mask"].sum(1) > 0).astype(heads.dtype)  # (b,) padding rows count nothing
    return {"heads": heads * real[:, None, None], "residual": residual * real[:, None],
            "layer_input": totals * real[:, None]}


@partial(jax.jit, static_argnames=("config",))
def head_gradient_x_input(params, config, batch: dict) -> jax.Array:
    """Gradient × input of every encoder head for the same prediction(s) as ``head_relevance``, the
    baseline LRP is checked against: Σ over the head's units and tokens of ∂o/∂c_h · c_h, which is
    ∂o/∂ξ_h at ξ = 1 for a gate ξ_h on the head's output (Michel et al. 2019's mask). o: the top-1
    class logit, or Σ_t over ``target_mask`` of the top-1 logit at target position t (the top-1
    token fixed at the unmodified model's). batch as ``head_relevance``'s -> (b, L, H), signed. Each
    layer is rematerialised in the backward pass where the layers' residuals do not fit
    (``jattn.nn.engine.layer_loop``), as the importance sweeps are: one layer's α at a time."""
    from jattn.nn import encoder, seq2seq
    from jattn.nn.interventions import Interventions

    b = batch["input_ids"].shape[0]
    if isinstance(config, EncoderConfig):
        if not config.num_labels:
            raise ValueError("gradient x input of the heads needs a prediction: load a classifier (num_labels > 0) "
                             "or a translation model")
        L, H = config.num_layers, config.num_heads
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}

        def outputs(gates):  # (L, b, H) -> (b,)
            logits = encoder.classify(params, config, inputs, Interventions(head_gates=gates), remat=True)  # (b, C)
            top = jax.lax.stop_gradient(logits.argmax(-1))  # (b,)
            return jnp.take_along_axis(logits, top[:, None], -1)[:, 0]
    else:
        L, H = config.encoder_layers, config.encoder_heads
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")}
        mask = batch["target_mask"].astype(jnp.float32)  # (b, t)

        def outputs(gates):
            logits = seq2seq.forward(params, config, inputs, {"encoder": Interventions(head_gates=gates)},
                                     internals=None, remat=True)[0]["logits"]  # (b, t, V)
            top = jax.lax.stop_gradient(logits.argmax(-1))  # (b, t)
            return (jnp.take_along_axis(logits, top[..., None], -1)[..., 0] * mask).sum(-1)  # (b,)

    ones = jnp.ones((L, b, H), jnp.float32)
    grads = jax.grad(lambda g: outputs(g).sum())(ones)  # (L, b, H): each example's o depends on its own gates only
    return jnp.moveaxis(grads, 1, 0)  # (b, L, H)


def normalise_per_layer(heads: np.ndarray) -> np.ndarray:
    """Σ over examples of head relevance (b, L, H) or its total (L, H) -> (L, H), each layer summing to 1."""
    total = np.asarray(heads, np.float64)
    total = total.sum(0) if total.ndim == 3 else total
    return total / np.maximum(total.sum(-1, keepdims=True), 1e-30)
