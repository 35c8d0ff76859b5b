"""README.md as a reader uses it: every Python block runs on its own, every `jattn` command line
of its shell blocks is accepted by the command's parser, the command table is the commands' own,
every relative link resolves, and nothing in README.md, docs/ or jattn/ tells how or when the code
was developed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def fence_errors(text: str) -> list[str]:
    """Code fences that do not pair up: every block opens with a language (```python, ```bash) and
    closes with a bare ```; a bare fence where a block should open, or a block left open, is an
    error (GitHub then renders the following text as code)."""
    errors, inside = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("```"):
            continue
        if inside is None and line.strip() == "```":
            errors.append(f"line {number}: a bare fence opens a block")
        inside = None if inside is not None else number
    return errors + ([f"line {inside}: the block opened here is never closed"] if inside is not None else [])


def test_fences_pair_up():
    assert fence_errors("```python\na\n```\n```\n") == ["line 4: a bare fence opens a block",
                                                         "line 4: the block opened here is never closed"]
    assert fence_errors(README.read_text()) == []


def test_blocks_are_found():
    text = "x\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = 2\n```\n"
    assert blocks(text, "python") == ["a = 1\n", "b = 2\n"] and blocks(text, "bash") == ["ls\n"]


@pytest.mark.parametrize("index", range(len(blocks(README.read_text(), "python"))))
def test_each_python_block_runs_on_its_own(index, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    block = blocks(README.read_text(), "python")[index]
    exec(compile(block, f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})


def command_lines(text: str) -> list[list[str]]:
    """The `jattn …` command lines of the shell blocks, continuation lines joined, comments dropped,
    ``"$(jattn data path NAME)"`` read as a folder name."""
    lines = []
    for block in blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r'"\$\(jattn data path ([\w-]+)\)', r'"/data/\1', line.split(" #")[0]).strip()
            line = re.sub(r"^(\.venv/bin/)", "", line)
            if line.startswith("jattn "):
                lines.append(shlex.split(line)[1:])
    return lines


def test_every_shell_command_line_is_accepted_by_its_parser(monkeypatch):
    import importlib

    import jattn.cli

    parsed = []
    for module in jattn.cli.COMMANDS.values():
        monkeypatch.setattr(importlib.import_module(module), "run", lambda args: parsed.append(args))
    lines = command_lines(README.read_text())
    assert len(lines) >= 10
    for argv in lines:
        jattn.cli.main(argv)  # a parser error exits with status 2 and fails the test
    assert len(parsed) == len(lines)


def test_the_command_table_is_generated_from_the_commands():
    import jattn.cli

    assert jattn.cli.overview() in README.read_text()


def test_relative_links_resolve():
    for path in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


HISTORY = re.compile(r"\b[Ss]essions?\b|\b[Ii]ssues? #?\d+|\b(?:[Ww]ork|[Dd]evelopment) rounds?\b|\bsittings?\b"
                     r"|\b20\d\d-\d\d-\d\d\b")


def test_no_development_history_in_readme_docs_or_code():
    files = [README, *(ROOT / "docs").glob("*.md"), *(ROOT / "jattn").rglob("*.py")]
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in files for m in HISTORY.finditer(p.read_text())]
    assert not hits, hits
    assert HISTORY.search("as issue 9 asked") and HISTORY.search("in this session") and not HISTORY.search("tissue")
