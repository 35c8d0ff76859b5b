"""The functional contract of a model's inputs and outputs (issue #59, items 3, 6 and 7), against
Hugging Face PyTorch (the oracle) on tiny random configs with padding:

* an untied masked-LM decoder (``tie_word_embeddings: false``) is converted and used (BERT,
  RoBERTa, MPNet), exported back and refused where a tied copy disagrees with what it is tied to;
* ``inputs_embeds`` in place of token ids (encoder; both sides of a translation model) and the
  gradient with respect to them;
* the feed-forward internals (``ffn_activation``, ``ffn_output``; HF forward hooks), the heads'
  outputs when asked (``heads=``: MLM logits, ELECTRA's replaced-token logits), the feed-forward
  and residual-stream patch sites, and jit equal to eager.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from jattn.io.hf import ConversionError
from jattn.nn import encoder, seq2seq
from encoder_family_parity import pair_batch, save_random
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms

SHAPE = dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=48, hidden_act="gelu", layer_norm_eps=1e-12)
LENGTHS = [11, 7, 3, 11]


def _hf_masked_lm(family: str, tied: bool, act: str = "gelu"):
    from transformers import (BertConfig, BertForMaskedLM, MPNetConfig, MPNetForMaskedLM, RobertaConfig,
                              RobertaForMaskedLM)

    import torch

    torch.manual_seed(0)
    kw = dict(SHAPE, tie_word_embeddings=tied, hidden_act=act)
    if family == "bert":
        return BertForMaskedLM(BertConfig(**kw, type_vocab_size=2))
    if family == "roberta":
        return RobertaForMaskedLM(RobertaConfig(**kw, type_vocab_size=1, pad_token_id=1))
    return MPNetForMaskedLM(MPNetConfig(**kw, pad_token_id=1))


def _mlm_pair(tmp_path, family: str, tied: bool, act: str = "gelu"):
    folder = save_random(_hf_masked_lm(family, tied, act), tmp_path / f"{family}-{tied}-{act}")
    from tiny_encoders import hf_model

    return folder, jattn.load(folder, tokenizer=False, use_cache=False), hf_model(folder, "mlm")


def _types(model) -> bool:
    return bool(model.config.type_vocab_size > 1)


def _hf_inputs(batch, types: bool) -> dict:
    return batch if types else {k: v for k, v in batch.items() if k != "token_type_ids"}


# ---- item 3: the masked-LM decoder ------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "roberta", "mpnet"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_mlm_logits_equal_hf(tmp_path, family, tied):
    """MLM logits (``heads=("mlm_logits",)``) equal HF's ``*ForMaskedLM`` on a padded batch, the
    decoder tied to the word embeddings or its own (the untied one and its bias differ from the
    embeddings and from the head's unused ``bias``: using either would be off)."""
    _, model, oracle = _mlm_pair(tmp_path, family, tied)
    assert model.config.with_mlm_head and model.config.tied_mlm_decoder == tied
    assert ("decoder" in model.params["mlm_head"]) != tied
    batch = pair_batch(model.config, LENGTHS, seed=1, types=_types(model))
    ours = model.forward(batch, internals=None, heads=("mlm_logits",))
    ref = hf_run(oracle, _hf_inputs(batch, _types(model))).logits.numpy()
    terms = model_terms(model.config, max(LENGTHS)) + model.config.hidden_size  # the transform's sum over D
    assert ours.mlm_logits.shape == ref.shape
    assert_close(ours.mlm_logits, ref, terms=terms)
    assert_close(encoder.mlm_logits(model.params, model.config, ours.last_hidden_state), ref, terms=terms)
    assert model.forward(batch, internals=None).mlm_logits is None  # the lean forward pays for no (b, n, V)


@pytest.mark.parametrize("family", ["bert", "roberta", "mpnet"])
def test_mlm_activation(tmp_path, family):
    """BERT's MLM transform applies ``hidden_act``; RoBERTa's and MPNet's exact GELU whatever
    ``hidden_act`` says (``config.mlm_activation``), as HF's heads do."""
    _, model, oracle = _mlm_pair(tmp_path, family, True, act="relu")
    batch = pair_batch(model.config, LENGTHS, seed=13, types=_types(model))
    ours = model.forward(batch, internals=None, heads="mlm_logits").mlm_logits
    ref = hf_run(oracle, _hf_inputs(batch, _types(model))).logits.numpy()
    assert_close(ours, ref, terms=model_terms(model.config, max(LENGTHS)) + model.config.hidden_size)


@pytest.mark.parametrize("family", ["bert", "mpnet"])
def test_untied_decoder_round_trip(tmp_path, family):
    """Exported, the untied head is HF's again: the same tensors (the head's unused ``bias`` equal
    to the decoder's), ``tie_word_embeddings: false``, and HF's logits equal jattn's."""
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays
    from tiny_encoders import hf_model

    folder, model, _ = _mlm_pair(tmp_path, family, tied=False)
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    original = {k: v for k, v in read_state_dict(folder).items() if "position_ids" not in k}
    assert set(state) == set(original)
    mlm = "cls.predictions" if family == "bert" else "lm_head"
    for k, v in state.items():
        want = original[f"{mlm}.decoder.bias"] if k == f"{mlm}.bias" else original[k]
        np.testing.assert_array_equal(v, want, err_msg=k)
    out = tmp_path / "exported"
    out.mkdir()
    save_file(state, str(out / "model.safetensors"))
    hf_config = model.family.to_hf_config(model.config)
    assert hf_config["tie_word_embeddings"] is False
    (out / "config.json").write_text(json.dumps(hf_config))
    again = jattn.load(out, tokenizer=False, use_cache=False)
    batch = pair_batch(model.config, LENGTHS, seed=2, types=_types(model))
    want = model.forward(batch, internals=None, heads="mlm_logits").mlm_logits
    assert np.array_equal(again.forward(batch, internals=None, heads="mlm_logits").mlm_logits, want)
    ref = hf_run(hf_model(out, "mlm"), _hf_inputs(batch, _types(model))).logits.numpy()
    assert_close(want, ref, terms=model_terms(model.config, max(LENGTHS)) + model.config.hidden_size)


def test_transformers4_untied_layout(tmp_path):
    """A transformers 4 checkpoint kept one bias (``decoder.bias`` was ``bias``): read from ``bias``."""
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict

    folder, model, _ = _mlm_pair(tmp_path, "bert", tied=False)
    state = read_state_dict(folder)
    state["cls.predictions.bias"] = state.pop("cls.predictions.decoder.bias")
    save_file(state, str(folder / "model.safetensors"))
    again = jattn.load(folder, tokenizer=False, use_cache=False)
    np.testing.assert_array_equal(np.asarray(again.params["mlm_head"]["bias"][...]), state["cls.predictions.bias"])


def test_tied_copy_that_differs_is_refused(tmp_path):
    """config.json says tied, but the checkpoint's decoder is its own: refused, naming the tensor
    and the fix (HF would silently use the word embeddings instead)."""
    folder, _, _ = _mlm_pair(tmp_path, "bert", tied=False)
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match=r"cls\.predictions\.decoder\.weight differs .*tie_word_embeddings"):
        jattn.load(folder, tokenizer=False, use_cache=False)


