"""Context mixing by value zeroing (Mohebbi et al. 2023) and ALTI+ for encoder–decoders
(Ferrando et al. 2022b), beside rollout / GlobEnc / ALTI (``jattn.analyses.attribution``).

* Value zeroing (Mohebbi et al. 2023, §2, Eq. 3-4): in layer l, zero token j's value vectors in
  every head (``Interventions.patch`` site ``values``), run the layer (attention, both LayerNorms
  and the FFN) and compare each token's output x̃_i^{¬j} with the unchanged x̃_i:
  C_ij = 1 − cos(x̃_i^{¬j}, x̃_i); rows normalised to sum 1, then rolled out (Abnar & Zuidema).
* ALTI+ (Ferrando et al. 2022b, "Towards Opening the Black Box of Neural Machine Translation",
  §3): ALTI contributions (Ferrando et al. 2022a, Eq. 7-9) per sublayer of the decoder. The
  causal self-attention gives a target × target map S_l; the cross-attention splits decoder
  token i's LayerNorm output over its residual (the self-attention output, T_i = LN-map of h_i)
  and the encoder outputs e_j (T_i = LN-map of Σ_h α f_h(e_j)), normalised together: residual
  share r_i and source shares c_ij. Layer l's map over [encoder outputs; target embeddings] is
  M_l = [c | r ⊙ S_l], rolled out through the decoder with the encoder outputs held fixed; the
  source part is carried to the source embeddings by the encoder's ALTI rollout. Rows sum to 1;
  the source share Σ_j of a row is the paper's source contribution.

Padding rows and columns are 0.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jattn.analyses.attribution import _pair_mask, alti_layer, rollout, row_normalize
from jattn.nn.token_classes import CLASS_NAMES
from jattn.runner.protocol import Method, Statistic, StepContext
from jattn.analyses.base import class_sums
from jattn.analyses.norms import layer_major, layer_norm_map, over_layers
from jattn.analyses.registry import register
from jattn.nn import state
from jattn.nn.attention import transformed_vectors
from jattn.nn.interventions import Interventions
from jattn.nn.layers import ln_sigma, safe_norm


# ---------------------------------------------------------------- value zeroing

def value_zeroing_layer(layer, x, allowed, mask, score_bias=None, chunk: int = 8) -> jax.Array:
    """Value-zeroing scores of one encoder layer (module ``layer``), rows normalised.
    x (b, n, D) the layer's input, allowed (b, 1, n), mask (b, n), ``score_bias`` (H, n, n) the
    layer's additive score bias or None -> (b, n, n)."""
    b, n, _ = x.shape
    H = layer.attention.query.kernel.shape[-2]
    keep, _ = layer(x, allowed, Interventions(), None, score_bias)  # (b, n, D) x̃
    zeros = jnp.zeros((b, H, n, layer.attention.value.kernel.shape[-1]), x.dtype)  # (b, H, n, d_h)

    def unit(v):  # (b, n, D) rows scaled to norm 1
        norm = safe_norm(v, axis=-1, keepdims=True)  # (b, n, 1)
        return v / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny)

    def zeroed(j):  # 1 − cos(x̃^{¬j}, x̃) = ½ ‖x̂^{¬j} − x̂‖² for every query i (no cancellation near cos = 1) -> (b, n)
        where = jnp.broadcast_to(jnp.arange(n) == j, (1, H, n))  # (1, H, n) token j in every head
        out, _ = layer(x, allowed, Interventions(patch={"values": (zeros, where)}), None, score_bias)  # (b, n, D)
        return 0.5 * jnp.square(unit(out) - unit(keep)).sum(-1)

    c = jnp.moveaxis(jax.lax.map(zeroed, jnp.arange(n), batch_size=min(chunk, n)), 0, 2)  # (b, n, n) [i, j]
    return row_normalize(jnp.maximum(c, 0.0) * _pair_mask(mask))


