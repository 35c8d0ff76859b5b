"""The pure faces with their inputs checked (``jax.experimental.checkify``).

``jattn.nn.encoder.forward`` and ``jattn.nn.seq2seq.forward`` do not check values: an id outside
the vocabulary reads a valid row silently (JAX's indexing: an id ≥ V the last row, −V ≤ id < 0
wrap as NumPy's, an id < −V the first), and a mask value other than 0/1 counts as 1. The models
and the runner check their inputs in Python; a program built on the pure faces checks them with
``checked``::

    err, (outputs, internals) = checked(forward)(params, config, batch)
    err.throw()  # a checkify.JaxRuntimeError naming the value, its position and the vocabulary

The checks are values of the program (``checkify.checkify``), so ``checked(forward)`` composes
with ``jax.jit`` (``jax.jit(checked(forward), static_argnums=1)``: the error comes back beside the
outputs, the caller throws it) and ``jax.vmap`` (positions are then within the mapped slice).
Checked: ids (``input_ids``; a translation model's ``decoder_input_ids`` against its target
vocabulary; an encoder's ``token_type_ids`` against its token types) in [0, size), and every
attention mask in {0, 1}. Embeddings given in place of ids (``inputs_embeds``) are not checked.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax.experimental import checkify

from jattn.nn.config import Seq2SeqConfig

__all__ = ["checked"]


def checked(forward):
    """``forward`` (a pure face ``forward(params, config, batch, interventions, **kwargs)``:
    ``jattn.nn.encoder.forward`` / ``classify``, ``jattn.nn.seq2seq.forward``) with its batch
    checked: ``checked(forward)(params, config, batch, interventions=None, **kwargs) -> (error,
    result)``, ``result`` what ``forward`` returns on the same arguments and ``error`` a
    ``checkify.Error`` whose ``throw()`` raises a ``checkify.JaxRuntimeError`` for the first
    offending value (ids < 0 or ≥ the vocabulary size, a mask value other than 0/1), naming it,
    its position (example, token), the vocabulary size and how many values offend."""
    @functools.wraps(forward)
    def run(params, config, batch: dict, interventions=None, **kwargs):
        def body(params, batch, interventions):
            _check_batch(config, batch)
            return forward(params, config, batch, interventions, **kwargs)

        return checkify.checkify(body)(params, batch, interventions)

    return run


def _check_batch(config, batch: dict) -> None:
    """``checkify.check`` every id and mask of ``batch`` that ``config``'s forward reads (inside a
    ``checkify.checkify``-transformed function)."""
    if isinstance(config, Seq2SeqConfig):
        ids = (("input_ids", config.src_vocab_size, "source vocabulary"),
               ("decoder_input_ids", config.tgt_vocab_size, "target vocabulary"))
        masks = ("attention_mask", "decoder_attention_mask")
    else:
        ids = (("input_ids", config.vocab_size, "vocabulary"),)
        if config.type_vocab_size:  # none: token_type_ids are ignored
            ids += (("token_type_ids", config.type_vocab_size, "token types"),)
        masks = ("attention_mask",)
    for key, size, what in ids:
        if batch.get(key) is not None:
            values = jnp.asarray(batch[key])
            _first_bad(key, values, (values < 0) | (values >= size),
                       f"is outside the {what} of {size} ([0, {size}))")
    for key in masks:
        if batch.get(key) is not None:
            values = jnp.asarray(batch[key])
            _first_bad(key, values, (values != 0) & (values != 1), "is not 0 or 1")


def _first_bad(key: str, values, bad, what: str) -> None:
    """A check that no entry of ``bad`` (shaped as ``values``, e.g. (b, n)) is set, naming the first
    set one's value and position (example, token)."""
    flat = bad.reshape(-1)
    where = jnp.unravel_index(jnp.argmax(flat), bad.shape) if bad.ndim else ()
    index = ", ".join("{}" for _ in where)
    checkify.check(~flat.any(), f"{key}[{index}] = {{}} {what}; {{}} such value(s) in {key} {tuple(bad.shape)}",
                   *where, values[where], flat.sum())
