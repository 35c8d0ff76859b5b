"""Head importance (Michel et al. 2019) against HF PyTorch in float64 with gates inserted by hooks:
central finite differences of the summed loss (batch estimator) and a per-example autograd loop
(example and token estimators), on a tiny random BERT classifier and a tiny random Marian model;
pruning curves against an explicit loop of masked evaluations."""

from __future__ import annotations

import json
import numpy as np
import pytest
import torch

import jattn
import tiny_seq2seq
from hf_head_gates import gated
from jattn.io.parallel import encode
from jattn.nn.interventions import Interventions
from jattn.sweeps.importance import ESTIMATORS, importance
from jattn.sweeps.pruning_curve import choose, classification_metric, prunable_fraction, prune
from tiny_encoders import hf_model, save_tiny
from tolerance import assert_close, model_terms

TEXTS = ["the cat sat on the mat .", "a dog", "hello there my friend , how are you today ?", "yes",
         "birds fly south in winter"]
LABELS = [0, 2, 1, 1, 0]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("cls"), "bert-2x4", head="cls")
    return jattn.load(folder, use_cache=False), hf_model(folder, "cls").double()


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tiny_seq2seq.save_tiny(tmp_path_factory.mktemp("marian"), "marian")
    return jattn.load(folder, use_cache=False), tiny_seq2seq.hf_model(folder, "marian").double()


def classifier_cases(model):
    """Per example: (HF inputs, label, {kind: query length})."""
    cases = []
    for text, y in zip(TEXTS, LABELS):
        b = model.tokenize([text], max_length=64)
        inputs = {k: torch.tensor(np.asarray(v), dtype=torch.long) for k, v in b.inputs().items()}
        cases.append((inputs, y, {"encoder": int(b.attention_mask.sum())}))
    return cases


def classifier_loss(hf, case, gates):
    inputs, y, _ = case
    with gated(hf, gates):
        logits = hf(**inputs).logits  # (1, C)
    return torch.nn.functional.cross_entropy(logits, torch.tensor([y]), reduction="sum")


def translation_cases(model, pairs):
    src = encode(model.tokenizer, [s for s, _ in pairs], 64)
    tgt = encode(model.tokenizer, [t for _, t in pairs], 64, target=True)
    cases = []
    for x, y in zip(src, tgt):
        dec = np.concatenate([[model.config.decoder_start_token_id], y[:-1]])
        inputs = {"input_ids": torch.tensor(x[None], dtype=torch.long),
                  "decoder_input_ids": torch.tensor(dec[None], dtype=torch.long)}
        cases.append((inputs, torch.tensor(y, dtype=torch.long), {"encoder": len(x), "decoder": len(y),
                                                                   "cross": len(y)}))
    return cases


def translation_loss(hf, case, gates):
    inputs, y, _ = case
    with gated(hf, gates):
        logits = hf(**inputs).logits[0]  # (t, V)
    return torch.nn.functional.cross_entropy(logits, y, reduction="sum")


def reference(hf, cases, loss, shapes, estimator, mask=None, eps=1e-4):
    """Σ over the estimator's units of |ξ ∂L/∂ξ| at ξ = mask, in float64 — finite differences of
    the summed loss for "batch", autograd one example at a time otherwise."""
    mask = {k: torch.ones(s, dtype=torch.float64) if mask is None or k not in mask
            else torch.tensor(mask[k], dtype=torch.float64) for k, s in shapes.items()}
    sums = {k: np.zeros(s) for k, s in shapes.items()}
    if estimator == "batch":
        with torch.no_grad():
            for kind, (L, H) in shapes.items():
                for l in range(L):
                    for h in range(H):
                        total = []
                        for sign in (1, -1):
                            g = {k: m.clone() for k, m in mask.items()}
                            g[kind][l, h] += sign * eps
                            total.append(sum(float(loss(hf, c, g)) for c in cases))
                        sums[kind][l, h] = abs(mask[kind][l, h].item() * (total[0] - total[1]) / (2 * eps))
        return sums
    for case in cases:
        gates = {}
        for kind, (L, H) in shapes.items():
            g = mask[kind][:, None, :]  # (L, 1, H)
            if estimator == "token":
                g = g[..., None].repeat(1, 1, 1, case[2][kind])  # (L, 1, H, q)
            gates[kind] = g.clone().requires_grad_(True)
        loss(hf, case, gates).backward()
        for kind, g in gates.items():
            grad = (g.grad * g.detach()).abs().numpy()  # ξ ∂L/∂ξ
            sums[kind] += grad.sum(axis=(1, 3) if estimator == "token" else 1)
    return sums


