"""The task heads an encoder checkpoint may carry, each as Hugging Face computes it.

* ``MLMHead``: masked-LM logits (Devlin et al. 2019, §3.1): ``W_dec · LN(act(W_t h + b_t)) + b``,
  W_dec the word-embedding table (tied, ``config.tied_mlm_decoder``) or a decoder (V, E) of its own.
  The transform maps the model width D to the embedding width E (``config.embedding_size``; D
  without one), so that its output meets the (V, E) table: ALBERT's factorised embeddings (Lan et
  al. 2020, §3.1) and ELECTRA's generator (Clark et al. 2020) have E < D, BERT's E = D.
* ``ClassificationHead``: sequence classification on the pooled [CLS] (BERT, ALBERT), on h_<s>
  through a dense–tanh layer (RoBERTa) or on h_[CLS] through a dense–ReLU layer (DistilBERT;
  ``config.classifier``).
* ``ReplacedTokenHead``: replaced-token detection (Clark et al. 2020, §2, the discriminator
  D(x, t) = sigmoid(w·act(W h_t + b) + c)): one logit per token.

Parameters (kernels (in, out)): mlm_head: transform {kernel (D, E), bias (E,)}, ln (E,), bias (V,),
decoder (V, E) when untied; classifier: out {kernel (D, C), bias (C,)}, dense (D, D) with
``dense_tanh`` and ``dense_relu``; replaced_token_head: dense {kernel (D, D), bias}, out {kernel
(D, 1), bias (1,)}.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jattn.nn.config import EncoderConfig
from jattn.nn.layers import ACT, Dense, LayerNorm, dropout, param, split_rng

STD = 0.02  # BERT's initializer_range


class MLMHead(nnx.Module):
    """W_dec · LN(act(W_t h + b_t)) + b, the transform D -> E (E the embedding width)."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        D, E = config.hidden_size, config.embedding_size or config.hidden_size
        self.transform = Dense((D,), (E,), rngs=rngs, std=STD, bias=config.head_bias)
        self.ln = LayerNorm(E, config.layer_norm_eps, bias=config.norm_bias)
        self.bias = param(None, (config.vocab_size,), "zeros") if config.mlm_output_bias else None  # None: no bias
        self.decoder = None if config.tied_mlm_decoder else param(rngs, (config.vocab_size, E), "normal", STD,
                                                                  (None, "model"))
        self.act = config.mlm_activation or config.hidden_act

    def __call__(self, hidden: jax.Array, word: jax.Array) -> jax.Array:
        """hidden (b, n, D), ``word`` the word-embedding table (V, E) (the decoder when tied) ->
        logits (b, n, V)."""
        h = self.ln(ACT[self.act](self.transform(hidden)))  # (b, n, E)
        table = word if self.decoder is None else self.decoder[...]  # (V, E)
        logits = h @ table.T.astype(h.dtype)  # (b, n, V)
        return logits if self.bias is None else logits + self.bias[...]  # (b, n, V)


# config.classifier -> what the head computes on its features (the pooled [CLS] for "pooler", else h_0)
CLASSIFIERS = ("pooler", "dense_tanh", "dense_relu", "dense_act_norm")


class ClassificationHead(nnx.Module):
    """Sequence classification as Hugging Face defines it (``config.classifier``), dropout at rate
    ``config.classifier_dropout`` (``hidden_dropout`` when None) where HF applies it:
    "pooler" (BERT, ALBERT): logits = W·dropout(pooler_output) + b on the pooled [CLS];
    "dense_tanh" (RoBERTa): logits = W_o·dropout(tanh(W_d·dropout(h_<s>) + b_d)) + b_o;
    "dense_relu" (DistilBERT, Sanh et al. 2019): logits = W_o·dropout(relu(W_d·h_[CLS] + b_d)) + b_o;
    "dense_act_norm" (Warner et al. 2024): logits = W_o·dropout(LN(act(W_d·h_[CLS] + b_d))) + b_o, act the
    heads' ``mlm_activation``, b_d only with ``head_bias``."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        D = config.hidden_size
        if config.classifier not in CLASSIFIERS:
            raise ValueError(f"unknown classifier {config.classifier!r}; jattn implements {CLASSIFIERS}")
        self.kind = config.classifier
        dense_bias = config.head_bias or config.classifier != "dense_act_norm"  # head_bias: dense_act_norm's only
        self.dense = Dense((D,), (D,), rngs=rngs, std=STD, bias=dense_bias) if config.classifier != "pooler" else None
        self.ln = (LayerNorm(D, config.layer_norm_eps, bias=config.norm_bias)
                   if config.classifier == "dense_act_norm" else None)
        self.act = config.mlm_activation or config.hidden_act
        self.out = Dense((D,), (config.num_labels,), rngs=rngs, std=STD)
        rate = config.classifier_dropout
        self.rate = config.hidden_dropout if rate is None else rate

    def __call__(self, features: jax.Array, rng) -> jax.Array:
        """features (b, D): the pooler output (BERT, ALBERT) or h_0 (RoBERTa, DistilBERT) -> logits (b, C)."""
        r = split_rng(rng, 2)
        if self.kind == "dense_tanh":
            features = jnp.tanh(self.dense(dropout(features, self.rate, r[0])))  # (b, D)
        elif self.kind == "dense_relu":
            features = jax.nn.relu(self.dense(features))  # (b, D)
        elif self.kind == "dense_act_norm":
            features = self.ln(ACT[self.act](self.dense(features)))  # (b, D)
        return self.out(dropout(features, self.rate, r[1]))  # (b, C)


class LMHead(nnx.Module):
    """A causal LM's next-token logits (Radford et al. 2019, §2: P(x_{i+1} | x_{≤i}) = softmax(h_i W^T)):
    W the word-embedding table (``config.tied_lm_head``, GPT-2's) or a (V, D) matrix of its own
    (Llama's ``lm_head``); no bias."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        self.weight = None if config.tied_lm_head else param(rngs, (config.vocab_size, config.hidden_size),
                                                              "normal", STD, (None, "model"))
        self.softcap = config.logit_softcap  # logits c·tanh(z / c) (Gemma Team 2024); 0: none

    def __call__(self, hidden: jax.Array, word: jax.Array) -> jax.Array:
        """hidden (b, n, D) (the final norm's output), ``word`` the word table (V, D) -> logits (b, n, V)."""
        table = word if self.weight is None else self.weight[...]  # (V, D)
        logits = hidden @ table.T.astype(hidden.dtype)  # (b, n, V)
        return self.softcap * jnp.tanh(logits / self.softcap) if self.softcap else logits  # (b, n, V)


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
