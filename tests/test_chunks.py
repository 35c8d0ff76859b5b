"""The encoder's layers on strided chunks of the batch (``jattn.nn.engine.over_chunks``) give the
unchunked layer's outputs, internals, layerwise reductions and gate gradients, under every kind of
intervention; dropout draws independently per chunk; the chunk-size rule."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.nn.interventions import Interventions
from jattn.nn import encoder, engine
from tiny_encoders import random_batch, save_tiny
from tolerance import assert_close, model_terms


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("chunks") / "model", "bert-2x4", head="cls")
    return jattn.load(str(folder), use_cache=False)


def test_chunk_count_rule():
    assert engine.chunk_count(32, 128, 1024) == 4  # 8 sequences = 1024 rows a chunk
    assert engine.chunk_count(32, 16, 1024) == 1  # the whole batch is 512 rows
    assert engine.chunk_count(8, 512, 1024) == 4  # 2 sequences a chunk
    assert engine.chunk_count(32, 128, 0) == 1  # 0: the whole batch
    assert engine.chunk_count(4, 2000, 1024) == 4  # one sequence a chunk, longer than 1024
    assert engine.chunk_count(31, 128, 1024) == 1  # prime batch: one sequence, 128 rows, is too few


@pytest.mark.parametrize("chunks", [4, 1])
def test_over_chunks_takes_strided_rows_and_reassembles_in_order(chunks):
    x = jnp.arange(12 * 3, dtype=jnp.float32).reshape(12, 3)  # (b, 3)
    stacks = {"triple": jnp.full((2, 12, 3), -1.0)}  # (L, b, 3): layer 1 is written, layer 0 kept
    rows, stacks, totals = engine.over_chunks(
        lambda i, take: ({"double": 2 * take(x), "row_sum": take(x).sum(1)}, {"triple": 3 * take(x)},
                         {"sum": take(x).sum(0)}), 12, chunks, stacks, jnp.int32(1))
    np.testing.assert_array_equal(rows["double"], 2 * x)
    np.testing.assert_array_equal(rows["row_sum"], x.sum(1))
    np.testing.assert_array_equal(stacks["triple"], jnp.stack([jnp.full((12, 3), -1.0), 3 * x]))
    np.testing.assert_array_equal(totals["sum"], x.sum(0))  # added over the chunks
    chunk_of_row, _, _ = engine.over_chunks(lambda i, take: (0 * take(x)[:, 0].astype(jnp.int32) + i, {}, None), 12,
                                            chunks)  # (12,)
    np.testing.assert_array_equal(chunk_of_row, np.arange(12) % chunks)  # chunk i holds rows i, i + 4, i + 8


def _all_interventions(config, b, n, seed=0):
    rng = np.random.default_rng(seed)
    L, H = config.num_layers, config.num_heads
    return Interventions(head_gates=jnp.asarray(rng.uniform(0.2, 1.5, (L, b, H, n)), jnp.float32),
                         disabled_heads=jnp.asarray(rng.random((L, b, H)) < 0.3),
                         weights_delta=jnp.asarray(rng.normal(0, 0.01, (L, b, H, n, n)), jnp.float32))


def _run(model, batch, iv, rows: int):
    """Forward (all internals, per-example layerwise rows and layerwise totals), [CLS] logits and the
    gate gradient with layers chunked at ``rows`` token rows (the config's ``chunk_rows``)."""
    cfg = dataclasses.replace(model.config, chunk_rows=rows)

    def rows(ints, view, take):  # per example: mean α per head, the summed FFN input, a masked sum
        real = take(batch["attention_mask"]).astype(jnp.float32)  # (s, n)
        return {"alpha": ints["weights"].mean((2, 3)), "ffn": ints["ffn_pre_ln"].sum((1, 2)),
                "bias": jnp.einsum("bn,d->bd", real, view["out_bias"])}

    def totals(ints, view, take):  # per layer: α mass on each key position over real query rows, per head
        real = take(batch["attention_mask"]).astype(jnp.float32)  # (s, n)
        return {"received": jnp.einsum("bhqk,bq->hk", ints["weights"], real), "rows": real.sum()}

    def loss(gates):
        return encoder.classify(model.params, cfg, batch, Interventions(head_gates=gates)).sum()

    fwd = jax.jit(lambda p, b, iv: encoder.forward(p, cfg, b, iv, layer_rows=rows, layer_totals=totals))
    outputs, internals = fwd(model.params, batch, iv)
    gates = jnp.ones((cfg.num_layers, batch["input_ids"].shape[0], cfg.num_heads), jnp.float32)
    logits = jax.jit(lambda p, b, iv: encoder.classify(p, cfg, b, iv))(model.params, batch, iv)
    return outputs, internals, logits, jax.jit(jax.grad(loss))(gates)


def test_chunked_layers_equal_the_unchunked_layer(tiny):
    cfg = tiny.config
    batch = {k: jnp.asarray(v) for k, v in random_batch(cfg, [10, 7, 10, 3, 9, 10]).items()}  # b = 6, n = 10
    iv = _all_interventions(cfg, 6, 10)
    chunked = _run(tiny, batch, iv, 20)
    assert engine.chunk_count(6, 10, 20) == 3  # 2 sequences a chunk
    whole = _run(tiny, batch, iv, 0)
    assert engine.chunk_count(6, 10, 0) == 1
    terms = 2 * model_terms(cfg, 10) + 6 * 10  # forward, gate gradient, totals over the 6 × 10 rows
    for got, want in zip(jax.tree.leaves(chunked), jax.tree.leaves(whole)):  # other shapes: other float32 orders
        assert_close(got, want, terms=terms)
    assert set(chunked[1]) == set(encoder.INTERNALS)


def test_each_chunk_draws_its_own_dropout(tiny):
    """One layer on 4 identical sequences, one a chunk: the chunk index is folded into the
    layer's dropout key, so the rows get different masks; without a key they are equal."""
    from flax import nnx

    graphdef, stacked = nnx.split(encoder.module(tiny.params, tiny.config).layers)
    layer = nnx.merge(graphdef, jax.tree.map(lambda a: a[0], stacked))  # layer 0
    D = tiny.config.hidden_size
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(1), (1, 10, D)), (4, 10, D))  # (b, n, D)
    allowed = jnp.ones((4, 1, 10), bool)
    run = engine.chunked(4, 10, 10)  # one sequence a chunk
    # (4, n, D)
    train, _, _ = run(layer, x, allowed, Interventions(), jax.random.key(0), lambda y, ints, take: (y, {}), None)
    ev, _, _ = run(layer, x, allowed, Interventions(), None, lambda y, ints, take: (y, {}), None)
    assert all(not np.allclose(train[0], train[i]) for i in (1, 2, 3))
    np.testing.assert_array_equal(ev[1:], jnp.broadcast_to(ev[:1], (3, 10, D)))  # one scan body, identical rows


