"""The parity checks every causal-LM family's tests run against Hugging Face PyTorch (the oracle,
``AutoModelForCausalLM`` with eager attention): a random HF model saved weights-only, loaded with
``jattn.load(folder, tokenizer=False)``; on a right-padded batch the next-token logits, every hidden
state and attention weight (real query rows), head gates per head / example / token (HF: pre-hooks
on the output projection, ``hf_head_gates.gated``), heads disabled (uniform over the keys the query
may see: real and not after it), and greedy and beam ``generate`` ids on left-padded prompts."""

from __future__ import annotations

import contextlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import jattn
from jattn import Interventions
from encoder_family_parity import gate_cases
from hf_head_gates import encoder_layers, gated, value_and_output
from tolerance import assert_close, model_terms


GPT2 = dict(vocab_size=80, n_embd=32, n_layer=3, n_head=4, n_positions=64, n_inner=48, bos_token_id=0, eos_token_id=1,
            pad_token_id=2)  # the tiny GPT-2 of the conformance table (tests/families) and the tests that run one


def save_gpt2(folder, seed: int = 0, **fields) -> Path:
    """A random GPT-2 (``GPT2LMHeadModel`` of ``GPT2`` and ``fields``) saved weights-only to ``folder``."""
    from encoder_family_parity import new_hf, save_random

    return save_random(new_hf("GPT2Config", "GPT2LMHeadModel", {**GPT2, **fields}, seed), folder, seed)


def load_lm_pair(folder: Path):
    """(jattn model, HF causal LM oracle in eval mode with eager attention) of a saved folder."""
    from transformers import AutoModelForCausalLM

    return (jattn.load(folder, tokenizer=False, use_cache=False),
            AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval())


