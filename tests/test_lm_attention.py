"""``lm-attention`` (a causal LM's first-token, previous-token, self and other shares and row
entropy) and Clark et al.'s ``entropy`` on a causal LM, against a slow reference: Hugging Face
PyTorch's GPT-2 (eager attention) one sequence at a time, unpadded (or left-padded, its real rows
and keys), then Python loops over sequences, layers, heads and rows. Also the refusals (the
method on a bidirectional encoder, [CLS]/[SEP] statistics on a causal LM) and ``jattn analyze``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import jattn
from jattn.runner.protocol import StepContext
from jattn.analyses.lm_attention import LMAttention
from jattn.analyses.weights import ClassAttention, Entropy
from jattn.cli import main
from jattn.runner import run_corpus
from tiny_lm import TEXTS, save_tiny_gpt2
from tolerance import assert_close, model_terms

SHARES = ("lm_first_token", "lm_previous_token", "lm_self", "lm_other")


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(folder, jattn model, HF GPT2LMHeadModel with eager attention)."""
    from transformers import GPT2LMHeadModel

    folder = save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))
    oracle = GPT2LMHeadModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    return folder, jattn.load(folder, use_cache=False), oracle


def hf_maps(oracle, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """HF's attention weights (L, b, H, n, n) float64 of a padded batch, positions from the mask
    (HF ``generate``'s ``cumsum(mask) − 1``, jattn's ``positions="from_mask"``)."""
    import torch

    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 0)  # (b, n)
    with torch.no_grad():
        out = oracle(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask, dtype=torch.long),
                     position_ids=torch.tensor(positions, dtype=torch.long), output_attentions=True)
    return np.stack([a.double().numpy() for a in out.attentions])


def unpadded_maps(model, oracle, texts) -> list[np.ndarray]:
    """Per text as the runner tokenizes it, HF's maps (L, H, n, n) on the unpadded sequence."""
    maps = []
    for text in texts:
        b = model.tokenize([text], max_length=64)
        n = int(b.attention_mask.sum())
        maps.append(hf_maps(oracle, b.input_ids[:, :n], b.attention_mask[:, :n])[:, 0])
    return maps


def reference(maps: list[np.ndarray]) -> dict:
    """The statistics by loops: per sequence the mean over rows i ≥ 1, then over sequences; Clark's
    smoothed entropy over rows i ≥ 0 and the keys j ≤ i."""
    per_seq = {k: [] for k in (*SHARES, "lm_entropy", "lm_entropy_normalised", "lm_entropy_uniform", "entropy",
                               "entropy_uniform")}
    for a in maps:
        L, H, n, _ = a.shape
        seq = {k: np.zeros((L, H)) for k in per_seq}
        for l in range(L):
            for h in range(H):
                rows = {k: [] for k in per_seq}
                for i in range(n):
                    row = a[l, h, i, : i + 1]
                    smooth = (1 - 1e-4) * row + 1e-4 / (i + 1)
                    rows["entropy"].append(-sum(p * math.log(p) for p in smooth))
                    rows["entropy_uniform"].append(math.log(i + 1))
                    if i == 0:
                        continue
                    entropy = -sum(p * math.log(p) for p in row if p > 0)
                    rows["lm_first_token"].append(row[0])
                    rows["lm_previous_token"].append(row[i - 1])
                    rows["lm_self"].append(row[i])
                    rows["lm_other"].append(sum(row[1: i - 1]))
                    rows["lm_entropy"].append(entropy)
                    rows["lm_entropy_normalised"].append(entropy / math.log(i + 1))
                    rows["lm_entropy_uniform"].append(math.log(i + 1))
                for k, v in rows.items():
                    seq[k][l, h] = np.mean(v) if v else np.nan
        for k in per_seq:
            if not np.isnan(seq[k]).all():  # a one-token sequence has no row i ≥ 1
                per_seq[k].append(seq[k])
    out = {k: np.mean(v, 0) for k, v in per_seq.items()}
    for k in ("lm_entropy_uniform", "entropy_uniform"):
        out[k] = out[k][0, 0]
    return out


def test_statistics_equal_hf_loops_on_a_padded_batch(lm):
    """A right-padded batch of unequal lengths (one a single token) through the runner."""
    _, model, oracle = lm
    got = run_corpus(model, TEXTS, [LMAttention(), Entropy()], batch_size=4, max_length=64, progress=False)
    maps = unpadded_maps(model, oracle, TEXTS)
    assert min(a.shape[-1] for a in maps) == 1 and len({a.shape[-1] for a in maps}) >= 3  # padded unequally
    want = reference(maps)
    assert "entropy_cls" not in got.statistics  # a causal LM has no [CLS] row
    for name, value in want.items():
        assert_close(got.statistics[name].value, value, terms=model_terms(model.config, 64), err_msg=name)
    shares = sum(got.statistics[k].value for k in SHARES)  # rows i = 1 count the first token twice
    assert np.all(shares >= 1 - 1e-5) and np.all(got.statistics["lm_entropy_normalised"].value <= 1 + 1e-5)


