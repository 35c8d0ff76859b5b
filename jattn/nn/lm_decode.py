"""Greedy and beam-search generation of a causal LM (``EncoderConfig.causal``) under ``jax.jit``
with a key/value cache, equal to Hugging Face ``generate(do_sample=False)`` (transformers v5).

Each step embeds one token per row at its own position, runs the stack's layers (the same
sublayers as the forward, ``jattn.nn.attention.SUBLAYERS``) with the token's keys and values
appended to a fixed-size head-major (L, B, H, T, d_h) cache (keys rotated at their position when
the model has rotary positions, Su et al. 2021; grouped-query attention's key/value heads
repeated per query head, Ainslie et al. 2023), and attends over the cache's real positions up to
its own (the causal mask). The prompt fills the cache through the same step, one position after
another; so a (batch, prompt length, beams, new tokens) combination compiles once.

Prompts are left-padded (HF's convention for decoder-only generation): a real token's position is
the count of real tokens before it (HF ``generate``'s ``position_ids = cumsum(mask) − 1``,
``jattn.nn.embeddings.counted``, what the forward of a model with learned positions numbers too:
``positions="from_mask"``), the padding is a masked key. The search follows HF: greedy fills
finished rows with ``pad_token_id``; beam search keeps 2·k candidates, scores a finished
hypothesis by Σ log p / t^length_penalty with t the generated tokens, and stops with HF's
heuristic (``jattn.nn.decode``, whose helpers it reuses)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn import state
from jattn.nn.attention import SUBLAYERS
from jattn.nn.config import EncoderConfig
from jattn.nn.decode import beam_continues, beam_init, beam_update, trim
from jattn.nn.embeddings import counted
from jattn.nn.engine import layer_loop
from jattn.nn.layer_terms import LayerTerms
from jattn.nn.rotary import rotate, tables


def _cache(config: EncoderConfig, B: int, T: int, dtype) -> dict:
    shape = (config.num_layers, B, config.num_heads, T, config.head_dim)  # per query head (repeated under GQA)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def step(params, config: EncoderConfig, tokens, t, positions, cache: dict, real, iv):
    """One position for every row: tokens (B,) at buffer index ``t`` (scalar), at positions (B,);
    ``real`` (B, T) bool, the cache positions that hold real tokens -> (logits (B, V) float32, cache)."""
    model = state.merge(params, config)
    c, emb = config, model.embeddings
    x = state.lookup(emb.word[...], tokens[:, None])  # (B, 1, E)
    if c.embedding_scale != 1.0:
        x = x * jnp.asarray(c.embedding_scale, x.dtype)
    if emb.position is not None:
        x = x + emb.position[...][positions][:, None]  # (B, 1, E)
    x = x if emb.ln is None else emb.ln(x)
    x = (x if emb.project is None else emb.project(x)).astype(cache["k"].dtype)  # (B, 1, D)
    T = cache["k"].shape[3]
    allowed = (real & (jnp.arange(T) <= t)[None])[:, None, :]  # (B, 1, T) causal, real keys
    terms = None
    if c.rotary_theta:
        cos, sin = tables(c.rotary_theta, c.max_position_embeddings, c.head_dim)  # (P, d_h)
        cos, sin = cos[positions][:, None, None], sin[positions][:, None, None]  # (B, 1, 1, d_h)
        terms = LayerTerms(cos, sin, None, None, None, None, jnp.asarray(True))  # the cache holds rotated keys
    attention, ffn = SUBLAYERS[c.norm_position]
    graphdef, stacked = nnx.split(model.layers)

    radii = jnp.asarray(c.attention_radius or (0,) * c.num_layers, jnp.int32)  # (L,) a layer's window; 0: none

    def layer(x, xs):
        st, k_c, v_c, slices, radius = xs
        lay, one = nnx.merge(graphdef, st), iv.for_layer(*slices)
        near = (radius == 0) | (t - jnp.arange(T) <= radius)  # (T,) keys within the layer's window (buffer indices)
        # (B, H, 1, d_h)
        k_new, v_new = lay.attention.keys_values(lay.attention_ln(x) if c.norm_position == "pre" else x)
        if terms is not None:
            k_new = rotate(k_new, cos, sin)  # (B, H, 1, d_h) at the token's position
        k_c = jax.lax.dynamic_update_slice_in_dim(k_c, k_new.astype(k_c.dtype), t, axis=2)  # (B, H, T, d_h)
        v_c = jax.lax.dynamic_update_slice_in_dim(v_c, v_new.astype(v_c.dtype), t, axis=2)
        h, _ = attention(lay.attention, lay.attention_ln, x, (k_c, v_c), allowed & near[None, None], one,
                         attention_dropout=0.0, dropout_rate=0.0, score_bias=terms,
                         **lay.post_norms("attention"))  # (B, 1, D)
        out, _ = ffn(lay.ffn_in, lay.ffn_out, lay.ffn_ln, h, one, activation=c.hidden_act, activation_dropout=0.0,
                     dropout_rate=0.0, **lay.post_norms("ffn"))  # (B, 1, D)
        return out, (k_c, v_c)

    x, (k, v) = layer_loop(layer, x, (stacked, cache["k"], cache["v"], iv.layer_slices(), radii))
    logits = model.lm_head(model.final(x), emb.word[...])[:, 0]  # (B, V)
    return logits.astype(jnp.float32), {"k": k, "v": v}


def _prefill(params, config, seqs, real, positions, s: int, iv, dtype):
    """The cache after the prompt's first s − 1 positions (the last one is the search's first step)."""
    cache = _cache(config, seqs.shape[0], seqs.shape[1], dtype)

    def body(t, cache):
        return step(params, config, seqs[:, t], t, positions[:, t], cache, real, iv)[1]

    return jax.lax.fori_loop(0, s - 1, body, cache)


def _setup(config, ids, mask, T):
    """The (b, T) token buffer (prompt, then pad), real positions and each position's index."""
    b, s = ids.shape
    seqs = jnp.full((b, T), config.pad_token_id, jnp.int32).at[:, :s].set(ids)  # (b, T)
    real = jnp.concatenate([mask.astype(bool), jnp.ones((b, T - s), bool)], axis=1)  # (b, T)
    positions = counted(real)  # (b, T) HF: cumsum(mask) − 1, pads 0 (also for rotary positions)
    return seqs, real, positions


