"""Greedy and beam-search decoding under ``jax.jit`` with a key/value cache.

The encoder runs once; each decoder step embeds one token per sequence, appends its keys and
values to a fixed-size head-major (L, B, H, T, d_h) cache, and attends over the filled prefix. The loop is
a ``jax.lax.while_loop`` over fixed shapes, so a (batch, source length, beams, max_length)
combination compiles once.

The search reproduces Hugging Face ``generate`` (transformers v5, no sampling,
``early_stopping=False``): greedy pads finished rows with ``pad_token_id``; beam search keeps
2·k candidates per step, scores a finished hypothesis by Σ log p / len^length_penalty with len
the number of generated tokens (Wu et al. 2016's length normalisation in HF's form), and stops
with HF's heuristic (best running score / current length cannot beat the worst finished one).
``forced_bos_token_id`` is forced at the first generated position, ``forced_eos_token_id`` at the
last, and ``bad_token_ids`` are never chosen.
Both return (b, max_length) token ids starting with ``decoder_start_token_id`` and each row's
length; callers trim to HF's layout with ``trim``.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn import state
from jattn.nn.config import Seq2SeqConfig
from jattn.nn.engine import layer_loop
from jattn.nn.seq2seq import check_interventions, module

__all__ = ["generate", "generated_mask"]

NEG = -1.0e9  # HF's sentinel for excluded beams


def init_state(params, config: Seq2SeqConfig, input_ids, attention_mask, iv, max_length, dtype):
    """Encode once; return the cross-attention keys/values (L, B, H, s, d_h) and an empty
    self-attention cache (L, B, H, T, d_h)."""
    model = module(params, config)
    enc, _, _ = model.encoder_stack(input_ids, attention_mask, iv["encoder"], dtype=dtype, internals=None)  # (B, s, D)
    graphdef, stacked = nnx.split(model.decoder.layers)
    cross_k, cross_v = jax.lax.map(lambda s: nnx.merge(graphdef, s).cross_attn.keys_values(enc), stacked)
    B, H = input_ids.shape[0], config.decoder_heads
    shape = (config.decoder_layers, B, H, max_length, config.decoder_head_dim)
    return {"cross_k": cross_k, "cross_v": cross_v,
            "self_k": jnp.zeros(shape, dtype), "self_v": jnp.zeros(shape, dtype)}


def decoder_step(params, config: Seq2SeqConfig, tokens, pos, cache, src_mask, iv):
    """One decoder position for every row, through the same sublayers (post- or pre-LN) and
    final LayerNorm as the teacher-forced forward; with a relative-position score bias, the
    decoder's bias of the query at ``pos`` on every cached key (Raffel et al. 2020, §2.1; keys
    after ``pos`` are masked). tokens (B,) at position ``pos`` (0-based) -> (logits (B, V)
    float32, updated cache)."""
    model = module(params, config)
    T = cache["self_k"].shape[3]
    y = model.embeddings(tokens[:, None], "target", cache["self_k"].dtype, None, offset=pos)  # (B, 1, D)
    seen = jnp.broadcast_to(jnp.arange(T) <= pos, (tokens.shape[0], T))[:, None, :]  # (B, 1, T)
    src = src_mask.astype(bool)[:, None, :]  # (B, 1, s)
    position_bias = model.decoder.score_bias(1, T, offset=pos)  # (H, 1, T) or None
    graphdef, stacked = nnx.split(model.decoder.layers)
    iv_self, iv_cross = iv["decoder"], iv["cross"]

    def layer(y, xs):
        state, k_c, v_c, ck, cv, s_self, s_cross = xs
        lay = nnx.merge(graphdef, state)
        k_new, v_new = lay.self_keys_values(y)  # (B, H, 1, d_h)
        k_c = jax.lax.dynamic_update_slice_in_dim(k_c, k_new.astype(k_c.dtype), pos, axis=2)  # (B, H, T, d_h)
        v_c = jax.lax.dynamic_update_slice_in_dim(v_c, v_new.astype(v_c.dtype), pos, axis=2)
        h, _ = lay.attend("self", y, (k_c, v_c), seen, iv_self.for_layer(*s_self), None, position_bias)  # (B, 1, D)
        h, _ = lay.attend("cross", h, (ck, cv), src, iv_cross.for_layer(*s_cross), None)  # (B, 1, D)
        return lay.ffn(h, iv_cross.for_layer(*s_cross), None)[0], (k_c, v_c)

    xs = (stacked, cache["self_k"], cache["self_v"], cache["cross_k"], cache["cross_v"],
          iv_self.layer_slices(), iv_cross.layer_slices())
    y, (k, v) = layer_loop(layer, y, xs)
    return model.logits(model.decoder.final(y))[:, 0], dict(cache, self_k=k, self_v=v)  # (B, V)


def process(config: Seq2SeqConfig, scores, cur_len, max_length):
    """HF logits processors: bad tokens to -inf; at cur_len == 1 only ``forced_bos_token_id`` is
    allowed, at cur_len == max_length - 1 only ``forced_eos_token_id`` (score 0; the later wins
    when both apply, as in HF's processor order)."""
    if config.bad_token_ids:
        scores = scores.at[:, jnp.asarray(config.bad_token_ids)].set(-jnp.inf)
    for token, at in ((config.forced_bos_token_id, 1), (config.forced_eos_token_id, max_length - 1)):
        if token is not None:
            forced = jnp.full_like(scores, -jnp.inf).at[:, token].set(0.0)  # (B, V)
            scores = jnp.where(cur_len == at, forced, scores)
    return scores


def _fill(config: Seq2SeqConfig) -> int:
    return config.pad_token_id or config.eos_token_id  # HF: `pad_token_id or eos_token_id`


@partial(jax.jit, static_argnames=("config", "max_length", "dtype"))
def greedy(params, config: Seq2SeqConfig, input_ids, attention_mask, iv, *, max_length: int,
           dtype=jnp.float32):
    """Greedy search. input_ids, attention_mask (b, s) -> ids (b, max_length), lengths (b,)."""
    b = input_ids.shape[0]
    cache = init_state(params, config, input_ids, attention_mask, iv, max_length, dtype)
    seqs = jnp.full((b, max_length), _fill(config), jnp.int32).at[:, 0].set(config.decoder_start_token_id)
    state = (seqs, jnp.ones((b,), bool), jnp.int32(1), cache)

    def cond(s):
        return (s[2] < max_length) & s[1].any()

    def body(s):
        seqs, unfinished, cur_len, cache = s
        logits, cache = decoder_step(params, config, seqs[:, cur_len - 1], cur_len - 1, cache, attention_mask,
                                     iv)  # (b, V)
        nxt = jnp.argmax(process(config, logits, cur_len, max_length), -1).astype(jnp.int32)  # (b,)
        nxt = jnp.where(unfinished, nxt, config.pad_token_id)  # (b,)
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, nxt[:, None], cur_len, axis=1)
        return seqs, unfinished & (nxt != config.eos_token_id), cur_len + 1, cache

    seqs, _, cur_len, _ = jax.lax.while_loop(cond, body, state)
    return seqs, jnp.full((b,), cur_len)


