"""Memory bounded by one layer: the rematerialised gradient (``remat``, ``jattn.nn.engine.layer_loop``)
equals the plain one and keeps less; ``lm-attention`` reduced in blocks of query rows
(``jattn.analyses.base.over_query_blocks``) equals the whole-α reduction; a forward whose stacked
internals exceed the available memory is refused while it is traced (``jattn.nn.engine.check_fits``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn.analyses import base
from jattn.runner.protocol import StepContext
from jattn.analyses.lm_attention import LMAttention
from jattn.nn import encoder
from jattn.nn.interventions import Interventions
from jattn.nn import losses
from tiny_lm import save_tiny_gpt2
from tolerance import assert_close, model_terms


@pytest.fixture(autouse=True)
def remat_taken(monkeypatch):
    """``remat=True`` rematerialises here whatever the size (``engine.remat_pays``'s rule is tested in
    tests/test_bounded_paths.py)."""
    from jattn.nn import engine

    monkeypatch.setattr(engine, "remat_pays", lambda step, carry, xs: True)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return jattn.load(save_tiny_gpt2(tmp_path_factory.mktemp("gpt2")), use_cache=False)


def gate_gradient(model, batch, remat: bool, unroll: bool = False):
    """∂(next-token loss)/∂ξ (L, b, H) of the head gates at ξ = 1."""
    c = model.config

    def loss(gates, params, batch):
        outputs, _ = encoder.forward(params, c, batch, Interventions(head_gates=gates), internals=None,
                                     remat=remat, unroll=unroll)
        return losses.lm_loss(params, c, outputs, batch).sum()

    return jax.jit(jax.grad(loss)), jnp.ones((c.num_layers, batch["input_ids"].shape[0], c.num_heads))


@pytest.mark.parametrize("unroll", [False, True])
def test_remat_gradient_equals_plain(lm, unroll):
    ids = np.random.default_rng(0).integers(3, lm.config.vocab_size, (2, 24)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 17:] = 0  # a padded row
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    plain, gates = gate_gradient(lm, batch, False, unroll)
    remat, _ = gate_gradient(lm, batch, True, unroll)
    want = np.asarray(plain(gates, lm.params, batch))
    # a gradient: twice the reductions
    assert_close(remat(gates, lm.params, batch), want, terms=2 * model_terms(lm.config, 24))


def test_remat_keeps_one_layer(lm):
    """XLA's buffers of the gradient: the plain one keeps every layer's α for the backward pass,
    the rematerialised one a layer's at a time (at 4 layers, n 256, α is most of the memory)."""
    import dataclasses

    config = dataclasses.replace(lm.config, num_layers=4, max_position_embeddings=256)
    model = type("M", (), {"config": config})()
    params = jattn.nn.state.abstract(config)  # shapes only
    ids = jax.ShapeDtypeStruct((1, 256), jnp.int32)
    batch = {"input_ids": ids, "attention_mask": ids, "token_type_ids": ids}
    alpha = config.num_heads * 256 * 256 * 4  # one layer's α, bytes
    temp = {}
    for remat in (False, True):
        fn, gates = gate_gradient(model, batch, remat)
        temp[remat] = fn.lower(gates, params, batch).compile().memory_analysis().temp_size_in_bytes
    assert temp[False] > temp[True] + 2 * alpha, temp


def causal_weights(rng, b, H, n, mask):
    """Random causal softmax rows (1, b, H, n, n) over each row's real keys j ≤ i."""
    real = mask > 0  # (b, n)
    allowed = real[:, :, None] & real[:, None, :] & np.tril(np.ones((n, n), bool))[None]  # (b, n, n)
    s = rng.normal(size=(1, b, H, n, n)) * 3
    s = np.where(allowed[None, :, None], s, -np.inf)
    e = np.exp(s - np.max(s, -1, keepdims=True, initial=-1e30))
    return (e / np.maximum(e.sum(-1, keepdims=True), 1e-30)).astype(np.float32)


def test_lm_attention_blocks_equal_whole(monkeypatch):
    rng = np.random.default_rng(1)
    b, H, n = 3, 2, 24
    mask = np.ones((b, n), np.int32)
    mask[1, :5] = 0  # left-padded
    mask[2, 19:] = 0  # right-padded
    ctx = StepContext(None, None, {"attention_mask": jnp.asarray(mask)}, {}, None,
                      {"weights": jnp.asarray(causal_weights(rng, b, H, n, mask))}, None, None)
    whole = LMAttention().reduce(ctx)
    monkeypatch.setattr(base, "BLOCK_BYTES", 5 * b * H * n * 4)  # blocks of 4 query rows: 6 blocks
    assert base.query_block(n, b * H * n * 4) == 4
    blocked = LMAttention().reduce(ctx)
    for key, want in whole.items():
        assert_close(blocked[key], want, terms=n, err_msg=key)


def test_forward_beyond_memory_refused_before_compute(lm, monkeypatch):
    """Every layer's α (L·b·H·n²·4 bytes) beyond the available memory: one error at trace time
    naming the bytes and the streaming options; without the internals the same forward runs."""
    from jattn.nn import engine

    c = lm.config
    b, n = 2, 40  # a shape no other test compiles: the forward is traced here
    batch = {"input_ids": np.full((b, n), 5, np.int32), "attention_mask": np.ones((b, n), np.int32)}
    hidden = (c.num_layers + 1) * b * n * c.hidden_size * 4  # bytes of the hidden states alone
    alpha = c.num_layers * b * c.num_heads * n * n * 4
    assert alpha > hidden
    monkeypatch.setattr(engine, "available_bytes", lambda: hidden + alpha // 2)
    with pytest.raises(ValueError, match=r"GiB .*more than the .* GiB of memory available.*internals=None.*"
                                         r"run_corpus with a layerwise method"):
        lm.forward(batch)  # refused while the program is traced: nothing runs
    result = lm.forward(batch, internals=None)  # the hidden states fit
    assert result.internals == {} and result.last_hidden_state.shape == (b, n, c.hidden_size)


def test_memory_benchmark_reports_peak_and_bound(tmp_path):
    """``benchmarks/bench_scale_memory.py`` at the tiny shape: what it reports (numbers not judged)."""
    pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_scale_memory

    r = bench_scale_memory.main(["--shape", "tiny", "--case", "lm-attention", "--tokens", "32", "--cache",
                                 str(tmp_path)])
    assert r["peak_above_model"] > 0 and r["layer_weights_bytes"] == 8 * 32 * 32 * 4 and r["dtype"] == "stored"
