"""The functional contract (``tests/test_contract.py``) on every registered family: for a tiny
random configuration of each (its Hugging Face config class with small sizes, read by the
family's spec; parameters from jattn's own initialisation, so no checkpoint is needed), on a
padded batch, the forward under ``jit`` equals the eager forward, ``vmap`` over examples equals a
loop (by default on one family per forward code path, ``FORWARD_PATHS``), and every analysis kernel
of the family's shape (norms, attributions, value zeroing, the gate gradient, disabling, patching:
``test_contract.KERNELS``) has finite gradients with respect to the parameters (by default on one
family per code path, ``GRADIENT_PATHS``; all families with ``--runslow``). A family registered
without an entry here fails ``test_every_family_is_covered``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jattn.families as families
from jattn.nn import state
from test_contract import KERNELS, compare_trees, weighted_sum
from tolerance import model_terms

ENCODER = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
               max_position_embeddings=40)
SEQ2SEQ = dict(vocab_size=60, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
               decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=40,
               pad_token_id=1, eos_token_id=2, bos_token_id=0, decoder_start_token_id=2)
ROBERTA = dict(ENCODER, pad_token_id=1, type_vocab_size=1)
# model_type -> the keyword arguments of its Hugging Face config class (``AutoConfig.for_model``)
CONFIGS = {
    "bert": ENCODER,
    "roberta": ROBERTA,
    "roberta-prelayernorm": ROBERTA,
    "xlm-roberta": ROBERTA,
    "electra": dict(ENCODER, embedding_size=8),
    "albert": dict(ENCODER, embedding_size=8),
    "mpnet": dict(ROBERTA, relative_attention_num_buckets=32),
    "distilbert": dict(vocab_size=60, dim=16, n_layers=2, n_heads=2, hidden_dim=24, max_position_embeddings=40),
    "deberta-v2": dict(ENCODER, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"],
                       type_vocab_size=0),
    "modernbert": dict(ENCODER, num_hidden_layers=3, local_attention=4, global_attn_every_n_layers=2, pad_token_id=0,
                       bos_token_id=0, eos_token_id=0, cls_token_id=0, sep_token_id=0),
    "gpt2": dict(vocab_size=60, n_embd=16, n_layer=2, n_head=2, n_inner=24, n_positions=40, bos_token_id=0,
                 eos_token_id=0),
    "llama": dict(ENCODER, num_key_value_heads=1, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "qwen2": dict(ENCODER, num_key_value_heads=1, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "gemma2": dict(ENCODER, num_key_value_heads=1, head_dim=4, sliding_window=3, bos_token_id=0, eos_token_id=0,
                   pad_token_id=0),
    "bart": SEQ2SEQ,
    "mbart": SEQ2SEQ,
    "m2m_100": SEQ2SEQ,
    "t5": dict(vocab_size=60, d_model=16, d_kv=6, num_heads=2, d_ff=24, num_layers=2, num_decoder_layers=2,
               relative_attention_num_buckets=8, relative_attention_max_distance=6, decoder_start_token_id=0),
    "mt5": dict(vocab_size=60, d_model=16, d_kv=6, num_heads=2, d_ff=24, num_layers=2, num_decoder_layers=2,
                feed_forward_proj="gated-gelu", relative_attention_num_buckets=8, relative_attention_max_distance=6,
                tie_word_embeddings=False),
    "marian": dict(SEQ2SEQ, decoder_vocab_size=60, pad_token_id=59, decoder_start_token_id=59),
    "fsmt": dict({k: v for k, v in SEQ2SEQ.items() if k != "vocab_size"}, langs=["en", "de"], src_vocab_size=60,
                 tgt_vocab_size=60),
}
LENGTHS = (7, 3, 5)


def test_every_family_is_covered():
    assert set(families.names()) <= set(CONFIGS), f"add a tiny config for {set(families.names()) - set(CONFIGS)}"


def tiny(model_type: str):
    """(params, config, padded inputs) of a random ``model_type`` model."""
    from transformers import AutoConfig

    config = families.get(model_type).config_from_hf(AutoConfig.for_model(model_type, **CONFIGS[model_type]).to_dict())
    module = state.MODULES[type(config)](config, rngs=nnx.Rngs(0))
    params = nnx.state(module, nnx.Param)
    rng = np.random.default_rng(0)
    n, pad = max(LENGTHS), config.pad_token_id
    mask = (np.arange(n)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)  # (b, n)
    ids = np.where(mask == 1, rng.integers(3, config.vocab_size - 2, mask.shape), pad).astype(np.int32)
    ids[ids == pad] = pad + 1 if pad < 3 else 3
    ids = np.where(mask == 1, ids, pad)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if hasattr(config, "d_model"):
        t = mask[:, ::-1].copy()  # other lengths on the target side
        inputs.update(decoder_input_ids=np.where(t == 1, ids, pad), decoder_attention_mask=t)
        inputs["decoder_input_ids"][:, 0], inputs["decoder_attention_mask"][:, 0] = config.decoder_start_token_id, 1
    else:
        inputs["token_type_ids"] = np.zeros_like(ids)
    return params, config, jax.tree.map(jnp.asarray, inputs)


def forward(params, config, inputs):
    from jattn.nn import encoder, seq2seq

    fn = seq2seq.forward if hasattr(config, "d_model") else encoder.forward
    return fn(params, config, inputs, internals=("weights",))


def terms(config, inputs) -> int:
    n = inputs["input_ids"].shape[1]
    return model_terms(config, n, n) if hasattr(config, "d_model") else model_terms(config, n)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def family(request):
    if request.param not in families.names():
        pytest.skip(f"{request.param} is not registered")
    return tiny(request.param)


# one family per forward code path under jit and vmap by default: after-padding, relative, disentangled and rotary
# positions, pre-LN (ModernBERT, GPT-2, Llama), E -> D projection and layer copies (ALBERT), causal MHA and GQA,
# windows with soft-capping and sublayer post-norms (Gemma 2), post- and pre-LN encoder–decoders with learned and
# sinusoidal positions, T5's bias; BERT and Marian: tests/test_contract.py. The others differ from one of these in
# static shapes or elementwise functions only (XLM-R = RoBERTa, ELECTRA = ALBERT's projection, Qwen2 = Llama + biases,
# mT5 = T5 gated, RoBERTa-PreLayerNorm = RoBERTa's positions in ModernBERT's pre-LN blocks, ...)
FORWARD_PATHS = ("roberta", "albert", "mpnet", "deberta-v2", "modernbert", "gpt2", "llama", "gemma2", "bart",
                 "m2m_100", "t5")


def test_jit_equals_eager_and_vmap_equals_a_loop(family, request):
    params, config, inputs = family
    if config.model_type not in FORWARD_PATHS and not request.config.getoption("--runslow"):
        pytest.skip(f"{config.model_type}'s forward paths are covered by FORWARD_PATHS; all families: --runslow")
    jitted = jax.jit(forward, static_argnums=1)(params, config, inputs)
    with jax.disable_jit():
        eager = forward(params, config, inputs)
    compare_trees(jitted, eager, 2 * terms(config, inputs), f"{config.model_type} jit vs eager")
    one = lambda row: forward(params, config, jax.tree.map(lambda a: a[None], row))  # noqa: E731
    mapped = jax.jit(jax.vmap(one))(inputs)
    rows = [jax.jit(one)(jax.tree.map(lambda a, i=i: a[i], inputs)) for i in range(len(LENGTHS))]
    compare_trees(mapped, jax.tree.map(lambda *r: np.stack(r), *rows), 2 * terms(config, inputs),
                  f"{config.model_type} vmap vs loop")


# one family per code path the kernels' gradients go through by default (post-LN: tests/test_contract.py;
# disentangled, pre-LN with rotary and GQA, pre-LN encoder–decoder with a relative bias); every family with
# --runslow (each 10–60 s). RoBERTa-PreLayerNorm (29 s) and ModernBERT (13 s) run the kernels' pre-LN branch as
# Llama does; what ModernBERT adds (local windows: a mask; no biases; GeGLU) is in its forward, jit = eager and
# vmap = loop above
GRADIENT_PATHS = ("deberta-v2", "llama", "t5")


def test_every_kernel_has_finite_gradients(family, request):
    params, config, inputs = family
    if config.model_type not in GRADIENT_PATHS and not request.config.getoption("--runslow"):
        pytest.skip(f"{config.model_type}'s code paths are covered by GRADIENT_PATHS; all families: --runslow")
    shape = "seq2seq" if hasattr(config, "d_model") else "encoder"

    class Model:  # what ``weighted_sum`` reads of a model
        pass

    model = Model()
    model.params, model.config = params, config
    for name, kernel in KERNELS.items():
        fn = getattr(kernel, shape)
        if fn is None or not kernel.differentiable:
            continue
        if name in ("norms", "attributions") and getattr(config, "sublayer_post_norm", False):
            with pytest.raises(ValueError, match="sublayer post-norms"):  # refused: docs/METHODS.md, "Pre-LN blocks"
                fn(params, config, inputs)
            continue
        value, grad = weighted_sum(fn, model, inputs)(params)
        bad = [
            jax.tree_util.keystr(p) for p, g in jax.tree_util.tree_leaves_with_path(grad) if not jnp.isfinite(g).all()
        ]
        assert np.isfinite(float(value)) and not bad, f"{config.model_type} {name}: non-finite gradients at {bad}"