def test_layer_rows_must_be_per_example(tiny):
    batch = {k: jnp.asarray(v) for k, v in random_batch(tiny.config, [5, 3]).items()}
    with pytest.raises(ValueError, match="per-example arrays"):
        encoder.forward(tiny.params, tiny.config, batch, layer_rows=lambda ints, view, take: ints["weights"].sum())


def test_chunk_size_default(monkeypatch):
    """A config's ``chunk_rows`` wins; else ``$JATTN_CHUNK_ROWS``; else 1,024 rows on CPU."""
    assert engine.chunk_rows(64) == 64 and engine.chunk_rows(0) == 0
    monkeypatch.setenv("JATTN_CHUNK_ROWS", "48")
    assert engine.chunk_rows(None) == 48
    monkeypatch.delenv("JATTN_CHUNK_ROWS")
    assert engine.chunk_rows(None) == (engine.CPU_CHUNK_ROWS if jax.default_backend() == "cpu" else 0) == 1024


def _unrolled_vs_loop(forward, params, batch, iv, gate_shape, gate_iv):
    """Outputs, every internal and a gate gradient, with the layers as a loop and unrolled."""
    def run(unroll):
        outs, ints = jax.jit(lambda p, b, iv: forward(p, b, iv, unroll=unroll))(params, batch, iv)
        def loss(g):  # fixed non-constant weights: a LayerNorm output's plain sum cancels to rounding
            x = jax.tree.leaves(forward(params, batch, gate_iv(g), internals=None, unroll=unroll)[0])[0]
            return (x * jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape)).sum()
        return outs, ints, jax.jit(jax.grad(loss))(jnp.ones(gate_shape, jnp.float32))
    return run(False), run(True)


