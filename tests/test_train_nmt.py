"""NMT training: loss on a synthetic copy task, checkpoint resume, batching."""

from __future__ import annotations


import jax
import numpy as np
import pytest

from jattn.nn.config import Seq2SeqConfig
from jattn.runner.batcher import token_batches
from jattn.training.nmt import TrainConfig, Trainer, inverse_sqrt_schedule, label_smoothed_loss
from tolerance import assert_close

V, PAD, EOS = 24, 23, 0


def tiny_config(**kw) -> Seq2SeqConfig:
    base = dict(
        model_type="marian",
        src_vocab_size=V,
        tgt_vocab_size=V,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_heads=2,
        decoder_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation="relu",
        max_position_embeddings=32,
        scale_embedding=True,
        shared_embeddings=True,
        tie_output=True,
        positions="vaswani",
        final_logits_bias=True,
        decoder_mask="all",
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        forced_eos_token_id=EOS,
        dropout=0.1,
    )
    return Seq2SeqConfig(**dict(base, **kw))


def copy_task(n: int, seed: int = 0):
    """Random token sequences (ids 1..V-2) ending in EOS; the target is the source."""
    rng = np.random.default_rng(seed)
    src = [np.append(rng.integers(1, V - 1, rng.integers(3, 9)), EOS).astype(np.int32) for _ in range(n)]
    return src, [s.copy() for s in src]


def _eval_loss(params, config, src, tgt) -> float:
    """Mean per-token cross-entropy (no dropout, no smoothing) over the whole data."""
    from jattn.nn import seq2seq
    from jattn.training.nmt import device_batch

    forward = jax.jit(seq2seq.forward, static_argnames=("config",))  # compiled: op by op takes seconds
    total, n = 0.0, 0
    for b in token_batches(src, tgt, 512, PAD, PAD):
        batch = device_batch(b)
        logits = forward(params, config, batch)[0]["logits"]
        total += float(label_smoothed_loss(logits, batch["labels"], batch["label_mask"], 0.0)[1])
        n += b.num_tokens
    return total / n


def test_copy_task_loss_decreases(tmp_path):
    src, tgt = copy_task(512)
    config = tiny_config()
    tc = TrainConfig(peak_lr=3e-3, warmup_steps=50, max_tokens=512, label_smoothing=0.1, epochs=100, seed=0)
    trainer = Trainer(config, tc, tmp_path / "run")
    before = _eval_loss(trainer.state["params"], config, src, tgt)
    trainer.fit(src, tgt, max_updates=300, progress=False)
    after = _eval_loss(trainer.state["params"], config, src, tgt)
    assert trainer.meta["step"] == 300
    assert after < 0.5 * before, (before, after)


def test_depth_scaled_init_scales_layer_l_by_one_over_sqrt_l(tmp_path):
    """DS-Init (Zhang et al. 2019): layer l's kernels are the plain initialisation's over √l, for
    encoder and decoder; embeddings, biases and LayerNorms are untouched; the trainer uses it."""
    from jattn.training.nmt import init_params

    config = tiny_config(encoder_layers=3, decoder_layers=4)
    plain, scaled = (init_params(config, jax.random.key(5), depth_scaled=d) for d in (False, True))
    kernels = 0
    for (path, a), (_, b) in zip(
        jax.tree_util.tree_leaves_with_path(plain), jax.tree_util.tree_leaves_with_path(scaled)
    ):
        names = [k.key for k in path]
        if "layers" in names and names[-1] == "kernel":
            kernels += 1
            for l in range(a.shape[0]):
                np.testing.assert_allclose(b[l], a[l] / np.sqrt(l + 1), rtol=1e-6)
        else:
            np.testing.assert_array_equal(b, a)
    assert kernels == 6 + 10  # encoder: q, k, v, o, FFN in and out; decoder: also cross-attention's q, k, v, o
    trainer_params = Trainer(config, TrainConfig(seed=5, depth_scaled_init=True), tmp_path / "run").state["params"]
    np.testing.assert_array_equal(trainer_params["decoder"]["layers"]["ffn_in"]["kernel"],
                                  scaled["decoder"]["layers"]["ffn_in"]["kernel"])


