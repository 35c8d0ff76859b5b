"""Physical head pruning (jattn.sweeps.pruning): the pruned model equals the masked model (Michel et al.'s
head gates = the keep mask), exports are smaller Hugging Face folders that jattn.load reads back,
the BERT export has exactly the tensors Hugging Face's own head pruning produces, bad masks fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from jattn import Interventions
from jattn.nn.config import ConfigError
from jattn.io.hf import ConversionError
from jattn.sweeps.pruning import check_keep, export_pruned, original_heads, real_heads, remove_heads
from tiny_encoders import hf_model, hf_run, random_batch, save_tiny
from tiny_seq2seq import padded_batch
from tiny_seq2seq import save_tiny as save_tiny_seq2seq
from tolerance import assert_close, model_terms

INTERNALS = ("weights", "output")  # one internals choice for every encoder forward here: fewer compiles
# bert-2x4 (L=2, H=4): different counts per layer with one head left; a layer with no head.
PATTERNS = {
    "counts-3-1": [[1, 0, 1, 1], [0, 1, 0, 0]],
    "no-head-in-layer-0": [[0, 0, 0, 0], [1, 1, 0, 1]],
}


def _close(got, want, config, *lengths):
    """A pruned model (fewer heads: other shapes, so float32 sums in other orders) vs the masked one."""
    assert_close(got, want, terms=model_terms(config, *lengths))


def _size(folder) -> int:
    return (Path(folder) / "model.safetensors").stat().st_size


def _numel(folder) -> int:
    """Parameters in a folder's model.safetensors (integer buffers such as position ids left out)."""
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), framework="numpy") as f:
        return sum(f.get_tensor(k).size for k in f.keys() if f.get_tensor(k).dtype.kind == "f")


def _masked(model, keep):
    """The unpruned model with the dropped heads' outputs zeroed (b_O still passes)."""
    return Interventions(head_gates=jnp.asarray(keep, jnp.float32))


@pytest.fixture(scope="module")
def bert_cls(tmp_path_factory):
    """Tiny BERT with pooler and a 3-class classification head (BertForSequenceClassification)."""
    folder = save_tiny(tmp_path_factory.mktemp("bert-cls"), "bert-2x4", head="cls")
    return jattn.load(folder, use_cache=False)


@pytest.fixture(scope="module")
def batch(bert_cls):
    return random_batch(bert_cls.config, [9, 5, 3], seed=3, pairs=True)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pruned_equals_masked_encoder(bert_cls, batch, name):
    keep = np.array(PATTERNS[name], bool)
    pruned = remove_heads(bert_cls, keep)
    counts = keep.sum(1)
    H_slots = max(1, counts.max())
    assert pruned.config.num_heads == H_slots and pruned.config.pruned.counts == tuple(counts)
    assert pruned.params["layers"]["attention"]["query"]["kernel"].shape == (2, 32, H_slots, 8)  # (L, D, H', d_h)
    ref = bert_cls.forward(batch, _masked(bert_cls, keep), internals=INTERNALS)
    out = pruned.forward(batch, internals=INTERNALS)
    _close(out.last_hidden_state, ref.last_hidden_state, bert_cls.config, 9)
    _close(out.logits, ref.logits, bert_cls.config, 9)
    for layer in range(2):  # real heads: the same attention as in the unpruned model
        slots = np.flatnonzero(keep[layer])
        if len(slots):
            _close(out.attentions[layer][:, : len(slots)], ref.attentions[layer][:, slots], bert_cls.config, 9)
        else:  # no head left: the attention sublayer adds its out bias only
            bias = pruned.params["layers"]["attention"]["out"]["bias"][layer]
            np.testing.assert_array_equal(out.internals["output"][layer], np.broadcast_to(bias, (3, 9, 32)))


