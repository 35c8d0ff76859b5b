"""The conformance checks of every encoder–decoder family of the table (``conformance_table``) against Hugging
Face PyTorch on its tiny random checkpoints (``tests/tiny_<family>.py``, each case of the row): teacher-forced
logits, hidden states, the embedding pipeline and every attention weight of the three attention types on
padded batches, the block identities of the internals, head gates and disabled heads per attention type
(HF with hooks), ``inputs_embeds``, bare checkpoints, conversion errors, refused and older configs, the
exporter (state dict round trip, a folder HF loads, the pruned export), greedy and beam search against
``generate`` (a forced first token, a language code per call, cross-attention gates), the KV-cache step
against teacher forcing, and the analyses (``jattn analyze``, ``jattn.norms``, ``jattn.patch_heads``).
Each case's checkpoint and compiled programs are shared by its checks (one module-scoped ``lab``); the checks
that take no parameters of their own run in one test, ``test_check[<case>-<check>]``, as ``CHECKS`` says."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import jattn
import seq2seq_family_analyses as analyses
import seq2seq_family_generate as generation
import seq2seq_family_parity as parity
from conformance_table import FAMILIES, KEEP, S2S, SEARCHES, FAST, cases, variants
from tiny_seq2seq import sentences

S = "encoder-decoder"


def builder(family):
    return importlib.import_module(FAMILIES[family].config)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    made = {}

    def tiny(family, case, decoding=False):
        """(folder, jattn model, HF model) of the case's checkpoint; ``decoding``: seed 1, EOS boosted."""
        if (case, decoding) not in made:
            b = builder(family)
            seeded = {"seed": 1, "eos_boost": b.EOS_BOOST[case]} if decoding else {}
            folder = b.save_tiny(tmp_path_factory.mktemp(case) / "model", case, **seeded)
            made[case, decoding] = folder, jattn.load(folder, use_cache=False), b.hf_model(folder, case)
        return made[case, decoding]

    return tiny


def conversion(t):
    from jattn.io.hf import read_state_dict

    parity.check_conversion_problems(t.family, t.model.config, read_state_dict(t.folder), t.row.gone)


def refused(t):
    """What jattn cannot run is refused, naming the field; older layout fields are read as the current ones."""
    from jattn.nn.config import ConfigError

    cfg = json.loads((t.folder / "config.json").read_text())
    spec = jattn.families.get(cfg["model_type"])
    for change, match in t.row.refused:
        with pytest.raises(ConfigError, match=match):
            spec.config_from_hf(dict(cfg, **change))
    if t.row.accepted:
        assert spec.config_from_hf(dict(cfg, **t.row.accepted)) == spec.config_from_hf(cfg)


def export(t):
    """A folder HF loads (the BPE files copied too where the family has them); the config keeps LayerDrop."""
    files = ("vocab.json", "merges.txt") if (t.folder / "merges.txt").exists() else ()
    parity.check_export(t.folder, t.model, t.tmp / "export", lambda f: t.builder.hf_model(f, t.case),
                        (*files, "tokenizer.json", "tokenizer_config.json"))
    cfg = t.model.family.to_hf_config(t.model.config)
    assert cfg.get("encoder_layerdrop", 0.0) == cfg.get("decoder_layerdrop", 0.0) == 0.0


def export_refused(t):
    with pytest.raises(ValueError, match=t.row.export_only):
        t.model.family.to_hf_config(dataclasses.replace(t.model.config, model_type="bart"))


def pruned_export(t):
    """Also: the pruned folder's weights are smaller than the source's."""
    pruned = parity.check_pruned_export(t.model, KEEP, t.tmp / "pruned")
    assert (pruned / "model.safetensors").stat().st_size < (Path(t.model.source) / "model.safetensors").stat().st_size


def config(t):
    for attribute, value in t.row.expect["config"].items():
        assert getattr(t.model.config, attribute) == value, attribute


