"""Frozen model configurations, built from Hugging Face ``config.json`` dictionaries.

Configs are hashable so that they can be static arguments of ``jax.jit``: one compiled
forward per (config, padded shape).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jattn.nn.errors import ConfigError  # noqa: F401  (re-exported)
from jattn.nn.pruned import PrunedHeads  # noqa: F401  (re-exported)

__all__ = ["ConfigError", "EncoderConfig", "Seq2SeqConfig"]

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


@dataclasses.dataclass(frozen=True)
class DisentangledAttention:
    """Disentangled attention's position terms (He et al. 2021, DeBERTa, Eq. 4; ``jattn.nn.positions``)."""

    terms: tuple[str, ...]  # ("c2p", "p2c") or a part: content→position, position→content; (): none
    scale_factor: int  # scores / sqrt(d_h · scale_factor); DeBERTa: 1 + the number of position terms
    span: int  # k: 2k relative embeddings, shared by the layers; distances clamped into [−k, k)
    buckets: int = 0  # logarithmic buckets of the distance (``position_buckets``); 0: the distance itself
    max_position: int = 0  # the distance the log buckets reach (``max_relative_positions``)
    layer_norm: bool = False  # a LayerNorm on the relative embeddings (``norm_rel_ebd: layer_norm``)
    shared_projections: bool = False  # the layer's W_q, W_k project them (v3's ``share_att_key``)


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """A post-LayerNorm Transformer encoder with learned positions (Devlin et al. 2019).

    What differs between families is data set by each family's spec (``jattn.families``):
    how positions are numbered (``positions``) and which classification head reads which
    features (``classifier``).
    """

    model_type: str  # the Hugging Face model_type it was read from (names the family; never branched on)
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int  # head slots per layer in the module (a pruned model: the most any layer keeps)
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int  # token types (segments A/B); 0: none, token_type_ids are ignored
    layer_norm_eps: float
    pad_token_id: int
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    with_pooler: bool = False  # the checkpoint has BERT's pooler (set by the converter)
    with_mlm_head: bool = False  # the checkpoint has a masked-LM head (set by the converter)
    # the masked-LM head's output matrix is the word-embedding table (config.json tie_word_embeddings);
    # False: a decoder matrix (V, E) of its own (jattn.nn.heads.MLMHead; E the embedding width)
    tied_mlm_decoder: bool = True
    mlm_activation: str | None = None  # the masked-LM transform's nonlinearity; None: hidden_act
    # the checkpoint has a replaced-token-detection head, one logit per token (Clark et al. 2020; set by the converter)
    with_replaced_token_head: bool = False
    num_labels: int = 0  # classes of a sequence-classification head; 0: none (set by the converter)
    pruned: PrunedHeads | None = None  # physically pruned heads (config.json "pruned_heads"; jattn.sweeps.pruning)
    positions: str = "absolute"  # "absolute": 0..n-1; "after_padding": pad+1+count of real tokens, pad on padding;
    # "from_mask": count of real tokens before it, 0 on padding (a causal LM's, as HF generate; jattn.nn.embeddings)
    classifier: str = "pooler"  # "pooler": W·pooler(h_0) + b; "dense_tanh": W_o·tanh(W_d·h_0 + b_d) + b_o
    # ("dense_relu": W_o·relu(W_d·h_0 + b_d) + b_o; jattn.nn.heads.ClassificationHead)
    classifier_dropout: float | None = None  # the classification head's dropout rate; None: hidden_dropout
    # an additive relative-position score bias (jattn.nn.relative): a learned (buckets, H) table shared
    # by the layers, B[bucket(j − i), h] added to every layer's scores; 0 buckets: none
    relative_position_buckets: int = 0
    relative_position_max_distance: int = 128  # distances beyond it share the last bucket
    # where each block's LayerNorms sit: "post" LN(x + sublayer(x)) (Vaswani et al. 2017), "pre"
    # x + sublayer(LN(x)) (Xiong et al. 2020; jattn.nn.attention.SUBLAYERS)
    norm_position: str = "post"
    final_norm: bool = False  # a LayerNorm on the last layer's output, which the heads read (pre-LN stacks)
    # False: layer 0's attention reads its input as is, no LayerNorm (pre-LN stacks whose embeddings end in one)
    first_attention_norm: bool = True
    # rotary position embeddings on queries and keys (Su et al. 2021; jattn.nn.rotary): the base of the
    # angles in layers without a window, and in windowed layers (0: rotary_theta); 0: no rotary
    rotary_theta: float = 0.0
    local_rotary_theta: float = 0.0
    # per layer, the largest |i − j| a query i may attend to (a local attention window, keys beyond it
    # masked; jattn.nn.layer_terms); 0: the whole sequence. (): every layer global
    attention_radius: tuple[int, ...] = ()
    gated_ffn: bool = False  # the FFN's W_1 gives input u and gate g (2F): act(u) * g (Shazeer 2020, GLU variants)
    attention_bias: bool = True  # biases of the attention projections (False: none)
    ffn_bias: bool = True  # biases of the FFN's W_1, W_2 (False: none)
    norm_bias: bool = True  # the LayerNorms' β (False: none, γ only)
    head_bias: bool = True  # the masked-LM transform's / the classification head's dense bias (False: none)
    mlm_output_bias: bool = True  # the masked-LM logits' bias (V,) (False: none)
    # width E of the embedding tables; None: hidden_size. When E != D a learned projection E -> D
    # follows the embedding LayerNorm (Clark et al. 2020's small embeddings)
    embedding_size: int | None = None
    # token rows a layer runs on at once (strided chunks of the batch, jattn.nn.engine.chunk_count);
    # 0: the whole batch; None: the backend's default (jattn.nn.engine.chunk_rows). Results are equal.
    chunk_rows: int | None = None
    # content-dependent relative-position score terms (jattn.nn.positions, DeBERTa); None: none
    disentangled: DisentangledAttention | None = None
    position_embeddings: bool = True  # a learned absolute position table added to the word embeddings
    mask_embeddings: bool = False  # the embedding output multiplied by attention_mask (padding rows 0)
    pooler_activation: str = "tanh"  # the pooler's nonlinearity, tanh(W h_0 + b) (BERT); or a name in ACT
    # a causal language model (Radford et al. 2019): query i attends to keys j <= i only, in every layer and
    # every path that runs one (jattn.nn.layer_terms); its head is next-token logits (jattn.nn.heads.LMHead)
    causal: bool = False
    tied_lm_head: bool = True  # the LM head's matrix is the word-embedding table (False: a (V, D) matrix of its own)
    # key/value heads H_kv of grouped-query attention (Ainslie et al. 2023): query head h reads key/value head
    # h // (H / H_kv) (``kv_head``); 0: H (multi-head attention)
    num_kv_heads: int = 0
    attention_head_dim: int = 0  # d_h when it is not D / H (Llama's ``head_dim``); 0: D / H
    attention_out_bias: bool | None = None  # the output projection's bias; None: as attention_bias (Qwen2: none)
    norm: str = "layer"  # every normaliser: "layer" LayerNorm, "rms" RMSNorm (jattn.nn.layers.NORMS)
    norm_offset: float = 0.0  # RMSNorm's scale is offset + γ (Gemma: 1)
    embedding_norm: bool = True  # a normaliser on the embeddings (False: none, GPT-2's and Llama's)
    embedding_scale: float = 1.0  # the word embeddings multiplied by it (Gemma: sqrt(D))
    bos_token_id: int | None = None  # a causal LM's first token of a prompt; eos: where its generation stops
    eos_token_id: int | None = None
    # Gemma 2's (Gemma Team 2024): a norm on each sublayer's output before the residual (jattn.nn.attention);
    # scores c·tanh(s / c) (attention_softcap c) and logits likewise (logit_softcap); 0: none
    sublayer_post_norm: bool = False
    attention_softcap: float = 0.0
    logit_softcap: float = 0.0
    score_scale: float = 0.0  # the scores' scale, q·k · score_scale (query_pre_attn_scalar^−½); 0: 1/sqrt(d_h)

    @property
    def head_dim(self) -> int:
        if self.attention_head_dim:
            return self.attention_head_dim
        return self.hidden_size // (self.pruned.heads if self.pruned else self.num_heads)

    @property
    def kv_heads(self) -> int:
        """Key/value heads per layer: ``num_kv_heads``, or H (multi-head attention)."""
        return self.num_kv_heads or self.num_heads

    @property
    def kv_head(self) -> tuple[int, ...]:
        """The key/value head each query head reads (grouped-query attention: h // (H / H_kv))."""
        return tuple(h // (self.num_heads // self.kv_heads) for h in range(self.num_heads))

    @property
    def max_length(self) -> int:
        """Longest sequence (special tokens included) the position table can encode."""
        if self.positions == "after_padding":
            return self.max_position_embeddings - self.pad_token_id - 1
        return self.max_position_embeddings


@dataclasses.dataclass(frozen=True)
class Seq2SeqConfig:
    """An encoder–decoder Transformer (Vaswani et al. 2017), post- or pre-LayerNorm.

    What differs between families is data set by each family's spec (``jattn.families``): the
    position scheme (``positions``: sinusoid tables or a learned table per side), a LayerNorm on
    the embeddings, where the blocks' LayerNorms sit and a final LayerNorm on each stack's output
    (``norm_position``, ``final_norm``), shared or separate embedding tables, a tied or separate
    output projection, a ``final_logits_bias``, and the decoder mask HF applies when none is given.
    """

    model_type: str  # the Hugging Face model_type it was read from (names the family; never branched on)
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int  # head slots per layer in the module (a pruned model: the most any layer keeps)
    decoder_heads: int  # the same, shared by decoder self- and cross-attention
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    activation: str
    max_position_embeddings: int
    scale_embedding: bool  # multiply token embeddings by sqrt(d_model)
    shared_embeddings: bool  # one table for source and target tokens
    tie_output: bool  # output projection = target embedding table
    positions: str  # "vaswani" | "tensor2tensor" (sinusoids) | "learned" (a table per side) | "none", jattn.nn.seq2seq
    pad_token_id: int
    eos_token_id: int
    decoder_start_token_id: int
    forced_eos_token_id: int | None = None  # forced as the last token at max_length (HF)
    forced_bos_token_id: int | None = None  # forced as the first generated token (HF)
    bad_token_ids: tuple[int, ...] = ()  # never generated (HF bad_words_ids of length 1)
    layer_norm_eps: float = 1e-5
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    # LayerDrop rates (encoder, decoder) (Fan et al. 2020): HF skips layers only in training, which
    # jattn's training forward does not implement (it refuses a non-zero rate there); evaluation is unchanged
    layerdrop: tuple[float, float] = (0.0, 0.0)
    # physically pruned heads of (encoder, decoder, cross) (config.json "jattn_pruned_heads"; jattn.sweeps.pruning)
    pruned: tuple[PrunedHeads, PrunedHeads, PrunedHeads] | None = None
    final_logits_bias: bool = False  # a learned bias added to the output logits
    decoder_mask: str = "pad"  # the default decoder mask: "pad" masks pad tokens, "all" attends everywhere
    position_offset: int = 0  # "learned" positions: the table row of position 0 (rows before it unused)
    embedding_ln: bool = False  # a LayerNorm on token + position embedding, one per side (before dropout)
    # where each block's LayerNorms sit: "post" LN(x + sublayer(x)) (Vaswani et al. 2017), "pre"
    # x + sublayer(LN(x)) (Xiong et al. 2020; jattn.nn.attention.SUBLAYERS)
    norm_position: str = "post"
    # a LayerNorm on each stack's last layer output (encoder and decoder; pre-LN stacks, Liu et al. 2020)
    final_norm: bool = False
    norm: str = "layer"  # every normaliser: "layer" LayerNorm, "rms" RMSNorm (jattn.nn.layers.NORMS)
    attention_head_dim: int = 0  # d_h when not D / H (T5's d_kv: H·d_h may differ from D); 0: D / H
    score_scale: float = 0.0  # scores q·k · score_scale; 0: q·k / sqrt(d_h) (T5: 1, unscaled)
    gated_ffn: bool = False  # W_1 gives an input u and a gate g (2, F): act(u) * g (Shazeer 2020)
    linear_bias: bool = True  # biases of the attention and FFN projections (False: none, T5)
    # a relative-position score bias per stack, B[bucket(j − i), h] added in every layer (Raffel et al. 2020,
    # §2.1; jattn.nn.relative; the decoder's buckets one-sided); 0 buckets: none
    relative_attention_num_buckets: int = 0
    relative_attention_max_distance: int = 128  # distances beyond it share the last bucket
    output_scale: float = 1.0  # the decoder's output times it before the output projection (T5 v1.0: D^-½)

    @property
    def encoder_head_dim(self) -> int:
        return self.attention_head_dim or self.d_model // (self.pruned[0].heads if self.pruned else self.encoder_heads)

    @property
    def decoder_head_dim(self) -> int:
        return self.attention_head_dim or self.d_model // (self.pruned[1].heads if self.pruned else self.decoder_heads)

    @property
    def vocab_size(self) -> int:
        """The largest vocabulary (a tokenizer may not exceed it)."""
        return max(self.src_vocab_size, self.tgt_vocab_size)

    @property
    def max_length(self) -> int:
        """Longest source or target sequence the position table covers."""
        return self.max_position_embeddings

    @property
    def position_rows(self) -> int:
        """Rows of a learned position table: positions 0..P-1 at rows offset..offset+P-1."""
        return self.max_position_embeddings + self.position_offset

    @staticmethod
    def read_pruned(hf: dict) -> tuple[PrunedHeads, PrunedHeads, PrunedHeads]:
        """config.json ``jattn_pruned_heads`` {"encoder"|"decoder"|"cross": {layer: [removed
        heads]}} (a missing type lost no head) -> (encoder, decoder, cross)."""
        given = hf["jattn_pruned_heads"]
        kinds = ("encoder", "decoder", "cross")
        if not isinstance(given, dict) or set(given) - set(kinds):
            raise ConfigError(f"config.json jattn_pruned_heads must map {kinds} to {{layer: [removed heads]}}, "
                              f"got {given!r:.200}")
        shapes = {"encoder": (hf["encoder_layers"], hf["encoder_attention_heads"]),
                  "decoder": (hf["decoder_layers"], hf["decoder_attention_heads"]),
                  "cross": (hf["decoder_layers"], hf["decoder_attention_heads"])}
        return tuple(PrunedHeads.from_removed(given.get(k, {}), *shapes[k], f"config.json jattn_pruned_heads.{k}")
                     for k in kinds)


def encoder_config(hf: dict[str, Any], **scheme) -> EncoderConfig:
    """An ``EncoderConfig`` from a Hugging Face ``config.json`` dict, refusing what jattn does not
    implement; ``scheme`` holds the fields a family's spec decides (``positions``, ``classifier``)."""
    model_type = hf.get("model_type")
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings")
    if missing := [k for k in required if k not in hf]:
        raise ConfigError(f"config.json lacks {', '.join(missing)}: not a complete {model_type} config")
    act = hf.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ConfigError(f"unsupported hidden_act {act!r}; supported: {', '.join(ACTIVATIONS)}")
    pos = hf.get("position_embedding_type", "absolute")
    if pos != "absolute":
        raise ConfigError(f"position_embedding_type={pos!r} is not supported, only 'absolute': the relative "
                          "position scores of Shaw et al. 2018 / Huang et al. 2020 ('relative_key', "
                          "'relative_key_query') are gone from transformers ≥ 5, jattn's oracle, which runs such a "
                          "checkpoint with absolute positions and drops its distance_embedding weights; jattn "
                          "refuses it rather than compute either. Fix: load a checkpoint trained with absolute "
                          "positions")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ConfigError(f"decoder-style {model_type} configs (is_decoder / add_cross_attention) are not supported")
    if hf["hidden_size"] % hf["num_attention_heads"]:
        raise ConfigError(f"config.json hidden_size={hf['hidden_size']} must be divisible by "
                          f"num_attention_heads={hf['num_attention_heads']}")
    pruned = None
    if hf.get("pruned_heads"):
        pruned = PrunedHeads.from_removed(hf["pruned_heads"], hf["num_hidden_layers"],
                                          hf["num_attention_heads"], "config.json pruned_heads")
    return EncoderConfig(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=pruned.slots if pruned else hf["num_attention_heads"],
        pruned=pruned,
        intermediate_size=hf["intermediate_size"],
        hidden_act=act,
        max_position_embeddings=hf["max_position_embeddings"],
        type_vocab_size=hf.get("type_vocab_size", 2),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        pad_token_id=hf.get("pad_token_id", 0) if hf.get("pad_token_id") is not None else 0,
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        tied_mlm_decoder=bool(hf.get("tie_word_embeddings", True)),
        **scheme,
    )


def seq2seq_config(hf: dict[str, Any], *, default_activation: str, vocab_sizes: tuple[int, int],
                   **scheme) -> Seq2SeqConfig:
    """A ``Seq2SeqConfig`` from a Hugging Face ``config.json`` dict, refusing what jattn does not
    implement; a family's spec passes its defaults, its (source, target) vocabulary sizes and the
    fields it decides (``positions``, ``position_offset``, ``embedding_ln``, ``norm_position``,
    ``final_norm``, ``shared_embeddings``, ``tie_output``, ``scale_embedding``, ``final_logits_bias``,
    ``decoder_mask``). (``Seq2SeqModel`` applies a folder's ``generation_config.json`` on top.)"""
    act = hf.get("activation_function", default_activation)
    if act not in ACTIVATIONS:
        raise ConfigError(f"unsupported activation_function {act!r}; supported: {', '.join(ACTIVATIONS)}")
    # Fields of older configs (transformers 3/4) that name the block layout: they must describe
    # what the family's scheme computes.
    learned, pre = scheme.get("positions") == "learned", scheme.get("norm_position", "post") == "pre"
    if scheme.get("norm_position", "post") not in ("post", "pre"):
        raise ValueError(f"norm_position must be 'post' or 'pre', got {scheme['norm_position']!r}")
    layout = {"normalize_before": pre, "add_final_layer_norm": bool(scheme.get("final_norm", False)),
              "normalize_embedding": bool(scheme.get("embedding_ln", False)), "static_position_embeddings": not learned}
    if learned:
        layout["extra_pos_embeddings"] = scheme.get("position_offset", 0)
    for key, ok in layout.items():
        if hf.get(key, ok) != ok:
            blocks = (f"{'pre' if pre else 'post'}-LayerNorm blocks, "
                      f"{'a' if layout['add_final_layer_norm'] else 'no'} final LayerNorm")
            raise ConfigError(f"config.json {key}={hf[key]!r} is not supported for {hf.get('model_type')}: jattn "
                              f"runs this family with {key}={ok!r} ({blocks}). Fix: check that the checkpoint is "
                              f"a {hf.get('model_type')} model, then set {key} to {ok!r} or remove it")
    if hf["d_model"] % 2 and scheme.get("positions") in ("vaswani", "tensor2tensor"):
        raise ConfigError(f"d_model={hf['d_model']} must be even for sinusoidal positions")
    for side in ("encoder", "decoder"):
        if hf["d_model"] % hf[f"{side}_attention_heads"] and not scheme.get("attention_head_dim"):
            raise ConfigError(f"d_model must be divisible by {side}_attention_heads")
    bad = hf.get("bad_words_ids") or []
    if any(len(w) != 1 for w in bad):
        raise ConfigError("only single-token bad_words_ids are supported in generation")
    eos = hf.get("eos_token_id")
    forced, forced_bos = hf.get("forced_eos_token_id"), hf.get("forced_bos_token_id")
    if any(isinstance(x, list) for x in (eos, forced, forced_bos)):
        raise ConfigError("a list of eos_token_id / forced_eos_token_id / forced_bos_token_id is not supported; "
                          "use one id")
    start = hf.get("decoder_start_token_id")
    start = hf.get("bos_token_id") if start is None else start  # HF generate's fallback
    if start is None:
        raise ConfigError(f"config.json has neither decoder_start_token_id nor bos_token_id, so a "
                          f"{hf.get('model_type')} decoder has no first token. Fix: set decoder_start_token_id "
                          "in config.json")
    heads = {"encoder": hf["encoder_attention_heads"], "decoder": hf["decoder_attention_heads"]}
    pruned = Seq2SeqConfig.read_pruned(hf) if hf.get("jattn_pruned_heads") else None
    if pruned:
        heads = {"encoder": pruned[0].slots, "decoder": max(pruned[1].slots, pruned[2].slots)}
    return Seq2SeqConfig(
        model_type=hf.get("model_type"), src_vocab_size=vocab_sizes[0], tgt_vocab_size=vocab_sizes[1],
        d_model=hf["d_model"], encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"],
        encoder_heads=heads["encoder"], decoder_heads=heads["decoder"], pruned=pruned,
        encoder_ffn_dim=hf["encoder_ffn_dim"], decoder_ffn_dim=hf["decoder_ffn_dim"], activation=act,
        max_position_embeddings=hf["max_position_embeddings"], pad_token_id=hf["pad_token_id"], eos_token_id=eos,
        decoder_start_token_id=start, forced_eos_token_id=forced, forced_bos_token_id=forced_bos,
        bad_token_ids=tuple(sorted(w[0] for w in bad)),
        dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        layerdrop=(float(hf.get("encoder_layerdrop") or 0.0), float(hf.get("decoder_layerdrop") or 0.0)), **scheme,
    )