def test_slot_maps(bert_cls):
    config = remove_heads(bert_cls, np.array(PATTERNS["counts-3-1"], bool)).config
    np.testing.assert_array_equal(original_heads(config)["encoder"], [[0, 2, 3], [1, -1, -1]])
    np.testing.assert_array_equal(real_heads(config)["encoder"], [[1, 1, 1], [1, 0, 0]])


def test_pruned_equals_masked_roberta(tmp_path):
    """RoBERTa, with its dense-tanh classification head, left with one head per layer."""
    model = jattn.load(save_tiny(tmp_path, "roberta-2x4", head="cls"), use_cache=False)
    keep = np.array([[0, 0, 1, 0], [1, 0, 0, 0]], bool)
    batch = random_batch(model.config, [8, 6], seed=4)
    ref = model.forward(batch, _masked(model, keep), internals=None)
    out = remove_heads(model, keep).forward(batch, internals=None)
    _close(out.last_hidden_state, ref.last_hidden_state, model.config, 8)
    _close(out.logits, ref.logits, model.config, 8)


def test_export_round_trip_and_further_pruning(bert_cls, batch, tmp_path):
    keep = np.array(PATTERNS["counts-3-1"], bool)
    folder = export_pruned(bert_cls, keep, tmp_path / "pruned")
    hf_config = json.loads((folder / "config.json").read_text())
    assert hf_config["pruned_heads"] == {"0": [1], "1": [0, 2, 3]} and hf_config["num_attention_heads"] == 4
    assert _size(folder) < _size(bert_cls.source)
    loaded = jattn.load(folder, use_cache=False)
    assert loaded.config.pruned == remove_heads(bert_cls, keep).config.pruned and loaded.config.num_labels == 3
    ref = bert_cls.forward(batch, _masked(bert_cls, keep), internals=INTERNALS)
    out = loaded.forward(batch, internals=INTERNALS)
    _close(out.last_hidden_state, ref.last_hidden_state, bert_cls.config, 9)
    _close(out.logits, ref.logits, bert_cls.config, 9)
    # Prune the pruned model further, by its own slots: layer 0 slots hold heads 0, 2, 3; layer 1 slot 0 head 1.
    again = export_pruned(loaded, np.array([[1, 0, 1], [0, 0, 0]], bool), tmp_path / "again")
    assert json.loads((again / "config.json").read_text())["pruned_heads"] == {"0": [1, 2], "1": [0, 1, 2, 3]}
    both = np.array([[1, 0, 0, 1], [0, 0, 0, 0]], bool)
    ref2 = bert_cls.forward(batch, _masked(bert_cls, both), internals=INTERNALS)
    out2 = jattn.load(again, use_cache=False).forward(batch, internals=INTERNALS)
    _close(out2.logits, ref2.logits, bert_cls.config, 9)
    # The fine-tuning exporter writes a pruned model's config correctly too (original heads + pruned_heads).
    from jattn.training.finetune import save_classifier

    saved = jattn.load(save_classifier(loaded, tmp_path / "saved"), use_cache=False)
    _close(saved.forward(batch, internals=INTERNALS).logits, ref.logits, bert_cls.config, 9)


def _hf_prune(model, keep: np.ndarray, d_h: int):
    """What transformers 4.x's ``prune_heads`` did, with HF's own ``prune_linear_layer``: keep the
    rows of q/k/v and the columns of the output dense that belong to the kept heads."""
    import torch
    from transformers.pytorch_utils import prune_linear_layer

    for layer, row in zip(model.bert.encoder.layer, keep):
        index = torch.tensor([h * d_h + i for h in np.flatnonzero(row) for i in range(d_h)], dtype=torch.long)
        attn = layer.attention
        for name in ("query", "key", "value"):
            setattr(attn.self, name, prune_linear_layer(getattr(attn.self, name), index, dim=0))
        attn.output.dense = prune_linear_layer(attn.output.dense, index, dim=1)
    return model


