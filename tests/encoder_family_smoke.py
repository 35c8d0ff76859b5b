"""What each newly added encoder family's tests run besides parity (``encoder_family_parity``):
tiny tokenizers to make a random checkpoint a complete model folder (a SentencePiece-style
Unigram vocabulary for XLM-R and ALBERT, MiniLM's WordPiece files for DistilBERT, a word-level tokenizer.json for
ModernBERT); the masked-LM
logits against Hugging Face's; the HF round trip (``to_hf_state_dict`` ∘ convert is the identity
on the checkpoint's tensors, and HF builds from ``to_hf_config`` a model that agrees); ``jattn
analyze`` from the command line (attention weights, entropy, norms, value zeroing: the encoder's
registered methods; ALTI, which no encoder method registers, through ``jattn.attributions``) and
``jattn.patch_heads`` from Python on the folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

import jattn
from tiny_encoders import TOKENIZER_FILES, hf_run
from tolerance import assert_close, model_terms

WORDS = ("the cat sat on mat alice met bob then left he stayed short a dog saw , . ? ! and of to in it was "
         "is").split()
TEXTS = ["the cat sat on the mat .", ("alice met bob , then left .", "he stayed ."), "short .",
         "a dog saw the cat and the cat saw it ."]
CLEAN = ["alice met bob then left .", "the cat saw the dog ."]
CORRUPTED = ["bob met alice then left .", "the dog saw the cat ."]  # the same tokens, other order
POSITIONS = 130  # a folder's position table: the default max_length (128) fits, whatever the scheme


def unigram_tokenizer(folder: Path, kind: str) -> int:
    """Save a tiny Unigram (SentencePiece-style) tokenizer of Hugging Face class ``kind``
    ("xlm-roberta": <s> <pad> </s> <unk> first, <mask> last; "albert": <pad> <unk> [CLS] [SEP]
    first, [MASK] last; "deberta-v2": [PAD] [CLS] [SEP] [UNK] first, [MASK] last, as DeBERTa-v3's
    spm.model) into ``folder``; returns its size, the model's vocabulary size."""
    from transformers import AlbertTokenizer, DebertaV2Tokenizer, XLMRobertaTokenizer

    pieces = sorted({"▁" + w for w in WORDS} | set(WORDS) | set("abcdefghijklmnopqrstuvwxyz"))
    scores = [(p, -1.0 - len(p) / 10) for p in pieces]  # longer pieces score lower: words stay whole
    if kind == "xlm-roberta":
        vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *scores, ("<mask>", 0.0)]
        tok = XLMRobertaTokenizer(vocab=vocab)
    elif kind == "deberta-v2":
        vocab = [("[PAD]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[UNK]", 0.0), *scores, ("[MASK]", 0.0)]
        tok = DebertaV2Tokenizer(vocab=vocab, unk_id=3)
    else:
        vocab = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), *scores, ("[MASK]", 0.0)]
        tok = AlbertTokenizer(vocab=vocab)
    tok.save_pretrained(str(folder))
    return len(tok)


def wordlevel_tokenizer(folder: Path, size: int = 80) -> int:
    """Save a word-level ``tokenizer.json`` with [CLS] A [SEP] (B [SEP]) templates into ``folder``: [CLS] [PAD]
    [SEP] at 0, 1, 2 (ModernBERT's cls / pad / sep ids), ``WORDS``, then made-up words up to ``size`` tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]", *dict.fromkeys(WORDS)]
    tokens += [f"w{i}" for i in range(size - len(tokens))]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 0), ("[SEP]", 2)])
    PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                            unk_token="[UNK]", mask_token="[MASK]").save_pretrained(folder)
    return size


def wordpiece_tokenizer(folder: Path) -> int:
    """Copy MiniLM's WordPiece tokenizer files (30522 tokens) into ``folder``; returns the size."""
    from jattn.models.load import default_model_path

    for name in TOKENIZER_FILES:
        shutil.copy(default_model_path() / name, Path(folder) / name)
    return 30522


def check_mlm_logits(model, oracle, batch: dict, types: bool = True, transform: bool = True,
                     real_rows: bool = False) -> None:
    """``forward(heads=("mlm_logits",))`` against HF's ``*ForMaskedLM`` logits (``real_rows``:
    ``encoder_family_parity.rows``); ``transform``: the tolerance counts the transform's sum over D."""
    from encoder_family_parity import rows

    inputs = batch if types else {k: v for k, v in batch.items() if k != "token_type_ids"}
    ours = model.forward(batch, internals=None, heads=("mlm_logits",)).mlm_logits
    n = batch["input_ids"].shape[1]
    terms = model_terms(model.config, n) + (model.config.hidden_size if transform else 0)  # one more sum over D
    assert_close(rows(ours, batch, 1, real_rows), rows(hf_run(oracle, inputs).logits, batch, 1, real_rows), terms=terms)


