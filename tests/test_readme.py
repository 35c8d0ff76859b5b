"""Every Python block of README.md runs, in order, in one namespace (as a reader would paste them)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_python_blocks_are_found():
    assert python_blocks("x\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = a\n```\n") == ["a = 1\n", "b = a\n"]


def test_readme_python_blocks_run(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