def grad_terms(model, examples: int) -> int:
    """jattn's float32 gradient (forward and backward on ≤ 64 tokens, the loss's softmax over the
    outputs), summed over the examples, against HF in float64 (tests/tolerance.py)."""
    c = model.config
    return 2 * (model_terms(c, 64, 64) + (c.tgt_vocab_size if hasattr(c, "d_model") else c.num_labels)) + examples


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_classifier_importance_equals_hf(classifier, estimator):
    model, hf = classifier
    cases = classifier_cases(model)
    L, H = model.config.num_layers, model.config.num_heads
    mask = np.ones((L, H), np.float32)
    mask[0, 1] = 0.0  # the gradient is taken at the masked model; the masked head gets 0
    got = importance(model, list(zip(TEXTS, LABELS)), estimator=estimator, normalize=False, mask=mask,
                     batch_size=8, progress=False)["encoder"]  # one batch: the batch estimator sums all examples
    sums = reference(hf, cases, classifier_loss, {"encoder": (L, H)}, estimator, {"encoder": mask})["encoder"]
    count = np.full((L, 1), float(len(cases)))
    if estimator == "token":  # tokens, but examples for the last layer of a [CLS] classifier
        count[:-1] = sum(c[2]["encoder"] for c in cases)
    assert_close(got, sums / count, terms=grad_terms(model, len(cases)))
    assert got[0, 1] == 0.0
    normalized = importance(model, list(zip(TEXTS, LABELS)), estimator=estimator, mask=mask, batch_size=8,
                            progress=False)["encoder"]
    assert_close(normalized, got / np.linalg.norm(got, axis=1, keepdims=True), terms=H)  # float32 norms over H


def test_token_estimator_does_not_depend_on_batching(classifier):
    model, _ = classifier
    examples = list(zip(TEXTS, LABELS))
    a = importance(model, examples, estimator="token", normalize=False, batch_size=2, progress=False)["encoder"]
    b = importance(model, examples, estimator="token", normalize=False, batch_size=8, progress=False)["encoder"]
    assert_close(a, b, terms=grad_terms(model, 2 * len(examples)))  # other batches: other float32 orders


# the batch estimator's probes and sums are the same code for every attention type and model kind
# (jattn.sweeps.importance); the translation model's gradients run here under the token and example
# estimators, the batch estimator against HF on the classifier
@pytest.mark.parametrize("estimator", [e if e != "batch" else pytest.param(e, marks=pytest.mark.slow(
    twin="tests/test_importance.py::test_classifier_importance_equals_hf[batch]")) for e in ESTIMATORS])
def test_translation_importance_equals_hf(marian, estimator):
    import seq2seq_family_analyses as analyses

    analyses.check_importance(*marian, estimator)


def test_mlm_loss_by_default_and_errors(tmp_path):
    model = jattn.load(save_tiny(tmp_path / "mlm", "bert-2x4", head="mlm"), use_cache=False)
    a = importance(model, TEXTS, estimator="example", batch_size=2, progress=False)["encoder"]
    b = importance(model, TEXTS, estimator="example", batch_size=8, progress=False)["encoder"]
    # masked positions are seeded per corpus index; other batches sum in another float32 order
    assert_close(a, b, terms=grad_terms(model, 2 * len(TEXTS)))
    assert_close(np.linalg.norm(a, axis=1), np.ones(len(a)), terms=model.config.num_heads)
    base = jattn.load(save_tiny(tmp_path / "base", "bert-2x4"), use_cache=False)
    with pytest.raises(ValueError, match="neither a classification nor a masked-LM head"):
        importance(base, TEXTS, progress=False)
    with pytest.raises(ValueError, match="unknown importance estimator"):
        importance(model, TEXTS, estimator="head", progress=False)


def test_classifier_needs_labels(classifier):
    with pytest.raises(ValueError, match="pairs with an int label"):
        importance(classifier[0], TEXTS, progress=False)


def explicit_accuracy(model, mask) -> float:
    """Accuracy ×100 with the head mask, one example at a time (no batching, no padding)."""
    iv = Interventions(head_gates=np.asarray(mask, np.float32))
    pred = [int(np.asarray(model.forward(model.tokenize([t], max_length=64), iv).logits).argmax()) for t in TEXTS]
    return 100.0 * np.mean(np.asarray(pred) == np.asarray(LABELS))


@pytest.mark.parametrize("schedule", ["once", "reestimate"])
def test_pruning_curve_equals_explicit_loop(classifier, schedule):
    model, _ = classifier
    examples = list(zip(TEXTS, LABELS))
    metric = classification_metric(model, examples, batch_size=8)
    curve = prune(model, examples, metric, estimator="example", schedule=schedule, step=0.25, batch_size=8)
    L, H = model.config.num_layers, model.config.num_heads
    mask = np.ones((L, H), np.float32)
    want = [[0.0, explicit_accuracy(model, mask)]]
    scores = None
    while mask.any():
        if scores is None or schedule == "reestimate":
            scores = importance(model, examples, estimator="example", mask=mask, batch_size=8, progress=False)[
                "encoder"
            ]
        order = [i for i in np.argsort(scores.ravel(), kind="stable") if mask.ravel()[i]]
        mask.ravel()[order[:2]] = 0.0
        want.append([1 - mask.mean(), explicit_accuracy(model, mask)])
    np.testing.assert_allclose(curve, want)