def lm_batch(config, lengths, seed: int = 0) -> dict:
    """Random ids, right-padded with the config's pad id after each row's length."""
    rng = np.random.default_rng(seed)
    b, n = len(lengths), max(lengths)
    ids = rng.integers(3, config.vocab_size, size=(b, n)).astype(np.int32)
    mask = (np.arange(n)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    return {"input_ids": np.where(mask == 1, ids, config.pad_token_id).astype(np.int32), "attention_mask": mask}


def hf_lm_run(oracle, batch: dict):
    import torch

    with torch.no_grad():
        return oracle(**{k: torch.tensor(batch[k], dtype=torch.long) for k in ("input_ids", "attention_mask")},
                      output_attentions=True, output_hidden_states=True)


def _real(a, mask, axis_b: int = 0, axis_q: int = 1):
    """``a`` with its padding query rows set to 0 (the rows compared: real tokens)."""
    a = np.asarray(a, np.float64)
    shape = [1] * a.ndim
    shape[axis_b], shape[axis_q] = mask.shape
    return a * mask.reshape(shape)


def check_lm_outputs(model, oracle, batch: dict) -> None:
    """Next-token logits, every hidden state and every layer's attention weights, real rows."""
    n, mask = batch["input_ids"].shape[1], batch["attention_mask"]
    ours, ref = model.forward(batch), hf_lm_run(oracle, batch)
    terms = model_terms(model.config, n)
    assert_close(_real(ours.logits, mask), _real(ref.logits, mask), terms=terms, err_msg="logits")
    assert len(ref.attentions) == model.config.num_layers and len(ref.hidden_states) == model.config.num_layers + 1
    for layer, att in enumerate(ref.attentions):  # (b, H, q, k): real query rows
        assert_close(_real(ours.attentions[layer], mask, 0, 2), _real(att, mask, 0, 2), terms=terms,
                     err_msg=f"attention of layer {layer}")
    for layer, h in enumerate(ref.hidden_states):
        assert_close(_real(ours.hidden_states[layer], mask), _real(h, mask), terms=terms, err_msg=f"hidden {layer}")


def check_lm_gates(model, oracle, batch: dict) -> None:
    """Head gates per head, example and token against HF with the same gates applied by hooks."""
    import torch

    mask, terms = batch["attention_mask"], model_terms(model.config, batch["input_ids"].shape[1])
    for kind, g in gate_cases(model.config, batch).items():
        ours = model.forward(batch, Interventions(head_gates=jnp.asarray(g)), internals=None)
        with gated(oracle, {"encoder": torch.tensor(g)}):
            ref = hf_lm_run(oracle, batch)
        assert_close(_real(ours.logits, mask), _real(ref.logits, mask), terms=terms, err_msg=f"gates per {kind}")


@contextlib.contextmanager
def causal_disabled(oracle, heads, values_slice=lambda out: out, radius=()):
    """HF causal LM with the heads in ``heads`` (L, H) disabled as Kovaleva et al. (2019) disable them:
    uniform over the keys query i may see (real, j ≤ i), the mean of their values put in place of the
    head's slice of the output projection's input. ``values_slice`` takes the values (b, n, H_kv·d_h)
    out of the value module's output; key/value head h // (H / H_kv) serves query head h. ``radius``
    (L,): a local layer's window, keys with i − j ≤ radius[l] (0: all)."""
    import torch

    seen, handles = {}, []
    base = getattr(oracle, oracle.base_model_prefix)
    handles.append(base.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("mask", kw["attention_mask"].float()), with_kwargs=True))
    for l, layer in enumerate(encoder_layers(oracle)):
        value, output = value_and_output(layer)
        off = torch.as_tensor(np.asarray(heads[l]))

        def keep(m, a, out, l=l):
            seen[l] = values_slice(out)  # (b, n, H_kv·d_h)

        def uniform(m, args, l=l, off=off):
            x = args[0]  # (b, q, H·d_h)
            b, q, D = x.shape
            H = off.shape[0]
            d_h = D // H
            v = seen[l].view(b, q, -1, d_h)  # (b, k, H_kv, d_h)
            v = v.repeat_interleave(H // v.shape[2], dim=2)  # (b, k, H, d_h)
            m = seen["mask"][:, None, :] * torch.tril(torch.ones(q, q))[None]  # (b, q, k)
            if radius and radius[l]:
                m = m * torch.triu(torch.ones(q, q), -radius[l])[None]  # (b, q, k) i − j ≤ radius
            mean = torch.einsum("bqk,bkhd->bqhd", m, v) / m.sum(-1)[..., None, None].clamp(min=1)  # (b, q, H, d_h)
            x = torch.where(off[None, None, :, None], mean, x.view(b, q, H, d_h))
            return (x.reshape(b, q, D),)

        handles += [value.register_forward_hook(keep), output.register_forward_pre_hook(uniform)]
    try:
        yield oracle
    finally:
        for h in handles:
            h.remove()


def check_lm_disabled(model, oracle, batch: dict, values_slice=lambda out: out, seed: int = 1) -> None:
    """Disabled heads (``causal_disabled``) against HF, the logits of the real rows."""
    heads = np.random.default_rng(seed).random((model.config.num_layers, model.config.num_heads)) < 0.5
    heads[0, 0] = True
    ours = model.forward(batch, Interventions(disabled_heads=jnp.asarray(heads)), internals=None)
    with causal_disabled(oracle, heads, values_slice, model.config.attention_radius):
        ref = hf_lm_run(oracle, batch)
    mask = batch["attention_mask"]
    assert_close(_real(ours.logits, mask), _real(ref.logits, mask),
                 terms=model_terms(model.config, batch["input_ids"].shape[1]))


def left_padded(config, lengths, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Prompts left-padded with the config's pad id (HF's convention for decoder-only generation)."""
    rng = np.random.default_rng(seed)
    b, n = len(lengths), max(lengths)
    ids = rng.integers(3, config.vocab_size, size=(b, n)).astype(np.int32)
    mask = (np.arange(n)[None] >= n - np.asarray(lengths)[:, None]).astype(np.int32)
    return np.where(mask == 1, ids, config.pad_token_id).astype(np.int32), mask


def _hf_generate(model, oracle, ids, mask, num_beams, max_new_tokens, eos):
    import torch

    with torch.no_grad():
        return oracle.generate(input_ids=torch.tensor(ids, dtype=torch.long),
                               attention_mask=torch.tensor(mask, dtype=torch.long), do_sample=False,
                               num_beams=num_beams, max_new_tokens=max_new_tokens, min_new_tokens=0,
                               pad_token_id=model.config.pad_token_id, eos_token_id=eos).numpy()


def check_generate(model, oracle, lengths, num_beams: int, max_new_tokens: int = 8) -> None:
    """``model.generate`` ids equal to HF ``generate`` on left-padded prompts; then again with the EOS
    id set to a token the first run generated in row 0, so that rows stop early (padded after EOS)."""
    import dataclasses

    from jattn.models.decoder import DecoderModel

    ids, mask = left_padded(model.config, lengths)
    want = _hf_generate(model, oracle, ids, mask, num_beams, max_new_tokens, model.config.eos_token_id)
    got = model.generate(ids, mask, max_new_tokens=max_new_tokens, num_beams=num_beams).sequences
    np.testing.assert_array_equal(got, want)
    eos = int(want[0, ids.shape[1] + 2])
    stopping = DecoderModel(dataclasses.replace(model.config, eos_token_id=eos), model.params, model.tokenizer)
    want = _hf_generate(model, oracle, ids, mask, num_beams, max_new_tokens, eos)
    assert num_beams > 1 or (want[:, ids.shape[1]:] == eos).any(), "the EOS run should stop a row"
    np.testing.assert_array_equal(
        stopping.generate(ids, mask, max_new_tokens=max_new_tokens, num_beams=num_beams).sequences, want
    )
