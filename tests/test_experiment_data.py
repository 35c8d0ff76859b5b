"""The experiments' --data-dir: a missing file names its public source and where it goes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from experiment_data import data_file  # noqa: E402


def test_missing_file_names_the_source_and_the_destination(tmp_path):
    with pytest.raises(SystemExit, match=r"gap-coreference.*into .*gap"):
        data_file(tmp_path, "gap/gap-development.tsv")
    with pytest.raises(SystemExit, match="awesome-align"):
        data_file(tmp_path, "alignment/enfr.gold")
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "val.fr").write_text("un chat .\n")
    assert data_file(tmp_path, "multi30k/val.fr") == tmp_path / "multi30k" / "val.fr"