def test_bert_export_is_hugging_face_head_pruning(tmp_path):
    """Transformers 5 no longer prunes heads (nor reads pruned_heads); its pruning primitive
    still exists, so the oracle is BertForSequenceClassification pruned by hand as v4 did it."""
    from safetensors.numpy import load_file

    source = save_tiny(tmp_path / "src", "bert-2x4", head="cls", seed=1)
    model = jattn.load(source, use_cache=False)
    keep = np.array([[1, 0, 1, 1], [0, 0, 1, 0]], bool)
    folder = export_pruned(model, keep, tmp_path / "pruned")
    oracle = _hf_prune(hf_model(source, head="cls"), keep, model.config.head_dim)
    theirs = {k: v.numpy() for k, v in oracle.state_dict().items()}
    ours = load_file(str(folder / "model.safetensors"))
    assert set(theirs) - set(ours) <= {"bert.embeddings.position_ids", "bert.embeddings.token_type_ids"}
    for key, value in ours.items():
        np.testing.assert_array_equal(value, theirs[key], err_msg=key)
    batch = random_batch(model.config, [7, 4], seed=5)
    ref = hf_run(oracle, batch)
    out = jattn.load(folder, use_cache=False).forward(batch, internals=None)
    _close(out.logits, ref.logits, model.config, 7)  # jattn vs PyTorch
    _close(out.last_hidden_state, ref.hidden_states[-1], model.config, 7)


def test_bad_keep_masks(bert_cls):
    config = bert_cls.config
    cases = [
        (np.ones((2, 3), bool), "shape"),
        (np.full((2, 4), 0.5), "bool mask"),
        ({"encoder": np.ones((2, 4), bool)}, "not a dict"),
        ("all", "shape"),
    ]
    for keep, message in cases:
        with pytest.raises(ValueError, match=message):
            check_keep(config, keep)
    np.testing.assert_array_equal(check_keep(config, np.eye(2, 4, dtype=int))["encoder"], np.eye(2, 4, dtype=bool))
    pruned = remove_heads(bert_cls, np.array(PATTERNS["counts-3-1"], bool))
    with pytest.raises(ValueError, match="padding slots"):  # layer 1 has one head in three slots
        check_keep(pruned.config, np.ones((2, 3), bool))


def test_bad_pruned_checkpoints(bert_cls, tmp_path):
    folder = export_pruned(bert_cls, np.array(PATTERNS["counts-3-1"], bool), tmp_path / "pruned")
    hf_config = json.loads((folder / "config.json").read_text())
    for bad, error, message in (({"0": [1], "2": [0]}, ConfigError, "outside the model"),
                                ({"0": ["x"]}, ConfigError, "integers"),
                                ({"0": [1, 2]}, ConversionError, "wrong shape")):  # config and weights disagree
        broken = tmp_path / "broken"
        shutil.copytree(folder, broken, dirs_exist_ok=True)
        (broken / "config.json").write_text(json.dumps(dict(hf_config, pruned_heads=bad)))
        with pytest.raises(error, match=message):
            jattn.load(broken, use_cache=False)


# Marian (tiny): encoder 2 layers x 4 heads, decoder 3 layers x 2 heads; FSMT: 2 x 4 and 2 x 4.
SEQ2SEQ_KEEP = {
    "marian": {"encoder": [[1, 0, 0, 1], [0, 1, 0, 0]], "decoder": [[1, 0], [0, 0], [0, 1]],
               "cross": [[0, 1], [1, 0], [0, 0]]},
    "fsmt": {"encoder": [[1, 1, 1, 0], [0, 0, 0, 0]], "cross": [[0, 0, 1, 0], [1, 0, 1, 1]]},  # decoder: all kept
}