def _gather(x, idx):
    """x (b, n, ...), idx (b, m) -> (b, m, ...)."""
    return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


def beam_init(running, start: int, cache) -> dict:
    """The search's state before its first step: ``running`` (b, k, T) beams holding their first
    ``start`` tokens (the decoder start token; a decoder-only model's prompt), beam 0 the only live one."""
    b, k, _ = running.shape
    return dict(
        running=running,  # (b, k, T)
        running_scores=jnp.zeros((b, k), jnp.float32).at[:, 1:].set(NEG),  # (b, k) Σ log p
        seqs=running,  # (b, k, T) finished hypotheses, best first
        scores=jnp.full((b, k), NEG, jnp.float32),  # (b, k) length-normalised
        finished=jnp.zeros((b, k), bool),
        lengths=jnp.full((b, k), start, jnp.int32),  # (b, k) tokens incl. the first ``start``
        open=jnp.ones((b, 1), bool),  # HF's is_early_stop_heuristic_unsatisfied
        all_hit=jnp.zeros((), bool),
        cur_len=jnp.int32(start),
        cache=cache,
    )


def beam_continues(s, T: int):
    """HF's loop condition: room left, some sentence's heuristic still open, not every candidate stopped."""
    return (s["cur_len"] < T) & s["open"].any() & ~s["all_hit"]


