"""docs/GUIDE.md's "Composing with JAX" as a user reads it: every Python block of the section
runs on its own, in a fresh namespace (its asserts are part of the example)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_readme import blocks

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "GUIDE.md"


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


COMPOSING = blocks(section(GUIDE.read_text(), "Composing with JAX"), "python")


def test_the_section_has_its_examples():
    assert len(COMPOSING) >= 6


@pytest.mark.parametrize("index", range(len(COMPOSING)))
def test_each_block_runs_on_its_own(index, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    exec(compile(COMPOSING[index], f"GUIDE.md 'Composing with JAX' block {index + 1}", "exec"),
         {"__name__": "__guide__"})
