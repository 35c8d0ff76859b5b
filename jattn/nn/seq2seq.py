"""Encoder–decoder Transformer as a Flax NNX module (Vaswani et al. 2017, §3.1), configured by
each encoder–decoder family's spec (``jattn.families``).

As ``jattn.nn.encoder``: the module ``Seq2Seq(config, rngs=...)`` and the pure face
``forward(params, config, batch, interventions) -> (outputs, internals)`` with
``params = nnx.state(model, nnx.Param)``. Blocks are post-LayerNorm (Vaswani et al. 2017) or
pre-LayerNorm (Xiong et al. 2020), ``config.norm_position`` choosing the shared sublayers of
``jattn.nn.attention`` (``SUBLAYERS``); with ``config.final_norm`` a LayerNorm follows each
stack's last layer (Liu et al. 2020's pre-LN stacks); the normalisers are LayerNorms or RMSNorms
(``config.norm``: Zhang & Sennrich 2019, T5's). With ``relative_attention_num_buckets`` each stack
holds a relative-position score bias B (buckets, H), computed once per forward (T5's "first
layer") and added to the scores of every layer's self-attention (Raffel et al. 2020, §2.1:
s[h, i, j] = q_hi · k_hj + B[bucket(j − i), h], bidirectional buckets in the encoder, one-sided
in the decoder, none in cross-attention; ``jattn.nn.relative``); it changes α only. Each stack's
L identical layers are created stacked and run with ``jax.lax.scan``; internals come out as
(L, ...) for the three attention types, keyed
``"encoder"`` (self), ``"decoder"`` (causal self) and ``"cross"`` (decoder queries on encoder
outputs). Interventions are a mapping with the same keys, each an ``Interventions`` for that
attention type (missing = none).

Parameters (kernels (in, out); attention kernels split by head, as in the encoder):
  embeddings: the token tables, learned positions and embedding LayerNorms
      (``jattn.nn.seq2seq_embeddings``)
  output (V_tgt, D): the output projection when it is not tied to the target embeddings
  final_logits_bias (V_tgt,): when the config has one
  encoder.layers (leading axis L_enc): self_attn {query, key, value, out}, self_attn_ln,
      ffn_in, ffn_out, ffn_ln
  decoder.layers (leading axis L_dec): self_attn, self_attn_ln, cross_attn, cross_attn_ln,
      ffn_in, ffn_out, ffn_ln
  encoder.final_ln, decoder.final_ln: with ``final_norm``, the LayerNorm on each stack's output
  encoder.relative_bias, decoder.relative_bias (buckets, H): with ``relative_attention_num_buckets``
  (kernels without biases with ``linear_bias`` False; ffn_in (D, 2, F), input and gate, with ``gated_ffn``)
Positions are sinusoidal (not parameters, ``sinusoid_table``) or a learned table per side
(``positions="learned"``, Devlin et al. 2019's absolute positions; row ``position_offset + p``
for position p, as Lewis et al. 2020's checkpoints number them).

Either side's input is token ids or their scaled token embeddings (``inputs_embeds``,
``decoder_inputs_embeds``; ``word_embeddings``), for gradients with respect to the input.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn.config import ConfigError, Seq2SeqConfig
from jattn.nn.interventions import FFN_SITES, NONE, Interventions
from jattn.nn.attention import SUBLAYERS, MultiHeadAttention, block_view
from jattn.nn.encoder import select
from jattn.nn import state
from jattn.nn.engine import layer_loop
from jattn.nn.layers import NORMS, Dense, dropout_key, param, split_rng
from jattn.nn.relative import relative_position_bias
from jattn.nn.seq2seq_embeddings import (Seq2SeqEmbeddings, position_ids, positions, sinusoid_table,  # noqa: F401
                                         token_table)

__all__ = ["forward", "word_embeddings"]

KINDS = ("encoder", "decoder", "cross")
FFN_INTERNALS = ("ffn_activation", "ffn_output", "ffn_pre_ln")  # a layer's FFN: under "encoder" and "cross"


def norm(config: Seq2SeqConfig, stack: tuple = ()):
    """A normaliser of width d_model: ``config.norm``'s LayerNorm or RMSNorm (``NORMS``)."""
    if config.norm not in NORMS:
        raise ValueError(f"config.norm must be one of {tuple(NORMS)}, got {config.norm!r}")
    return NORMS[config.norm](config.d_model, config.layer_norm_eps, stack=stack)