def value_zeroing_maps(module, hidden_states: jax.Array, mask: jax.Array, reduce=lambda m: m):
    """Every layer's value-zeroing map of an encoder ``module``, one layer at a time (``lax.map``):
    hidden_states (L+1, b, n, D) its layers' inputs (and output), mask (b, n) the real tokens.
    ``reduce`` turns a layer's map (b, n, n) into what is kept of it, so a caller that keeps a
    reduction holds one layer's map at a time -> ``reduce``'s results stacked (L, ...); the
    maps themselves (L, b, n, n) by default."""
    from flax import nnx

    allowed = mask.astype(bool)[:, None, :]  # (b, 1, n)
    graphdef, stacked = nnx.split(module.layers)
    n, L = mask.shape[1], hidden_states.shape[0] - 1

    def one(xs):
        state, x, l = xs
        return reduce(value_zeroing_layer(nnx.merge(graphdef, state), x, allowed, mask, module.score_bias(l, n)))

    return jax.lax.map(one, (stacked, hidden_states[:-1], jnp.arange(L)))  # (L, ...)


@partial(jax.jit, static_argnames=("config",))
def encoder_value_zeroing(params, config, inputs) -> dict:
    """Per-layer value-zeroing maps and their rollout for an encoder batch, (L, b, n, n)."""
    from jattn.nn import encoder

    def run(params, inputs):
        model = encoder.module(params, config)
        outputs, _ = model(inputs, internals=None)
        maps = value_zeroing_maps(model, outputs["hidden_states"], inputs["attention_mask"])  # (L, b, n, n)
        return {"value_zeroing_layers": maps, "value_zeroing": rollout(maps)}

    return state.on_auto_axes(run, (params, inputs), inputs["attention_mask"], layer_major)


def value_zeroing(model, batch) -> dict[str, np.ndarray]:
    """Value zeroing (Mohebbi et al. 2023) for an encoder on a batch: ``value_zeroing_layers``
    (L, b, n, n) per layer and ``value_zeroing`` rolled out, numpy; padding 0."""
    if not hasattr(model, "attribution_maps"):
        raise TypeError(f"value_zeroing supports encoder models, got {type(model).__name__}")
    return {k: np.asarray(v) for k, v in encoder_value_zeroing(model.params, model.config,
                                                               model.check_batch(batch)).items()}


# ---------------------------------------------------------------- ALTI+

def cross_alti_layer(layer: dict, view: dict, target_mask, source_mask, eps: float,
                     norm_position: str = "post") -> jax.Array:
    """ALTI over a cross-attention sublayer's residual and source tokens (b, t, 1 + s), rows sum
    to 1 on real target tokens: column 0 the residual h_i, columns 1.. the encoder outputs.
    Post-LN: the parts LN-mapped, y_i the LayerNorm's output; pre-LN (``norm_position`` "pre"):
    the parts h_i and Σ_h α f_h(e_j), y_i = h_i + Σ_j Σ_h α f_h(e_j) + b_O the sublayer's output."""
    alpha = layer["weights"].astype(jnp.float32) * source_mask[:, None, None, :]  # (b, H, t, s)
    x = layer["residual"].astype(jnp.float32)  # (b, t, D)
    if norm_position == "pre":
        g = transformed_vectors(layer["values"].astype(jnp.float32), view["out_kernel"].astype(jnp.float32))
        t_src = jnp.einsum("bhts,bhsd->btsd", alpha, g)  # (b, t, s, D)
        t_res, y = x, x + layer["output"].astype(jnp.float32)  # (b, t, D)
    else:
        gamma = view["ln_scale"].astype(jnp.float32)  # (D,)
        sigma = ln_sigma(layer["pre_ln"], eps)  # (b, t, 1)
        w_ln = layer_norm_map(view["out_kernel"].astype(jnp.float32), gamma, jnp.ones(()))  # (H, d_h, D)
        g = transformed_vectors(layer["values"].astype(jnp.float32), w_ln)  # (b, H, s, D)
        t_src = jnp.einsum("bhts,bhsd->btsd", alpha, g) / sigma[..., None]  # (b, t, s, D)
        t_res = layer_norm_map(x, gamma, sigma)  # (b, t, D)
        y = layer["attention_ln_out"].astype(jnp.float32)  # (b, t, D)
    parts = jnp.concatenate([t_res[:, :, None], t_src], 2)  # (b, t, 1 + s, D)
    c = jnp.maximum(jnp.abs(y).sum(-1, keepdims=True) - jnp.abs(y[:, :, None] - parts).sum(-1), 0.0)  # (b, t, 1+s)
    real = jnp.concatenate([jnp.ones_like(source_mask[:, :1]), source_mask], 1)  # (b, 1 + s)
    return row_normalize(c * real[:, None, :] * target_mask[:, :, None])