@pytest.fixture(scope="module", params=sorted(SEQ2SEQ_KEEP))
def seq2seq(request, tmp_path_factory):
    folder = save_tiny_seq2seq(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, jattn.load(folder, use_cache=False)


def test_seq2seq_export_equals_masked(seq2seq, tmp_path):
    kind, model = seq2seq
    keep = {k: np.array(v, bool) for k, v in SEQ2SEQ_KEEP[kind].items()}
    folder = export_pruned(model, keep, tmp_path / "pruned")
    assert _size(folder) < _size(model.source)
    loaded = jattn.load(folder, use_cache=False)
    full = check_keep(model.config, keep)
    assert [p.counts for p in loaded.config.pruned] == [tuple(full[k].sum(1)) for k in ("encoder", "decoder", "cross")]
    batch = padded_batch(model.config, seed=2)
    masked = {k: _masked(model, m) for k, m in full.items()}
    ref, out = model.forward(batch, masked, internals=None), loaded.forward(batch, internals=None)
    _close(out.encoder_last_hidden_state, ref.encoder_last_hidden_state, model.config, 9, 7)
    _close(out.decoder_last_hidden_state, ref.decoder_last_hidden_state, model.config, 9, 7)
    _close(out.logits, ref.logits, model.config, 9, 7)
    if kind == "marian":  # cached decoding with fewer decoder slots (1) than heads (2) of width d_model / 2
        ids, mask = batch["input_ids"], batch["attention_mask"]
        np.testing.assert_array_equal(loaded.generate(ids, mask, max_length=8).sequences,
                                      model.generate(ids, mask, max_length=8, interventions=masked).sequences)


def test_seq2seq_bad_keep_masks(seq2seq):
    _, model = seq2seq
    L = model.config.encoder_layers
    with pytest.raises(ValueError, match="dict of keep masks"):
        check_keep(model.config, np.ones((L, model.config.encoder_heads), bool))
    with pytest.raises(ValueError, match="unknown"):
        check_keep(model.config, {"self": np.ones((L, model.config.encoder_heads), bool)})
    with pytest.raises(ValueError, match=r"keep\['cross'\] must have shape"):
        check_keep(model.config, {"cross": np.ones((L + 5, model.config.decoder_heads), bool)})


@pytest.mark.slow
def test_minilm_half_pruned(minilm, tmp_path):
    """The real MiniLM (6 x 12) with half of its heads removed at random, one layer left with one
    head: the exported folder reads back and equals the masked model on real sentences."""
    from jattn.cli.demo import sample_sentences

    keep = np.random.default_rng(0).random((6, 12)) < 0.5
    keep[2] = np.arange(12) == 7
    folder = export_pruned(minilm, keep, tmp_path / "minilm")
    D, d_h = 384, 32  # a removed head takes d_h columns of W_Q, W_K, W_V, their biases and d_h rows of W_O
    assert _numel(minilm.source) - _numel(folder) == (~keep).sum() * (4 * D * d_h + 3 * d_h)
    batch = minilm.tokenize(sample_sentences()[:16])
    ref = minilm.forward(batch, _masked(minilm, keep), internals=None)
    out = jattn.load(folder, use_cache=False).forward(batch, internals=None)
    _close(out.last_hidden_state, ref.last_hidden_state, minilm.config, batch.input_ids.shape[1])


@pytest.mark.slow
def test_multi30k_half_pruned(tmp_path):
    """The committed Multi30k fr->en model with half of each attention type's heads removed:
    teacher-forced outputs and beam-search translations equal the masked model's."""
    model = jattn.load(Path(__file__).parents[1] / "checkpoints" / "multi30k-fr-en-6x8", use_cache=False)
    rng = np.random.default_rng(0)
    shapes = {"encoder": (model.config.encoder_layers, model.config.encoder_heads),
              "decoder": (model.config.decoder_layers, model.config.decoder_heads),
              "cross": (model.config.decoder_layers, model.config.decoder_heads)}
    keep = {k: rng.random(s) < 0.5 for k, s in shapes.items()}
    folder = export_pruned(model, keep, tmp_path / "nmt")
    pruned = jattn.load(folder, use_cache=False)
    assert _size(folder) < _size(model.source)
    src = ["Un homme fait du vélo dans la rue.", "Deux enfants jouent au ballon sur la plage."]
    enc = model.tokenizer(src, text_target=["A man rides a bike.", "Two kids play ball on the beach."],
                          padding=True, return_tensors="np")
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
             "decoder_input_ids": np.concatenate([np.full((2, 1), model.config.decoder_start_token_id),
                                                  enc["labels"][:, :-1]], 1)}
    masked = {k: _masked(model, m) for k, m in keep.items()}
    ref, out = model.forward(batch, masked, internals=None), pruned.forward(batch, internals=None)
    _close(out.logits, ref.logits, model.config, *(batch[k].shape[1] for k in ("input_ids", "decoder_input_ids")))
    ids, mask = enc["input_ids"], enc["attention_mask"]
    np.testing.assert_array_equal(pruned.generate(ids, mask, num_beams=4, max_length=32).sequences,
                                  model.generate(ids, mask, num_beams=4, max_length=32, interventions=masked).sequences)