@partial(jax.jit, static_argnames=("config", "max_new_tokens", "dtype"))
def greedy(params, config: EncoderConfig, ids, mask, iv, *, max_new_tokens: int, dtype=jnp.float32):
    """Greedy search. ids, mask (b, s) -> ids (b, s + max_new_tokens), the length run (scalar)."""
    b, s = ids.shape
    T = s + max_new_tokens
    seqs, real, positions = _setup(config, ids, mask, T)
    cache = _prefill(params, config, seqs, real, positions, s, iv, dtype)
    eos = -1 if config.eos_token_id is None else config.eos_token_id

    def cond(st):
        return (st[2] < T) & st[1].any()

    def body(st):
        seqs, unfinished, cur, cache = st
        logits, cache = step(params, config, seqs[:, cur - 1], cur - 1, positions[:, cur - 1], cache, real, iv)
        nxt = jnp.where(unfinished, jnp.argmax(logits, -1).astype(jnp.int32), config.pad_token_id)  # (b,)
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, nxt[:, None], cur, axis=1)
        return seqs, unfinished & (nxt != eos), cur + 1, cache

    seqs, _, cur, _ = jax.lax.while_loop(cond, body, (seqs, jnp.ones((b,), bool), jnp.int32(s), cache))
    return seqs, jnp.full((b,), cur)


