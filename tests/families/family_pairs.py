"""The checkpoints of the conformance table's rows and the module fixtures of a family's own test file
(``test_<family>.py``): an encoder's (``save``, ``pair_fixture``), a causal LM's (``save_lm``, ``lm_fixture``)
and an encoder–decoder's (``tiny_fixture``): the loaded jattn model, its HF oracle and a batch."""

from __future__ import annotations

import pytest

from conformance_table import FAMILIES, variants
from encoder_family_parity import load_pair, new_hf, pair_batch, save_random
from lm_family_parity import lm_batch, load_lm_pair


def save(folder, family: str, case: str | None = None, head: str = "base", seed: int = 0, **kw):
    """A random checkpoint of the family's ``head`` (the fields of ``case``, default the main one, and ``kw``),
    weights only."""
    import torch

    row = FAMILIES[family]
    fields = {**dict(variants(family))[case or variants(family)[0][0]], **kw}
    fields.pop("types", None)
    model = new_hf(row.config, row.heads[head], {**fields, "num_labels": 3}, seed)
    if row.bias:  # a relative-position table of the size of the scores, so that it moves α
        with torch.no_grad():
            next(p for n, p in model.named_parameters() if n.endswith(row.bias + ".weight")).normal_(0, 1.0)
    return save_random(model, folder, seed)


def check_refused(model, refused) -> None:
    """Each (config.json change, error match) of ``refused`` on the model's config.json: refused, naming it."""
    import json
    from pathlib import Path

    from jattn.nn.config import ConfigError

    config = json.loads((Path(model.source) / "config.json").read_text())
    for change, match in refused:
        with pytest.raises(ConfigError, match=match):
            model.family.config_from_hf({**config, **change})


def batch_of(model, family: str, case: str | None = None) -> dict:
    """The row's padded sentence pairs for ``model``."""
    row = FAMILIES[family]
    types = dict(variants(family))[case or variants(family)[0][0]].get("types", row.types)
    return pair_batch(model.config, list(row.lengths), row.seed, types)


def pair_fixture(family: str, case: str | None = None, head: str = "base"):
    """The module fixture (jattn model, HF oracle, padded batch) of the family's checkpoint."""

    @pytest.fixture(scope="module")
    def pair(tmp_path_factory):
        model, oracle = load_pair(save(tmp_path_factory.mktemp(family), family, case, head), head)
        return model, oracle, batch_of(model, family, case)

    return pair


def save_lm(folder, family: str, **fields):
    row = FAMILIES[family]
    return save_random(new_hf(row.config, row.heads["lm"], {**row.fields, **fields}), folder)


def lm_fixture(*families: str):
    """The module fixture ``pair`` of the families' checkpoints (parametrized where several)."""

    @pytest.fixture(scope="module", params=families)
    def pair(request, tmp_path_factory):
        model, oracle = load_lm_pair(save_lm(tmp_path_factory.mktemp(request.param), request.param))
        row = FAMILIES[request.param]
        return model, oracle, lm_batch(model.config, list(row.lengths), seed=row.seed)

    return pair


def tiny_fixture(family: str, *cases: str):
    """The module fixture ``tiny`` (case, folder, jattn model, HF model) of the family's seq2seq checkpoints, one
    per case (default: every case of its row)."""
    import importlib

    import jattn

    @pytest.fixture(scope="module", params=cases or [case for case, _ in variants(family)])
    def tiny(request, tmp_path_factory):
        b = importlib.import_module(FAMILIES[family].config)
        folder = b.save_tiny(tmp_path_factory.mktemp(request.param) / "model", request.param)
        return request.param, folder, jattn.load(folder, use_cache=False), b.hf_model(folder, request.param)

    return tiny
