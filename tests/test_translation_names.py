"""Statistics of a translation model in its own terms (``jattn analyze``): </s> where an encoder
has [SEP], the start token where it has [CLS], and nothing about a class an attention type never
sees (no [CLS] share of 0 in a Marian source, no NaN start-token entropy); BART's leading source
<s> is its start token. Encoder results keep their names and values."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jattn
from jattn.cli import main
from tiny_bart import save_tiny as save_bart
from tiny_seq2seq import sentences


def analyze(model_folder, tmp_path, name) -> dict:
    src, tgt = tmp_path / f"{name}.src", tmp_path / f"{name}.tgt"
    src.write_text("\n".join(sentences(6, 1)) + "\n")
    tgt.write_text("\n".join(sentences(6, 2)) + "\n")
    out = tmp_path / name
    main(["analyze", "--model", str(model_folder), "--format", "parallel", "--input", str(src), str(tgt), "--out",
          str(out), "--methods", "weights,entropy", "--batch-size", "4", "--max-length", "32"])
    return json.loads((out / "results.json").read_text()), out


def check_terms(doc: dict) -> None:
    for name, stat in doc.items():
        if name == "meta":
            continue
        assert "[CLS]" not in stat["description"] and "[SEP]" not in stat["description"], name
        assert all(v is not None for v in np.ravel(np.asarray(stat["value"], object))), f"{name} holds NaN"


def test_marian_source_has_no_start_token(tiny_marian_folder, tmp_path):
    doc, out = analyze(tiny_marian_folder, tmp_path, "marian")
    check_terms(doc)
    assert "encoder_attn_to_cls" not in doc and "encoder_entropy_cls" not in doc  # Marian's source: no <s>
    assert "decoder_attn_to_cls" in doc and "the start token" in doc["decoder_attn_to_cls"]["description"]
    assert "</s>" in doc["encoder_attn_to_sep"]["description"]
    assert "decoder_attn_to_sep" not in doc  # the decoder input (start + target[:-1]) holds no </s>
    assert {"encoder_attn_to_cls", "decoder_attn_to_sep"} <= set(doc["meta"]["left_out"])
    report = (out / "report.md").read_text()
    assert "[CLS]" not in report and "[SEP]" not in report and "encoder_attn_to_sep" in report


def test_bart_source_start_token_is_its_cls(tmp_path):
    folder = save_bart(tmp_path / "bart-model", "bart")
    doc, _ = analyze(folder, tmp_path, "bart")
    check_terms(doc)
    model = jattn.load(folder, use_cache=False)
    src = model.tokenizer([sentences(6, 1)[0]])["input_ids"][0]
    assert src[0] == model.tokenizer.bos_token_id  # BART's source begins with <s> ...
    for name in ("encoder_attn_to_cls", "encoder_entropy_cls"):  # ... which is its start token
        assert np.isfinite(doc[name]["value"]).all() and np.min(doc[name]["value"]) > 0
    shares = sum(np.asarray(doc[f"encoder_attn_to_{c}"]["value"]) for c in ("cls", "sep", "punct", "other"))
    np.testing.assert_allclose(shares, 1.0, atol=1e-5)  # the classes still partition the keys


def test_encoder_results_keep_their_names(tiny_bert_folder, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat.\nA dog ran, fast.\n")
    main(["analyze", "--model", str(tiny_bert_folder), "--input", str(corpus), "--out", str(tmp_path / "o"),
          "--methods", "weights,entropy", "--max-length", "32"])
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert {"attn_to_cls", "entropy_cls", "sep_to_sep"} <= set(doc) and "left_out" not in doc["meta"]
    assert "[CLS]" in doc["attn_to_cls"]["description"]
    assert (tmp_path / "o" / "report.md").is_file()


@pytest.mark.parametrize("ids,bos,want", [([0, 5, 2], 0, [0, 3, 1]), ([5, 6, 2], None, [3, 3, 1]),
                                          ([5, 0, 2], 0, [3, 3, 1])])
def test_source_start_token_class(ids, bos, want):
    from types import SimpleNamespace

    from jattn.runner.batcher import pair_token_classes

    got = pair_token_classes({}, SimpleNamespace(eos_token_id=2), np.array([ids]), np.ones((1, 3)), False, bos)
    assert got.tolist() == [want]