def test_left_padding_never_enters(lm):
    """The reduce on a left-padded batch: positions count from each sequence's first real token."""
    _, model, oracle = lm
    texts = TEXTS[:3]
    rows = [model.tokenize([t], max_length=64) for t in texts]
    lengths = [int(r.attention_mask.sum()) for r in rows]
    n = max(lengths) + 2
    ids = np.full((len(texts), n), model.config.pad_token_id, np.int32)
    mask = np.zeros((len(texts), n), np.int32)
    for r, (b, m) in enumerate(zip(rows, lengths)):
        ids[r, n - m:], mask[r, n - m:] = b.input_ids[0, :m], 1
    weights = np.asarray(model.forward({"input_ids": ids, "attention_mask": mask}, internals=("weights",)).attentions)
    method = LMAttention()
    ctx = StepContext(None, model.config, {"attention_mask": mask}, {}, None, {"weights": weights}, None, None)
    totals = {k: np.asarray(v, np.float64) for k, v in method.reduce(ctx).items()}
    got = method.finalize(totals, {})
    hf = hf_maps(oracle, ids, mask)  # (L, b, H, n, n)
    want = reference([hf[:, r, :, n - m:, n - m:] for r, m in enumerate(lengths)])
    for name in (*SHARES, "lm_entropy", "lm_entropy_normalised", "lm_entropy_uniform"):
        assert_close(got[name].value, want[name], terms=model_terms(model.config, n), err_msg=name)


def test_refusals(lm, tmp_path):
    """lm-attention refuses a bidirectional encoder; [CLS]/[SEP] statistics and word-level
    methods refuse a causal LM; each saying why and what to choose."""
    from analysis_helpers import tiny_bert

    bert = jattn.load(tiny_bert(tmp_path / "bert"), use_cache=False)
    with pytest.raises(ValueError, match=r"'lm-attention' reads decoder models \(it needs a causal mask.*is a "
                                         r"bidirectional encoder. Fix: choose methods that declare families "
                                         r"including 'encoder'"):
        run_corpus(bert, ["a b"], [LMAttention()], progress=False)
    model = lm[1]
    with pytest.raises(ValueError, match=r"'weights' reads encoder and seq2seq models \(it needs \[CLS\] and \[SEP\]"
                                         r".*causal \(decoder-only\) language model.*lm-attention"):
        run_corpus(model, ["a b"], [ClassAttention()], max_length=64, progress=False)
    with pytest.raises(ValueError, match="'word-entropy' is word-level; a causal .* runs token-level methods only"):
        run_corpus(model, ["a b"], [Entropy("word")], max_length=64, progress=False)


def test_analyze_cli_runs_it_on_a_causal_lm(lm, tmp_path):
    folder = lm[0]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    main(["analyze", "--model", str(folder), "--input", str(corpus), "--methods", "lm-attention,entropy",
          "--out", str(tmp_path / "out"), "--batch-size", "2", "--max-length", "64"])
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["meta"]["segments"] == len(TEXTS)
    for name in (*SHARES, "lm_entropy", "lm_entropy_normalised", "entropy"):
        assert doc[name]["shape"] == [2, 4] and np.isfinite(doc[name]["value"]).all(), name
    assert (tmp_path / "out" / "figures" / "lm_attention.png").is_file()
    assert "first token" in (tmp_path / "out" / "report.md").read_text()
    with pytest.raises(SystemExit, match=r"\[CLS\] and \[SEP\]"):
        main(["analyze", "--model", str(folder), "--input", str(corpus), "--methods", "weights",
              "--out", str(tmp_path / "bad"), "--max-length", "64"])


def test_a_tokenizer_without_a_padding_token_pads_with_end_of_text(lm, tmp_path):
    """GPT-2's own tokenizer has no padding token: batches pad with its end-of-text id, and the
    numbers are those of the folder whose tokenizer names a padding token (padding is masked)."""
    import shutil

    folder = tmp_path / "no_pad"
    shutil.copytree(lm[0], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None}))
    assert jattn.load(folder).tokenizer.pad_token_id is None
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    for name, model in (("with", lm[0]), ("without", folder)):
        main(["analyze", "--model", str(model), "--input", str(corpus), "--methods", "lm-attention",
              "--out", str(tmp_path / name), "--batch-size", "3", "--max-length", "64"])
    with_pad, without = (json.loads((tmp_path / n / "results.json").read_text()) for n in ("with", "without"))
    for name in SHARES:
        assert without[name]["value"] == with_pad[name]["value"], name
