"""The suite's own rules (tests/conftest.py): a slow test's fast twin must exist and not be slow, checked
whenever the twin's file is collected whole; a file named with one test (path::test) is not checked; the
run's compilation cache folder is removed at its end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CASES = '''
import pytest

def test_fast():
    pass

@pytest.mark.slow(twin="test_x.py::test_fast")
def test_slow_with_twin():
    pass

@pytest.mark.slow(twin="test_x.py::{missing}")
def test_slow_with_missing_twin():
    pass
'''


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest run in ``folder``, its temporary files in ``folder / "tmp"``."""
    (folder / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "JAX_COMPILATION_CACHE"))}
    env["TMPDIR"] = str(folder / "tmp")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_a_missing_twin_stops_the_run_and_a_named_test_runs(tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text(CASES.format(missing="test_gone"))
    (tmp_path / "test_y.py").write_text(CASES.format(missing="test_fast").replace("test_x.py", "test_y.py"))
    whole = pytest_in(tmp_path, "test_x.py")
    assert whole.returncode == 4, whole.stdout + whole.stderr  # a usage error
    assert "test_slow_with_missing_twin: twin test_x.py::test_gone not found" in whole.stderr + whole.stdout
    # test_x.py named with one test is not collected whole: not checked; test_y.py's twins are there
    named = pytest_in(tmp_path, "test_x.py::test_fast", "test_y.py")
    assert named.returncode == 0 and "2 passed, 2 skipped" in named.stdout, named.stdout + named.stderr
    assert not list((tmp_path / "tmp").glob("jattn-tests-xla-cache-*")), "a run left its compilation cache folder"
