"""BERT-family encoder as a Flax NNX module (Devlin et al. 2019; Liu et al. 2019 for RoBERTa).

Two faces of one definition:
  * the module ``Encoder(config, rngs=...)``: compose it, fine-tune it with ``nnx.Optimizer``,
    inspect it with ``nnx.display``; ``encoder(batch, interventions) -> (outputs, internals)``;
  * the pure function ``forward(params, config, batch, interventions) -> (outputs, internals)``,
    where ``params = nnx.state(encoder, nnx.Param)`` (an ``nnx.State``, the module's parameters,
    what ``nnx.split`` returns beside the graph): what ``jax.jit``, ``jax.grad``, ``jax.vmap`` and
    meshes act on.

The L identical post-LayerNorm blocks are one ``EncoderLayer`` created *stacked* (every
parameter has a leading L axis) and run with ``jax.lax.scan`` over its split state: one compiled
layer, internals stacked as (L, ...). (``lax.scan`` over the split state rather than
``nnx.scan``: the same compiled program, and the per-layer interventions and the
``layer_rows`` / ``layer_totals`` callbacks ride along as ordinary scanned arrays.)

Parameters (kernels (in, out); attention kernels split by head; ``L`` leads every layer tensor):
  embeddings: word (V, E), position (P, E), token_type (T, E) (none when T = 0), ln {scale, bias} (E,),
              project {kernel (E, D), bias (D,)} when the embedding width E (``config.embedding_size``) != D
  layers: attention.{query,key,value} {kernel (L, D, H, d_h), bias (L, H, d_h)},
          attention.out {kernel (L, H, d_h, D), bias (L, D)}, attention_ln, ffn_in {kernel
          (L, D, F), bias}, ffn_out {kernel (L, F, D), bias}, ffn_ln
  relative_bias (``config.relative_position_buckets`` = R > 0): (R, H) the score bias shared by the layers
  pooler (``config.with_pooler``): {kernel (D, D), bias (D,)}
  mlm_head (``config.with_mlm_head``), classifier (``config.num_labels`` = C > 0),
  replaced_token_head (``config.with_replaced_token_head``): the task heads (``jattn.nn.heads``)

The input is token ids or, for saliency and integrated gradients (``jax.grad`` with respect to
it), their embeddings (``inputs_embeds``, ``word_embeddings``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jattn.nn.config import EncoderConfig
from jattn.nn.interventions import NONE, Interventions
from jattn.nn.attention import SUBLAYERS, MultiHeadAttention, block_view
from jattn.nn import state
from jattn.nn.relative import relative_position_bias
from jattn.nn.positions import layer_scores, position_projections, relative_embeddings
from jattn.nn.engine import chunk_rows, chunked, layer_loop, layer_slice, run_stack
from jattn.nn.layer_terms import attention_norm, layer_terms
from jattn.nn.embeddings import Embeddings
from jattn.nn.heads import STD, ClassificationHead, LMHead, MLMHead, ReplacedTokenHead
from jattn.nn.layers import ACT, Dense, dropout_key, norm_module, param, split_rng

__all__ = ["classify", "forward", "INTERNALS", "word_embeddings"]

INTERNALS = ("weights", "values", "context", "output", "residual", "pre_ln", "attention_ln_out", "ffn_activation",
             "ffn_output", "ffn_pre_ln")
# the checkpoint's own heads' outputs a forward returns when asked (``heads=``): (b, n, V) and (b, n)
HEADS = ("mlm_logits", "replaced_token_logits", "lm_logits")  # lm_logits: a causal LM's (b, n, V)


class EncoderLayer(nnx.Module):
    """One block, created stacked (``stack=(L,)``): post-LN x -> LN(x + Attn(x)) -> LN(h + FFN(h))
    (Vaswani et al. 2017) or pre-LN x -> x + Attn(LN(x)) -> h + FFN(LN(h)) (Xiong et al. 2020),
    as ``config.norm_position`` says (``jattn.nn.attention.SUBLAYERS``)."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs, stack: tuple = ()):
        D, H, F = config.hidden_size, config.num_heads, config.intermediate_size
        self.attention = MultiHeadAttention(D, H, rngs=rngs, stack=stack, std=STD, head_dim=config.head_dim,
                                            bias=config.attention_bias, kv_heads=config.kv_heads,
                                            out_bias=config.attention_out_bias, softcap=config.attention_softcap,
                                            score_scale=config.score_scale)
        self.attention_ln = norm_module(config, D, stack)  # LayerNorm or RMSNorm (config.norm)
        gated = (2,) if config.gated_ffn else ()  # a gated FFN's W_1: input and gate (2, F)
        self.ffn_in = Dense((D,), (*gated, F), rngs=rngs, stack=stack, out_names=(*(None,) * len(gated), "model"),
                            std=STD, bias=config.ffn_bias)
        self.ffn_out = Dense((F,), (D,), rngs=rngs, stack=stack, in_names=("model",), std=STD, bias=config.ffn_bias)
        self.ffn_ln = norm_module(config, D, stack)
        post = config.sublayer_post_norm  # norms on the sublayers' outputs (pre_ln_attention's post_ln)
        self.attention_post_ln, self.ffn_post_ln = (norm_module(config, D, stack) if post else None for _ in "af")
        self.positions = position_projections(config, rngs=rngs, stack=stack, std=STD)  # DeBERTa's W_{k,r}, W_{q,r}
        self.config = config

    def __call__(self, x, allowed, iv: Interventions, rng, score_bias=None):
        """One layer's slice: x (b, n, D) -> (x' (b, n, D), internals of this layer);
        ``score_bias`` (H, n, n) or None (``Encoder.score_bias``)."""
        c, r = self.config, split_rng(rng, 2)
        attention, ffn_sublayer = SUBLAYERS[c.norm_position]
        h, internals = attention(self.attention, attention_norm(self.attention_ln, score_bias), x, x, allowed, iv,
                                         attention_dropout=c.attention_dropout, dropout_rate=c.hidden_dropout,
                                         rng=r[0], score_bias=score_bias, **self.post_norms("attention"))  # (b, n, D)
        out, ffn = ffn_sublayer(self.ffn_in, self.ffn_out, self.ffn_ln, h, iv, activation=c.hidden_act,
                                activation_dropout=0.0, dropout_rate=c.hidden_dropout, rng=r[1],
                                **self.post_norms("ffn"))  # (b, n, D)
        return out, {**internals, **ffn}  # ffn: ffn_activation (b, n, F), ffn_output, ffn_pre_ln (b, n, D)

    def cls_row(self, x, allowed, iv: Interventions, score_bias=None):
        """This layer's output at the [CLS] position only, in evaluation mode: the query x[:, :1],
        keys and values from all of x (b, n, D); ``iv`` for that one query row, ``score_bias``
        the layer's (H, n, n) or None -> (b, 1, D)."""
        c = self.config
        attention, ffn_sublayer = SUBLAYERS[c.norm_position]
        row_bias = None if score_bias is None else score_bias[:, :1]  # (H, 1, n)
        ln = attention_norm(self.attention_ln, score_bias)  # the LayerNorm, or the identity where switched off
        kv = x if c.norm_position == "post" else self.attention.keys_values(ln(x))  # pre-LN: LN(x)
        h, _ = attention(self.attention, ln, x[:, :1], kv, allowed, iv,
                         attention_dropout=0.0, dropout_rate=0.0, score_bias=row_bias)  # (b, 1, D)
        out, _ = ffn_sublayer(self.ffn_in, self.ffn_out, self.ffn_ln, h, iv, activation=c.hidden_act,
                              activation_dropout=0.0, dropout_rate=0.0)  # (b, 1, D)
        return out

    def post_norms(self, sublayer: str) -> dict:
        """The ``post_ln`` keyword of a sublayer ("attention" | "ffn") with output norms, else {}."""
        post = getattr(self, f"{sublayer}_post_ln")
        return {} if post is None else {"post_ln": post}

    def view(self) -> dict:
        """This layer's (or the stack's) parameters as the norm-based methods read them."""
        return block_view(self.attention, self.attention_ln, self.ffn_ln)