def default_decoder_mask(config: Seq2SeqConfig, decoder_input_ids):
    """HF's default when no decoder mask is given: ``decoder_mask`` "all" attends to every target
    position (a family whose start token is the pad id), "pad" masks pad tokens. (b, t) -> (b, t)
    int32, a numpy array for numpy ids (the wrappers' host-side checks: no device round trip),
    else a jax array."""
    xp = np if isinstance(decoder_input_ids, np.ndarray) else jnp
    if config.decoder_mask == "all":
        return xp.ones(decoder_input_ids.shape, xp.int32)
    return (decoder_input_ids != config.pad_token_id).astype(xp.int32)


class Seq2SeqLayer(nnx.Module):
    """An encoder layer (self-attention, FFN) or, with ``cross``, a decoder layer (causal
    self-attention, cross-attention, FFN); created stacked (``stack=(L,)``)."""

    def __init__(self, config: Seq2SeqConfig, cross: bool, *, rngs: nnx.Rngs, stack: tuple):
        D, bias = config.d_model, config.linear_bias
        H = config.decoder_heads if cross else config.encoder_heads
        d_h = config.decoder_head_dim if cross else config.encoder_head_dim
        F = config.decoder_ffn_dim if cross else config.encoder_ffn_dim
        attention = dict(rngs=rngs, stack=stack, head_dim=d_h, bias=bias, score_scale=config.score_scale)
        self.self_attn = MultiHeadAttention(D, H, **attention)
        self.self_attn_ln = norm(config, stack)
        if cross:
            self.cross_attn = MultiHeadAttention(D, H, **attention)
            self.cross_attn_ln = norm(config, stack)
        gated = (2,) if config.gated_ffn else ()  # a gated FFN's W_1: input and gate (2, F), jattn.nn.layer_terms
        self.ffn_in = Dense((D,), (*gated, F), rngs=rngs, stack=stack, out_names=(*(None,) * len(gated), "model"),
                            bias=bias)
        self.ffn_out = Dense((F,), (D,), rngs=rngs, stack=stack, in_names=("model",), bias=bias)
        self.ffn_ln = norm(config, stack)
        self.config = config

    def attend(self, kind: str, x, kv, allowed, iv: Interventions, rng, score_bias=None):
        """The attention sublayer of type ``kind`` ("self" | "cross"), post- or pre-LN
        (``config.norm_position``); in a pre-LN decoder h = x + CrossAttn(LN(x), kv) with ``kv``
        the encoder's output. ``score_bias`` (H, q, k) or None: the stack's relative-position bias
        (``Stack.score_bias``), added to the scores."""
        c = self.config
        attn, ln = (self.self_attn, self.self_attn_ln) if kind == "self" else (self.cross_attn, self.cross_attn_ln)
        return SUBLAYERS[c.norm_position][0](attn, ln, x, kv, allowed, iv, attention_dropout=c.attention_dropout,
                                             dropout_rate=c.dropout, rng=rng, score_bias=score_bias)

    def self_keys_values(self, x) -> tuple[jax.Array, jax.Array]:
        """The keys and values (b, H, n, d_h) positions x (b, n, D) add to cached decoding's
        self-attention cache: from the attention's input, x in a post-LN block, LN(x) in a pre-LN one."""
        return self.self_attn.keys_values(self.self_attn_ln(x) if self.config.norm_position == "pre" else x)

    def ffn(self, h, iv: Interventions, rng):
        c = self.config
        return SUBLAYERS[c.norm_position][1](self.ffn_in, self.ffn_out, self.ffn_ln, h, iv, activation=c.activation,
                                             activation_dropout=c.activation_dropout, dropout_rate=c.dropout, rng=rng)

    def view(self, kind: str) -> dict:
        """Parameters of attention type ``kind`` ("self" | "cross") as the norm methods read them."""
        if kind == "self":
            after = self.cross_attn_ln if hasattr(self, "cross_attn") else self.ffn_ln
            return block_view(self.self_attn, self.self_attn_ln, after)
        return block_view(self.cross_attn, self.cross_attn_ln, self.ffn_ln)


