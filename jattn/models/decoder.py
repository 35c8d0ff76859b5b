"""``DecoderModel``: a causal language model (GPT-2, Llama, Qwen2) as jattn holds it — the encoder
stack (``jattn.nn.encoder.Encoder``) with ``config.causal`` (every layer masks keys after the
query) and a next-token head (``forward(batch).logits``, HF's ``logits``), so every analysis and sweep of
the encoder runs on it unchanged; plus ``generate`` (greedy and beam search with a key/value
cache, ``jattn.nn.lm_decode``). Its attention type is named "encoder" (the one self-attention
stack), as every per-type result of an encoder names it. The [CLS]-reading parts of an encoder
(a classification head, ``classify``) do not apply to a causal LM."""

from __future__ import annotations

import numpy as np

from jattn.io import validate
from jattn.models.encoder import EncoderModel
from jattn.models.seq2seq import Generation
from jattn.nn.interventions import Interventions


class DecoderModel(EncoderModel):
    """A causal LM: ``forward(batch)`` gives next-token ``logits`` (b, n, V), as HF's causal LMs do, and every
    internal per query head (grouped-query attention: ``config.kv_head`` says which key/value head
    each query head reads); ``generate`` continues prompts as Hugging Face ``generate`` does."""

    def __repr__(self) -> str:
        c = self.config
        return (f"DecoderModel({c.model_type}, L={c.num_layers}, H={c.num_heads}, H_kv={c.kv_heads}, "
                f"D={c.hidden_size}, source={self.source!r})")

    def classify(self, batch, interventions: Interventions | None = None):
        raise ValueError(f"{self.config.model_type} is a causal language model: it has no [CLS] and no "
                         "classification head, so classify does not apply. Fix: read forward(batch).logits, "
                         "the next-token logits (b, n, V)")

    def forward(self, batch, interventions: Interventions | None = None, *, heads=("lm_logits",), **options):
        """``EncoderModel.forward`` with the next-token head by default: ``.logits`` (b, n, V) is
        P(x_{i+1} | x_{≤i}) before the softmax at every position i, equal to HF's causal LM's
        ``logits``. ``heads=()``: the logits are not computed (an analysis of the attention alone
        saves the (b, n, V) product); ``options``: ``EncoderModel.forward``'s (internals, compute_dtype, ...)."""
        return super().forward(batch, interventions, heads=heads, **options)

    def generate(self, input_ids, attention_mask=None, *, max_new_tokens: int | None = None,
                 max_length: int | None = None, num_beams: int = 1, length_penalty: float = 1.0, interventions=None,
                 return_attentions: bool = False) -> Generation:
        """Continue the prompts ``input_ids`` (b, s) (left-padded, ``attention_mask`` 0 on the padding:
        Hugging Face's convention for decoder-only generation) by up to ``max_new_tokens`` tokens (HF's
        ``max_length`` = s + ``max_new_tokens`` counts the prompt; give one of them; default: 20, fewer
        where the model's positions end sooner), greedily (``num_beams`` 1) or by beam search, equal to
        HF ``generate(do_sample=False)``'s ids. A ``Generation``: ``sequences`` (b, s + t) numpy, the
        prompt then the generated tokens, rows that stopped at EOS padded with ``pad_token_id``, and
        their ``attention_mask`` (b, s + t) (0 on the prompts' padding and after each row's EOS).
        ``interventions``: per-head (L, H) head gates / disabled heads during generation.
        ``return_attentions``: also ``attentions``, the weights of a teacher-forced pass over the
        returned ids under that mask, (L, b, H, s + t, s + t) (the generated tokens' rows are what the
        generation computed)."""
        from jattn.nn.lm_decode import generate

        num_beams = validate.number("num_beams", num_beams, low=1, integer=True)
        length_penalty = validate.number("length_penalty", length_penalty)
        ids, mask = prompts(input_ids, attention_mask)
        self.check_batch({"input_ids": ids, "attention_mask": mask})
        s, positions = ids.shape[1], self.config.max_length
        if max_new_tokens is not None and max_length is not None:
            raise ValueError(f"max_new_tokens={max_new_tokens} and max_length={max_length} both given: they say the "
                             f"same (max_length = the prompt's {s} tokens + max_new_tokens). Fix: give one of them")
        if max_length is not None:
            fix = f"pass max_length above the prompt's {s} tokens, or max_new_tokens"
            max_new_tokens = validate.number("max_length", max_length, low=s + 1, integer=True, fix=fix) - s
        elif max_new_tokens is None:
            max_new_tokens = max(1, min(20, positions - s))
        max_new_tokens = validate.number("max_new_tokens", max_new_tokens, low=1, integer=True)
        if s + max_new_tokens > positions:
            raise ValueError(f"a prompt of {s} tokens plus max_new_tokens={max_new_tokens} exceeds the "
                             f"model's {positions} positions. Fix: fewer new tokens or a shorter prompt")
        iv = self.check_interventions(interventions)
        out = generate(self.params, self.config, ids, mask, max_new_tokens=max_new_tokens, num_beams=num_beams,
                       length_penalty=length_penalty, interventions=iv)  # (b, s + t)
        full = np.concatenate([mask, generated_mask(self.config, out[:, s:])], axis=1).astype(np.int32)  # (b, s + t)
        if not return_attentions:
            return Generation(out, attention_mask=full)
        result = self.forward({"input_ids": out, "attention_mask": full}, iv, internals=("weights",), heads=())
        return Generation(out, attention_mask=full, attentions=result.attentions)


def prompts(input_ids, attention_mask) -> tuple[np.ndarray, np.ndarray]:
    """``generate``'s prompts (b ≥ 1, s ≥ 1) and their mask (ones when None) as numpy arrays, or an
    error saying what is wrong with them (their values are ``check_batch``'s)."""
    ids = np.asarray(input_ids)
    if ids.ndim == 3 and np.issubdtype(ids.dtype, np.floating):
        raise ValueError(f"input_ids is a float {ids.shape} array (embeddings?): generate continues token ids "
                         "(batch, length). Fix: pass the prompts' token ids, model.tokenizer(texts)['input_ids']")
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be token ids (batch, length), got shape {ids.shape}")
    if ids.shape[0] == 0:
        raise ValueError(f"input_ids holds no prompts (shape {ids.shape}). Fix: give at least one")
    if ids.shape[1] == 0:
        raise ValueError(f"the prompts are empty (input_ids shape {ids.shape}). Fix: give each at least one token, "
                         "e.g. the BOS token (model.config.bos_token_id)")
    mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask)
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}. Fix: one mask value per "
                         "token (1 real, 0 padding)")
    return ids, mask


def generated_mask(config, new) -> np.ndarray:
    """1 on the generated tokens (b, t) up to and including each row's first EOS, 0 on the padding after."""
    if config.eos_token_id is None:
        return np.ones_like(new, np.int32)
    hit = new == config.eos_token_id  # (b, t)
    return (np.cumsum(hit, axis=1) - hit == 0).astype(np.int32)  # (b, t)