def test_seq2seq_tied_copies(tmp_path):
    """A translation model's tied copies (``lm_head.weight``, ``embed_tokens``): one equal to the
    shared table is read as HF reads it; one that differs is refused, naming it."""
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from tiny_seq2seq import save_tiny

    folder = save_tiny(tmp_path, "marian")
    state = read_state_dict(folder)
    save_file({**state, "lm_head.weight": state["model.shared.weight"]}, str(folder / "model.safetensors"))
    jattn.load(folder, use_cache=False)
    save_file({**state, "lm_head.weight": state["model.shared.weight"] + 1.0}, str(folder / "model.safetensors"))
    with pytest.raises(ConversionError, match=r"lm_head\.weight differs from model\.shared\.weight.*Fix:"):
        jattn.load(folder, use_cache=False)


def test_heads_not_in_checkpoint(tmp_path):
    _, model, _ = _mlm_pair(tmp_path, "bert", tied=True)
    batch = pair_batch(model.config, [4, 2])
    with pytest.raises(ValueError, match="no head for \\['replaced_token_logits'\\]"):
        model.forward(batch, internals=None, heads=("replaced_token_logits",))
    with pytest.raises(ValueError, match="unknown heads"):
        model.forward(batch, internals=None, heads=("logit",))


# ---- item 7: ELECTRA's replaced-token detection head ----------------------------------------------------


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    from transformers import ElectraConfig, ElectraForPreTraining

    import torch

    torch.manual_seed(0)
    hf = ElectraForPreTraining(ElectraConfig(**SHAPE, embedding_size=16, type_vocab_size=2))
    folder = save_random(hf, tmp_path_factory.mktemp("electra"))
    return folder, jattn.load(folder, tokenizer=False, use_cache=False), hf.eval()


