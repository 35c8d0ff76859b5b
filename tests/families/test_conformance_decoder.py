"""The conformance checks of every causal-LM family of the table (``conformance_table``) against Hugging
Face's ``AutoModelForCausalLM`` (eager attention) on its tiny random config: the config read, next-token
logits, every hidden state and attention weight on a right-padded batch, head gates per head / example /
token, disabled heads (uniform over the keys the query may see, from the query head's key/value head),
greedy and beam ``generate`` ids on left-padded prompts, the export's state dict, refused configs. Each
family's checkpoint and compiled programs are shared by its checks (one module-scoped ``lab``); the checks that
take no parameters of their own run in one test, ``test_check[<family>-<check>]``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conformance_table import DEC, FAMILIES, cases
from family_pairs import check_refused, save_lm
from lm_family_parity import check_generate, check_lm_disabled, check_lm_gates, check_lm_outputs, lm_batch, load_lm_pair


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    made = {}

    def pair(family):
        """(jattn model, HF oracle, right-padded batch) of the family's checkpoint."""
        if family not in made:
            row = FAMILIES[family]
            model, oracle = load_lm_pair(save_lm(tmp_path_factory.mktemp(family), family))
            made[family] = model, oracle, lm_batch(model.config, list(row.lengths), seed=row.seed)
        return made[family]

    return pair


def config(t):
    for attribute, value in t.row.expect["config"].items():
        assert getattr(t.model.config, attribute) == value, attribute
    assert t.row.holds.get("config", lambda m, hf: True)(t.model, t.oracle)


def causal(t):
    w = np.asarray(t.model.forward(t.batch, internals=("weights",)).attentions)  # (L, b, H, n, n)
    assert np.all(w[..., np.triu(np.ones(w.shape[-2:], bool), 1)] == 0)


def export(t):
    """The exported state dict is the converted one (fused or split projections joined again)."""
    import jax

    from jattn.nn.state import to_arrays

    arrays = to_arrays(t.model.params)
    again = t.model.family.convert(t.model.family.to_hf_state_dict(arrays, t.model.config), t.model.config)
    assert jax.tree.structure(again) == jax.tree.structure(arrays)
    for (path, want), got in zip(jax.tree_util.tree_leaves_with_path(arrays), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=str(path))


# check -> what it runs on ``t``: the family's model, HF oracle and right-padded batch
CHECKS = {
    "config": config,
    "outputs": lambda t: check_lm_outputs(t.model, t.oracle, t.batch),
    "causal": causal,
    "gates": lambda t: check_lm_gates(t.model, t.oracle, t.batch),
    "disabled": lambda t: check_lm_disabled(t.model, t.oracle, t.batch,
                                            **({"values_slice": t.row.values_slice} if t.row.values_slice else {})),
    "export": export,
    "refused": lambda t: check_refused(t.model, t.row.refused),
}


@pytest.mark.parametrize("family,case,check", [pytest.param(*p.values, check, id=f"{p.id}-{check}", marks=p.marks)
                                               for check in CHECKS for p in cases(check, "decoder")])
def test_check(lab, family, case, check):
    model, oracle, batch = lab(family)
    CHECKS[check](SimpleNamespace(row=FAMILIES[family], model=model, oracle=oracle, batch=batch))


def searches():
    """(family, beams): the row's fast beam counts (default 1 and 3), the others slow with Llama's as the
    twin (beam search moves every family's caches by the same row gather; Qwen2 decodes through Llama's step)."""
    for p in cases("generate", "decoder"):
        family, _ = p.values
        for beams in (1, 3):
            fast = not p.marks and beams in (FAMILIES[family].searches or (1, 3))
            marks = () if fast else pytest.mark.slow(twin=f"{DEC}test_generate_matches_hf[llama-{beams}]")
            yield pytest.param(family, beams, id=f"{p.id}-{beams}", marks=marks)


@pytest.mark.parametrize("family,num_beams", list(searches()))
def test_generate_matches_hf(lab, family, num_beams):
    model, oracle, _ = lab(family)
    check_generate(model, oracle, [7, 4, 2], num_beams)
