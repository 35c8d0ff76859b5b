"""The tutorial notebooks (notebooks/*.ipynb) as a reader runs them: top to bottom in a fresh
Jupyter kernel on CPU, every cell without an error and within its timeout, each drawing at least
one figure inline. The committed files carry no outputs (CI makes them; a diff shows only what a
person wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TUTORIALS = ["01_tour", "02_study", "03_induction_lm"]
CELL_TIMEOUT_S = 300  # one cell; the slowest (a vmapped sweep or a corpus pass) takes well under a minute


def test_the_tutorials_are_there_and_linked_from_the_readme():
    assert [p.stem for p in NOTEBOOKS] == TUTORIALS
    readme = (ROOT / "README.md").read_text()
    assert all(f"(notebooks/{name}.ipynb)" in readme for name in TUTORIALS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and not any(c.outputs or c.execution_count for c in code), f"{path.name}: clear its outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_draws(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own inline backend draws the figures
    nb = nbformat.read(path, as_version=4)
    # cwd: a fresh folder, so a notebook that writes files writes them there; a failing cell raises
    # CellExecutionError with its traceback
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} drew no figure"
