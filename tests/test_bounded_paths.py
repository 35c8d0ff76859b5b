"""Every gradient sweep on its memory-bounded path: each layer rematerialised in the backward pass
(``remat``, ``jattn.nn.engine.layer_loop``: Chen et al. 2016), so a gradient through the whole
stack keeps one layer's activations at a time. For each sweep, at a tiny random shape: its
program holds the rematerialised layers (``remat2`` in the traced program), and its result equals
the same sweep's with ``remat`` off (the materialised path) to float32 tolerance. Covered: head
importance (a classifier's [CLS] forward, a custom loss's full forward; a translation model's
three attention types), attribution patching (encoder, translation), L0 gate training (encoder,
translation, with dropout: the recomputed layer draws the same masks) and ``grad`` (∂L/∂α).

And every ``layerwise`` registered analysis (reduced per layer and per chunk of the batch inside
the layer loop, so every layer's α is never held) equals its reduction of the stacked (L, b, ...)
internals (``ClassAttention`` / ``Entropy``: tests/test_run.py), ALTI with its rolled-out map
carried through the loop (``initial_state``) and Voita et al.'s head roles (an encoder's and a
translation model's encoder) among them; the methods that read no internals after
the loop (value zeroing, mixing: ``Method.internals``) run with none kept."""

from __future__ import annotations

import copy
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jattn.analyses.grad import AttentionGradient
from jattn.nn import encoder, engine, state
from jattn.nn import gates as G
from jattn.nn.config import EncoderConfig, Seq2SeqConfig
from jattn.runner.protocol import StepContext
from jattn.sweeps import patching
from jattn.sweeps.importance import KINDS, HeadImportance, TranslationImportance
from jattn.training import l0
from jattn.analyses.confidence import HeadConfidence
from jattn.analyses.lm_attention import LMAttention
from jattn.analyses.norm_stats import NormClassAttention
from jattn.analyses.patterns import PatternTypes
from jattn.runner import run_corpus
from tiny_encoders import random_batch
from tolerance import assert_close, model_terms

ENCODER = EncoderConfig(model_type="bert", vocab_size=50, hidden_size=16, num_layers=3, num_heads=4,
                        intermediate_size=24, hidden_act="gelu", max_position_embeddings=32, type_vocab_size=1,
                        layer_norm_eps=1e-12, pad_token_id=0, with_pooler=True, num_labels=2, hidden_dropout=0.1,
                        attention_dropout=0.1)
SEQ2SEQ = Seq2SeqConfig(model_type="marian", src_vocab_size=40, tgt_vocab_size=40, d_model=16, encoder_layers=1,
                        decoder_layers=2, encoder_heads=4, decoder_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=20,
                        activation="relu", max_position_embeddings=32, scale_embedding=True,
                        shared_embeddings=False, tie_output=False, positions="vaswani", pad_token_id=0,
                        eos_token_id=1, decoder_start_token_id=0, dropout=0.1)
B, N, T = 3, 9, 7  # rows, source and target length


@pytest.fixture(scope="module")
def params():
    return {c: jax.tree.map(jnp.asarray, nnx.to_pure_dict(state.init(c, seed=2))) for c in (ENCODER, SEQ2SEQ)}


def encoder_batch(seed: int = 0) -> dict:
    b = random_batch(ENCODER, [N, 6, 4], seed=seed)  # padded rows
    b["example"] = np.array([0, 1, -1], np.int32)  # a filler row
    return {k: jnp.asarray(v) for k, v in b.items()}


def seq2seq_batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    src_len, tgt_len = np.array([N, 5, 3]), np.array([T, 4, 2])
    mask = (np.arange(N)[None] < src_len[:, None]).astype(np.int32)  # (b, s)
    dec_mask = (np.arange(T)[None] < tgt_len[:, None]).astype(np.int32)  # (b, t)
    ids = np.where(mask, rng.integers(2, 40, (B, N)), 0)
    target = np.where(dec_mask, rng.integers(2, 40, (B, T)), -1)  # (b, t)
    dec_in = np.concatenate([np.zeros((B, 1), int), np.maximum(target[:, :-1], 0)], 1)  # start token, then shifted
    b = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec_in, "decoder_attention_mask": dec_mask,
         "target_ids": target}
    return {k: jnp.asarray(v, jnp.int32) for k, v in b.items()}