def test_replaced_token_logits_equal_hf(electra):
    _, model, oracle = electra
    assert model.config.with_replaced_token_head
    batch = pair_batch(model.config, LENGTHS, seed=3)
    ours = model.forward(batch, internals=None, heads=("replaced_token_logits",)).replaced_token_logits
    ref = hf_run(oracle, batch).logits.numpy()  # (b, n)
    assert ours.shape == ref.shape == (len(LENGTHS), max(LENGTHS))
    assert_close(ours, ref, terms=model_terms(model.config, max(LENGTHS)) + model.config.hidden_size)


def test_electra_pretraining_round_trip(electra, tmp_path):
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays

    folder, model, _ = electra
    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    original = {k: v for k, v in read_state_dict(folder).items() if "position_ids" not in k
                and "token_type_ids" not in k}
    assert set(state) == set(original)
    for k, v in state.items():
        np.testing.assert_array_equal(v, original[k], err_msg=k)
    assert model.family.to_hf_config(model.config)["architectures"] == ["ElectraForPreTraining"]
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    assert jattn.load(tmp_path, tokenizer=False, use_cache=False).config.with_replaced_token_head


def test_electra_classifier_is_refused(tmp_path):
    """ELECTRA's classification head (W_o·gelu(W_d·h + b_d) + b_o) is not implemented: refused by
    name (the generator, ElectraForMaskedLM, loads: tests/families/test_electra.py)."""
    from transformers import ElectraConfig, ElectraForSequenceClassification

    folder = save_random(ElectraForSequenceClassification(ElectraConfig(**SHAPE, embedding_size=16)), tmp_path)
    with pytest.raises(ConversionError, match=r"ElectraFor\*Classification.*Fix: load ElectraModel"):
        jattn.load(folder, tokenizer=False, use_cache=False)


# ---- item 6: inputs_embeds ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from transformers import BertConfig, BertForMaskedLM

    import torch

    torch.manual_seed(1)
    hf = BertForMaskedLM(BertConfig(**SHAPE, type_vocab_size=2))
    folder = save_random(hf, tmp_path_factory.mktemp("bert"), seed=1)
    return jattn.load(folder, tokenizer=False, use_cache=False), hf.eval()


def _embeds(model, batch, seed=0):
    """Random embeddings (b, n, E) at the word table's scale (no table row: the lookup is bypassed)."""
    E = model.config.embedding_size or model.config.hidden_size
    b, n = batch["attention_mask"].shape
    return np.random.default_rng(seed).normal(0, 0.5, (b, n, E)).astype(np.float32)