@pytest.mark.parametrize("schedule", ["once", "reestimate"])
def test_interrupted_curve_resumes_to_the_uninterrupted_one(classifier, schedule, tmp_path):
    """Ctrl-C (or a kill) at any point of a curve with a state file: the same call again resumes
    from the last saved point and returns the uninterrupted curve, importance history and masks;
    other settings are refused."""
    model, _ = classifier
    examples = list(zip(TEXTS, LABELS))
    metric = classification_metric(model, examples, batch_size=8)
    kw = dict(estimator="example", schedule=schedule, step=0.25, batch_size=8)
    history, masks = [], []
    whole = prune(model, examples, metric, history=history, masks_out=masks, **kw)
    calls = []

    def stopping(mask):  # Ctrl-C during the third evaluation
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return metric(mask)

    state = tmp_path / "work" / "curve.json"
    with pytest.raises(KeyboardInterrupt):
        prune(model, examples, stopping, state_file=state, history=[], masks_out=[], **kw)
    assert len(json.loads(state.read_text())["curve"]) == 2  # the points before the interrupted one
    resumed_history, resumed_masks, evaluated = [], [], []
    counting = lambda m: evaluated.append(1) or metric(m)  # noqa: E731
    resumed = prune(model, examples, counting, state_file=state, history=resumed_history, masks_out=resumed_masks,
                    **kw)
    assert resumed == whole and len(evaluated) == len(whole) - 2  # done points are not evaluated again
    for got, want in ((resumed_masks, masks), (resumed_history, history)):  # {"encoder": (L, H)} each
        np.testing.assert_array_equal([x["encoder"] for x in got], [x["encoder"] for x in want])
    with pytest.raises(ValueError, match=r"step=0\.25 \(now 0\.5\)"):
        prune(model, examples, metric, state_file=state, **dict(kw, step=0.5))


def test_keep_one_per_layer_and_fixed_ranking(classifier):
    model, _ = classifier
    examples = list(zip(TEXTS, LABELS))
    seen = []
    metric = lambda m: seen.append(np.array(m["encoder"])) or float(m["encoder"].sum())  # noqa: E731
    L, H = model.config.num_layers, model.config.num_heads
    scores = np.arange(L * H, dtype=float).reshape(L, H)[::-1].copy()  # layer 1 first, then layer 0
    curve = prune(model, examples, metric, scores=scores, step=0.25, keep_one_per_layer=True)
    assert [c[0] for c in curve] == [0.0, 0.25, 0.5, 0.75]  # stops with one head per layer
    assert (seen[-1].sum(1) == 1).all()
    assert seen[1][1].sum() == 2 and seen[1][0].sum() == 4  # lowest scores go first
    with pytest.raises(ValueError, match="cannot be re-estimated"):
        prune(model, examples, metric, scores=scores, schedule="reestimate")


def test_choose_and_prunable_fraction():
    scores = np.array([0.5, 0.1, 0.3, 0.2])
    layer_of = np.array([0, 0, 1, 1])
    assert choose(scores, np.ones(4), layer_of, 2, False) == [1, 3]
    assert choose(scores, np.ones(4), layer_of, 3, True) == [1, 3]
    assert prunable_fraction([[0, 90.0], [0.1, 89.5], [0.2, 88.9], [0.3, 89.8]], 90.0) == 0.1


def test_translation_curve_ranks_all_attention_types_together(marian):
    import seq2seq_family_analyses as analyses

    analyses.check_pruning_curve(marian[0], list(zip(tiny_seq2seq.sentences(3, 1), tiny_seq2seq.sentences(3, 2))))


def test_bleu_metric_equals_sentence_by_sentence_decoding(marian):
    import seq2seq_family_analyses as analyses

    analyses.check_bleu_metric(marian[0], list(zip(tiny_seq2seq.sentences(3, 3), tiny_seq2seq.sentences(3, 4))))