@pytest.fixture(autouse=True)
def remat_taken(monkeypatch):
    """Every test here on the rematerialised path: at these tiny shapes ``engine.remat_pays`` (the
    size rule, tested below) would keep the layers' residuals instead."""
    monkeypatch.setattr(engine, "remat_pays", lambda step, carry, xs: True)


def test_remat_is_taken_where_the_residuals_do_not_fit(monkeypatch):
    """The size rule: L steps' residuals beyond their weights against a sixteenth of the free memory."""
    monkeypatch.undo()
    step = lambda c, w: (jnp.tanh(c @ w), (c @ w).sum())  # noqa: E731  residuals: c (4, 8), w, two (4, 8)
    carry, xs = jnp.ones((4, 8)), jnp.ones((3, 8, 8))  # 3 steps x 3 x 4 x 8 floats = 1,152 bytes kept
    monkeypatch.setattr(engine, "available_bytes", lambda: 16 * 1152)
    assert not engine.remat_pays(step, carry, xs)
    monkeypatch.setattr(engine, "available_bytes", lambda: 16 * 1152 - 16)
    assert engine.remat_pays(step, carry, xs)
    monkeypatch.setattr(engine, "available_bytes", lambda: None)  # unknown: bounded memory first
    assert engine.remat_pays(step, carry, xs)


def rematerialised(fn, *args) -> int:
    """How many rematerialised regions the traced program of ``fn(*args)`` holds (nested programs too)."""
    return str(jax.make_jaxpr(fn)(*args)).count("remat2[")


def plain(method):
    """``method`` with its gradient on the materialised path (every layer's activations kept)."""
    m = copy.copy(method)
    object.__setattr__(m, "remat", False)
    return m


def reduced(method, params, config, batch, features, internals=None):
    """``method.reduce`` on one batch, as the runner's step calls it (jitted)."""
    def step(params, batch, features):
        def forward(input_ids=None, interventions=None, **kwargs):
            b = batch if input_ids is None else dict(batch, input_ids=input_ids)
            inputs = {k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
            return encoder.forward(params, config, inputs, interventions, **kwargs)

        ints = None if internals is None else forward(internals=internals)[1]
        return method.reduce(StepContext(params, config, batch, features, None, ints, forward, None, "all"))

    return step, jax.jit(step)(params, batch, features)


def assert_bounded_equals_plain(method, params, config, batch, features, terms, internals=None):
    step, bounded = reduced(method, params, config, batch, features, internals)
    plain_step, want = reduced(plain(method), params, config, batch, features, internals)
    assert rematerialised(step, params, batch, features) > 0
    assert rematerialised(plain_step, params, batch, features) == 0
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(bounded), jax.tree.leaves(want)):
        assert_close(got, want, terms=terms, err_msg=jax.tree_util.keystr(path))


def custom_loss(params, config, outputs, batch):
    return outputs["last_hidden_state"][:, 0, :4].sum(-1)  # (b,)


@pytest.mark.parametrize("loss", [None, custom_loss], ids=["classifier", "custom"])
def test_head_importance_remat_equals_plain(params, loss):
    """A classifier's importance (the [CLS]-only ``encoder.classify``) and a custom loss's (the full forward)."""
    model = types.SimpleNamespace(config=ENCODER, source=None)
    method = HeadImportance(model, loss, labels=(0, 1))
    batch = encoder_batch()
    L, H = ENCODER.num_layers, ENCODER.num_heads
    features = {"head_mask": jnp.ones((B, L, H)).at[:, 1, 2].set(0.0), "labels": jnp.array([0, 1, 0], jnp.int32)}
    assert_bounded_equals_plain(method, params[ENCODER], ENCODER, batch, features, 2 * B * model_terms(ENCODER, N))