def test_inputs_embeds_equal_hf(bert):
    """``inputs_embeds`` replaces the word lookup; positions, token types and the LayerNorm are
    added as HF's ``BertModel(inputs_embeds=...)`` adds them; every hidden state and the MLM logits
    agree, through the pure face and through ``EncoderModel.forward``."""
    import torch

    model, oracle = bert
    batch = pair_batch(model.config, LENGTHS, seed=4)
    e = _embeds(model, batch)
    given = {"inputs_embeds": e, "attention_mask": batch["attention_mask"], "token_type_ids": batch["token_type_ids"]}
    with torch.no_grad():
        ref = oracle(inputs_embeds=torch.tensor(e), attention_mask=torch.tensor(batch["attention_mask"]),
                     token_type_ids=torch.tensor(batch["token_type_ids"], dtype=torch.long), output_hidden_states=True)
    ours = model.forward(given, heads="mlm_logits")
    terms = model_terms(model.config, max(LENGTHS))
    for layer, h in enumerate(ref.hidden_states):
        assert_close(ours.hidden_states[layer], h, terms=terms, err_msg=f"hidden state {layer}")
    assert_close(ours.mlm_logits, ref.logits, terms=terms + model.config.hidden_size)
    pure, _ = encoder.forward(model.params, model.config, {k: jnp.asarray(v) for k, v in given.items()},
                              internals=None)
    assert_close(pure["last_hidden_state"], ours.last_hidden_state, terms=terms)


@pytest.mark.parametrize("family", ["roberta", "electra"])
def test_word_embeddings_give_the_ids_forward(tmp_path, family, electra):
    """``inputs_embeds = word_embeddings(ids)`` is the forward on the ids, RoBERTa's positions
    (counted from the mask) and ELECTRA's narrow embeddings (E = 16 -> D = 32) included."""
    model = electra[1] if family == "electra" else _mlm_pair(tmp_path, "roberta", True)[1]
    batch = pair_batch(model.config, LENGTHS, seed=5, types=_types(model))
    e = encoder.word_embeddings(model.params, model.config, jnp.asarray(batch["input_ids"]))
    assert e.shape == (*batch["input_ids"].shape, model.config.embedding_size or model.config.hidden_size)
    ids_run = model.forward(batch)
    embeds_run = model.forward({"inputs_embeds": np.asarray(e), "attention_mask": batch["attention_mask"],
                                "token_type_ids": batch["token_type_ids"]})
    terms = model_terms(model.config, max(LENGTHS))
    assert_close(embeds_run.last_hidden_state, ids_run.last_hidden_state, terms=terms)
    for name in ("weights", "ffn_activation"):
        assert_close(embeds_run.internals[name], ids_run.internals[name], terms=terms, err_msg=name)


def test_gradient_wrt_inputs_embeds(bert):
    """Saliency: ``jax.grad`` with respect to ``inputs_embeds`` is finite, non-zero on the real
    tokens and exactly zero on padding (masked keys) for a loss over the real tokens; it matches a
    central finite difference in a random direction; integrated gradients from the [PAD] baseline
    sum to the loss difference (completeness, Sundararajan et al. 2017) within the quadrature error."""
    model, _ = bert
    batch = {k: jnp.asarray(v) for k, v in pair_batch(model.config, LENGTHS, seed=6).items()}
    mask = batch["attention_mask"][..., None].astype(jnp.float32)  # (b, n, 1)
    ids = batch.pop("input_ids")

    def loss(e):
        out, _ = encoder.forward(model.params, model.config, {**batch, "inputs_embeds": e}, internals=None)
        return jnp.sum(jnp.tanh(out["last_hidden_state"]) * mask)

    e = encoder.word_embeddings(model.params, model.config, ids)
    g = jax.grad(loss)(e)  # (b, n, E)
    assert bool(jnp.isfinite(g).all())
    real = np.asarray(batch["attention_mask"], bool)
    assert (np.abs(np.asarray(g))[real].sum(-1) > 0).all() and (np.asarray(g)[~real] == 0).all()
    direction = np.random.default_rng(0).normal(size=e.shape).astype(np.float32) * np.asarray(mask)
    step = 1e-3
    numeric = (loss(e + step * direction) - loss(e - step * direction)) / (2 * step)
    assert abs(float(jnp.sum(g * direction)) - float(numeric)) < 2e-2 * abs(float(numeric)) + 1e-3
    baseline = encoder.word_embeddings(model.params, model.config, jnp.full_like(ids, model.config.pad_token_id))
    alphas = (jnp.arange(32) + 0.5) / 32  # midpoint rule
    grads = jax.vmap(lambda a: jax.grad(loss)(baseline + a * (e - baseline)))(alphas).mean(0)  # (b, n, E)
    attribution = float(jnp.sum(grads * (e - baseline)))
    assert abs(attribution - float(loss(e) - loss(baseline))) < 2e-2 * abs(float(loss(e) - loss(baseline)))