def test_cli_importance_and_prune(classifier, marian, tmp_path):
    import json

    from jattn.cli import main

    model, _ = classifier
    labelled = tmp_path / "train.tsv"
    labelled.write_text("".join(f"{t}\t{y}\n" for t, y in zip(TEXTS, LABELS)))
    main(["importance", "--model", model.source, "--input", str(labelled), "--out", str(tmp_path / "imp"),
          "--estimator", "example", "--max-length", "64", "--batch-size", "8"])
    doc = json.loads((tmp_path / "imp" / "results.json").read_text())
    want = importance(model, list(zip(TEXTS, LABELS)), estimator="example", batch_size=8, progress=False)["encoder"]
    np.testing.assert_allclose(doc["importance"]["value"], want, rtol=1e-6)
    assert (tmp_path / "imp" / "figures" / "heatmap_importance.png").is_file()
    assert "most important" in (tmp_path / "imp" / "report.md").read_text()

    mt, _ = marian
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(tiny_seq2seq.sentences(4, 1)) + "\n")
    tgt.write_text("\n".join(tiny_seq2seq.sentences(4, 2)) + "\n")
    main(["prune", "--model", mt.source, "--format", "parallel", "--input", str(src), str(tgt), "--dev", str(src),
          str(tgt), "--out", str(tmp_path / "prune"), "--step", "0.25", "--batch-size", "4", "--tolerance", "100",
          "--export", str(tmp_path / "pruned")])
    doc = json.loads((tmp_path / "prune" / "results.json").read_text())
    assert [f for f, _ in doc["curve"]] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0], abs=0.03)
    assert doc["prunable_fraction"] == doc["curve"][-1][0]  # tolerance 100: every step is within it
    assert (tmp_path / "prune" / "figures" / "curve.png").is_file() and doc["metric"] == "BLEU (greedy decoding)"
    assert "BLEU (greedy decoding)" in (tmp_path / "prune" / "report.md").read_text()
    heads = sum(L * H for L, H in mt.head_shapes.values())
    assert f"{round(0.25 * heads)} of the {heads} heads (" in (tmp_path / "prune" / "report.md").read_text()
    with pytest.raises(SystemExit, match=rf"--step 0.01 of {heads} heads is .* of a head per step. Fix: pass --step ≥"):
        main(["prune", "--model", mt.source, "--format", "parallel", "--input", str(src), str(tgt), "--dev", str(src),
              str(tgt), "--out", str(tmp_path / "prune-small"), "--step", "0.01"])  # no step of whole heads
    assert not (tmp_path / "prune-work").exists()  # the resumable state goes once the results are written
    pruned = jattn.load(tmp_path / "pruned", use_cache=False)
    assert pruned.params is not None
    with pytest.raises(SystemExit, match="--format parallel"):
        main(["importance", "--model", mt.source, "--input", str(labelled), "--out", str(tmp_path / "bad")])


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory):
    """A tiny random GPT-2 with a byte-level BPE tokenizer trained here on ``TEXTS``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("gpt2")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=2, n_head=4, n_positions=64, n_inner=24,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, initializer_range=0.2)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return jattn.load(folder, use_cache=False), hf_model(folder, "lm").double()


def lm_cases(model):
    """Per text: (HF inputs, None, {kind: query length}) as jattn tokenizes it."""
    cases = []
    for text in TEXTS:
        b = model.tokenize([text], max_length=64)
        inputs = {k: torch.tensor(np.asarray(v), dtype=torch.long) for k, v in b.inputs().items()
                  if k in ("input_ids", "attention_mask")}
        cases.append((inputs, None, {"encoder": int(b.attention_mask.sum())}))
    return cases


def lm_loss(hf, case, gates):
    """The mean next-token cross-entropy of one sequence (jattn.nn.losses.lm_loss)."""
    inputs, _, _ = case
    with gated(hf, gates):
        logits = hf(**inputs).logits[0]  # (n, V)
    if len(logits) < 2:  # one token: nothing predicted, loss 0 (as jattn's)
        return 0.0 * logits.sum()
    return torch.nn.functional.cross_entropy(logits[:-1], inputs["input_ids"][0, 1:], reduction="mean")


# as for the translation model: the causal LM's loss and gradients run here under the token and example
# estimators; the batch estimator's code is the classifier's (test_classifier_importance_equals_hf[batch])
@pytest.mark.parametrize("estimator", [e if e != "batch" else pytest.param(e, marks=pytest.mark.slow(
    twin="tests/test_importance.py::test_classifier_importance_equals_hf[batch]")) for e in ESTIMATORS])
def test_causal_lm_importance_equals_hf(causal_lm, estimator):
    """A causal LM's own loss (next-token cross-entropy) drives Michel et al.'s importance."""
    model, hf = causal_lm
    cases = lm_cases(model)
    L, H = model.config.num_layers, model.config.num_heads
    got = importance(model, TEXTS, estimator=estimator, normalize=False, batch_size=8, progress=False)["encoder"]
    sums = reference(hf, cases, lm_loss, {"encoder": (L, H)}, estimator)["encoder"]
    count = sum(c[2]["encoder"] for c in cases) if estimator == "token" else len(cases)
    assert_close(got, sums / count, terms=2 * (model_terms(model.config, 64) + model.config.vocab_size) + len(cases))
    assert np.abs(got).max() > 0