def test_translation_importance_remat_equals_plain(params):
    shapes = {"encoder": (1, 4), "decoder": (2, 2), "cross": (2, 2)}
    method = TranslationImportance(shapes=shapes)
    features = {k: jnp.ones((B, *shapes[k])) for k in KINDS}
    batch = seq2seq_batch()
    step = lambda p, b, f: method.reduce(StepContext(p, SEQ2SEQ, b, f, None, None, None, None, "all"))  # noqa: E731
    plain_method = plain(method)
    plain_step = lambda p, b, f: plain_method.reduce(StepContext(p, SEQ2SEQ, b, f, None, None, None, None, "all"))  # noqa: E731
    p = params[SEQ2SEQ]
    assert rematerialised(step, p, batch, features) >= 2  # both stacks
    assert rematerialised(plain_step, p, batch, features) == 0
    got, want = jax.jit(step)(p, batch, features), jax.jit(plain_step)(p, batch, features)
    for kind in KINDS:
        assert_close(got["sums"][kind], want["sums"][kind], terms=2 * B * model_terms(SEQ2SEQ, N, T), err_msg=kind)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), got["counts"], want["counts"]))


def first_state(outputs):
    return outputs["last_hidden_state"][:, 0, :4].sum(-1)  # (b,)


def first_logit(outputs):
    return outputs["logits"][:, :, 3].sum(-1)  # (b,)


@pytest.mark.parametrize("config", [ENCODER, SEQ2SEQ], ids=["encoder", "translation"])
def test_attribution_patching_remat_equals_plain(params, config):
    """``_attribution``, the program ``jattn.attribution_patch_heads`` runs per batch, on the layer views."""
    views = engine.layer_views(params[config])
    if config is ENCODER:  # the same lengths, other tokens
        clean, corrupted = ({k: v for k, v in encoder_batch(seed).items() if k != "example"} for seed in (0, 1))
        metric, terms = first_state, model_terms(config, N)
    else:
        keys = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
        clean, corrupted = ({k: seq2seq_batch(seed)[k] for k in keys} for seed in (0, 1))
        metric, terms = first_logit, model_terms(config, N, T)
    run = lambda remat: lambda v, a, b: patching._attribution(v, config, a, b, metric, None, remat)  # noqa: E731
    assert rematerialised(run(True), views, clean, corrupted) >= config_layers(config)  # unrolled: one per layer
    assert rematerialised(run(False), views, clean, corrupted) == 0
    got, want = run(True)(views, clean, corrupted), run(False)(views, clean, corrupted)
    for kind in want:
        assert_close(got[kind], want[kind], terms=3 * B * terms, err_msg=kind)  # two forwards and a backward


def config_layers(config) -> int:
    return config.num_layers if config is ENCODER else config.encoder_layers + config.decoder_layers