class Stack(nnx.Module):
    """A stack's layers, with ``final_norm`` the normaliser on its last layer's output, and with
    ``relative_attention_num_buckets`` its relative-position score bias table (buckets, H)."""

    def __init__(self, config: Seq2SeqConfig, cross: bool, *, rngs: nnx.Rngs):
        n = config.decoder_layers if cross else config.encoder_layers
        self.layers = Seq2SeqLayer(config, cross, rngs=rngs, stack=(n,))
        if config.final_norm:
            self.final_ln = norm(config)
        if config.relative_attention_num_buckets:
            if config.pruned:  # the pruning sweep moves heads into slots; the bias table's columns would stay
                raise ConfigError("physically pruning heads of a model with a relative-position bias "
                                  "(relative_attention_num_buckets > 0) is not supported. Fix: gate the heads "
                                  "(Interventions(head_gates=...)) instead of removing them")
            H = config.decoder_heads if cross else config.encoder_heads
            self.relative_bias = param(rngs, (config.relative_attention_num_buckets, H), "normal",
                                       config.d_model ** -0.5)  # HF T5's init
        self.config, self.causal = config, cross

    def score_bias(self, n: int, keys: int | None = None, offset=0):
        """The self-attention score bias of every layer of the stack on n queries at positions
        offset..offset+n−1 and ``keys`` keys (None: n), (H, n, keys) float32 (Raffel et al. 2020,
        §2.1: bidirectional buckets in the encoder, one-sided in the causal decoder), or None."""
        c = self.config
        if not c.relative_attention_num_buckets:
            return None
        return relative_position_bias(self.relative_bias[...], n, c.relative_attention_max_distance,
                                      bidirectional=not self.causal, keys=keys, offset=offset)  # (H, n, keys)

    def final(self, x: jax.Array) -> jax.Array:
        """The stack's output from its last layer's x (b, n, D): LN(x) with ``final_norm``, else x."""
        return self.final_ln(x) if self.config.final_norm else x  # (b, n, D)


def reduced(layer_totals, kind: str, internals: dict, view: dict, state):
    """One layer's ``layer_totals(kind, internals, view, state) -> (totals, next state)``
    (``Seq2Seq.__call__``), or (None, state) without the callback."""
    return (None, state) if layer_totals is None else layer_totals(kind, internals, view, state)


def check_interventions(config: Seq2SeqConfig, given) -> dict[str, Interventions]:
    """A mapping kind -> ``Interventions`` (missing kinds: none), shapes checked on the host."""
    if given is None:
        given = {}
    if isinstance(given, Interventions) or not isinstance(given, Mapping):
        raise ValueError("a translation model takes interventions per attention type: a dict "
                         "{'encoder'|'decoder'|'cross': Interventions(...)}, e.g. "
                         "{'encoder': Interventions(head_gates=gates)} with gates (L_enc, H)")
    if unknown := set(given) - set(KINDS):
        raise ValueError(f"interventions keys must be among {KINDS}, got {sorted(unknown)}")
    shapes = {"encoder": (config.encoder_layers, config.encoder_heads),
              "decoder": (config.decoder_layers, config.decoder_heads),
              "cross": (config.decoder_layers, config.decoder_heads)}
    out = {}
    for kind in KINDS:
        iv = given.get(kind) or NONE
        if not isinstance(iv, Interventions):
            raise ValueError(f"interventions[{kind!r}] must be an Interventions, got {type(iv).__name__}")
        out[kind] = iv.check(*shapes[kind], what=f"interventions[{kind!r}]")
    if ffn := [site for site in out["decoder"].patch or {} if site in FFN_SITES]:
        raise ValueError(f"interventions['decoder'].patch has {ffn}: a decoder layer's feed-forward sublayer "
                         "follows its cross-attention. Fix: patch them in interventions['cross']")
    return out


