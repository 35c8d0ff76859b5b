"""The parity checks every encoder family's tests run against Hugging Face PyTorch (the oracle):
a random HF model saved weights-only, loaded with ``jattn.load(folder, tokenizer=False)``; the
last hidden state, every hidden state and attention weight, the pooler; head gates per head, per
example and per token (HF: forward pre-hooks on the output projection, ``hf_head_gates``); heads
disabled as Kovaleva et al. do it; the [CLS]-only ``classify`` path, the disabling sweep's layer
suffix and a pruned model (gates = the keep mask), all on padded sentence pairs (DeBERTa's real query rows
alone: ``rows``). Also the random checkpoints the family tests share (tests/families/conformance_table.py)."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

import jattn
from jattn import Interventions
from hf_head_gates import disabled, gated
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms


def save_random(hf, folder: Path, seed: int = 0) -> Path:
    """Save the HF model ``hf`` with random LayerNorm parameters and biases (so that every tensor
    matters), weights only (``save_pretrained``: no tokenizer files)."""
    import torch

    torch.manual_seed(seed)
    D = hf.config.hidden_size
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 1:
                p.normal_(0, 0.2)
                if p.shape[0] == D:
                    p.add_(1.0)
    hf.save_pretrained(folder)
    return Path(folder)


def new_hf(config_class: str, model_class: str, fields: dict, seed: int = 0):
    """A new Hugging Face ``model_class`` of ``config_class(**fields)`` (transformers' class names),
    its weights drawn after ``torch.manual_seed(seed)``."""
    import torch
    import transformers

    torch.manual_seed(seed)
    return getattr(transformers, model_class)(getattr(transformers, config_class)(**fields))


def load_pair(folder: Path, head: str = "base"):
    """(jattn model, HF oracle in eval mode with eager attention) of a saved folder."""
    from tiny_encoders import hf_model

    return jattn.load(folder, tokenizer=False, use_cache=False), hf_model(folder, head)


def pair_batch(config, lengths, seed: int = 0, types: bool = True) -> dict:
    """Padded random sentence pairs: [CLS]-like first id, the second half of each row segment B
    (token type 1 where the model has token types), padding with the config's pad id."""
    rng = np.random.default_rng(seed)
    b, n = len(lengths), max(lengths)
    pad = config.pad_token_id
    ids = rng.integers(5, config.vocab_size, size=(b, n)).astype(np.int32)
    ids[ids == pad] = pad + 7  # no pad id among the real tokens
    mask = (np.arange(n)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, pad).astype(np.int32)
    tt = np.zeros((b, n), np.int32)
    if types:
        for i, length in enumerate(lengths):
            tt[i, length // 2: length] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}


def hf_inputs(batch: dict, types: bool) -> dict:
    return batch if types else {k: v for k, v in batch.items() if k != "token_type_ids"}


def rows(x, batch: dict, axis: int, real: bool):
    """``x``, or with ``real`` its padding query rows (along ``axis``, the query axis) set to 0: HF masks
    DeBERTa's attention by m_i·m_j, so that a padding query attends uniformly to every key, padding included,
    where jattn's padding rows attend to the real keys as in every other family (real rows read no padding)."""
    if not real:
        return x
    m = np.asarray(batch["attention_mask"], bool)  # (b, n)
    shape = [1] * np.ndim(x)
    shape[0], shape[axis] = m.shape
    return np.where(m.reshape(shape), np.asarray(x, np.float64), 0.0)


def check_outputs(model, oracle, batch: dict, types: bool = True, real_rows: bool = False) -> None:
    """Last and every hidden state, every layer's attention weights, the pooler (``real_rows``: ``rows``)."""
    n = batch["input_ids"].shape[1]
    ours, ref = model.forward(batch), hf_run(oracle, hf_inputs(batch, types))
    terms = model_terms(model.config, n)  # jattn vs PyTorch: other float32 kernels
    r = lambda x, axis=1: rows(x, batch, axis, real_rows)  # noqa: E731
    assert_close(r(ours.last_hidden_state), r(ref.last_hidden_state), terms=terms)
    assert len(ref.attentions) == model.config.num_layers
    for layer, att in enumerate(ref.attentions):
        assert_close(r(ours.attentions[layer], 2), r(att, 2), terms=terms, err_msg=f"attention of layer {layer}")
    for layer, h in enumerate(ref.hidden_states):
        assert_close(r(ours.hidden_states[layer]), r(h), terms=terms, err_msg=f"hidden state {layer}")
    if getattr(ref, "pooler_output", None) is not None:
        assert_close(ours.pooler_output, ref.pooler_output, terms=terms)


def gate_cases(config, batch: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Head gates per head (L, H), per example (L, b, H) and per token (L, b, H, q), in [0, 1.5)."""
    rng = np.random.default_rng(seed)
    L, H = config.num_layers, config.num_heads
    b, n = batch["input_ids"].shape
    return {"head": rng.uniform(0, 1.5, (L, H)).astype(np.float32),
            "example": rng.uniform(0, 1.5, (L, b, H)).astype(np.float32),
            "token": rng.uniform(0, 1.5, (L, b, H, n)).astype(np.float32)}


def check_gates(model, oracle, batch: dict, types: bool = True, real_rows: bool = False) -> None:
    """Every kind of head gate against HF with the same gates applied by hooks (``real_rows``: ``rows``)."""
    import torch

    terms = model_terms(model.config, batch["input_ids"].shape[1])
    for kind, g in gate_cases(model.config, batch).items():
        ours = model.forward(batch, Interventions(head_gates=jnp.asarray(g)), internals=("weights",))
        with gated(oracle, {"encoder": torch.tensor(g)}):
            ref = hf_run(oracle, hf_inputs(batch, types))
        r = lambda x, axis=1: rows(x, batch, axis, real_rows)  # noqa: E731
        assert_close(r(ours.last_hidden_state), r(ref.last_hidden_state), terms=terms, err_msg=f"gates per {kind}")
        for layer, att in enumerate(ref.attentions):  # α below a gated layer depends on the gates above
            assert_close(r(ours.attentions[layer], 2), r(att, 2), terms=terms,
                         err_msg=f"gates per {kind}, layer {layer}")


def check_disabled(model, oracle, batch: dict, types: bool = True, seed: int = 1, real_rows: bool = False) -> None:
    """Disabled heads (uniform attention over the real keys) against HF's value/output hooks (``real_rows``:
    ``rows``)."""
    rng = np.random.default_rng(seed)
    heads = rng.random((model.config.num_layers, model.config.num_heads)) < 0.5
    heads[0, 0] = True
    ours = model.forward(batch, Interventions(disabled_heads=jnp.asarray(heads)), internals=None)
    with disabled(oracle, heads, getattr(model.config, "attention_radius", None) or ()):  # ModernBERT's windows
        ref = hf_run(oracle, hf_inputs(batch, types))
    assert_close(rows(ours.last_hidden_state, batch, 1, real_rows), rows(ref.last_hidden_state, batch, 1, real_rows),
                 terms=model_terms(model.config, batch["input_ids"].shape[1]))


def check_classifier(model, oracle, batch: dict, types: bool = True) -> None:
    """A converted classification head: HF's logits, ``classify`` (the last layer on [CLS] only)
    equal to the forward's, and the disabling sweep's per-layer suffix (``suffix_logits``) equal
    to the full forward with that head disabled."""
    from jattn.sweeps.disable import suffix_logits

    n = batch["input_ids"].shape[1]
    terms = model_terms(model.config, n)
    logits = model.forward(batch, internals=None).logits
    assert_close(logits, hf_run(oracle, hf_inputs(batch, types)).logits, terms=terms)
    assert_close(model.classify(batch), logits, terms=terms)
    inputs = model.check_batch(batch)
    hidden = model.forward(inputs, internals=("hidden_states",)).hidden_states  # (L+1, b, n, D)
    allowed = jnp.asarray(inputs["attention_mask"], bool)[:, None, :]
    L, H = model.config.num_layers, model.config.num_heads
    for start in range(L):
        mask = np.zeros(H, bool)
        mask[start % H] = True
        full = np.zeros((L, H), bool)
        full[start] = mask
        want = model.forward(batch, Interventions(disabled_heads=jnp.asarray(full)), internals=None).logits
        got = suffix_logits(model.params, model.config, hidden[start], allowed, start, jnp.asarray(mask), "uniform")
        assert_close(got, want, terms=terms, err_msg=f"suffix from layer {start}")


def check_pruned(model, batch: dict) -> None:
    """A physically pruned model equals the model with the dropped heads gated to 0."""
    from jattn.sweeps.pruning import remove_heads

    L, H = model.config.num_layers, model.config.num_heads
    keep = np.ones((L, H), bool)
    keep[0, 1:] = False  # one head left in layer 0
    keep[-1, 0] = False
    masked = model.forward(batch, Interventions(head_gates=jnp.asarray(keep, jnp.float32)), internals=("weights",))
    out = remove_heads(model, keep).forward(batch, internals=("weights",))
    terms = model_terms(model.config, batch["input_ids"].shape[1])
    assert_close(out.last_hidden_state, masked.last_hidden_state, terms=terms)
    for layer in range(L):
        slots = np.flatnonzero(keep[layer])
        assert_close(out.attentions[layer][:, : len(slots)], masked.attentions[layer][:, slots], terms=terms)