@pytest.mark.parametrize("config", [ENCODER, SEQ2SEQ], ids=["encoder", "translation"])
def test_gate_training_remat_equals_plain(params, config):
    """∂(task loss)/∂gates with the model's dropout on: the recomputed layers draw the same masks; the
    jitted update step holds the rematerialised layers."""
    kinds = ("encoder",) if config is ENCODER else KINDS
    gc = l0.GateConfig(kinds=kinds, dropout=True)
    if config is ENCODER:
        batch = {k: v for k, v in encoder_batch().items() if k != "example"}
        batch["labels"] = jnp.array([0, 1, 1], jnp.int32)
        terms = model_terms(config, N)
    else:
        b = seq2seq_batch()
        batch = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"],
                 "decoder_input_ids": b["decoder_input_ids"], "decoder_attention_mask": b["decoder_attention_mask"],
                 "labels": jnp.maximum(b["target_ids"], 0), "label_mask": b["decoder_attention_mask"]}
        terms = model_terms(config, N, T)
    shapes = l0.gate_shapes(config)
    values = {k: jnp.linspace(0.3, 1.0, np.prod(shapes[k])).reshape(shapes[k]) for k in kinds}
    key = jax.random.key(5)

    def gradient(remat):
        def loss(values):
            iv = G.interventions(values, encoder_only=config is ENCODER)
            return l0.task_loss(config, params[config], batch, iv, key, gc, remat=remat)

        return jax.jit(jax.grad(loss))(values)

    got, want = gradient(True), gradient(False)
    for kind in kinds:
        assert_close(got[kind], want[kind], terms=2 * B * terms, err_msg=kind)
    optimizer = l0.make_optimizer(gc)
    trainable = {"log_alpha": {k: G.init_log_alpha(shapes[k], 3.0) for k in kinds}, "params": params[config]}
    train_state = {**trainable, "opt_state": optimizer.init(trainable)}
    step = lambda s, b: l0.train_step(s, b, key, jnp.float32(0.1), config=config, gc=gc, optimizer=optimizer)  # noqa: E731
    assert rematerialised(step, train_state, batch) >= (1 if config is ENCODER else 2)


def test_attention_gradient_remat_equals_plain(params):
    """``grad`` (|∂L/∂α| per key class, Clark et al. 2019) with a per-sequence loss."""
    model = types.SimpleNamespace(config=ENCODER, source=None, tokenizer=types.SimpleNamespace(mask_token_id=4))
    method = AttentionGradient(model, custom_loss)
    batch = encoder_batch()
    batch["token_class"] = jnp.asarray(np.random.default_rng(3).integers(0, 4, (B, N)), jnp.int32)
    assert_bounded_equals_plain(method, params[ENCODER], ENCODER, batch, {}, 2 * B * model_terms(ENCODER, N),
                                internals=("weights",))


class Stacked:
    """The same method reduced after the layer loop, on the stacked internals."""

    layerwise = False

    def __init__(self, method):
        self.method, self.name = method, method.name

    def __getattr__(self, attr):
        return getattr(self.method, attr)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    import jattn
    from tiny_lm import save_tiny_gpt2

    return jattn.load(save_tiny_gpt2(tmp_path_factory.mktemp("gpt2")), use_cache=False)


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_layerwise_analyses_equal_the_stacked_reduction(tiny_bert_folder, tiny_lm, family, monkeypatch):
    """Every layerwise method of the family (patterns, confidence, norms; lm-attention on a causal LM),
    its layers on chunks of ≤ 16 token rows (one or two examples a chunk), vs the stacked internals."""
    import jattn
    from analysis_helpers import SENTENCES

    monkeypatch.setenv("JATTN_CHUNK_ROWS", "16")
    if family == "encoder":
        model, inside = jattn.load(str(tiny_bert_folder), use_cache=False), [PatternTypes(), HeadConfidence(),
                                                                               NormClassAttention()]
    else:
        model, inside = tiny_lm, [LMAttention(), HeadConfidence()]
    assert all(m.layerwise for m in inside)
    run = lambda methods: run_corpus(model, SENTENCES[:4], methods, batch_size=4, max_length=32, truncate=True,  # noqa: E731
                                     progress=False)
    a, b = run(inside), run([Stacked(m) for m in inside])
    assert a.totals.keys() == b.totals.keys()
    terms = model_terms(model.config, 32) + a.meta["tokens"]
    for name, totals in b.totals.items():
        for key, want in totals.items():
            assert_close(a.totals[name][key], want, terms=terms, err_msg=f"{name}.{key}")


def kept_shapes(monkeypatch) -> list:
    """Every forward's kept internals per layer (what ``engine.check_fits`` is handed), recorded."""
    seen, check = [], engine.check_fits
    monkeypatch.setattr(engine, "check_fits", lambda shapes, L, x0: (seen.append(shapes), check(shapes, L, x0)))
    return seen