PAIRS = list(zip(sentences(3, 3), sentences(3, 4)))
# check -> what it runs on ``t`` (the case's folder, model, HF model ``hf``, a fresh one ``oracle()`` for the checks
# that turn it to float64, the decoding checkpoint's ``decoding``, a ``tmp`` folder); docstrings: the helpers'
CHECKS = {
    "config": config,
    "parity": lambda t: parity.check_parity(t.model, t.hf),
    "default_mask": lambda t: parity.check_default_decoder_mask(t.model, t.hf),
    "embeddings": lambda t: parity.check_embeddings(t.model, t.hf),
    "hidden_states": lambda t: parity.check_hidden_states(t.model, t.hf),
    "internals": lambda t: parity.check_internals(t.model),
    "pre_ln_internals": lambda t: parity.check_pre_ln_internals(t.model),
    "gates": lambda t: parity.check_gates(t.model, t.hf),
    "disabled": lambda t: parity.check_disabled(t.model, t.hf),
    "inputs_embeds": lambda t: parity.check_inputs_embeds(t.model, t.hf),
    "bare": lambda t: parity.check_bare_model(t.builder.save_tiny(t.tmp / "bare", t.case, bare=True),
                                              t.builder.hf_model),
    "conversion": conversion,
    "refused": refused,
    "missing_tokenizer": lambda t: parity.check_missing_tokenizer(t.folder, t.tmp / "none", t.row.missing_tokenizer),
    "round_trip": lambda t: parity.check_state_dict_round_trip(t.folder, t.model),
    "export": export,
    "export_refused": export_refused,
    "pruned_export": pruned_export,
    "language": lambda t: generation.check_generate_language(
        t.decoding[1], t.decoding[2], t.decoding[1].tokenizer.convert_tokens_to_ids(t.row.language)),
    "cached_steps": lambda t: generation.check_cached_steps(t.decoding[1]),
    "generate_gated": lambda t: generation.check_generate_gated(*t.decoding[1:]),
    "analyze": lambda t: analyses.check_analyze_cli(t.model, t.folder, t.tmp / "out"),
    "norms": lambda t: analyses.check_norms(t.model, residual=t.model.config.norm_position == "post"),
    "patch_heads": lambda t: analyses.check_patch_heads(t.model, t.oracle()),
    "statistics": lambda t: analyses.check_statistics(t.model, t.oracle(), analyses.pairs(9)),
    "importance": lambda t: analyses.check_importance(t.model, t.oracle()),
    "pruning_curve": lambda t: analyses.check_pruning_curve(t.model, PAIRS),
    "bleu": lambda t: analyses.check_bleu_metric(t.model, PAIRS),
    "l0": lambda t: analyses.check_l0_fold_and_export(t.model, t.tmp / "pruned"),
    "lrp": lambda t: analyses.check_lrp_conservation(t.model),
    "view": lambda t: analyses.check_view_page(t.model),
    "public_api": lambda t: analyses.check_public_api(t.model),
    "encoder_only": lambda t: analyses.check_encoder_only_method_refused(t.model, analyses.pairs(9)),
    "analyze_post_ln": lambda t: analyses.check_analyze_cli_post_ln(t.model, t.folder, t.tmp / "out"),
}


@pytest.mark.parametrize("family,case,check", [pytest.param(*p.values, check, id=f"{p.id}-{check}", marks=p.marks)
                                               for check in CHECKS for p in cases(check, S)])
def test_check(lab, family, case, check, tmp_path, monkeypatch):
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    folder, model, hf = lab(family, case)
    t = SimpleNamespace(family=family, case=case, row=FAMILIES[family], builder=builder(family), folder=folder,
                        model=model, hf=hf, tmp=tmp_path, oracle=lambda: builder(family).hf_model(folder, case))
    if check in ("language", "cached_steps", "generate_gated"):
        t.decoding = lab(family, case, decoding=True)
    CHECKS[check](t)


def searches():
    """(family, case, beams, length penalty, max length): the row's fast searches on its main case (and the
    greedy one on every case of a row whose generation runs fast everywhere); the others slow, their twin the
    same search where it runs fast (or the greedy one): each case decodes through the same cache and search."""
    rows = [(p, FAMILIES[p.values[0]]) for p in cases("generate", S)]
    main = {name: variants(name)[0][0] for name in FAMILIES}

    def fast(p, row, s):
        family, case = p.values
        how = row.checks["generate"]
        return s in row.searches and (case == main[family] or (how == FAST and s == SEARCHES[0]))

    quick = {(p.values[1], s) for p, row in rows for s in row.searched if fast(p, row, s)}
    for p, row in rows:
        family, case = p.values
        for s in row.searched:
            marks = ()
            if (case, s) not in quick:
                twin = next(t for t in ((main[family], s), (main[family], SEARCHES[0]), ("t5-v1.1", s), ("bart", s))
                            if t in quick)
                marks = pytest.mark.slow(twin=S2S + "test_generate_matches_hf[{}-{}-{}-{}]".format(twin[0], *twin[1]))
            yield pytest.param(family, case, *s, id="{}-{}-{}-{}".format(case, *s), marks=marks)


@pytest.mark.parametrize("family,case,num_beams,length_penalty,max_length", list(searches()))
def test_generate_matches_hf(lab, family, case, num_beams, length_penalty, max_length):
    """Greedy and beam ids equal HF ``generate``'s: the start token, the forced first token where the
    generation config has one, hypotheses of different lengths (EOS boosted at max_length 12)."""
    _, model, hf = lab(family, case, decoding=True)
    forced = getattr(builder(family), "FORCED_BOS", {}).get(case, False)
    generation.check_generate(model, hf, num_beams, length_penalty, max_length, forced)