def check_round_trip(model, oracle, head: str, batch: dict, folder: Path, types: bool = True,
                     same_keys: bool = True, drop: tuple = ("position_ids", "token_type_ids")) -> None:
    """The export of a loaded model: with ``same_keys`` its tensors are the checkpoint's (but for the keys
    containing a string of ``drop``, which the export leaves out), bit for bit; HF loads the folder written
    from ``to_hf_state_dict`` and ``to_hf_config`` and computes what the source computes (HF's own output
    compared exactly), and jattn reads it back."""
    from safetensors.numpy import save_file

    from jattn.io.hf import read_state_dict
    from jattn.nn.state import to_arrays
    from tiny_encoders import hf_model

    state = model.family.to_hf_state_dict(to_arrays(model.params), model.config)
    if same_keys:
        original = {k: v for k, v in read_state_dict(model.source).items()
                    if not any(d in k for d in drop)}
        assert set(state) == set(original)
        for k, v in state.items():
            np.testing.assert_array_equal(v, original[k], err_msg=k)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.family.to_hf_config(model.config)))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    inputs = batch if types else {k: v for k, v in batch.items() if k != "token_type_ids"}
    again, want = hf_run(hf_model(folder, head), inputs), hf_run(oracle, inputs)
    out = "logits" if head != "base" else "last_hidden_state"
    np.testing.assert_array_equal(getattr(again, out).numpy(), getattr(want, out).numpy())
    back = jattn.load(folder, tokenizer=False, use_cache=False)
    np.testing.assert_array_equal(back.forward(batch, internals=None).last_hidden_state,
                                  model.forward(batch, internals=None).last_hidden_state)


def check_analyze_cli(folder: Path, out: Path, layers: int, heads: int) -> dict:
    """``jattn analyze --methods weights,entropy,norms,alti,value-zeroing`` on a small corpus:
    per-head statistics (L, H), finite, ALTI's rolled-out class shares summing to 1, and the
    figures written; then ALTI (Ferrando et al. 2022a) of the same texts by ``jattn.attributions``:
    (L, b, n, n) maps, finite, each real token's row summing to 1 over the real tokens. Returns
    results.json."""
    from jattn.cli import main

    corpus = Path(out).parent / f"{Path(out).name}-corpus.txt"
    corpus.write_text("\n".join(t if isinstance(t, str) else "\t".join(t) for t in TEXTS) + "\n")
    main(["analyze", "--model", str(folder), "--input", str(corpus), "--methods",
          "weights,entropy,norms,alti,value-zeroing", "--out", str(out), "--batch-size", "2"])
    doc = json.loads((Path(out) / "results.json").read_text())
    assert doc["meta"]["segments"] == len(TEXTS)
    for name in ("attn_to_cls", "attn_to_sep", "entropy"):
        assert doc[name]["shape"] == [layers, heads], name
    for name, entry in doc.items():
        if name != "meta" and isinstance(entry, dict) and "value" in entry:
            assert np.isfinite(np.asarray(entry["value"], float)).all(), name
    shares = np.asarray(doc["alti_class"]["value"])  # (L, classes)
    assert_close(shares.sum(-1), np.ones(layers), terms=layers * heads, scale=1.0)
    methods = {k for k in doc if k != "meta"}
    assert any("norm" in k for k in methods) and any("zero" in k for k in methods), sorted(methods)
    assert list((Path(out) / "figures").glob("*.png"))
    model = jattn.load(folder, use_cache=False)
    batch = model.tokenize(TEXTS)
    alti = jattn.attributions(model, TEXTS)["encoder"]["alti"]  # (L, b, n, n)
    real = batch.attention_mask.astype(bool)  # (b, n)
    assert alti.shape == (layers, *real.shape, real.shape[1]) and np.isfinite(alti).all()
    sums = alti.sum(-1)[:, real]  # (L, real tokens)
    assert_close(sums, np.ones_like(sums), terms=model_terms(model.config, real.shape[1]), scale=1.0)
    return doc


def check_patch_heads(model) -> np.ndarray:
    """``jattn.patch_heads`` with a metric on the [CLS] hidden state: (L, H) effects, finite, not
    all zero for pairs of different texts, zero to float32 rounding when clean = corrupted (the
    patched and the plain run are two programs: their metrics may round differently)."""
    direction = np.random.default_rng(0).normal(size=model.config.hidden_size).astype(np.float32)
    metric = lambda out: out["last_hidden_state"][:, 0] @ direction  # noqa: E731
    L, H = model.config.num_layers, model.config.num_heads
    effects = jattn.patch_heads(model, CLEAN, CORRUPTED, metric)
    effects = effects["encoder"] if isinstance(effects, dict) else effects
    assert effects.shape == (L, H) and np.isfinite(effects).all() and np.abs(effects).max() > 0
    same = jattn.patch_heads(model, CLEAN, CLEAN, metric)
    n = max(len(model.tokenize([t]).input_ids[0]) for t in CLEAN)
    # |metric| ≤ |h|·|w| with a LayerNorm output |h| ≈ sqrt(D) (its scale and shift O(1))
    scale = float(np.sqrt(model.config.hidden_size) * np.linalg.norm(direction))
    assert_close(same["encoder"] if isinstance(same, dict) else same, 0.0, terms=2 * model_terms(model.config, n),
                 scale=scale)
    return effects


def check_new_classifier_export(model, folder: Path) -> None:
    """A fresh classification head on a loaded base model (``finetune.with_classifier``, the
    family's ``config.classifier``), exported by ``finetune.save_classifier``: HF's
    ``AutoModelForSequenceClassification`` reads the folder and gives jattn's logits."""
    from jattn.training.finetune import save_classifier, with_classifier
    from tiny_encoders import hf_model

    tuned = with_classifier(model, 3, seed=1)
    out = save_classifier(tuned, folder, label_names=["a", "b", "c"])
    batch = tuned.tokenize(TEXTS)
    inputs = {k: v for k, v in batch.inputs().items() if k != "token_type_ids" or model.config.type_vocab_size}
    n = batch.input_ids.shape[1]
    assert_close(tuned.forward(batch.inputs(), internals=None).logits, hf_run(hf_model(out, "cls"), inputs).logits,
                 terms=model_terms(tuned.config, n))
    assert jattn.load(out, use_cache=False).config.num_labels == 3