def gap_examples():
    """GAP-labelled word lists (``jattn.io.readers``' --format gap): pronoun, names A (1) and B (2), gold."""
    from jattn.io.readers import Example

    rows = [("Alice met Bob and she smiled .", 4, [0], [2], 0), ("Tom saw Ann , then he left .", 5, [0], [2], 0),
            ("Mary told Sue that her dog ran .", 4, [0], [2], 1)]
    out = []
    for k, (text, pronoun, a, b, gold) in enumerate(rows):
        words = text.split()
        cand = np.zeros(len(words), np.int32)
        cand[a], cand[b] = 1, 2
        out.append(Example(words, None, f"gap {k}", {"pronoun": np.int32(pronoun), "candidates": cand,
                                                      "gold": np.int32(gold)}))
    return out


def tree_examples():
    """Words with gold dependency trees (the CoNLL-U reader's labels ``heads`` and ``relations``)."""
    from jattn.io.readers import Example

    trees = [("The old dog barked at the cat .", [3, 3, 4, 0, 7, 7, 4, 4],
              ["det", "amod", "nsubj", "root", "case", "det", "obl", "punct"]),
             ("She reads books .", [2, 0, 2, 2], ["nsubj", "root", "obj", "punct"]),
             ("A bird sang", [2, 3, 0], ["det", "nsubj", "root"])]
    return [Example(t.split(), None, f"tree {k}", {"heads": np.array(h), "relations": r})
            for k, (t, h, r) in enumerate(trees)]


def test_analyses_of_every_layer_stay_within_one_layer(tiny_bert_folder, tmp_path, monkeypatch):
    """ALTI (its rolled-out map (b, n, n) carried through the scan), norm frequencies, syntax and GAP
    coreference (word level), reduced inside the layer loop on chunks of ≤ 16 token rows, equal their
    reduction of the stacked (L, b, ...) internals; value zeroing (each layer re-run from its hidden
    state) and mixing (its own forward on the masked input, the ratios reduced per layer) run with
    no layer's internals kept. In every bounded run no forward keeps any layer's internals."""
    import jattn
    from analysis_helpers import SENTENCES
    from jattn.analyses.attribution import Alti
    from jattn.analyses.context_mixing import ValueZeroing
    from jattn.analyses.coref import GapCoreference
    from jattn.analyses.norm_stats import MixingRatio, NormFrequency
    from jattn.analyses.syntax import DependencyHeads

    monkeypatch.setenv("JATTN_CHUNK_ROWS", "16")
    model = jattn.load(str(tiny_bert_folder), use_cache=False)
    ranks = tmp_path / "ranks.txt"
    ids = model.tokenizer.convert_tokens_to_ids(["the", ",", ".", "cat", "a"])
    ranks.write_text("".join(f"{r + 1} {100 - r} {i}\n" for r, i in enumerate(ids)))
    cases = [(SENTENCES[:4], [Alti(), NormFrequency(model.config.vocab_size, ranks)]),
             (tree_examples(), [DependencyHeads(("amod", "case", "det", "nsubj", "obj", "obl", "punct", "root"))]),
             (gap_examples(), [GapCoreference()])]
    for examples, methods in cases:
        assert all(m.layerwise for m in methods)
        seen = kept_shapes(monkeypatch)
        run = lambda methods: run_corpus(model, examples, methods, batch_size=4, max_length=32,  # noqa: E731
                                         truncate=True, progress=False)
        a = run(methods)
        assert seen and all(not s for s in seen), seen  # no forward kept a layer's internals
        b = run([Stacked(m) for m in methods])
        assert a.totals.keys() == b.totals.keys()
        terms = model_terms(model.config, 32) + a.meta["tokens"]
        for name, totals in b.totals.items():
            for key, want in totals.items():
                assert_close(a.totals[name][key], want, terms=terms, err_msg=f"{name}.{key}")
    seen = kept_shapes(monkeypatch)
    result = run_corpus(model, SENTENCES[:4], [ValueZeroing(), MixingRatio(model, rank_file=ranks)], batch_size=4,
                        max_length=32, truncate=True, progress=False)
    assert np.isfinite(result.statistics["value_zeroing_self"].value).all()
    assert seen and not any(k != "layer_rows" for s in seen for k in s), seen  # mixing's ratios (b, n) only
    assert all(a.ndim == 2 for s in seen for a in jax.tree.leaves(s)), seen