@partial(jax.jit, static_argnames=("config", "num_beams", "max_new_tokens", "length_penalty", "dtype"))
def beam_search(params, config: EncoderConfig, ids, mask, iv, *, num_beams: int, max_new_tokens: int,
                length_penalty: float = 1.0, dtype=jnp.float32):
    """Beam search as HF ``generate(num_beams=k, early_stopping=False)`` on a decoder-only model.
    ids, mask (b, s) -> the best hypothesis (b, s + max_new_tokens), its length (b,)."""
    b, s = ids.shape
    k, T = num_beams, s + max_new_tokens
    seqs0, real0, positions0 = _setup(config, ids, mask, T)
    cache = _prefill(params, config, seqs0, real0, positions0, s, iv, dtype)
    cache = jax.tree.map(lambda a: jnp.repeat(a, k, axis=1), cache)  # (L, b*k, H, T, d_h)
    real, positions = jnp.repeat(real0, k, axis=0), jnp.repeat(positions0, k, axis=0)  # (b*k, T)
    eos = -1 if config.eos_token_id is None else config.eos_token_id
    running = jnp.repeat(seqs0[:, None], k, axis=1)  # (b, k, T)

    def body(st):
        cur = st["cur_len"]
        tokens = st["running"][:, :, cur - 1].reshape(-1)  # (b*k,)
        logits, cache = step(params, config, tokens, cur - 1, positions[:, cur - 1], st["cache"], real, iv)
        st, rows = beam_update(st, jax.nn.log_softmax(logits, -1), T=T, eos=eos, start=s,
                               length_penalty=length_penalty)
        return dict(st, cache=jax.tree.map(lambda a: a[:, rows], cache))

    st = jax.lax.while_loop(lambda st: beam_continues(st, T), body, beam_init(running, s, cache))
    return st["seqs"][:, 0], st["lengths"][:, 0]


def generate(params, config: EncoderConfig, input_ids, attention_mask, *, max_new_tokens: int, num_beams: int = 1,
             length_penalty: float = 1.0, interventions=None, dtype=jnp.float32) -> np.ndarray:
    """Continue left-padded prompts (b, s); returns HF-layout ids (b, s + t ≤ s + max_new_tokens) as a
    numpy array. ``interventions``: a checked ``Interventions`` with per-head (L, H) gates / disabled
    heads, or None. A right-padded prompt is refused: HF numbers the tokens it generates after
    padding from position 1 again (its documented usage is left padding)."""
    from jattn.nn.interventions import NONE

    iv = NONE if interventions is None else interventions
    if (iv.weights_delta is not None or iv.patch is not None
            or any(a is not None and a.ndim != 2 for a in iv.layer_slices()[:2])):
        raise ValueError("generation takes per-head interventions only: (L, H) head_gates / disabled_heads, no "
                         "weights_delta or patch")
    if not config.causal:
        raise ValueError(f"{config.model_type} is not a causal language model (config.causal is False)")
    mask = np.asarray(attention_mask).astype(bool)
    if (mask[:, 1:] < mask[:, :-1]).any() or not mask[:, -1].all():
        raise ValueError("generate needs left-padded prompts (attention_mask 0 only before each row's first real "
                         "token, 1 at the last position), Hugging Face's convention for decoder-only models. Fix: "
                         "pad on the left (tokenizer.padding_side = 'left')")
    if num_beams < 1 or max_new_tokens < 1:
        raise ValueError(f"num_beams and max_new_tokens must be >= 1, got {num_beams} and {max_new_tokens}")
    ids, m = jnp.asarray(input_ids, jnp.int32), jnp.asarray(mask, jnp.int32)  # (b, s)
    if num_beams == 1:
        seqs, lengths = greedy(params, config, ids, m, iv, max_new_tokens=max_new_tokens, dtype=dtype)
    else:
        seqs, lengths = beam_search(params, config, ids, m, iv, num_beams=num_beams, max_new_tokens=max_new_tokens,
                                    length_penalty=float(length_penalty), dtype=dtype)
    return trim(seqs, lengths)