def test_inputs_embeds_errors(bert):
    model, _ = bert
    batch = pair_batch(model.config, [4, 2])
    e = _embeds(model, batch)
    with pytest.raises(ValueError, match="both input_ids and inputs_embeds"):
        model.forward({**batch, "inputs_embeds": e})
    with pytest.raises(ValueError, match=r"inputs_embeds must be a float \(batch, length, 32\)"):
        model.forward({"inputs_embeds": e[..., :8], "attention_mask": batch["attention_mask"]})
    with pytest.raises(ValueError, match="exactly one of input_ids .* and inputs_embeds"):
        encoder.forward(model.params, model.config, {"attention_mask": jnp.asarray(batch["attention_mask"])})


@pytest.fixture(scope="module", params=["marian", "fsmt"])
def translation(request, tmp_path_factory):
    from tiny_seq2seq import hf_model, save_tiny

    folder = save_tiny(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, jattn.load(folder, use_cache=False), hf_model(folder, request.param)


def test_seq2seq_inputs_embeds(translation):
    """Both sides' ids replaced by ``word_embeddings`` give the ids' forward (FSMT's positions
    counted from the masks); against HF Marian, whose ``inputs_embeds`` are these on the encoder
    side and which scales ``decoder_inputs_embeds`` by sqrt(D) itself; the gradient with respect
    to both is finite."""
    import torch

    from tiny_seq2seq import padded_batch

    kind, model, hf = translation
    c, params = model.config, model.params
    batch = {k: jnp.asarray(v) for k, v in padded_batch(c, seed=3).items()}
    src = seq2seq.word_embeddings(params, c, batch["input_ids"], "source")  # (b, s, D)
    tgt = seq2seq.word_embeddings(params, c, batch["decoder_input_ids"], "target")  # (b, t, D)
    embedded = {"inputs_embeds": src, "attention_mask": batch["attention_mask"], "decoder_inputs_embeds": tgt,
                "decoder_attention_mask": batch["decoder_attention_mask"]}
    ids_out, ids_int = seq2seq.forward(params, c, batch)
    out, ints = seq2seq.forward(params, c, embedded)
    s, t = batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1]
    T = model_terms(c, s, t)
    real_t = np.asarray(batch["decoder_attention_mask"], bool)
    assert_close(np.asarray(out["logits"])[real_t], np.asarray(ids_out["logits"])[real_t], terms=T)
    assert_close(ints["cross"]["ffn_output"], ids_int["cross"]["ffn_output"], terms=T)
    if kind == "marian":
        kw = {k: torch.tensor(np.asarray(v)) for k, v in embedded.items()}
        kw["decoder_inputs_embeds"] = kw["decoder_inputs_embeds"] / float(np.sqrt(c.d_model))
        with torch.no_grad():
            ref = hf(**kw, use_cache=False)
        real_s = np.asarray(batch["attention_mask"], bool)
        assert_close(np.asarray(out["encoder_last_hidden_state"])[real_s],
                     ref.encoder_last_hidden_state.numpy()[real_s], terms=T)
        assert_close(np.asarray(out["logits"])[real_t], ref.logits.numpy()[real_t], terms=T)

    def loss(src, tgt):
        o, _ = seq2seq.forward(params, c, {**embedded, "inputs_embeds": src, "decoder_inputs_embeds": tgt},
                               internals=None)
        return jnp.sum(jax.nn.log_softmax(o["logits"])[..., 5] * batch["decoder_attention_mask"])

    g_src, g_tgt = jax.grad(loss, argnums=(0, 1))(src, tgt)
    assert bool(jnp.isfinite(g_src).all()) and bool(jnp.isfinite(g_tgt).all())
    assert float(jnp.abs(g_src).sum()) > 0 and float(jnp.abs(g_tgt).sum()) > 0