def role_examples(tokenizer, pairs, vocab_size: int) -> list:
    """(source, target or None) pairs labelled for ``roles`` (``token_labels``): each non-special
    source token a word, random heads and relations of Voita's four, every sentence with a rare word."""
    from jattn.analyses.roles import RELATIONS, token_labels
    from jattn.io.readers import Example

    rng, out = np.random.default_rng(4), []
    for k, (source, target) in enumerate(pairs):
        ids = np.asarray(tokenizer(source)["input_ids"])  # (n,) the last one EOS ([SEP] or </s>)
        special = np.isin(ids, tokenizer.all_special_ids)  # (n,)
        word = np.where(special, -1, np.cumsum(~special) - 1)  # (n,)
        w = int((~special).sum())
        heads, relations = rng.integers(0, w + 1, w), list(rng.choice(RELATIONS, w))  # (w,) 1-based, 0 root
        labels = token_labels(word, heads, relations, ids, np.arange(vocab_size), top=0)
        out.append(Example(source, target, source=f"pair {k}", labels=labels))
    return out


@pytest.mark.parametrize("family", ["encoder", "translation"])
def test_roles_inside_the_layer_loop_equals_every_layers_alpha(tiny_bert_folder, tiny_marian, family, monkeypatch):
    """Voita et al.'s head roles (``roles``, §4: each row's argmax key) counted from each layer's α
    inside the layer loop (an encoder's on chunks of ≤ 16 token rows) equal the same counts from every
    layer's α kept by the forward, on a tiny random encoder and a translation model's encoder; the
    bounded run's forward keeps no layer's internals."""
    import jattn
    from analysis_helpers import SENTENCES
    from jattn.analyses.roles import TokenRoles
    from test_bounded_recompute import recorded_internals
    from tiny_seq2seq import sentences

    monkeypatch.setenv("JATTN_CHUNK_ROWS", "16")
    if family == "encoder":
        model = jattn.load(str(tiny_bert_folder), use_cache=False)
        pairs, vocab = [(s, None) for s in SENTENCES if isinstance(s, str)], model.config.vocab_size
        kept = kept_shapes(monkeypatch)
        kept_none = lambda: kept and all(not s for s in kept)  # noqa: E731
        kept_alpha = lambda: kept and all("weights" in s for s in kept)  # noqa: E731
    else:
        model = tiny_marian
        pairs, vocab = list(zip(sentences(6, 1), sentences(6, 2))), model.config.src_vocab_size
        kept = recorded_internals(monkeypatch)
        kept_none = lambda: kept and all(not names for step in kept for names in step.values())  # noqa: E731
        kept_alpha = lambda: kept and all("weights" in step["encoder"] for step in kept)  # noqa: E731
    examples, method = role_examples(model.tokenizer, pairs, vocab), TokenRoles(min_count=1)
    assert method.layerwise
    run = lambda methods: run_corpus(model, examples, methods, batch_size=4, max_length=64,  # noqa: E731
                                     progress=False)
    a = run([method])
    assert kept_none(), kept
    kept.clear()
    b = run([Stacked(method)])
    assert kept_alpha(), kept
    assert a.statistics.keys() == b.statistics.keys()
    for name, want in b.statistics.items():
        np.testing.assert_array_equal(a.statistics[name].value, want.value, err_msg=name)
    prefix = "roles_" if family == "encoder" else "encoder_roles_"  # a translation model's attention type first
    assert all(a.statistics[prefix + k].value.sum() > 0 for k in ("correct", "prev_hits", "next_hits", "rare_hits"))
