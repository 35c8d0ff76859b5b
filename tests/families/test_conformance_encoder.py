"""The conformance checks of every encoder family of the table (``conformance_table``) against Hugging Face
PyTorch on its tiny random config, padded sentence pairs: the config read, outputs and every attention weight,
head gates per head / example / token, disabled heads, pruning (in memory and exported), the classification
head with ``classify`` and the disabling sweep's suffix, the masked-LM head, the HF round trip, refused
configs, and on a complete folder (a tiny tokenizer) ``jattn analyze``, ``jattn.patch_heads`` and a new
classification head exported. Each family's checkpoints and compiled programs are shared by its checks (one
module-scoped ``lab``); the checks that take no parameters of their own run in one test, ``test_check``. Also:
the table holds every family of the registry."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

import jattn
from conformance_table import FAMILIES, cases, variants
from family_pairs import check_refused, save
from encoder_family_parity import (check_classifier, check_disabled, check_gates, check_outputs, check_pruned,
                                   load_pair, pair_batch)
from encoder_family_smoke import (POSITIONS, check_analyze_cli, check_mlm_logits, check_new_classifier_export,
                                  check_patch_heads, check_round_trip, unigram_tokenizer, wordlevel_tokenizer,
                                  wordpiece_tokenizer)
from jattn import Interventions
from tolerance import assert_close, model_terms


def test_table_holds_every_family():
    import jattn.families

    assert set(FAMILIES) == set(jattn.families.names())
    assert all(row.shape == jattn.families.get(name).shape for name, row in FAMILIES.items())


class Lab:
    """Checkpoints, loaded models and batches made once per module and shared by the checks."""

    def __init__(self, tmp):
        self.tmp, self.made = tmp, {}

    def once(self, key, make):
        if key not in self.made:
            self.made[key] = make()
        return self.made[key]

    def types(self, family, case):
        return dict(variants(family))[case].get("types", FAMILIES[family].types)

    def pair(self, family, case, head="base", **kw):
        """(jattn model, HF oracle, padded batch)."""
        def make():
            model, oracle = load_pair(save(self.tmp.mktemp(case), family, case, head, **kw), head)
            row = FAMILIES[family]
            return model, oracle, pair_batch(model.config, list(row.lengths), row.seed, self.types(family, case))
        return self.once((family, case, head, tuple(sorted(kw.items()))), make)

    def text_folder(self, family, case):
        """A complete folder: the row's tokenizer (tiny Unigram of a class, or MiniLM's WordPiece) and head."""
        def make():
            tokenizer, head, fields = FAMILIES[family].text
            folder = self.tmp.mktemp(f"{case}-text")
            size = (wordpiece_tokenizer(folder) if tokenizer == "wordpiece" else wordlevel_tokenizer(folder)
                    if tokenizer == "word-level" else unigram_tokenizer(folder, tokenizer))
            return save(folder, family, case, head, vocab_size=size, max_position_embeddings=POSITIONS, **fields)
        return self.once((family, case, "text"), make)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab(tmp_path_factory)


def expected(family, check, model, oracle):
    row = FAMILIES[family]
    for attribute, value in row.expect.get(check, {}).items():
        assert getattr(model.config, attribute) == value, attribute
    assert row.holds.get(check, lambda m, hf: True)(model, oracle)


def types_ignored(t):
    """No token-type table: segment ids change nothing (HF's forward takes none)."""
    typed = pair_batch(t.model.config, list(t.row.lengths), t.row.seed, types=True)
    np.testing.assert_array_equal(t.model.forward(typed, internals=None).last_hidden_state,
                                  t.model.forward(t.batch, internals=None).last_hidden_state)


# check -> what it runs on ``t``: the case's model, HF oracle, padded batch, whether the batch has token types
# (``types``) and the family compares the real query rows alone (``real``)
CHECKS = {
    "config": lambda t: expected(t.family, "config", t.model, t.oracle),
    "outputs": lambda t: check_outputs(t.model, t.oracle, t.batch, t.types, t.real),
    "gates": lambda t: check_gates(t.model, t.oracle, t.batch, t.types, t.real),
    "disabled": lambda t: check_disabled(t.model, t.oracle, t.batch, t.types, real_rows=t.real),
    "pruned": lambda t: check_pruned(t.model, t.batch),
    "types_ignored": types_ignored,
    "refused": lambda t: check_refused(t.model, t.row.refused),
}


def run(check):
    return pytest.mark.parametrize("family,case", cases(check, "encoder"))


@pytest.mark.parametrize("family,case,check", [pytest.param(*p.values, check, id=f"{p.id}-{check}", marks=p.marks)
                                               for check in CHECKS for p in cases(check, "encoder")])
def test_check(lab, family, case, check):
    model, oracle, batch = lab.pair(family, case)
    CHECKS[check](SimpleNamespace(family=family, row=FAMILIES[family], model=model, oracle=oracle, batch=batch,
                                  types=lab.types(family, case), real=FAMILIES[family].real_rows))


@run("pruned_export")
def test_pruned_export(lab, family, case, tmp_path):
    """``export_pruned`` writes each layer's kept heads under the family's keys and ``pruned_heads`` in
    config.json; the folder loads back as the model with the dropped heads gated to 0."""
    from jattn.sweeps.pruning import export_pruned

    model, _, batch = lab.pair(family, case)
    keep = np.array([[1, 0, 0, 1], [0, 1, 1, 1]], bool)
    folder = export_pruned(model, keep, tmp_path / "pruned")
    assert json.loads((folder / "config.json").read_text())["pruned_heads"] == {"0": [1, 2], "1": [0]}
    again = jattn.load(folder, tokenizer=False, use_cache=False)
    masked = model.forward(batch, Interventions(head_gates=jnp.asarray(keep, jnp.float32)), internals=None)
    assert_close(again.forward(batch, internals=None).last_hidden_state, masked.last_hidden_state,
                 terms=model_terms(model.config, batch["input_ids"].shape[1]))


@run("classifier")
def test_classifier_head(lab, family, case):
    """A converted classification head: HF's logits, ``classify`` and the disabling sweep's suffix."""
    model, oracle, batch = lab.pair(family, case, "cls", **FAMILIES[family].kw.get("classifier", {}))
    expected(family, "classifier", model, oracle)
    check_classifier(model, oracle, batch, lab.types(family, case))


@pytest.mark.parametrize("family,case,fields", [
    pytest.param(*p.values, fields, id=p.id + "".join(f"-{k}={v}" for k, v in fields.items()), marks=p.marks)
    for p in cases("mlm", "encoder") for fields in FAMILIES[p.values[0]].mlm])
def test_mlm_head(lab, family, case, fields):
    row = FAMILIES[family]
    model, oracle, batch = lab.pair(family, case, "mlm", **fields)
    assert model.config.with_mlm_head and model.config.tied_mlm_decoder == fields.get("tie_word_embeddings",
                                                                                      model.config.tied_mlm_decoder)
    expected(family, "mlm", model, oracle)
    check_mlm_logits(model, oracle, batch, lab.types(family, case), row.mlm_transform_terms, row.real_rows)


@pytest.mark.parametrize("family,case,head", [
    pytest.param(*p.values, head, id=f"{p.id}-{head}", marks=p.marks)
    for p in cases("trip", "encoder") for head in FAMILIES[p.values[0]].trips])
def test_hf_round_trip(lab, family, case, head, tmp_path):
    """to_hf_state_dict ∘ convert is the identity on the checkpoint's tensors (or, ``same_keys`` off, HF
    computes the same from the export, bit for bit), config.json names HF's class; jattn reads it back."""
    row = FAMILIES[family]
    model, oracle, batch = lab.pair(family, case, head)
    config = model.family.to_hf_config(model.config)
    assert config["architectures"] == [row.heads[head]]
    assert all(config[k] == v for k, v in row.expect.get("trip", {}).items())
    check_round_trip(model, oracle, head, batch, tmp_path / "exported", lab.types(family, case), row.same_keys,
                     row.drop)


@run("analyze")
def test_analyze_cli_and_patch_heads(lab, family, case, tmp_path, monkeypatch):
    """``jattn analyze`` and ``patch_heads`` on the complete folder."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder = lab.text_folder(family, case)
    c = lab.pair(family, case)[0].config
    check_analyze_cli(folder, tmp_path / "out", layers=c.num_layers, heads=c.num_heads)
    check_patch_heads(jattn.load(folder, use_cache=False))


@run("new_classifier")
def test_new_classifier(lab, family, case, tmp_path, monkeypatch):
    """A new head of the family's kind exported for HF."""
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    check_new_classifier_export(jattn.load(lab.text_folder(family, case), use_cache=False), tmp_path / "classifier")