# ---- item 7: feed-forward internals, patch sites, jit ---------------------------------------------------


def _hooked(modules, fn):
    """Run ``fn()`` with forward hooks on ``modules``: each module's (input, output), in their order."""
    seen = {}

    def hook(index):
        def record(module, inputs, output):  # returns None: the output is left as it is
            seen[index] = (inputs[0].numpy(), output.numpy())
        return record

    handles = [m.register_forward_hook(hook(index)) for index, m in enumerate(modules)]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return [seen[i] for i in range(len(modules))]


def test_ffn_internals_equal_hf(bert):
    """``ffn_activation`` (L, b, n, F) is HF's ``intermediate`` output (act(W_1 h + b_1)) and
    ``ffn_output`` (L, b, n, D) its ``output.dense`` output (before dropout and the residual)."""
    model, oracle = bert
    batch = pair_batch(model.config, LENGTHS, seed=7)
    layers = oracle.bert.encoder.layer
    seen = _hooked([l.intermediate for l in layers] + [l.output.dense for l in layers],
                   lambda: hf_run(oracle, batch))
    L = model.config.num_layers
    ours = model.forward(batch, internals=("ffn_activation", "ffn_output"))
    assert ours.internals["ffn_activation"].shape == (L, len(LENGTHS), max(LENGTHS), model.config.intermediate_size)
    terms = model_terms(model.config, max(LENGTHS))
    for l in range(L):
        assert_close(ours.internals["ffn_activation"][l], seen[l][1], terms=terms, err_msg=f"activation {l}")
        assert_close(ours.internals["ffn_output"][l], seen[L + l][1], terms=terms, err_msg=f"output {l}")


def test_seq2seq_ffn_internals_equal_hf(translation):
    """Marian / FSMT: a layer's FFN internals (HF: the input and output of ``fc2``) under
    "encoder" and, for the decoder's layers, "cross"; the decoder self-attention kind has none."""
    import torch

    from tiny_seq2seq import padded_batch

    kind, model, hf = translation
    batch = padded_batch(model.config, seed=8)
    stacks = {"encoder": hf.model.encoder.layers, "cross": hf.model.decoder.layers}
    fc2 = [l.fc2 for side in stacks.values() for l in side]
    with torch.no_grad():
        seen = _hooked(fc2, lambda: hf(**{k: torch.tensor(v) for k, v in batch.items()}, use_cache=False))
    ours = model.forward(batch, internals=("ffn_activation", "ffn_output", "weights"))
    assert "ffn_output" not in ours.internals["decoder"] and "weights" in ours.internals["decoder"]
    T = model_terms(model.config, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])
    i = 0
    for name, layers in stacks.items():
        real = batch["attention_mask" if name == "encoder" else "decoder_attention_mask"].astype(bool)
        for l in range(len(layers)):
            a, y = seen[i]
            if kind == "fsmt":  # FSMT runs time-major: (n, b, ...)
                a, y = a.swapaxes(0, 1), y.swapaxes(0, 1)
            assert_close(np.asarray(ours.internals[name]["ffn_activation"][l])[real], a[real], terms=T,
                         err_msg=f"{name} activation {l}")
            assert_close(np.asarray(ours.internals[name]["ffn_output"][l])[real], y[real], terms=T,
                         err_msg=f"{name} output {l}")
            i += 1


def _stack_at(L, layer, value):
    """(L, b, n, D) holding ``value`` (b, n, D) at ``layer``, zeros elsewhere; where True there."""
    stacked = np.zeros((L, *value.shape), np.float32)
    stacked[layer] = value
    where = np.zeros((L, *value.shape[:2]), bool)
    where[layer] = True
    return stacked, where