class Seq2Seq(nnx.Module):
    """Embeddings, encoder and decoder stacks, output projection (tied or not)."""

    def __init__(self, config: Seq2SeqConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = Seq2SeqEmbeddings(config, rngs=rngs)
        self.encoder = Stack(config, False, rngs=rngs)
        self.decoder = Stack(config, True, rngs=rngs)
        if not config.tie_output:
            self.output = token_table(rngs, config, config.tgt_vocab_size)
        if config.final_logits_bias:
            self.final_logits_bias = param(None, (config.tgt_vocab_size,), "zeros")
        self.deterministic = True  # evaluation mode; train() / eval() set it (``jattn.nn.layers.dropout_key``)

    def encoder_stack(self, input_ids, attention_mask, iv: Interventions = NONE, rng=None, dtype=jnp.float32,
               internals="all", unroll=False, inputs_embeds=None, remat=False, layer_totals=None, layer_state=None):
        """Encoder stack. input_ids (or None and ``inputs_embeds`` (b, s, D)), attention_mask (b, s) ->
        the stack's output (b, s, D) (after the final LayerNorm, if any), internals (L_enc, ...);
        ``unroll``, ``remat``: ``jattn.nn.engine.layer_loop``; ``layer_totals``, ``layer_state``: as
        ``__call__``'s, with (totals (L_enc, ...), the state after the stack) as a third result."""
        r = split_rng(rng, 2)
        x = self.embeddings.side_input(input_ids, inputs_embeds, attention_mask, "source", dtype, r[0])  # (b, s, D)
        allowed = attention_mask.astype(bool)[:, None, :]  # (b, 1, s)
        layer_rngs = None if rng is None else jax.random.split(r[1], self.config.encoder_layers)
        position_bias = self.encoder.score_bias(x.shape[1])  # (H, s, s) or None, shared by the layers
        graphdef, stacked = nnx.split(self.encoder.layers)

        def step(carry, xs):
            (x, carried), (state, slices, lr) = carry, xs
            layer, lr = nnx.merge(graphdef, state), split_rng(lr, 2)
            layer_iv = iv.for_layer(*slices)
            h, ints = layer.attend("self", x, x, allowed, layer_iv, lr[0], position_bias)  # (b, s, D)
            out, ffn = layer.ffn(h, layer_iv, lr[1])  # (b, s, D)
            ints = {**ints, **ffn}
            totals, carried = reduced(layer_totals, "encoder", ints, layer.view("self"), carried)
            return (out, carried), (select(ints, internals), totals)

        (x, carried), (ints, totals) = layer_loop(step, (x, layer_state), (stacked, iv.layer_slices(), layer_rngs),
                                                  unroll, remat)  # (b, s, D)
        return self.encoder.final(x), ints, (totals, carried)

    def decoder_stack(self, encoder_out, attention_mask, decoder_input_ids, decoder_attention_mask,
               iv: Mapping[str, Interventions], rng=None, dtype=jnp.float32, internals="all", unroll=False,
               inputs_embeds=None, remat=False, layer_totals=None, layer_state=None):
        """Decoder stack with teacher forcing. encoder_out (b, s, D), decoder_input_ids (b, t) (or
        None and ``inputs_embeds`` (b, t, D)) -> the stack's output (b, t, D) (after the final
        LayerNorm, if any), internals {"decoder": (L_dec, ...), "cross": (L_dec, ...)} and (totals
        {"decoder", "cross"} (L_dec, ...), the state after the stack); ``unroll``, ``remat``:
        ``jattn.nn.engine.layer_loop``; ``layer_totals``, ``layer_state``: as ``__call__``'s."""
        r = split_rng(rng, 2)
        y = self.embeddings.side_input(decoder_input_ids, inputs_embeds, decoder_attention_mask, "target", dtype,
                                       r[0])  # (b, t, D)
        t = y.shape[1]
        causal = jnp.tril(jnp.ones((t, t), bool))[None] & decoder_attention_mask.astype(bool)[:, None, :]  # (b, t, t)
        cross_allowed = attention_mask.astype(bool)[:, None, :]  # (b, 1, s)
        layer_rngs = None if rng is None else jax.random.split(r[1], self.config.decoder_layers)
        position_bias = self.decoder.score_bias(t)  # (H, t, t) or None, shared by the layers
        graphdef, stacked = nnx.split(self.decoder.layers)
        iv_self, iv_cross = iv.get("decoder", NONE), iv.get("cross", NONE)

        def step(carry, xs):
            (y, carried), (state, s_self, s_cross, lr) = carry, xs
            layer, lr = nnx.merge(graphdef, state), split_rng(lr, 3)
            h, self_int = layer.attend("self", y, y, causal, iv_self.for_layer(*s_self), lr[0],
                                       position_bias)  # (b, t, D)
            h, cross_int = layer.attend("cross", h, encoder_out, cross_allowed, iv_cross.for_layer(*s_cross),
                                        lr[1])  # (b, t, D)
            out, ffn = layer.ffn(h, iv_cross.for_layer(*s_cross), lr[2])  # (b, t, D)
            cross_int = {**cross_int, **ffn}
            self_totals, carried = reduced(layer_totals, "decoder", self_int, layer.view("self"), carried)
            cross_totals, carried = reduced(layer_totals, "cross", cross_int, layer.view("cross"), carried)
            return (out, carried), ({"decoder": select(self_int, internals, absent=FFN_INTERNALS),
                                     "cross": select(cross_int, internals)},
                                    {"decoder": self_totals, "cross": cross_totals})

        xs = (stacked, iv_self.layer_slices(), iv_cross.layer_slices(), layer_rngs)
        (y, carried), (ints, totals) = layer_loop(step, (y, layer_state), xs, unroll, remat)  # (b, t, D)
        return self.decoder.final(y), ints, (totals, carried)

    def logits(self, h: jax.Array) -> jax.Array:
        """Output projection (tied to the target embeddings or not) of h · ``output_scale`` (T5 v1.0:
        D^-½, Raffel et al. 2020's tied output) + the final_logits_bias, if any.
        h (b, t, D) -> (b, t, V_tgt), float32."""
        if self.config.output_scale != 1.0:
            h = h * jnp.asarray(self.config.output_scale, h.dtype)  # (b, t, D)
        table = self.output[...] if not self.config.tie_output else self.embeddings.table("target")  # (V, D)
        logits = jnp.einsum("btd,vd->btv", h, table.astype(h.dtype)).astype(jnp.float32)  # (b, t, V)
        if self.config.final_logits_bias:
            logits = logits + self.final_logits_bias[...]
        return logits

    def __call__(self, batch: dict, interventions: Mapping[str, Interventions] | None = None, *,
                 dropout_rng=None, compute_dtype=jnp.float32, internals="all", unroll=False, remat=False,
                 layer_totals=None, layer_state=None):
        """Teacher-forced encoder–decoder pass; returns (outputs, internals).

        batch: ``input_ids``, ``attention_mask`` (b, s); ``decoder_input_ids`` (b, t) and optional
        ``decoder_attention_mask`` (b, t) (default as HF: see ``default_decoder_mask``; all ones
        with embeddings). In place of the ids, ``inputs_embeds`` (b, s, D) and
        ``decoder_inputs_embeds`` (b, t, D): the scaled token embeddings (``word_embeddings``), to
        which positions are added; tensor2tensor's positions then count the tokens the masks mark
        real. (Hugging Face's ``inputs_embeds`` replace its scaled word-embedding module's output
        in some families and are scaled by sqrt(D) after it in others: the family specs say which.)
        ``interventions``: {"encoder"|"decoder"|"cross": Interventions} (missing = none).
        ``dropout_rng``: in training mode (``train()``) the key dropout draws from, a key or an
        ``nnx.Rngs``; none in evaluation mode (``eval()``, the default). ``internals``: "all",
        None or names. ``unroll``: the layers as straight-line code
        (``jattn.nn.engine.layer_loop``); ``remat``: a gradient keeps one layer's activations at a
        time, recomputing them (Chen et al. 2016; ``layer_loop``; the gradient sweeps).
        ``layer_totals(kind, internals, view, state) -> (totals, state)``: called inside the layer
        loops on each layer's internals of each type (the encoder's, then per decoder layer its
        self- and cross-attention's) and parameter view (``Seq2SeqLayer.view``) with the state
        carried from call to call (``layer_state``, any pytree, e.g. per-example arrays (b, ...));
        ``outputs["layer_totals"]`` {kind: totals stacked (L, ...)}, ``outputs["layer_state"]`` the
        last state: analyses reduce each layer while it is at hand (``jattn.runner.translation``).

        outputs: ``logits`` (b, t, V), ``encoder_last_hidden_state`` (b, s, D),
        ``decoder_last_hidden_state`` (b, t, D). internals: {"encoder", "decoder", "cross"}, each
        the sublayer internals stacked (L, ...), e.g. ``weights`` (L, b, H, q, k); a layer's
        feed-forward internals (``FFN_INTERNALS``: ``ffn_activation`` (L, b, n, F), ``ffn_output``,
        ``ffn_pre_ln``) under "encoder" and, for the decoder's layers, "cross".
        """
        iv = {} if interventions is None else interventions
        r = split_rng(dropout_key(self, dropout_rng), 2)
        if r[0] is not None and any(self.config.layerdrop):
            raise ValueError(f"this model's config asks for LayerDrop {self.config.layerdrop} (encoder, decoder) in "
                             "training, which jattn does not implement (every layer runs). Fix: train with "
                             "dataclasses.replace(config, layerdrop=(0.0, 0.0)), or set encoder_layerdrop / "
                             "decoder_layerdrop to 0.0 in config.json")
        dec_ids, dec_mask = batch.get("decoder_input_ids"), batch.get("decoder_attention_mask")
        dec_embeds = batch.get("decoder_inputs_embeds")
        if dec_mask is None and dec_ids is not None:
            dec_mask = default_decoder_mask(self.config, dec_ids)  # (b, t)
        elif dec_mask is None and dec_embeds is not None:
            dec_mask = jnp.ones(dec_embeds.shape[:2], jnp.int32)  # (b, t)
        enc, enc_int, (enc_totals, state) = self.encoder_stack(
            batch.get("input_ids"), batch["attention_mask"], iv.get("encoder", NONE), r[0], compute_dtype, internals,
            unroll, batch.get("inputs_embeds"), remat, layer_totals, layer_state)  # (b, s, D)
        dec, dec_int, (dec_totals, state) = self.decoder_stack(
            enc, batch["attention_mask"], dec_ids, dec_mask, iv, r[1], compute_dtype, internals, unroll, dec_embeds,
            remat, layer_totals, state)  # (b, t, D)
        outputs = {"logits": self.logits(dec), "encoder_last_hidden_state": enc, "decoder_last_hidden_state": dec}
        if layer_totals is not None:
            outputs.update(layer_totals={"encoder": enc_totals, **dec_totals}, layer_state=state)
        return outputs, {"encoder": enc_int, **dec_int}

    def view(self, kind: str) -> dict:
        """Stacked (L, ...) parameter view of attention type ``kind`` (``KINDS``)."""
        if kind == "encoder":
            return self.encoder.layers.view("self")
        return self.decoder.layers.view("self" if kind == "decoder" else "cross")


state.MODULES[Seq2SeqConfig] = Seq2Seq


def module(params, config) -> Seq2Seq:
    """The module with ``params`` as its parameters (``jattn.nn.state.merge``)."""
    return state.merge(params, config)


def forward(params, config: Seq2SeqConfig, batch: dict, interventions=None, **kwargs):
    """The pure face: ``Seq2Seq.__call__`` with the parameters as an argument; a ``dropout_rng``
    makes it a training forward; Explicit mesh axes run Auto (``jattn.nn.state.pure_call``).
    Values are not checked (the models and the runner check them): a source id outside
    [0, src_vocab_size) or a target id outside [0, tgt_vocab_size) reads a valid row silently
    (JAX's indexing: ids ≥ V the last row, −V ≤ id < 0 wrap as NumPy's, ids < −V the first) and a
    mask value other than 0/1 counts as 1; ``jattn.nn.checked.checked(forward)`` checks them
    (checkify, under ``jit`` and ``vmap``)."""
    return state.pure_call(params, config, batch, interventions, _batch_axis, **kwargs)


def _batch_axis(path) -> int | None:
    """The batch axis of ``forward``'s result at ``path``: 0 in the outputs (b, ...) and the state,
    1 in the internals (L, b, ...), none in the per-layer totals (L, ...)."""
    if path[0].idx == 1:
        return 1
    return None if path[1].key == "layer_totals" else 0


def word_embeddings(params, config: Seq2SeqConfig, ids: jax.Array, side: str) -> jax.Array:
    """The scaled token embeddings of ``ids`` (b, n) on ``side`` ("source" | "target") -> (b, n, D):
    what the batch keys ``inputs_embeds`` / ``decoder_inputs_embeds`` replace, so a forward on
    them equals the forward on the ids (an integrated-gradients baseline: e.g. pad ids')."""
    if side not in ("source", "target"):
        raise ValueError(f"side must be 'source' or 'target', got {side!r}")
    return module(params, config).embeddings.words(ids, side)  # (b, n, D)
