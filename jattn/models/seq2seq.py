"""``Seq2SeqModel``: a converted encoder–decoder checkpoint (or one trained here) as its NNX module
(``.module``) with its tokenizer, a jitted teacher-forced forward returning the attention
internals, and jitted decoding."""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jattn.io import validate
from jattn.nn.config import Seq2SeqConfig
from jattn.models.encoder import check_dtype, int_array, internals_arg
from jattn.models.base import ModuleModel, NoTokenizer, as_int32, check_traced, concrete
from jattn.nn import decode, seq2seq
from jattn.nn.engine import unrolled


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Seq2SeqResult:
    """A teacher-forced forward's outputs; a pytree (``jax.tree.map``, ``jax.device_get``, returned
    from ``jax.jit``)."""

    logits: jax.Array  # (b, t, V)
    encoder_last_hidden_state: jax.Array  # (b, s, D)
    decoder_last_hidden_state: jax.Array  # (b, t, D)
    internals: dict  # {"encoder", "decoder", "cross"}: attention internals stacked (L, b, ...)

    @property
    def encoder_attentions(self) -> jax.Array:  # (L_enc, b, H, s, s)
        return self.internals["encoder"]["weights"]

    @property
    def decoder_attentions(self) -> jax.Array:  # (L_dec, b, H, t, t)
        return self.internals["decoder"]["weights"]

    @property
    def cross_attentions(self) -> jax.Array:  # (L_dec, b, H, t, s)
        return self.internals["cross"]["weights"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Generation:
    """What ``generate`` returns, for a causal LM (``DecoderModel``) and a translation model alike, with
    the names of HF ``generate(return_dict_in_generate=True)``'s output; a pytree whose fields that do
    not apply (or were not asked for) are None. With ``return_attentions=True``, the attention weights
    the ids were generated with, from a teacher-forced pass over them: a causal LM's ``attentions``
    over ``sequences`` (row t, t ≥ s - 1, the step that chose ``sequences[:, t + 1]``); a translation
    model's maps, row t of a decoder or cross map the step that chose ``sequences[:, t + 1]``. Rows
    after a sequence's EOS attend only up to it, where HF's steps also attend to the padding fed after it."""

    sequences: np.ndarray | jax.Array  # (b, n) HF's layout: a causal LM's prompt, or a start token, then the new ids
    attention_mask: np.ndarray | jax.Array | None = None  # (b, n) causal LM: 1 on real prompt and generated tokens
    decoder_attention_mask: np.ndarray | jax.Array | None = None  # (b, n - 1) translation: 1 up to each row's EOS
    attentions: jax.Array | None = None  # (L, b, H, n, n) a causal LM's
    encoder_attentions: jax.Array | None = None  # (L_enc, b, H, s, s)
    decoder_attentions: jax.Array | None = None  # (L_dec, b, H, n - 1, n - 1)
    cross_attentions: jax.Array | None = None  # (L_dec, b, H, n - 1, s)


@partial(jax.jit, static_argnames=("config", "compute_dtype", "internals"))
def _forward(params, config, batch, interventions, compute_dtype, internals):
    """``seq2seq.forward`` on stacked parameters (the layer loops) or on ``layer_views`` (unrolled);
    on a mesh with Explicit axes its results are sharded over the batch (``jattn.nn.state.pure_call``)."""
    params, unroll = unrolled(params)
    return seq2seq.forward(params, config, batch, interventions, compute_dtype=compute_dtype,
                           internals=internals, unroll=unroll)


def _generation_overrides(source: str) -> dict:
    """bad_words_ids / forced BOS and EOS from the folder's ``generation_config.json``, if any."""
    path = Path(source) / "generation_config.json" if source else None
    if path is None or not path.is_file():
        return {}
    gen = json.loads(path.read_text())
    out = {}
    if gen.get("bad_words_ids"):
        out["bad_token_ids"] = tuple(sorted(w[0] for w in gen["bad_words_ids"] if len(w) == 1))
    for key in ("forced_bos_token_id", "forced_eos_token_id"):
        if key in gen:
            out[key] = gen[key]
    return out


NORMALIZATION_KEY = "text_normalization"  # in tokenizer_config.json: {"unicode": "NFKC", "lowercase": bool}


def text_normalization(source: str) -> dict | None:
    """The text normalisation a model folder records (``record_normalization``), or None."""
    path = Path(source) / "tokenizer_config.json" if source else None
    if path is None or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get(NORMALIZATION_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    if value is not None and (not isinstance(value, dict) or value.get("unicode", "NFKC") != "NFKC"):
        raise ValueError(f"{path}: {NORMALIZATION_KEY} {value!r} is not understood (expected "
                         '{"unicode": "NFKC", "lowercase": true|false}). Fix: correct or remove the entry')
    return value


def record_normalization(folder, lowercase: bool) -> None:
    """Write the text normalisation a model was trained with (``jattn.io.parallel.normalize``:
    NFKC, collapsed blanks, ``lowercase``) into the folder's tokenizer_config.json, so that
    ``translate`` and the corpus runner apply it to new text."""
    path = Path(folder) / "tokenizer_config.json"
    doc = json.loads(path.read_text()) if path.is_file() else {}
    doc[NORMALIZATION_KEY] = {"unicode": "NFKC", "lowercase": bool(lowercase)}
    path.write_text(json.dumps(doc))


def language_codes(tokenizer) -> dict[int, str]:
    """The language codes a multilingual tokenizer lists, id -> token: mBART's and M2M-100's
    ``lang_code_to_id``, else NLLB's extra special tokens; {} for a tokenizer without them."""
    if tokenizer is None or isinstance(tokenizer, NoTokenizer):
        return {}
    ids = list((getattr(tokenizer, "lang_code_to_id", None) or {}).values())
    if not ids:
        extra = getattr(tokenizer, "extra_special_tokens", None) or []
        ids = tokenizer.convert_tokens_to_ids(list(extra.values() if isinstance(extra, dict) else extra))
    return {int(i): tokenizer.convert_ids_to_tokens(int(i)) for i in ids if i != tokenizer.unk_token_id}


class Seq2SeqModel(ModuleModel):
    """An encoder–decoder translation model: ``.module`` (the ``jattn.nn.seq2seq.Seq2Seq``),
    ``.config``, ``.params`` (its ``nnx.Param`` state), ``.tokenizer``, ``.forward`` (teacher
    forcing, internals of the three attention types), ``.generate`` and ``.translate``."""

    def __init__(self, config: Seq2SeqConfig, params, tokenizer=None, source: str = ""):
        super().__init__(dataclasses.replace(config, **_generation_overrides(source)), params)
        self.tokenizer, self.source = tokenizer, source
        self.text_normalization = text_normalization(source)

    def prepare_texts(self, texts) -> list[str]:
        """Texts as the model was trained on them: the normalisation its folder records
        (``text_normalization``: NFKC and collapsed blanks, lowercasing), else unchanged."""
        from jattn.io.parallel import normalize

        norm = self.text_normalization
        if not norm:
            return list(texts)
        return [normalize(t, bool(norm.get("lowercase"))) for t in texts]

    def __repr__(self) -> str:
        c = self.config
        return (f"Seq2SeqModel({c.model_type}, L={c.encoder_layers}+{c.decoder_layers}, "
                f"H={c.encoder_heads}/{c.decoder_heads}, D={c.d_model}, source={self.source!r})")

    def _check_ids(self, name, ids, mask, vocab):
        ids = int_array(ids, name, "a translation batch")
        if ids.ndim != 2:
            raise ValueError(f"{name} must be (batch, length), got shape {ids.shape}")
        if ids.shape[0] == 0:
            raise ValueError(f"{name} holds no sentences (shape {ids.shape}). Fix: give at least one")
        if ids.shape[1] == 0:
            raise ValueError(f"{name} holds empty sentences (shape {ids.shape}). Fix: give each at least one token")
        if ids.shape[1] > self.config.max_length:
            raise ValueError(f"{name} has {ids.shape[1]} tokens but the model has {self.config.max_length} "
                             "positions; truncate the input (tokenizer(..., truncation=True, max_length=...))")
        if concrete(ids) and ((v := np.asarray(ids)).min() < 0 or v.max() >= vocab):  # on the host (also in a trace)
            raise ValueError(f"{name} has ids outside the vocabulary [0, {vocab}): was it made with "
                             "another model's tokenizer?")
        mask = np.ones(ids.shape, np.int32) if mask is None else int_array(mask, f"{name} attention_mask")
        if mask.shape != ids.shape:
            raise ValueError(f"the attention mask of {name} has shape {mask.shape}, {name} has {ids.shape}")
        if concrete(mask) and not np.isin(mask, (0, 1)).all():
            raise ValueError(f"the attention mask of {name} must hold 0 and 1 only, got {np.unique(mask)[:6].tolist()}")
        if concrete(mask) and not np.asarray(mask).any(axis=1).all():
            raise ValueError(f"{name} has an empty sentence (an all-zero attention-mask row); remove it")
        return as_int32(ids), as_int32(mask)

    @property
    def head_shapes(self) -> dict[str, tuple[int, int]]:
        c = self.config
        return {"encoder": (c.encoder_layers, c.encoder_heads), "decoder": (c.decoder_layers, c.decoder_heads),
                "cross": (c.decoder_layers, c.decoder_heads)}

    def tokenize_examples(self, pairs: list) -> dict:
        """(source, target) text pairs -> a teacher-forced batch (decoder input: start + target[:-1]),
        the texts normalised as the model was trained (``prepare_texts``)."""
        from jattn.runner.batcher import pad_rows

        if any(not (isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(s, str) for s in p))
               for p in pairs):
            raise ValueError("a translation model takes (source, target) string pairs, or a batch dict "
                             "(input_ids, attention_mask, decoder_input_ids)")
        c, tok = self.config, self.tokenizer
        src = tok(self.prepare_texts([s for s, _ in pairs]))["input_ids"]
        tgt = tok(text_target=self.prepare_texts([t for _, t in pairs]))["input_ids"]
        b, s, t = len(pairs), max(map(len, src)), max(map(len, tgt))
        ids, mask = pad_rows(src, b, s, c.pad_token_id)  # (b, s)
        _, dec_mask = pad_rows(tgt, b, t, c.pad_token_id)  # (b, t)
        dec, _ = pad_rows([y[:-1] for y in tgt], b, t, c.pad_token_id, offset=1)  # (b, t) start + target[:-1]
        dec[:, 0] = c.decoder_start_token_id
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask}

    def check_batch(self, batch) -> dict:
        """Validate a dict of (b, s) source and (b, t) target arrays; return the forward's input.
        Shapes and dtypes are always checked, values (vocabulary, masks) where they are concrete:
        not inside ``jax.jit``, ``grad`` or ``vmap``. Jax arrays stay jax arrays, sharded as they are."""
        if isinstance(batch, (str, list, tuple)):
            raise ValueError("forward takes a dict of token-id arrays (input_ids, attention_mask, "
                             "decoder_input_ids), not text. Fix: tokenize with model.tokenizer(src, text_target=tgt)")
        batch = dict(batch)
        for key in ("input_ids", "attention_mask", "decoder_input_ids"):
            if key not in batch:
                raise ValueError(f"a batch needs {key}; have {sorted(batch)}")
        ids, mask = self._check_ids("input_ids", batch["input_ids"], batch["attention_mask"],
                                    self.config.src_vocab_size)
        dec_mask = batch.get("decoder_attention_mask")
        if dec_mask is None:
            dec_mask = seq2seq.default_decoder_mask(self.config, int_array(batch["decoder_input_ids"],
                                                                           "decoder_input_ids", "a translation batch"))
        dec, dec_mask = self._check_ids("decoder_input_ids", batch["decoder_input_ids"], dec_mask,
                                        self.config.tgt_vocab_size)
        if dec.shape[0] != ids.shape[0]:
            raise ValueError(f"decoder_input_ids has {dec.shape[0]} rows, input_ids has {ids.shape[0]}")
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask}

    def forward(self, batch, interventions=None, *, compute_dtype=jnp.float32, internals="all") -> Seq2SeqResult:
        """Teacher-forced forward; one compile per padded shape. ``interventions``:
        {"encoder"|"decoder"|"cross": jattn.Interventions} (missing = none). ``compute_dtype``:
        float32 (default) or bfloat16 / float16 for the products and activations, the softmax kept
        in float32 (``docs/GUIDE.md``, Precision)."""
        iv = check_traced(lambda given: seq2seq.check_interventions(self.config, given), interventions)
        inputs = self.check_batch(batch)
        self.check_placement(inputs)
        (b, s), t, c = inputs["input_ids"].shape, inputs["decoder_input_ids"].shape[1], self.config
        for kind, (L, H, q, k) in {"encoder": (c.encoder_layers, c.encoder_heads, s, s),
                                   "decoder": (c.decoder_layers, c.decoder_heads, t, t),
                                   "cross": (c.decoder_layers, c.decoder_heads, t, s)}.items():
            validate.interventions(iv.get(kind), f"interventions[{kind!r}]", L, H, b, q, k)
        outputs, kept = _forward(self.forward_params(), self.config, inputs, iv, check_dtype(compute_dtype),
                                 internals_arg(internals))
        return Seq2SeqResult(outputs["logits"], outputs["encoder_last_hidden_state"],
                             outputs["decoder_last_hidden_state"], kept)

    def norm_maps(self, batch, residual: bool) -> dict:
        """``jattn.norms`` for this family: {kind: arrays} (Kobayashi et al. 2020/2021)."""
        from jattn.analyses.norms import seq2seq_norms

        return seq2seq_norms(self.params, self.config, self.check_batch(batch), residual)

    def attribution_maps(self, batch) -> dict:
        """``jattn.attributions`` for this family: ALTI+ (Ferrando et al. 2022b) per attention type
        (``jattn.analyses.context_mixing.alti_plus_maps``), on device."""
        from jattn.analyses.context_mixing import seq2seq_alti_plus

        return seq2seq_alti_plus(self.params, self.config, self.check_batch(batch))

    def generate(self, input_ids, attention_mask=None, *, max_new_tokens: int | None = None,
                 max_length: int | None = None, num_beams: int = 1, length_penalty: float = 1.0, interventions=None,
                 return_attentions: bool = False, forced_bos_token_id: int | None = None) -> Generation:
        """Greedy (num_beams=1) or beam search, equal to HF ``generate(do_sample=False)``: a
        ``Generation`` whose ``sequences`` (b, n) are HF's layout, the decoder start token then up to
        ``max_new_tokens`` generated ids (HF's ``max_length`` = ``max_new_tokens`` + 1 counts the start
        token; give one of them; default: up to min(128, the model's positions) in all), a numpy
        array (under ``jax.jit`` / ``vmap``: untrimmed (b, max_length), ``jattn.nn.decode.generate``),
        and ``decoder_attention_mask`` (b, n - 1), ``decode.generated_mask`` of ``sequences[:, :-1]``.
        ``interventions``: per attention type, per-head (L, H) arrays only.
        ``forced_bos_token_id``: the first generated token in place of the config's, e.g. a
        multilingual model's target language code (``tokenizer.convert_tokens_to_ids("fra_Latn")``),
        as HF ``generate(forced_bos_token_id=...)``.

        ``return_attentions``: also the attention weights the ids were generated with, of a
        teacher-forced forward over ``sequences[:, :-1]`` under ``decoder_attention_mask`` (the start
        token kept, the padding after each row's EOS masked); for greedy search, rows up to each EOS
        equal HF ``generate(output_attentions=True)``'s steps."""
        if max_new_tokens is not None and max_length is not None:
            raise ValueError(f"max_new_tokens={max_new_tokens} and max_length={max_length} both given: they say the "
                             "same (max_length = max_new_tokens + 1, the decoder start token). Fix: give one of them")
        if max_new_tokens is not None:
            max_length = validate.number("max_new_tokens", max_new_tokens, low=1, integer=True) + 1
        max_length = min(128, self.config.max_length) if max_length is None else max_length
        num_beams = validate.number("num_beams", num_beams, low=1, integer=True)
        max_length = validate.number("max_length", max_length, low=2, integer=True)
        length_penalty = validate.number("length_penalty", length_penalty)
        if max_length > self.config.max_length:
            raise ValueError(f"max_length={max_length} (the start token and {max_length - 1} new tokens) exceeds the "
                             f"model's {self.config.max_length} positions. Fix: max_new_tokens="
                             f"{self.config.max_length - 1} or fewer")
        if forced_bos_token_id is not None:
            forced_bos_token_id = self.check_language_code(forced_bos_token_id)
        if np.ndim(input_ids) == 3:
            raise ValueError(
                f"input_ids has shape {np.shape(input_ids)} (embeddings?): generate translates token "
                "ids (batch, length). Fix: pass the sources' token ids, model.tokenizer(texts)['input_ids']"
            )
        ids, mask = self._check_ids("input_ids", input_ids, attention_mask, self.config.src_vocab_size)
        self.check_placement({"input_ids": ids, "attention_mask": mask})
        for kind, one in (interventions or {}).items() if isinstance(interventions, dict) else ():
            for field in ("head_gates", "weights_delta"):
                if getattr(one, field, None) is not None:
                    value = getattr(one, field)  # finite; the shapes decode accepts are checked there
                    validate.array(f"interventions[{kind!r}].{field}", value,
                                   tuple((f"axis {i}", None) for i in range(np.ndim(value))))
        iv = check_traced(lambda given: seq2seq.check_interventions(self.config, given), interventions)
        seqs = decode.generate(self.params, self.config, ids, mask, num_beams=num_beams, max_length=max_length,
                               length_penalty=length_penalty, interventions=iv,
                               forced_bos_token_id=forced_bos_token_id)  # (b, n)
        dec = seqs[:, :-1]  # (b, n - 1) the tokens fed: row t's attention chose seqs[:, t + 1]
        dec_mask = decode.generated_mask(self.config, dec)  # (b, n - 1)
        if not return_attentions:
            return Generation(seqs, decoder_attention_mask=dec_mask)
        forced = self.forward({"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
                               "decoder_attention_mask": dec_mask}, iv, internals=("weights",))
        return Generation(seqs, decoder_attention_mask=dec_mask, encoder_attentions=forced.encoder_attentions,
                          decoder_attentions=forced.decoder_attentions, cross_attentions=forced.cross_attentions)

    def check_language_code(self, token_id) -> int:
        """``forced_bos_token_id`` as an int, or an error: a non-integer, the tokenizer's unknown
        token (what ``convert_tokens_to_ids`` gives a mistyped code), or, where the tokenizer lists
        language codes (``language_codes``), an id that is none of them."""
        token_id = validate.number("forced_bos_token_id", token_id, low=0, integer=True)
        tok, codes = self.tokenizer, language_codes(self.tokenizer)
        example = f", e.g. {sorted(codes.values())[:3]}" if codes else ""
        unk = None if tok is None or isinstance(tok, NoTokenizer) else tok.unk_token_id
        if token_id == unk:
            raise ValueError(f"forced_bos_token_id={token_id} is the tokenizer's unknown token {tok.unk_token!r} "
                             f"(convert_tokens_to_ids gives it for a code it does not know). Fix: the id of a "
                             f"language code of the tokenizer{example}")
        if codes and token_id not in codes:
            raise ValueError(f"forced_bos_token_id={token_id} ({tok.convert_ids_to_tokens(token_id)!r}) is not a "
                             f"language code of the tokenizer. Fix: the id of one of its {len(codes)} codes{example} "
                             "(tokenizer.convert_tokens_to_ids(code))")
        return token_id

    def translate(self, texts, num_beams: int = 4, max_length: int | None = None, batch_size: int = 64,
                  length_penalty: float = 1.0, truncate: bool = False,
                  forced_bos_token_id: int | None = None) -> list[str]:
        """Translate strings with the model's tokenizer, after the text normalisation the model
        was trained with (``prepare_texts``); batches are padded to multiples of 8 so that few
        shapes compile. A source longer than the model's positions is an error unless
        ``truncate`` (then it is cut to them). ``forced_bos_token_id``: the target language code of
        a multilingual model (``generate``'s); the source language is the tokenizer's (``src_lang``)."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer; pass token ids to generate() instead")
        if isinstance(texts, str):
            raise ValueError("translate() takes a list of strings; wrap a single sentence in a list")
        texts = list(texts)
        validate.number("batch_size", batch_size, low=1, integer=True)
        validate.number("num_beams", num_beams, low=1, integer=True)
        validate.number("length_penalty", length_penalty)
        if forced_bos_token_id is not None:
            self.check_language_code(forced_bos_token_id)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError("translate() needs non-empty sentences")
        for i, t in enumerate(texts):
            validate.visible(t, f"sentence {i}")
        texts = self.prepare_texts(texts)
        limit = self.config.max_length
        if not truncate:
            lengths = [len(x) for x in self.tokenizer(texts)["input_ids"]]
            if long := [i for i, n in enumerate(lengths) if n > limit]:
                raise validate.BadArgument("texts", f"sentence {long[0]} ({lengths[long[0]]} tokens; {len(long)} "
                                           "such)", f"at most the model's {limit} source positions",
                                           "split the long sentences, or pass truncate=True to cut them")
        out = []
        for i in range(0, len(texts), batch_size):
            chunk = texts[i:i + batch_size]
            enc = self.tokenizer(chunk, padding=True, truncation=True, max_length=limit, return_tensors="np")
            ids, mask = enc["input_ids"], enc["attention_mask"]
            s = min(-(-ids.shape[1] // 8) * 8, limit)
            rows = -(-len(chunk) // 8) * 8
            pad_ids = np.full((rows, s), self.config.pad_token_id, ids.dtype)  # (rows, s)
            pad_mask = np.zeros((rows, s), mask.dtype)  # (rows, s)
            pad_ids[:, : ids.shape[1]] = ids[0]  # filler rows repeat sentence 0 (same stopping time)
            pad_mask[:, : ids.shape[1]] = mask[0]
            pad_ids[: len(chunk), : ids.shape[1]] = ids
            pad_mask[: len(chunk), : ids.shape[1]] = mask
            gen = self.generate(pad_ids, pad_mask, num_beams=num_beams, max_length=max_length,
                                length_penalty=length_penalty, forced_bos_token_id=forced_bos_token_id)
            out += self.tokenizer.batch_decode(gen.sequences[: len(chunk)], skip_special_tokens=True)
        return out
