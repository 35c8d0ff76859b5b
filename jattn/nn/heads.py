"""The task heads an encoder checkpoint may carry, each as Hugging Face computes it.

* ``MLMHead``: masked-LM logits (Devlin et al. 2019, §3.1): ``W_dec · LN(act(W_t h + b_t)) + b``,
  W_dec the word-embedding table (tied, ``config.tied_mlm_decoder``) or a decoder (V, D) of its own.
* ``ClassificationHead``: sequence classification on the pooled [CLS] (BERT) or on h_<s> through a
  dense–tanh layer (RoBERTa, ``config.classifier``).
* ``ReplacedTokenHead``: replaced-token detection (Clark et al. 2020, §2, the discriminator
  D(x, t) = sigmoid(w·act(W h_t + b) + c)): one logit per token.

Parameters (kernels (in, out)): mlm_head: transform {kernel (D, D), bias}, ln, bias (V,), decoder
(V, D) when untied; classifier: out {kernel (D, C), bias (C,)}, dense (D, D) with ``dense_tanh``;
replaced_token_head: dense {kernel (D, D), bias}, out {kernel (D, 1), bias (1,)}.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jattn.nn.config import EncoderConfig
from jattn.nn.layers import ACT, Dense, LayerNorm, dropout, param, split_rng

STD = 0.02  # BERT's initializer_range


class MLMHead(nnx.Module):
    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        D = config.hidden_size
        self.transform = Dense((D,), (D,), rngs=rngs, std=STD)
        self.ln = LayerNorm(D, config.layer_norm_eps)
        self.bias = param(None, (config.vocab_size,), "zeros")
        self.decoder = None if config.tied_mlm_decoder else param(rngs, (config.vocab_size, D), "normal", STD)
        self.act = config.mlm_activation or config.hidden_act

    def __call__(self, hidden: jax.Array, word: jax.Array) -> jax.Array:
        """hidden (b, n, D), ``word`` the word-embedding table (V, D) (the decoder when tied) ->
        logits (b, n, V)."""
        h = self.ln(ACT[self.act](self.transform(hidden)))  # (b, n, D)
        table = word if self.decoder is None else self.decoder[...]  # (V, D)
        return h @ table.T.astype(h.dtype) + self.bias[...]  # (b, n, V)


class ClassificationHead(nnx.Module):
    """Sequence classification as Hugging Face defines it. BERT: logits = W·dropout(pooler_output) + b
    on the pooled [CLS]; RoBERTa: logits = W_o·dropout(tanh(W_d·dropout(h_<s>) + b_d)) + b_o."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        D = config.hidden_size
        self.dense = Dense((D,), (D,), rngs=rngs, std=STD) if config.classifier == "dense_tanh" else None
        self.out = Dense((D,), (config.num_labels,), rngs=rngs, std=STD)
        self.rate = config.hidden_dropout

    def __call__(self, features: jax.Array, rng) -> jax.Array:
        """features (b, D): BERT's pooler output or RoBERTa's h_<s> -> logits (b, C)."""
        r = split_rng(rng, 2)
        if self.dense is not None:
            features = jnp.tanh(self.dense(dropout(features, self.rate, r[0])))  # (b, D)
        return self.out(dropout(features, self.rate, r[1]))  # (b, C)


class ReplacedTokenHead(nnx.Module):
    """ELECTRA's discriminator head (HF ``discriminator_predictions``): w·act(W h + b) + c per token."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        D = config.hidden_size
        self.dense = Dense((D,), (D,), rngs=rngs, std=STD)
        self.out = Dense((D,), (1,), rngs=rngs, std=STD)
        self.act = config.hidden_act

    def __call__(self, hidden: jax.Array) -> jax.Array:
        """hidden (b, n, D) -> logits (b, n): > 0 where the token is judged replaced."""
        return self.out(ACT[self.act](self.dense(hidden)))[..., 0]  # (b, n)