def beam_update(s, logp, *, T: int, eos: int, start: int, length_penalty: float):
    """One step of HF's beam search (``early_stopping=False``). ``logp`` (b*k, V): the running
    beams' next-token log-probabilities after the logits processors. Returns the new state without
    its ``cache`` and rows (b*k,): for each new running beam, the row of the beam it continues, by
    which the caller reorders its key/value cache."""
    cur_len, (b, k, _) = s["cur_len"], s["running"].shape
    V = logp.shape[-1]
    logp = (logp.reshape(b, k, V) + s["running_scores"][:, :, None]).reshape(b, k * V)  # (b, k*V)
    cand_lp, cand = jax.lax.top_k(logp, 2 * k)  # (b, 2k)
    src_beam, tok = cand // V, (cand % V).astype(jnp.int32)  # (b, 2k)
    cand_seqs = _gather(s["running"], src_beam)  # (b, 2k, T)
    cand_seqs = jax.lax.dynamic_update_slice_in_dim(cand_seqs, tok[:, :, None], cur_len, axis=2)
    hit = (tok == eos) | (cur_len + 1 >= T)  # (b, 2k) stopping criteria

    # Running beams: the best k candidates that did not stop.
    _, keep = jax.lax.top_k(cand_lp + hit * NEG, k)  # (b, k)
    running_scores = _gather(cand_lp + hit * NEG, keep)  # (b, k)
    running = _gather(cand_seqs, keep)  # (b, k, T)
    rows = (_gather(src_beam, keep) + jnp.arange(b)[:, None] * k).reshape(-1)  # (b*k,) cache rows

    # Finished set: merge candidates that just stopped among the top k.
    generated = (cur_len + 1 - start).astype(jnp.float32)  # HF: cur_len + 1 − decoder_prompt_len
    just = hit & (jnp.arange(2 * k) < k)[None]  # (b, 2k) stopped among the top k
    fin = cand_lp / jnp.power(generated, length_penalty)  # (b, 2k)
    fin = fin + (~s["open"]) * NEG + (~just) * NEG  # (b, 2k)
    m_scores = jnp.concatenate([s["scores"], fin], 1)  # (b, 3k)
    _, best = jax.lax.top_k(m_scores, k)  # (b, k)
    m_len = jnp.concatenate([s["lengths"], jnp.full((b, 2 * k), cur_len + 1)], 1)  # (b, 3k)
    seqs = _gather(jnp.concatenate([s["seqs"], cand_seqs], 1), best)  # (b, k, T)
    finished = _gather(jnp.concatenate([s["finished"], just], 1), best)  # (b, k)
    scores, lengths = _gather(m_scores, best), _gather(m_len, best)  # (b, k)

    # HF's stopping heuristic, evaluated at the new length.
    best_running = running_scores[:, :1] / jnp.power(generated, length_penalty)  # (b, 1)
    worst = jnp.where(finished, scores.min(1, keepdims=True), NEG)  # (b, k)
    open_ = s["open"] & (best_running > worst).any(-1, keepdims=True)  # (b, 1)
    return dict(running=running, running_scores=running_scores, seqs=seqs, scores=scores, finished=finished,
                lengths=lengths, open=open_, all_hit=hit.all(), cur_len=cur_len + 1), rows


@partial(jax.jit, static_argnames=("config", "num_beams", "max_length", "length_penalty", "dtype"))
def beam_search(params, config: Seq2SeqConfig, input_ids, attention_mask, iv, *, num_beams: int,
                max_length: int, length_penalty: float = 1.0, dtype=jnp.float32):
    """Beam search as HF ``generate(num_beams=k, early_stopping=False)``.

    input_ids, attention_mask (b, s) -> best hypothesis ids (b, max_length), lengths (b,)."""
    b, k, T = input_ids.shape[0], num_beams, max_length
    rep = lambda x: jnp.repeat(x, k, axis=0)  # (b, ...) -> (b*k, ...) beam-major per sentence
    src_mask = rep(attention_mask)  # (b*k, s)
    cache = init_state(params, config, rep(input_ids), src_mask, iv, T, dtype)
    running = jnp.full((b, k, T), _fill(config), jnp.int32).at[:, :, 0].set(config.decoder_start_token_id)

    def body(s):
        tokens = s["running"][:, :, s["cur_len"] - 1].reshape(-1)  # (b*k,)
        logits, cache = decoder_step(params, config, tokens, s["cur_len"] - 1, s["cache"], src_mask, iv)
        logp = process(config, jax.nn.log_softmax(logits, -1), s["cur_len"], T)  # (b*k, V)
        s, rows = beam_update(s, logp, T=T, eos=config.eos_token_id, start=1, length_penalty=length_penalty)
        return dict(s, cache=dict(cache, self_k=cache["self_k"][:, rows], self_v=cache["self_v"][:, rows]))

    s = jax.lax.while_loop(lambda s: beam_continues(s, T), body, beam_init(running, 1, cache))
    return s["seqs"][:, 0], s["lengths"][:, 0]