def select(internals: dict, which, absent=()) -> dict:
    """Keep the internals named in ``which`` ("all", None/() for none, or a tuple of names); names
    in ``absent`` (those another sublayer of the model records) are skipped where missing."""
    if which == "all":
        return internals
    which = tuple(k for k in (() if which is None else which) if k in internals or k not in absent)
    if unknown := [k for k in which if k not in internals]:
        raise ValueError(f"unknown internals {unknown}; available: {sorted(internals)}")
    return {k: internals[k] for k in which}


class Encoder(nnx.Module):
    """Embeddings, L stacked post-LN layers, optional pooler and task heads (``jattn.nn.heads``)."""

    def __init__(self, config: EncoderConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = Embeddings(config, rngs=rngs)
        self.layers = EncoderLayer(config, rngs=rngs, stack=(config.num_layers,))
        D = config.hidden_size
        heads = config.pruned.heads if config.pruned else config.num_heads  # the table's heads: never pruned
        self.relative_bias = (param(rngs, (config.relative_position_buckets, heads), "normal", STD)
                              if config.relative_position_buckets else None)
        self.relative_embeddings = relative_embeddings(config, rngs=rngs, std=STD)  # (2k, D) jattn.nn.positions
        # a LayerNorm on the last layer's output (pre-LN stacks: Xiong et al. 2020); the heads read its output
        self.final_ln = norm_module(config, D) if config.final_norm else None
        self.lm_head = LMHead(config, rngs=rngs) if config.causal else None  # next-token logits (jattn.nn.heads)
        self.pooler = Dense((D,), (D,), rngs=rngs, std=STD) if config.with_pooler else None
        self.mlm_head = MLMHead(config, rngs=rngs) if config.with_mlm_head else None
        if config.num_labels and config.classifier == "pooler" and not config.with_pooler:
            raise ValueError("a pooler classification head reads the pooler: set with_pooler=True with num_labels")
        self.classifier = ClassificationHead(config, rngs=rngs) if config.num_labels else None
        self.replaced_token_head = ReplacedTokenHead(config, rngs=rngs) if config.with_replaced_token_head else None
        self.deterministic = True  # evaluation mode; train() / eval() set it (``jattn.nn.layers.dropout_key``)

    def __call__(self, batch: dict, interventions: Interventions | None = None, *, dropout_rng=None,
                 compute_dtype=jnp.float32, layer_rows=None, layer_totals=None, internals="all", unroll=False,
                 heads=(), remat=False, layer_state=None):
        """Run the encoder; return (outputs, internals).

        batch: ``input_ids`` (b, n) int or ``inputs_embeds`` (b, n, E) float (the word embeddings,
        ``word_embeddings``: positions, token types and the LayerNorm are still added),
        ``attention_mask`` (b, n) {0,1}, optional ``token_type_ids`` (b, n). ``interventions``:
        see ``jattn.nn.interventions`` (None = none).
        ``dropout_rng``: in training mode (``train()``) the key dropout draws from, a key or an
        ``nnx.Rngs``; none in evaluation mode (``eval()``, the default). ``internals``: "all", None, or names from
        ``INTERNALS``; under ``jit`` the others are never written. ``heads``: names from
        ``HEADS``, the checkpoint's heads whose outputs to add (the lean forward pays for none of
        the (b, n, V) product unless asked). ``unroll``: the layers as
        straight-line code rather than a loop (``jattn.nn.engine.layer_loop``), for programs that
        pass over them several times or differentiate through them; ``remat``: a gradient keeps one
        layer's activations at a time, recomputing them (``layer_loop``; the gradient sweeps).

        Analyses that read a layer's internals while they are in cache, inside the scan, run on
        each chunk of the batch the layer is computed in (``config.chunk_rows``,
        ``jattn.nn.engine.chunk_count``; the whole batch on GPU/TPU), with that chunk's
        internals (e.g. ``weights`` (b', H, n, n)), the layer's parameter view
        (``EncoderLayer.view``) and ``take``, which cuts any other per-example array (b, ...)
        to the chunk's rows (b', ...): ``layer_rows(internals, view, take)`` returns
        per-example arrays (b', ...), written into ``outputs["layer_rows"]`` (L, b, ...) (e.g.
        Kobayashi et al.'s norm maps); ``layer_totals(internals, view, take)`` returns sums
        over the chunk's examples, added over the chunks into ``outputs["layer_totals"]``
        (L, ...) (the runner's methods). ``layer_state``: per-example arrays (b, ...) before the first
        layer, carried from layer to layer (a rollout's product so far): ``layer_totals(internals, view,
        take, state)`` then returns (sums, next state), ``outputs["layer_state"]`` the last (b, ...).

        outputs: ``last_hidden_state`` (b, n, D) (after the final LayerNorm, ``config.final_norm``),
        ``hidden_states`` (L+1, b, n, D) (the embeddings, each layer's output, the last one after the
        final LayerNorm as HF's),
        ``pooler_output`` (b, D) with a pooler, ``logits`` (b, C) with a classification head;
        asked by ``heads``: ``mlm_logits`` (b, n, V), ``replaced_token_logits`` (b, n).
        internals: each entry stacked (L, b, ...), e.g. ``weights`` (L, b, H, n, n): α, values,
        per-head context, attention output, the block input (``residual``), the vectors entering
        both LayerNorms (``pre_ln``, ``ffn_pre_ln``), the attention LayerNorm's output, the
        feed-forward activation act(W_1 h + b_1) (``ffn_activation`` (L, b, n, F)) and output
        before the residual (``ffn_output``).
        """
        iv = NONE if interventions is None else interventions
        dropout_rng = dropout_key(self, dropout_rng)
        r = split_rng(dropout_rng, 2)
        layer_rngs = None if dropout_rng is None else jax.random.split(r[1], self.config.num_layers)
        x0 = self.embeddings(batch, compute_dtype, r[0])  # (b, n, D)
        allowed = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, n)
        n = x0.shape[1]

        def written(view, ints, take):  # what a layer writes to the stacked result, rows (b', ...)
            rows = {} if layer_rows is None else {"layer_rows": layer_rows(ints, view, take)}
            return {**select(ints, internals), **rows}

        x, kept, totals, after = run_stack(self.layers, x0, allowed, iv, layer_rngs, chunk_rows(self.config.chunk_rows),
                                           written, layer_totals, lambda l: self.score_bias(l, n), unroll, remat,
                                           layer_state)
        hidden, last = kept.pop("hidden"), self.final(x)  # (L+1, b, n, D), (b, n, D); x: the last layer's output
        if self.final_ln is not None:  # HF's last hidden state is the final LayerNorm's output
            hidden = hidden.at[-1].set(last)  # (L+1, b, n, D)
        outputs = {"last_hidden_state": last, "hidden_states": hidden}
        if self.pooler is not None:
            outputs["pooler_output"] = self.pool(x)  # (b, D)
        if self.classifier is not None:  # its dropout: a stream independent of the layers'
            head_rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, self.config.num_layers)
            outputs["logits"] = self.head_logits(x, head_rng)  # (b, C)
        outputs.update(self.task_outputs(last, heads))
        if layer_rows is not None:
            outputs["layer_rows"] = kept.pop("layer_rows")  # (L, b, ...)
        if layer_totals is not None:
            outputs["layer_totals"] = totals  # (L, ...)
        if layer_state is not None:
            outputs["layer_state"] = after  # (b, ...) the state after the last layer
        return outputs, kept

    def classify(self, batch: dict, interventions: Interventions | None = None, *, compute_dtype=jnp.float32,
                 remat=False):
        """The classification head's logits (b, C) in evaluation mode, computed the cheap way: the
        head reads the [CLS] position alone, so layers 0..L−2 run in full and the last layer for the
        [CLS] query only (its keys and values still from every token) — 1/n of the last layer's
        queries and FFN. Equals ``self(batch, interventions)[0]["logits"]``; per-query gates of
        the last layer's other positions are unused there too (their gradient is exactly 0).
        ``remat``: as ``__call__``'s (``jattn.nn.engine.layer_loop``)."""
        if self.classifier is None:
            raise ValueError("classify needs a classification head (config.num_labels > 0)")
        iv = NONE if interventions is None else interventions
        x = self.embeddings(batch, compute_dtype, None)  # (b, n, D)
        allowed = batch["attention_mask"].astype(bool)[:, None, :]  # (b, 1, n)
        graphdef, stacked = nnx.split(self.layers)
        below, last = (lambda t: jax.tree.map(lambda a: a[:-1], t)), (lambda t: jax.tree.map(lambda a: a[-1], t))
        slices = iv.layer_slices()
        run = chunked(*x.shape[:2], chunk_rows(self.config.chunk_rows))
        L, n = self.config.num_layers, x.shape[1]

        def step(x, xs):
            state, layer_slices, l = xs
            y, _, _ = run(nnx.merge(graphdef, state), x, allowed, iv.for_layer(*layer_slices), None,
                          lambda y, ints, take: (y, {}), None, score_bias=self.score_bias(l, n))  # (b, n, D)
            return y, None

        xs = (below(stacked), below(slices), jnp.arange(L - 1))
        x, _ = layer_loop(step, x, xs, remat=remat)  # (b, n, D) the last layer's input
        cls = nnx.merge(graphdef, last(stacked)).cls_row(x, allowed, iv.for_layer(*last(slices)).first_query(),
                                                         self.score_bias(L - 1, n))
        return self.head_logits(cls)  # (b, C)

    def run_from(self, x: jax.Array, allowed: jax.Array, start, interventions: Interventions) -> jax.Array:
        """Layers start..L−1 on x (b, n, D), the input of layer ``start`` (an int, or traced), with
        ``interventions`` in layer ``start`` only and the layers' score bias -> the last layer's
        output (b, n, D), what ``head_logits`` and ``pool`` read (``final`` gives the last hidden
        state). The prefix reuse of the patching sweep: layers below ``start`` ran once."""
        graphdef, stacked = nnx.split(self.layers)
        n = x.shape[1]

        def layer(i, x, iv):
            return nnx.merge(graphdef, layer_slice(stacked, i))(x, allowed, iv, None,
                                                                               self.score_bias(i, n))[0]

        x = layer(start, x, interventions)  # (b, n, D)
        return jax.lax.fori_loop(start + 1, self.config.num_layers, lambda i, x: layer(i, x, NONE), x)

    def final(self, x: jax.Array) -> jax.Array:
        """The last hidden state of the last layer's output x (b, n, D): the final LayerNorm's
        output, or x itself without one (``config.final_norm``). Every head reads it."""
        return x if self.final_ln is None else self.final_ln(x)  # (b, n, D)

    def score_bias(self, layer, n: int) -> jax.Array | None:
        """Layer ``layer``'s (an int, or traced) additive score bias on n positions (H, n, n),
        float32 (``jattn.nn.relative``), or None without one. The table is indexed by the
        original heads; a pruned layer reads its kept heads' columns, a padding slot none (0).
        With rotary positions, a local window or a switched-off LayerNorm: ``LayerTerms``
        (``jattn.nn.layer_terms``), which the attention reads."""
        if (terms := layer_terms(self.config, layer, n)) is not None:
            return terms
        if self.config.disentangled is not None:  # content-dependent terms (jattn.nn.positions)
            return layer_scores(self.config, self.relative_embeddings, self.layers, layer, n)
        if self.relative_bias is None:
            return None
        table = self.relative_bias[...]  # (R, H)
        if self.config.pruned:
            kept = self.config.pruned.kept
            slots = self.config.num_heads
            index = np.array([list(k) + [0] * (slots - len(k)) for k in kept])  # (L, H') original head per slot
            real = np.array([[s < len(k) for s in range(slots)] for k in kept])  # (L, H')
            table = jnp.where(jnp.asarray(real)[layer], table[:, jnp.asarray(index)[layer]], 0.0)  # (R, H')
        return relative_position_bias(table, n, self.config.relative_position_max_distance)  # (H, n, n)

    def head_logits(self, hidden: jax.Array, rng=None) -> jax.Array:
        """The classification head on the last layer's output (b, n ≥ 1, D), through the final
        LayerNorm (``final``): BERT pools [CLS], RoBERTa reads h_<s> -> logits (b, C)."""
        pooled = self.config.classifier == "pooler"
        features = self.pool(hidden) if pooled else self.final(hidden[:, :1])[:, 0]  # (b, D)
        return self.classifier(features, rng)  # (b, C)

    def pool(self, hidden: jax.Array) -> jax.Array:
        """BERT pooler: tanh(W h_[CLS] + b) on the last layer's output (b, n, D), through the final
        LayerNorm (``final``) -> (b, D)."""
        act = jnp.tanh if self.config.pooler_activation == "tanh" else ACT[self.config.pooler_activation]
        return act(self.pooler(self.final(hidden[:, :1])[:, 0]))  # (b, D)

    def mlm_logits(self, hidden: jax.Array) -> jax.Array:
        """Masked-LM head (BERT ``cls.predictions`` / RoBERTa ``lm_head``), its decoder the word
        embeddings or its own (``config.tied_mlm_decoder``). hidden (b, n, D) -> logits (b, n, V)."""
        if self.mlm_head is None:
            raise ValueError("this checkpoint has no masked-LM head (config.with_mlm_head is False). Fix: load a "
                             "*ForMaskedLM checkpoint")
        return self.mlm_head(hidden, self.embeddings.word[...])  # (b, n, V)

    def task_outputs(self, hidden: jax.Array, heads) -> dict:
        """The outputs of the heads named in ``heads`` (``HEADS``) on the last hidden state (b, n, D)."""
        if unknown := [h for h in heads if h not in HEADS]:
            raise ValueError(f"unknown heads {unknown}; available: {HEADS}")
        present = {"mlm_logits": self.mlm_head, "replaced_token_logits": self.replaced_token_head,
                   "lm_logits": self.lm_head}
        if missing := [h for h in heads if present[h] is None]:
            raise ValueError(f"heads={tuple(heads)}: this checkpoint has no head for {missing} (config."
                             "with_mlm_head, config.with_replaced_token_head). Fix: leave them out of heads, or "
                             "load a checkpoint saved with that head")
        out = {"mlm_logits": self.mlm_logits(hidden)} if "mlm_logits" in heads else {}  # (b, n, V)
        if "replaced_token_logits" in heads:
            out["replaced_token_logits"] = self.replaced_token_head(hidden)  # (b, n)
        if "lm_logits" in heads:
            out["lm_logits"] = self.lm_head(hidden, self.embeddings.word[...])  # (b, n, V)
        return out

    def view(self) -> dict:
        """Every layer's parameter view, stacked (L, ...)."""
        return self.layers.view()