def test_unrolled_layers_equal_the_layer_loop(tiny, tiny_marian):
    """``engine.layer_loop(unroll=True)``: the same outputs, internals and gate gradients as the
    loop, for the encoder (chunked layers, every intervention) and the translation model."""
    from tiny_seq2seq import padded_batch

    from jattn.nn import seq2seq

    cfg = dataclasses.replace(tiny.config, chunk_rows=20)  # 3 chunks of 2 sequences
    batch = {k: jnp.asarray(v) for k, v in random_batch(cfg, [10, 7, 10, 3, 9, 10]).items()}  # b = 6, n = 10
    loop, unrolled = _unrolled_vs_loop(lambda p, b, iv, **k: encoder.forward(p, cfg, b, iv, **k), tiny.params, batch,
                                       _all_interventions(cfg, 6, 10), (cfg.num_layers, 6, cfg.num_heads),
                                       lambda g: Interventions(head_gates=g))
    terms = 2 * model_terms(cfg, 10)
    mc = tiny_marian.config
    pairs = {k: jnp.asarray(v) for k, v in padded_batch(mc).items()}
    s2s = _unrolled_vs_loop(lambda p, b, iv, **k: seq2seq.forward(p, mc, b, iv, **k), tiny_marian.params, pairs, None,
                            (mc.decoder_layers, 4, mc.decoder_heads),
                            lambda g: {"cross": Interventions(head_gates=g)})
    for (got_all, want_all), t in (((unrolled, loop), terms), ((s2s[1], s2s[0]), 4 * terms)):
        assert jax.tree.structure(got_all) == jax.tree.structure(want_all)
        for got, want in zip(jax.tree.leaves(got_all), jax.tree.leaves(want_all)):
            assert_close(got, want, terms=t)


@pytest.mark.parametrize("views_on_host", [True, False])
def test_layer_views_are_the_layers_without_copies(tiny, tiny_marian, monkeypatch, views_on_host):
    """``engine.layer_views``: each stacked-layer leaf as its L layers (on one CPU device, views of
    the stacked buffer; else slices); ``stacked_layers`` inside a program gives the same forward,
    and XLA folds its stacks into the unrolled layers' slices: the program slices no weights."""
    from tiny_seq2seq import padded_batch

    from jattn.nn import seq2seq

    monkeypatch.setattr(engine, "on_one_cpu", lambda a: views_on_host)
    mc = tiny_marian.config
    cases = [(encoder.forward, tiny.config, tiny.params, random_batch(tiny.config, [10, 7, 3])),
             (seq2seq.forward, mc, tiny_marian.params, padded_batch(mc))]
    for forward, cfg, params, batch in cases:
        views = engine.layer_views(params)
        stacked = jax.tree_util.tree_leaves_with_path(params)
        split = dict(jax.tree_util.tree_leaves_with_path(views, is_leaf=lambda x: isinstance(x, list)))
        aliased = 0
        for path, a in stacked:
            got = split[path]
            if not engine._is_stacked(path):
                assert got is a
                continue
            assert isinstance(got, list) and len(got) == a.shape[0]
            for l, layer in enumerate(got):
                np.testing.assert_array_equal(layer, a[l])
                offset = l * layer.nbytes
                if views_on_host and offset % 64 == 0:  # jax aliases host memory aligned to 64 bytes, else copies
                    assert layer.unsafe_buffer_pointer() == a.unsafe_buffer_pointer() + offset
                    aliased += 1
        assert (aliased > 0) == views_on_host
        batch = {k: jnp.asarray(v) for k, v in batch.items()}

        def run(p, b, from_views):
            p = engine.stacked_layers(p) if from_views else p
            return forward(p, cfg, b, None, internals=None, unroll=True)[0]  # the outputs

        program = jax.jit(run, static_argnums=2)
        for got, want in zip(
            *(jax.tree.leaves(program(*a, batch, v)) for a, v in (((views,), True), ((params,), False)))
        ):
            np.testing.assert_array_equal(got, want)
        assert _weight_copies(program, views, batch, True) == 0
        assert _weight_copies(program, params, batch, False) > 0  # the stacked arguments: each layer's slices