def test_ffn_and_stream_patches(bert):
    """A patch of the FFN output with its own value is the identity; the FFN block's input and output
    (or the layer's output) from another run make every layer above equal to that run; a float
    ``where`` 0 is the identity and 1 the replacement; validation names a mis-shaped site."""
    model, _ = bert
    L, layer = model.config.num_layers, 0
    a = pair_batch(model.config, LENGTHS, seed=9)
    b = {**a, "input_ids": pair_batch(model.config, LENGTHS, seed=10)["input_ids"]}  # same padding
    run_a, run_b = model.forward(a), model.forward(b)
    terms = model_terms(model.config, max(LENGTHS))

    own = Interventions(patch={"ffn_output": _stack_at(L, layer, np.asarray(run_a.internals["ffn_output"][layer]))})
    assert_close(model.forward(a, own).hidden_states, run_a.hidden_states, terms=terms)
    for patch in ({"ffn_residual": _stack_at(L, layer, np.asarray(run_b.internals["attention_ln_out"][layer])),
                   "ffn_output": _stack_at(L, layer, np.asarray(run_b.internals["ffn_output"][layer]))},
                  {"layer_output": _stack_at(L, layer, np.asarray(run_b.hidden_states[layer + 1]))}):
        patched = model.forward(a, Interventions(patch=patch))
        assert_close(patched.hidden_states[layer + 1:], run_b.hidden_states[layer + 1:], terms=terms,
                     err_msg=str(sorted(patch)))
    value, where = _stack_at(L, layer, np.asarray(run_b.hidden_states[layer + 1]))
    blend0 = model.forward(a, Interventions(patch={"layer_output": (value, where * np.float32(0.0))}))
    blend1 = model.forward(a, Interventions(patch={"layer_output": (value, where.astype(np.float32))}))
    assert_close(blend0.last_hidden_state, run_a.last_hidden_state, terms=terms)
    assert_close(blend1.last_hidden_state, run_b.last_hidden_state, terms=terms)
    with pytest.raises(ValueError, match=r"patch\['ffn_output'\] value .*axis 2 \(query\)"):
        model.forward(a, Interventions(patch={"ffn_output": (value[:, :, :3], where[:, :, :3])}))
    with pytest.raises(ValueError, match=r"patch\['layer_output'\] where"):
        model.forward(a, Interventions(patch={"layer_output": (value, where[..., None])}))


def test_seq2seq_ffn_patch_sites(translation):
    """In a translation model the encoder's FFN sites are the "encoder" kind's, the decoder's the
    "cross" kind's (its FFN follows cross-attention): an own-value patch is the identity; naming
    them in "decoder" is refused."""
    from tiny_seq2seq import padded_batch

    _, model, _ = translation
    batch = padded_batch(model.config, seed=11)
    base = model.forward(batch)
    c = model.config
    T = model_terms(c, batch["input_ids"].shape[1], batch["decoder_input_ids"].shape[1])
    patch = {"encoder": Interventions(patch={"ffn_output": _stack_at(
                 c.encoder_layers, 1, np.asarray(base.internals["encoder"]["ffn_output"][1]))}),
             "cross": Interventions(patch={"ffn_output": _stack_at(
                 c.decoder_layers, 0, np.asarray(base.internals["cross"]["ffn_output"][0]))})}
    assert_close(model.forward(batch, patch).logits, base.logits, terms=T)
    with pytest.raises(ValueError, match=r"interventions\['decoder'\]\.patch has \['ffn_output'\].*"
                                         r"interventions\['cross'\]"):
        model.forward(batch, {"decoder": patch["cross"]})


def test_jit_equals_eager(bert):
    """The pure face jitted equals it run eagerly: the new internals and the heads' outputs."""
    model, _ = bert
    batch = {k: jnp.asarray(v) for k, v in pair_batch(model.config, LENGTHS, seed=12).items()}
    names = ("ffn_activation", "ffn_output")

    def run(params, batch):
        return encoder.forward(params, model.config, batch, internals=names, heads=("mlm_logits",))

    with jax.disable_jit():
        eager = run(model.params, batch)
    jitted = jax.jit(run)(model.params, batch)
    terms = model_terms(model.config, max(LENGTHS)) + model.config.hidden_size
    assert_close(jitted[0]["mlm_logits"], eager[0]["mlm_logits"], terms=terms)
    for name in names:
        assert_close(jitted[1][name], eager[1][name], terms=terms, err_msg=name)