def test_a_run_recorded_before_an_argument_existed_resumes_at_its_default(tmp_path):
    """A run whose recorded arguments lack a field added later (here ``depth_scaled_init``)
    resumes when the new value is the field's default, and is refused otherwise."""
    import dataclasses
    import json

    config = tiny_config()
    Trainer(config, TrainConfig(), tmp_path / "run").save()
    for meta in (tmp_path / "run").glob("last/*/meta/metadata"):  # as an older jattn recorded it
        record = json.loads(meta.read_text())
        del record["arguments"]["depth_scaled_init"]
        meta.write_text(json.dumps(record))
    assert Trainer(config, TrainConfig(), tmp_path / "run").meta["step"] == 0
    with pytest.raises(ValueError, match=r"depth_scaled_init=False \(now True\)"):
        Trainer(config, dataclasses.replace(TrainConfig(), depth_scaled_init=True), tmp_path / "run")


def test_resume_gives_identical_params_and_step(tmp_path):
    src, tgt = copy_task(128, seed=1)
    tc = TrainConfig(peak_lr=1e-3, warmup_steps=10, max_tokens=256, accumulate=2, epochs=10, seed=3)
    a = Trainer(tiny_config(), tc, tmp_path / "a")
    a.fit(src, tgt, max_updates=4, progress=False)
    saved = jax.tree.map(np.asarray, a.state)

    b = Trainer(tiny_config(), tc, tmp_path / "a")  # a new process would do this: resume from last/
    assert b.meta["step"] == 4 and b.meta["micro_step"] == a.meta["micro_step"]
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, b.state), saved)
    b.fit(src, tgt, max_updates=8, progress=False)

    c = Trainer(tiny_config(), tc, tmp_path / "c")  # the same run without interruption
    c.fit(src, tgt, max_updates=8, progress=False)
    assert c.meta["micro_step"] == b.meta["micro_step"]
    jax.tree.map(np.testing.assert_array_equal,  # the same compiled steps on the same batches: bit for bit
                 jax.tree.map(np.asarray, b.state["params"]), jax.tree.map(np.asarray, c.state["params"]))


def test_label_smoothed_loss_against_direct_formula():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, (2, 3))
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    loss, nll = label_smoothed_loss(logits, labels, mask, 0.2)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = np.full_like(logp, 0.2 / 5)
    q[np.arange(2)[:, None], np.arange(3)[None], labels] += 0.8
    terms, scale = 5 + 3 * 2, np.abs(logp).max() * mask.sum()  # float32 log-softmax over 5, sums over 2·3 terms
    assert_close(loss, (-(q * logp).sum(-1) * mask).sum(), terms=terms, scale=scale)
    assert_close(nll, (-np.take_along_axis(logp, labels[..., None], -1)[..., 0] * mask).sum(), terms=terms, scale=scale)


def test_schedule_peaks_at_warmup():
    s = inverse_sqrt_schedule(1e-3, 100)
    assert float(s(50)) == pytest.approx(5e-4) and float(s(100)) == pytest.approx(1e-3)
    assert float(s(400)) == pytest.approx(5e-4)


def test_token_batches_cover_corpus_with_few_shapes():
    src, tgt = copy_task(300, seed=2)
    batches = token_batches(src, tgt, 128, PAD, PAD, np.random.default_rng(0))
    assert sum(b.num_tokens for b in batches) == sum(len(t) for t in tgt)
    assert all(b.input_ids.size <= 128 for b in batches)
    assert len({b.input_ids.shape for b in batches}) <= 2
    b = batches[0]
    real = b.label_mask.astype(bool)
    assert np.all(b.decoder_input_ids[:, 0] == PAD)
    assert np.all(b.decoder_input_ids[:, 1:][real[:, 1:]] == b.labels[:, :-1][real[:, 1:]])  # shifted right