def _weight_copies(program, params, batch, *static) -> int:
    """How many slices or concatenations the compiled ``program(params, batch, ...)`` takes of a
    stacked-layer parameter (or a layer of one) inside its fusions."""
    import re

    hlo = program.lower(params, batch, *static).compile().as_text()
    bodies = dict(re.findall(r"^%?([\w.\-]+) \([^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M))
    entry = hlo[hlo.index("ENTRY"):]
    weights = {name for name, i in re.findall(r"%([\w.\-]+) = [^\n]* parameter\((\d+)\)", entry)
               if int(i) < len(jax.tree.leaves(params)) and "layers" in name}
    copies = 0
    for operands, called in re.findall(r"= [^\n]* fusion\(([^)]*)\), kind=kLoop, calls=%?([\w.\-]+)", entry):
        reads = [re.sub(r"/\*.*?\*/", "", o).strip().lstrip("%") for o in operands.split(",")]
        body = bodies.get(called, "")
        inner = {name for name, i in re.findall(r"%([\w.\-]+) = [^\n]* parameter\((\d+)\)", body)
                 if reads[int(i)] in weights}  # the fusion's parameters that are weights
        copies += sum(1 for operand in re.findall(r" (?:slice|concatenate)\(%([\w.\-]+)", body) if operand in inner)
    return copies


@pytest.mark.parametrize("one_cpu", [True, False])
def test_model_forward_unrolls_over_views_on_one_cpu(tiny, tiny_marian, monkeypatch, one_cpu):
    """``Model.forward`` takes ``layer_views`` on one CPU device (``forward_params``; the layers
    run unrolled, ``engine.unrolled``) and the stacked parameters elsewhere (the loop); either
    way the loop's outputs and internals under interventions: an encoder (also into a recycled
    result) and a translation model."""
    from tiny_seq2seq import padded_batch

    from jattn.models import base
    from jattn.nn import seq2seq

    monkeypatch.setattr(base, "on_one_cpu", lambda params: one_cpu)
    cfg, mc = tiny.config, tiny_marian.config
    batch, pairs = random_batch(cfg, [10, 7, 10, 3]), padded_batch(mc)
    iv = _all_interventions(cfg, 4, 10)
    gates = {"cross": Interventions(head_gates=jnp.linspace(0.2, 1.5, mc.decoder_layers * mc.decoder_heads
                                                            ).reshape(mc.decoder_layers, mc.decoder_heads))}
    for model in (tiny, tiny_marian):
        taken = [a for p, a in jax.tree_util.tree_leaves_with_path(model.forward_params(),
                                                                   is_leaf=lambda x: isinstance(x, list))
                 if engine._is_stacked(p)]
        assert taken and all(isinstance(a, list) == one_cpu for a in taken)
    loop = jax.jit(lambda p, b, iv: encoder.forward(p, cfg, b, iv))
    outs, ints = loop(tiny.params, {k: jnp.asarray(v) for k, v in batch.items()}, iv)
    want = [outs["last_hidden_state"], outs["hidden_states"], ints]
    for result in (tiny.forward(batch, iv), tiny.forward(batch, iv, recycle=tiny.forward(batch, iv))):
        assert jax.tree.structure(result.internals) == jax.tree.structure(ints)
        for g, w in zip(jax.tree.leaves([result.last_hidden_state, result.hidden_states, result.internals]),
                        jax.tree.leaves(want)):
            assert_close(g, w, terms=model_terms(cfg, 10))
    s2s_loop = jax.jit(lambda p, b, iv: seq2seq.forward(p, mc, b, iv))
    outs, ints = s2s_loop(tiny_marian.params, {k: jnp.asarray(v) for k, v in pairs.items()}, gates)
    got = tiny_marian.forward(pairs, gates)
    assert jax.tree.structure(got.internals) == jax.tree.structure(ints)
    for g, w in zip(jax.tree.leaves([got.logits, got.internals]), jax.tree.leaves([outs["logits"], ints])):
        assert_close(g, w, terms=model_terms(mc, 9, 7))