def alti_plus_maps(internals: dict, views: dict, batch: dict, eps: float, norm_position: str = "post") -> dict:
    """ALTI+ from a translation model's internals {kind: (L, ...)} and views {kind: (L, ...)}, per
    attention type: ``encoder``: ``alti_layers`` / ``alti`` (L_enc, b, s, s) as for an encoder;
    ``decoder``: ``alti_layers`` (L_dec, b, t, t) and ``alti_plus`` (L_dec, b, t, s + t), columns the
    source tokens then the target tokens; ``cross``: ``alti_layers`` (L_dec, b, t, 1 + s), column 0
    the residual. ``norm_position``: the blocks' ("post" | "pre", see ``alti_layer``)."""
    src = batch["attention_mask"].astype(jnp.float32)  # (b, s)
    tgt = batch["decoder_attention_mask"].astype(jnp.float32)  # (b, t)
    # (L_enc, b, s, s)
    enc_layers = over_layers(alti_layer, internals["encoder"], views["encoder"], src, eps, norm_position)
    enc_rolled = rollout(enc_layers)  # (L_enc, b, s, s)
    enc = enc_rolled[-1]  # (b, s, s)
    self_maps = over_layers(alti_layer, internals["decoder"], views["decoder"], tgt, eps, norm_position)  # (L, b, t, t)
    cross = over_layers(cross_alti_layer, internals["cross"], views["cross"], tgt, src, eps,
                        norm_position)  # (L, b, t, 1 + s)
    b, s, t = src.shape[0], src.shape[1], tgt.shape[1]

    def step(acc, maps):  # acc (b, t, s + t): the target tokens' contributions so far
        sm, cm = maps
        target = cm[..., :1] * sm  # (b, t, t)  r_i S_l[i, k]
        acc = jnp.einsum("bik,bkm->bim", target, acc) + jnp.pad(cm[..., 1:], ((0, 0), (0, 0), (0, t)))
        return acc, acc

    start = jnp.concatenate([jnp.zeros((b, t, s)), jnp.broadcast_to(jnp.eye(t), (b, t, t)) * tgt[:, :, None]], 2)
    rolled = jax.lax.scan(step, start, (self_maps, cross))[1]  # (L, b, t, s + t) over encoder outputs
    to_source = jnp.einsum("lbts,bsu->lbtu", rolled[..., :s], enc)  # (L, b, t, s) over source embeddings
    return {"encoder": {"alti_layers": enc_layers, "alti": enc_rolled},
            "decoder": {"alti_layers": self_maps, "alti_plus": jnp.concatenate([to_source, rolled[..., s:]], -1)},
            "cross": {"alti_layers": cross}}


@partial(jax.jit, static_argnames=("config",))
def seq2seq_alti_plus(params, config, inputs) -> dict:
    from jattn.nn import seq2seq

    def run(params, inputs):
        model = seq2seq.module(params, config)
        _, internals = model(inputs)
        views = {k: model.view(k) for k in seq2seq.KINDS}
        return alti_plus_maps(internals, views, inputs, config.layer_norm_eps, config.norm_position)

    return state.on_auto_axes(run, (params, inputs), inputs["attention_mask"], layer_major)



# ---------------------------------------------------------------- registered methods

@dataclasses.dataclass(frozen=True)
class ValueZeroing(Method):
    """Per layer, the mean share of a token's value-zeroing row given to itself and to each
    token class ([CLS], [SEP], punctuation, other)."""

    name = "value-zeroing"
    internals = ()  # each layer re-run from its input, the hidden states: every layer's internals are never kept

    def reduce(self, ctx: StepContext) -> dict:
        from jattn.nn import encoder

        mask = ctx.batch["attention_mask"] * (ctx.batch["example"] >= 0)[:, None]  # (b, n)
        real = mask.astype(jnp.float32)  # (b, n)

        def shares(m):  # one layer's map (b, n, n) -> its class and self shares, summed over real rows
            per_class = class_sums(m[None, :, None], ctx.batch["token_class"])[:, 0, :, 0]  # (C, b, n)
            selfs = jnp.diagonal(m, axis1=-2, axis2=-1)  # (b, n)
            return {"class": jnp.einsum("cbn,bn->c", per_class, real), "self": jnp.einsum("bn,bn->", selfs, real)}

        out = value_zeroing_maps(encoder.module(ctx.params, ctx.config), ctx.outputs["hidden_states"], mask,
                                 shares)  # class (L, C), self (L,)
        return {**out, "n": real.sum()}

    def finalize(self, totals, meta):
        n = max(float(totals["n"]), 1.0)
        return {
            "value_zeroing_class": Statistic(
                totals["class"] / n,
                f"(L, {len(CLASS_NAMES)}) mean value-zeroing share to {'/'.join(CLASS_NAMES)} (Mohebbi et al. 2023)",
            ),
            "value_zeroing_self": Statistic(totals["self"] / n, "(L,) mean value-zeroing share to the token itself"),
        }


