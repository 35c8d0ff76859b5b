"""The experiments' --data-dir: a missing file names its public source and where it goes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from experiment_data import compilation_cache, data_file  # noqa: E402


def test_missing_file_names_the_source_and_the_destination(tmp_path):
    with pytest.raises(SystemExit, match=r"`jattn data fetch gap --data-dir .*gap-coreference.*into .*gap"):
        data_file(tmp_path, "gap/gap-development.tsv")
    with pytest.raises(SystemExit, match="awesome-align"):
        data_file(tmp_path, "alignment/enfr.gold")
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "val.fr").write_text("un chat .\n")
    assert data_file(tmp_path, "multi30k/val.fr") == tmp_path / "multi30k" / "val.fr"


def test_compilation_cache_is_used_inside_the_block_only(tmp_path):
    """Compiles inside ``compilation_cache`` land in its folder; after the block none do, even
    though JAX opens its cache once per process (a test calling an experiment's main once left the
    whole pytest process writing executables into that test's folder)."""
    import jax
    import jax.numpy as jnp

    folder = tmp_path / "cache"
    before = jax.config.jax_compilation_cache_dir  # the suite's own cache (tests/conftest.py)
    min_time = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    try:
        with compilation_cache(folder):
            jax.jit(lambda x: jnp.sin(x) * 3.0)(jnp.ones(7)).block_until_ready()
        inside = sorted(p.name for p in folder.iterdir())
        jax.jit(lambda x: jnp.cos(x) * 5.0)(jnp.ones(9)).block_until_ready()
        after = sorted(p.name for p in folder.iterdir())
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_time)
    assert inside, "nothing was cached inside the block"
    assert after == inside, f"compiles after the block still wrote {sorted(set(after) - set(inside))}"
    assert jax.config.jax_compilation_cache_dir == before