state.MODULES[EncoderConfig] = Encoder


def module(params, config) -> Encoder:
    """The module with ``params`` as its parameters (``jattn.nn.state.merge``)."""
    return state.merge(params, config)


def forward(params, config: EncoderConfig, batch: dict, interventions: Interventions | None = None, **kwargs):
    """The pure face: ``Encoder.__call__`` with the parameters as an argument; a ``dropout_rng``
    makes it a training forward; Explicit mesh axes run Auto (``jattn.nn.state.pure_call``: a
    ``layer_rows`` / ``layer_totals`` callback reads the arrays it needs from its arguments).
    Values are not checked (the models and the runner check them): an id outside [0, vocab_size)
    reads a valid row silently (JAX's indexing: ids ≥ V the last row, −V ≤ id < 0 wrap as NumPy's,
    −1 the last row, ids < −V the first) and
    an ``attention_mask`` value other than 0/1 counts as 1; ``jattn.nn.checked.checked(forward)``
    checks them (checkify, under ``jit`` and ``vmap``)."""
    return state.pure_call(params, config, batch, interventions, _batch_axis, **kwargs)


def _batch_axis(path) -> int | None:
    """The batch axis of ``forward``'s result at ``path``: 0 in the outputs (b, ...), 1 in the
    stacked ones (L, b, ...) and the internals; none in the per-layer totals (L, ...)."""
    if path[0].idx == 1 or path[1].key in ("hidden_states", "layer_rows"):
        return 1
    return None if path[1].key == "layer_totals" else 0


