"""DeBERTa-v2 / v3 (``jattn/families/deberta_v2``, ``jattn.nn.positions``) against Hugging Face's
``DebertaV2Model`` (eager) on tiny random configs: v2's layout (own position projections
``pos_key_proj`` / ``pos_query_proj``, absolute positions, token types) and v3's (``share_att_key``,
no absolute positions, relative-embedding LayerNorm), log buckets reached by padded sequences.

HF masks DeBERTa's attention by m_i·m_j: a padding *query* row attends uniformly to every key
(padding included), where jattn's padding rows attend to the real keys as in every other family.
Real rows do not read padding rows (their keys are masked), so the comparisons below are on the
real query rows; everything at real rows is compared, every layer."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from encoder_family_parity import check_classifier, check_pruned, load_pair, new_hf, pair_batch, save_random
from hf_head_gates import disabled, gated
from jattn import Interventions
from jattn.nn.config import ConfigError
from tiny_encoders import hf_run
from tolerance import assert_close, model_terms

LENGTHS = [40, 23, 9, 40]  # distances up to 39: beyond position_buckets / 2 = 8, into the log buckets
SHAPE = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-7, relative_attention=True,
             position_buckets=16, max_relative_positions=64, pos_att_type="p2c|c2p")
V2 = dict(type_vocab_size=2, position_biased_input=True, share_att_key=False, norm_rel_ebd="none")
V3 = dict(type_vocab_size=0, position_biased_input=False, share_att_key=True, norm_rel_ebd="layer_norm")


def save_deberta(folder, head="base", seed=0, **kw):
    import torch

    cls = {"mlm": "DebertaV2ForMaskedLM", "cls": "DebertaV2ForSequenceClassification"}.get(head, "DebertaV2Model")
    model = new_hf("DebertaV2Config", cls, {**SHAPE, **kw, "num_labels": 3}, seed)
    base = getattr(model, "deberta", model)
    with torch.no_grad():  # relative embeddings of the size of the content, so that the terms move α
        base.encoder.rel_embeddings.weight.normal_(0, 1.0)
    return save_random(model, folder, seed)


@pytest.fixture(scope="module", params=["v2", "v3"])
def base(request, tmp_path_factory):
    kw = V2 if request.param == "v2" else V3
    return (*load_pair(save_deberta(tmp_path_factory.mktemp("deberta"), **kw)), kw)


def batch_of(model, kw):
    return pair_batch(model.config, LENGTHS, seed=1, types=bool(kw["type_vocab_size"]))


def inputs(batch, kw):
    return batch if kw["type_vocab_size"] else {k: v for k, v in batch.items() if k != "token_type_ids"}


def real_rows(x, batch, axis):
    """x with the padding query rows (along ``axis``, the query axis) set to 0."""
    m = np.asarray(batch["attention_mask"], bool)  # (b, n)
    shape = [1] * np.ndim(x)
    shape[0], shape[axis] = m.shape
    return np.where(m.reshape(shape), np.asarray(x, np.float64), 0.0)


def compare(ours, ref, batch, terms, what=""):
    """Last and every hidden state, every attention weight, at the real query rows."""
    assert_close(real_rows(ours.last_hidden_state, batch, 1), real_rows(ref.last_hidden_state, batch, 1),
                 terms=terms, err_msg=what)
    for layer, att in enumerate(ref.attentions):
        assert_close(real_rows(ours.attentions[layer], batch, 2), real_rows(att, batch, 2), terms=terms,
                     err_msg=f"{what} attention of layer {layer}")
    for layer, h in enumerate(ref.hidden_states or ()):
        assert_close(real_rows(ours.hidden_states[layer], batch, 1), real_rows(h, batch, 1), terms=terms,
                     err_msg=f"{what} hidden state {layer}")


HERE = "tests/families/deberta_v2/test_deberta_v2.py::"


def v3_only(test: str):
    """``base``'s cases with v2 slow, its fast twin the same test on v3: both run the same disentangled attention
    (jattn.nn.positions) and the same interventions and analyses on it; v2's own position projections, absolute
    positions and token types are checked fast by its test_outputs_and_attention (and the kernels on a v2 layout
    under jit, vmap and grad by tests/test_contract_families.py)."""
    return pytest.mark.parametrize("base", [pytest.param("v2", marks=pytest.mark.slow(twin=f"{HERE}{test}[v3]")), "v3"],
                                   indirect=True)


def test_config(base):
    model, _, kw = base
    d = model.config.disentangled
    assert d.terms == ("c2p", "p2c") and d.scale_factor == 3 and d.span == 16 and d.buckets == 16
    assert d.shared_projections == kw["share_att_key"]
    assert model.config.position_embeddings == kw["position_biased_input"]
    assert model.params["relative_embeddings"]["table"].shape == (32, 32)
    assert ("positions" in model.params["layers"]) == (not kw["share_att_key"])


def test_outputs_and_attention(base):
    model, oracle, kw = base
    batch = batch_of(model, kw)
    terms = model_terms(model.config, LENGTHS[0])
    compare(model.forward(batch), hf_run(oracle, inputs(batch, kw)), batch, terms)


# v2: the same gates in the same disentangled attention as v3 (v3_only)
@v3_only("test_head_gates")
def test_head_gates(base):
    import torch

    from encoder_family_parity import gate_cases

    model, oracle, kw = base
    batch = batch_of(model, kw)
    terms = model_terms(model.config, LENGTHS[0])
    for kind, g in gate_cases(model.config, batch).items():
        ours = model.forward(batch, Interventions(head_gates=jnp.asarray(g)), internals=("weights",))
        with gated(oracle, {"encoder": torch.tensor(g)}):
            ref = hf_run(oracle, inputs(batch, kw))
        ref.hidden_states = None
        compare(ours, ref, batch, terms, f"gates per {kind}")


# v2: the same disabling in the same disentangled attention as v3 (v3_only)
@v3_only("test_disabled_heads")
def test_disabled_heads(base):
    model, oracle, kw = base
    batch = batch_of(model, kw)
    rng = np.random.default_rng(1)
    heads = rng.random((model.config.num_layers, model.config.num_heads)) < 0.5
    heads[0, 0] = True
    ours = model.forward(batch, Interventions(disabled_heads=jnp.asarray(heads)), internals=None)
    with disabled(oracle, heads):
        ref = hf_run(oracle, inputs(batch, kw))
    assert_close(real_rows(ours.last_hidden_state, batch, 1), real_rows(ref.last_hidden_state, batch, 1),
                 terms=model_terms(model.config, LENGTHS[0]))


# v2: the same ContextPooler head, classify and disabling suffix (cls_row with the disentangled score bias) as v3;
# v2's own position projections run fast in test_outputs_and_attention[v2]
@pytest.mark.parametrize("version", [pytest.param("v2", marks=pytest.mark.slow(twin=HERE + "test_classifier_head[v3]")),
                                     "v3"])
def test_classifier_head(tmp_path, version):
    """ContextPooler (dense + GELU on token 0) and classifier; classify and the disabling suffix."""
    kw = V2 if version == "v2" else V3
    model, oracle = load_pair(save_deberta(tmp_path, head="cls", **kw), head="cls")
    assert model.config.num_labels == 3 and model.config.with_pooler and model.config.pooler_activation == "gelu"
    check_classifier(model, oracle, batch_of(model, kw), types=bool(kw["type_vocab_size"]))


@pytest.mark.parametrize("legacy", [True, False])
def test_mlm_head(tmp_path, legacy):
    from jattn.nn.encoder import mlm_logits

    model, oracle = load_pair(save_deberta(tmp_path, head="mlm", legacy=legacy, **V3), head="mlm")
    batch = batch_of(model, V3)
    logits = mlm_logits(model.params, model.config, model.forward(batch, internals=None).last_hidden_state)
    terms = model_terms(model.config, LENGTHS[0]) + model.config.hidden_size
    assert_close(real_rows(logits, batch, 1), real_rows(hf_run(oracle, inputs(batch, V3)).logits, batch, 1),
                 terms=terms)


def test_pruning(base):
    """Shared projections (v3): the kept heads' slices of W_q, W_k project the relative embeddings,
    so a pruned model equals the gated one; own position projections (v2): refused."""
    model, _, kw = base
    batch = batch_of(model, kw)
    if kw["share_att_key"]:
        check_pruned(model, batch)
    else:
        from jattn.sweeps.pruning import remove_heads

        with pytest.raises(ConfigError, match="shared_projections"):
            remove_heads(model, np.ones((2, 4), bool) & (np.arange(4) > 0))


@pytest.mark.parametrize("bad, match", [(dict(conv_kernel_size=3), "conv_kernel_size"),
                                        (dict(embedding_size=16), "embedding_size"),
                                        (dict(pos_att_type="p2c|p2p"), "pos_att_type")])
def test_refused(bad, match):
    from jattn.families.deberta_v2.spec import config_from_hf

    with pytest.raises(ConfigError, match=match):
        config_from_hf({"model_type": "deberta-v2", **SHAPE, **V2, **bad})


# norms, attributions (value zeroing with the score bias) and head patching on DeBERTa-v2 run fast, under grad and
# with finite values, in tests/test_contract_families.py (deberta-v2 in GRADIENT_PATHS, lengths into the log buckets)
@pytest.mark.slow(twin="tests/test_contract_families.py::test_every_kernel_has_finite_gradients")
def test_analyses_run(base):
    """Kobayashi et al.'s norms, the context-mixing maps (ALTI among them; value zeroing calls the
    layers with ``module.score_bias``) and head patching run on the model, finite at the real
    tokens (Python API on a padded token-id batch reaching the log buckets; from text and the
    command line: ``test_analyze_cli_and_patch_heads``)."""
    from jattn.sweeps.patching import patch_heads

    model, _, kw = base
    batch = batch_of(model, kw)
    n = jattn.norms(model, batch)["encoder"]
    assert n["summed_norm"].shape == (2, len(LENGTHS), LENGTHS[0], LENGTHS[0]) and np.isfinite(n["summed_norm"]).all()
    maps = jattn.attributions(model, batch)["encoder"]
    assert "alti" in maps and all(np.isfinite(np.asarray(v)).all() for v in maps.values())
    clean, corrupted = {k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}
    corrupted = {**clean, "input_ids": np.where(clean["attention_mask"] == 1, (clean["input_ids"] + 1) % 120,
                                                clean["input_ids"])}
    got = patch_heads(model, clean, corrupted, lambda out: out["last_hidden_state"][:, 0, 0])["encoder"]
    assert got.shape == (2, 4) and np.isfinite(got).all()


# > 30 s: the same command and patching run fast on the XLM-R folder; DeBERTa's
# kernels are under jit, vmap and grad in tests/test_contract_families.py
@pytest.mark.slow
def test_analyze_cli_and_patch_heads(tmp_path, monkeypatch):
    """A complete v3 folder (a tiny Unigram tokenizer of DeBERTa-v2's class, as v3's spm.model
    lays its vocabulary out): ``jattn analyze --methods weights,entropy,norms,alti,value-zeroing``
    and ``patch_heads`` from text."""
    from encoder_family_smoke import POSITIONS, check_analyze_cli, check_patch_heads, unigram_tokenizer

    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    size = unigram_tokenizer(folder, "deberta-v2")
    save_deberta(folder, **{**V3, "vocab_size": size, "max_position_embeddings": POSITIONS, "pad_token_id": 0})
    check_analyze_cli(folder, tmp_path / "out", layers=2, heads=4)
    check_patch_heads(jattn.load(folder, use_cache=False))