def test_a_step_is_whole_heads_and_a_step_under_half_a_head_is_refused():
    from jattn.sweeps.pruning_curve import heads_per_step

    assert (heads_per_step(0.1, 144), heads_per_step(0.05, 72), heads_per_step(1.0, 6)) == (14, 4, 6)
    with pytest.raises(
        ValueError, match=r"step 0.003 of 144 heads is 0.43 of a head per step. Fix: pass step ≥ 0.0069"
    ):
        heads_per_step(0.003, 144)


def test_a_curve_on_a_pruned_model_counts_its_heads_not_its_padding_slots(bert_cls, tmp_path):
    """A model pruned before has padding slots (layer 1 of counts-3-1 keeps 1 head in 3 slots):
    they are not heads, so the curve's shares, its steps and the CLI's report count the 4 heads
    left, never mask a padding slot, and results.json names the masked heads by their index
    before any pruning (null: removed before)."""
    from jattn.cli import main
    from jattn.sweeps.pruning_curve import held, prune

    loaded = jattn.load(export_pruned(bert_cls, np.array(PATTERNS["counts-3-1"], bool), tmp_path / "pruned"),
                        use_cache=False)
    assert held(loaded).tolist() == [True, True, True, True, False, False]  # (L, H') = (2, 3) slots
    seen = []
    metric = lambda m: seen.append(np.array(m["encoder"])) or 0.0  # noqa: E731
    scores = np.array([[3.0, 2.0, 5.0], [4.0, 0.0, 0.0]])  # padding slots score lowest, as importance gives them
    curve = prune(loaded, [("a", 0)], metric, scores=scores, step=0.25)
    assert [f for f, _ in curve] == [0.0, 0.25, 0.5, 0.75, 1.0]  # one of the 4 heads per step
    assert [m[1, 1:].tolist() for m in seen] == [[0.0, 0.0]] * 5  # padding slots: never counted as kept heads
    assert seen[1].tolist() == [[1, 0, 1], [1, 0, 0]]  # the lowest-scored head first, not a padding slot
    data = tmp_path / "data.tsv"
    data.write_text("the cat sat .\t0\na dog\t2\nbirds fly south\t1\n")
    main(["prune", "--model", str(tmp_path / "pruned"), "--input", str(data), "--dev", str(data),
          "--out", str(tmp_path / "curve"), "--step", "0.25", "--estimator", "example", "--batch-size", "4"])
    report = (tmp_path / "curve" / "report.md").read_text()
    assert "1 of the 4 heads (25.0%) per step" in report
    doc = json.loads((tmp_path / "curve" / "results.json").read_text())
    assert [f for f, _ in doc["curve"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    first = doc["masks"][0]["encoder"]  # (L, 4): heads by index before pruning, null where removed before
    assert first == [[1.0, None, 1.0, 1.0], [None, 1.0, None, None]]
    assert [sum(v for row in m["encoder"] for v in row if v is not None) for m in doc["masks"]] == [4, 3, 2, 1, 0]