def classify(params, config: EncoderConfig, batch: dict, interventions: Interventions | None = None,
             remat: bool = False) -> jax.Array:
    """``Encoder.classify`` on ``params``: logits (b, C), the last layer on [CLS] only
    (``jattn.nn.state.pure_call``: Explicit mesh axes run Auto); ``remat`` as ``forward``'s."""
    return state.pure_call(params, config, batch, interventions, lambda path: 0, "classify", remat=remat)


def mlm_logits(params, config: EncoderConfig, hidden: jax.Array) -> jax.Array:
    """``Encoder.mlm_logits`` on ``params``. hidden (b, n, D) -> (b, n, V)."""
    return module(params, config).mlm_logits(hidden)


def word_embeddings(params, config: EncoderConfig, input_ids: jax.Array) -> jax.Array:
    """The word embeddings of ``input_ids`` (b, n) -> (b, n, E): what the batch key
    ``inputs_embeds`` replaces, so ``forward(.., {"inputs_embeds": word_embeddings(.., ids), ..})``
    equals the forward on ``ids``. Saliency is ``jax.grad`` with respect to it; an integrated-
    gradients baseline is e.g. the embeddings of [PAD] ids (Sundararajan et al. 2017)."""
    return module(params, config).embeddings.word[...][input_ids]  # (b, n, E)


def with_heads(config: EncoderConfig, params) -> EncoderConfig:
    """``config`` with the head fields the converted ``params`` (a nested dict of arrays) decide:
    pooler, masked-LM head and its untied decoder, classifier and its classes, replaced-token head."""
    mlm = params.get("mlm_head", {})
    labels = int(params["classifier"]["out"]["bias"].shape[0]) if "classifier" in params else 0
    return dataclasses.replace(config, with_pooler="pooler" in params, with_mlm_head="mlm_head" in params,
                               tied_mlm_decoder="decoder" not in mlm, num_labels=labels,
                               with_replaced_token_head="replaced_token_head" in params)
