"""DeBERTa-v2 / v3's quirks (``jattn/families/deberta_v2``, ``jattn.nn.positions``): v2's own position
projections refuse head removal; the analyses on the disentangled attention (c2p / p2c score bias) reaching the
log buckets. The rest of DeBERTa's checks (v3 and v2 layouts, real query rows): the conformance table."""

from __future__ import annotations

import numpy as np
import pytest

import jattn
from family_pairs import pair_fixture
from jattn.nn.config import ConfigError

v2 = pair_fixture("deberta-v2", "deberta-v2")
v3 = pair_fixture("deberta-v2", "deberta-v3")


def test_pruning_refused_with_own_position_projections(v2):
    """Shared projections (v3) prune (the conformance table's test_pruned); own position projections (v2) would
    need the kept heads' slices of them: refused."""
    from jattn.sweeps.pruning import remove_heads

    with pytest.raises(ConfigError, match="shared_projections"):
        remove_heads(v2[0], np.ones((2, 4), bool) & (np.arange(4) > 0))


# norms, attributions (value zeroing with the score bias) and head patching on DeBERTa-v2 run fast, under grad and
# with finite values, in tests/test_contract_families.py (deberta-v2 in GRADIENT_PATHS, lengths into the log buckets)
@pytest.mark.slow(twin="tests/test_contract_families.py::test_every_kernel_has_finite_gradients")
@pytest.mark.parametrize("version", ["v2", "v3"])
def test_analyses_run(request, version):
    """Kobayashi et al.'s norms, the context-mixing maps (ALTI among them; value zeroing calls the
    layers with ``module.score_bias``) and head patching run on the model, finite at the real
    tokens (Python API on a padded token-id batch reaching the log buckets)."""
    from jattn.sweeps.patching import patch_heads

    model, _, batch = request.getfixturevalue(version)
    b, n = batch["input_ids"].shape
    norms = jattn.norms(model, batch)["encoder"]
    assert norms["summed_norm"].shape == (2, b, n, n) and np.isfinite(norms["summed_norm"]).all()
    maps = jattn.attributions(model, batch)["encoder"]
    assert "alti" in maps and all(np.isfinite(np.asarray(v)).all() for v in maps.values())
    clean = {k: v[:2] for k, v in batch.items()}
    corrupted = {**clean, "input_ids": np.where(clean["attention_mask"] == 1, (clean["input_ids"] + 1) % 120,
                                                clean["input_ids"])}
    got = patch_heads(model, clean, corrupted, lambda out: out["last_hidden_state"][:, 0, 0])["encoder"]
    assert got.shape == (2, 4) and np.isfinite(got).all()