@dataclasses.dataclass(frozen=True)
class AltiPlus(Method):
    """Per decoder layer, the mean source contribution (ALTI+ rolled out) over real target tokens."""

    name = "alti-plus"
    families = ("seq2seq",)
    kinds = ("cross",)
    internals = ()  # its own forward reduces each layer inside the loops; the runner's keeps none for it

    def reduce(self, ctx: StepContext) -> dict:
        """``alti_plus_maps``' rollout inside its own forward's layer loops: the encoder's ALTI rollout
        (b, s, s) and the decoder's contributions (b, t, s + t) carried from layer to layer, each
        layer's maps computed from that layer's internals alone, so no layer's internals are kept."""
        real = (ctx.batch["example"] >= 0)[:, None]  # (b, 1)
        src = (ctx.batch["attention_mask"] * real).astype(jnp.float32)  # (b, s)
        tgt = (ctx.batch["decoder_attention_mask"] * real).astype(jnp.float32)  # (b, t)
        eps, position = ctx.config.layer_norm_eps, ctx.config.norm_position
        (b, s), t = src.shape, tgt.shape[1]

        def layer(kind, ints, view, state):  # one layer of type ``kind`` -> (its source share, the state after)
            if kind == "encoder":
                enc = jnp.einsum("bij,bjk->bik", alti_layer(ints, view, src, eps, position), state["enc"])
                return {}, dict(state, enc=enc)  # (b, s, s) rolled out to the source embeddings
            if kind == "decoder":
                return {}, dict(state, self=alti_layer(ints, view, tgt, eps, position))  # (b, t, t)
            cm = cross_alti_layer(ints, view, tgt, src, eps, position)  # (b, t, 1 + s)
            acc = jnp.einsum("bik,bkm->bim", cm[..., :1] * state["self"], state["acc"]) + jnp.pad(
                cm[..., 1:], ((0, 0), (0, 0), (0, t)))  # (b, t, s + t) over the encoder outputs and targets
            source = jnp.einsum("bts,bsu->btu", acc[..., :s], state["enc"]).sum(-1)  # (b, t) to the source
            return {"source": jnp.einsum("bt,bt->", source, tgt)}, dict(state, acc=acc)

        start = {"enc": jnp.broadcast_to(jnp.eye(s, dtype=jnp.float32), (b, s, s)),
                 "self": jnp.zeros((b, t, t), jnp.float32),
                 "acc": jnp.concatenate([jnp.zeros((b, t, s)), jnp.broadcast_to(jnp.eye(t), (b, t, t))
                                         * tgt[:, :, None]], 2)}  # (b, t, s + t)
        outputs, _ = ctx.forward(internals=None, layer_totals=layer, layer_state=start)
        return {"source": outputs["layer_totals"]["cross"]["source"], "n": tgt.sum()}  # (L_dec,), ()

    def finalize(self, totals, meta):
        n = max(float(totals["n"]), 1.0)
        return {"alti_plus_source": Statistic(totals["source"] / n, "(L_dec,) mean source contribution to a target "
                                              "token's representation after each decoder layer (ALTI+)")}


register("value-zeroing", "value zeroing: each token's context mixing per layer, share to self and token classes "
         "(Mohebbi et al. 2023)", lambda model, options: ValueZeroing())
register("alti-plus", "ALTI+ source vs target contributions per decoder layer (Ferrando et al. 2022b; translation "
         "models)", lambda model, options: AltiPlus())