def trim(ids, lengths) -> np.ndarray:
    """HF's output layout: every row cut to the longest returned length in the batch."""
    return np.asarray(ids)[:, : int(np.max(np.asarray(lengths)))]


def generate(params, config: Seq2SeqConfig, input_ids, attention_mask, *, num_beams: int = 1, max_length: int,
             length_penalty: float = 1.0, interventions=None, dtype=jnp.float32, forced_bos_token_id=None):
    """Translate a padded batch; returns HF-layout ids (b, n ≤ max_length), starting with the
    decoder start token and padded with ``pad_token_id`` after EOS, as a numpy array. Under a
    trace (``jax.jit``, ``vmap``) the rows' lengths are unknown values: the ids come untrimmed,
    (b, max_length), the columns past the longest row holding HF's fill (``pad_token_id`` or,
    when that is 0, ``eos_token_id``). ``interventions``: {"encoder"|"decoder"|"cross":
    Interventions} with per-head (L, H) gates / disabled heads, checked here; traced ones must
    come checked (``Seq2SeqModel.generate`` does). ``forced_bos_token_id``: the first generated
    token of this call in place of the config's (a multilingual model's target language code, as
    HF ``generate(forced_bos_token_id=...)``). On a mesh with Explicit axes the search runs with
    them Auto (``jattn.nn.state.on_auto_axes``)."""
    if forced_bos_token_id is not None:
        if not 0 <= int(forced_bos_token_id) < config.tgt_vocab_size:
            raise ValueError(f"forced_bos_token_id={forced_bos_token_id} is not a target token id (0.."
                             f"{config.tgt_vocab_size - 1}). Fix: the id of the target language code")
        config = dataclasses.replace(config, forced_bos_token_id=int(forced_bos_token_id))
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(interventions))
    iv = interventions if traced else check_interventions(config, interventions)
    for kind, one in iv.items():
        if (one.weights_delta is not None or one.patch is not None
                or any(a is not None and a.ndim != 2 for a in one.layer_slices()[:2])):
            raise ValueError(f"decoding takes per-head interventions only: interventions[{kind!r}] must have "
                             "(L, H) head_gates / disabled_heads and no weights_delta or patch")
    ids, mask = jnp.asarray(input_ids, jnp.int32), jnp.asarray(attention_mask, jnp.int32)  # (b, s)
    if num_beams == 1:
        search = partial(greedy, config=config, max_length=max_length, dtype=dtype)
    else:
        search = partial(beam_search, config=config, num_beams=num_beams, max_length=max_length,
                         length_penalty=length_penalty, dtype=dtype)
    seqs, lengths = state.on_auto_axes(lambda p, i, m, v: search(p, input_ids=i, attention_mask=m, iv=v),
                                       (params, ids, mask, iv), ids, lambda path: 0)  # (b, T), (b,)
    return seqs if isinstance(seqs, jax.core.Tracer) else trim(seqs, lengths)


def generated_mask(config: Seq2SeqConfig, sequences):
    """The decoder mask of a teacher-forced pass over generated ids (b, t): 1 up to and including
    each row's first EOS after position 0, 0 on the padding after it. The start token is kept
    whatever its id (Marian's is the pad id, which HF's ``ids != pad`` mask would hide; BART's is
    EOS). (b, t) -> (b, t) int32, numpy for numpy ids, else jax."""
    xp = np if isinstance(sequences, np.ndarray) else jnp
    hit = (sequences == config.eos_token_id) & (xp.arange(sequences.shape[1]) > 0)  # (b, t) an EOS
    return (xp.cumsum(hit, axis=1) - hit == 0).astype(xp.int32)  # (b, t) no EOS before t
