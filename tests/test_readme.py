"""README.md as a reader uses it: every Python block runs on its own, every `jattn` command line
of its shell blocks is accepted by the command's parser and runs from any folder (on the data sets'
first rows; as written with --runslow), the command table is the commands' own,
every relative link resolves, and nothing in README.md, docs/ or jattn/ tells how or when the code
was developed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
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


# --- every shell command of the README runs -----------------------------------------------------
# Fast tier: in this process, with cwd = tmp_path (a folder outside the checkout), each
# ``"$(jattn data path NAME)/FILE"`` replaced by FILE's first ROWS rows (CoNLL-U: sentences; a TSV
# keeps its header) and every other option as written. Slow tier (--runslow): the command exactly as
# written, by bash, from tmp_path. Both replace ``checkpoints/`` (the committed models, named by
# their path in the checkout: no named model is the committed 3 + 3-layer translation model) by the
# checkout's folder. STAND_INS are what the fast tier uses for models it cannot make in seconds.

ROWS = 40
NOT_RUN = {"make demo": "the top-level entry point (setup, then `jattn demo`; tests/test_demo.py runs the demo)",
           "make test": "the top-level entry point: the whole suite, this test among it",
           "make reproduce": "the top-level entry point: hours of experiments (tests/reproduce/ tests the pipeline)"}
STAND_INS = {  # model name in the README -> what the fast tier loads under that name, and why
    "minilm-sst2": "a random 2-layer BERT classifier made into a cache under that name: "
                   "`jattn models make minilm-sst2` fine-tunes MiniLM for about 25 minutes (slow tier)"}
NETWORK = {"jattn data fetch": "fetches from the pinned sources on the internet; the fast tier fetches every "
                               "data set from a local mirror of $JATTN_DATA instead"}
DATA_PATH = re.compile(r'"\$\(jattn data path ([\w-]+)\)/([^"]+)"')
DATA_PATH_NAME = re.compile(r"\$\(jattn data path ([\w-]+)\)")


def shell_commands(text: str) -> list[str]:
    """The commands of the README's shell blocks: continuation lines joined, comments dropped."""
    lines = [line.split(" #")[0].strip() for block in blocks(text, "bash")
             for line in block.replace("\\\n", " ").splitlines()]
    return [re.sub(r" +", " ", line) for line in lines if line and not line.startswith("#")]


COMMANDS = shell_commands(README.read_text())


def not_run(command: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def test_every_shell_command_is_a_jattn_command_or_a_make_entry_point():
    assert len(COMMANDS) >= 15
    for command in COMMANDS:
        assert command.startswith("jattn ") or not_run(command), f"no test runs {command!r}"


def head(source: Path, target: Path, rows: int = ROWS) -> Path:
    """The first ``rows`` rows of ``source``: CoNLL-U sentences, or lines (a TSV's header kept besides)."""
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".conllu":
        kept = "\n\n".join(text.split("\n\n")[:rows]) + "\n\n"
    else:
        lines = text.splitlines(keepends=True)
        kept = "".join(lines[:rows + (source.suffix == ".tsv")])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(kept, encoding="utf-8")
    return target


def jattn_output(argv: list[str]) -> str:
    from jattn.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(argv)
    return out.getvalue()


def need_data(command: str, data_set) -> None:
    for name in dict.fromkeys(DATA_PATH_NAME.findall(command)):
        if name != "sample":
            data_set(name)  # a skip naming the fetch command when absent



def in_checkout(command: str) -> str:
    return re.sub(r"(?<![\w/])checkpoints/", f"{ROOT}/checkpoints/", command)


def out_of(argv: list[str]) -> Path | None:
    return Path(argv[argv.index("--out") + 1]) if "--out" in argv else None


def made_stand_in(name: str, cache: Path) -> Path:
    from jattn.io import artefacts
    from tiny_encoders import save_tiny

    folder = save_tiny(cache / "models" / name, "bert-2x4", head="cls")
    (folder / artefacts.DONE).write_text("stand-in\n")
    return folder


def fast_argv(command: str, tmp_path: Path, monkeypatch) -> list[str]:
    """The command's arguments with small data, its stand-in model, and the checkout's checkpoints/."""
    def small(match: re.Match) -> str:
        folder = Path(jattn_output(["data", "path", match.group(1)]).strip())  # the README's own command
        return shlex.quote(str(head(folder / match.group(2), tmp_path / "small" / match.group(1) / match.group(2))))

    argv = shlex.split(DATA_PATH.sub(small, in_checkout(command)))[1:]
    if "--model" in argv:
        i = argv.index("--model") + 1
        if argv[i] == "minilm-sst2":
            monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))  # found by name there
            made_stand_in("minilm-sst2", tmp_path / "cache")
    return argv


def check_wrote(argv: list[str], cwd: Path) -> None:
    out = out_of(argv)
    if out is not None:
        path = cwd / out
        assert path.is_file() or (path / "results.json").is_file(), f"{' '.join(argv)} wrote no {out}"


def skip_unless_made(command: str, fast: bool) -> None:
    from jattn import artefacts
    from jattn.io.artefacts import is_made, models_dir

    for name in re.findall(r"--model ([\w.-]+)|jattn models fetch ([\w.-]+)", command):
        name = "".join(name)
        if fast and name in STAND_INS or name not in artefacts.RECIPES:
            continue
        if not is_made(name):
            pytest.skip(f"{name} is not made in {models_dir()}: run `{artefacts.make_command(name)}`"
                        + (" (a download from the package index)" if artefacts.recipe(name).fetched else ""))


def serve(folder: Path):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# The small-data runs of the fast tier (≤ 20 s each on 2 cores); the others' small-data runs are
# slow too: MiniLM's and MPNet's runs over the sample (25-60 s each; the syntax line is their twin),
# the disabling sweep (75 s on the stand-in and SST-2 dev), the
# L0 gates (3 × 300 updates: over 10 minutes even on 40 rows) and the translation model's analyses
# (22 s, two thirds of it drawing its 60 heatmaps; every line's arguments are parsed by
# test_every_shell_command_line_is_accepted_by_its_parser, and TWIN runs the same analyses on a tiny Marian).
FAST = ("--out out/syntax", "--out out/prune", "--out out/lm", "jattn view ", "jattn data fetch",
        "jattn models fetch ", "jattn models list")
TWIN = {"--out out/nmt": "tests/test_analyze_cli.py::test_analyze_cli_on_a_translation_model"}
SMALL = [c for c in COMMANDS if c.startswith("jattn ") and not c.startswith("jattn models make ")]


def tier(command: str):
    """The command in the fast tier, or slow (with its fast twin where TWIN names one)."""
    if any(f in command for f in FAST):
        return command
    twin = next((t for f, t in TWIN.items() if f in command), None)
    return pytest.param(command, marks=pytest.mark.slow(twin=twin) if twin else pytest.mark.slow)


def label(command: str) -> str:
    words = shlex.split(DATA_PATH.sub("x", command))
    return "-".join(words[1:3] if "--out" not in words else [words[1], words[words.index("--out") + 1]])


@pytest.mark.parametrize("command", [tier(c) for c in SMALL], ids=map(label, SMALL))
def test_readme_command_runs_on_small_data_from_any_folder(command, tmp_path, monkeypatch, data_set):
    """Every `jattn` line but `jattn models make` (hours; slow tier) on the data sets' first rows,
    standing in tmp_path; STAND_INS for models that take long to make or download."""
    monkeypatch.chdir(tmp_path)
    skip_unless_made(command, fast=True)
    if command.startswith("jattn data fetch"):  # every data set, from a local mirror of the data folder
        server = serve(data_set("sst2").parent)
        try:
            monkeypatch.setenv("JATTN_DATA", str(tmp_path / "data"))
            monkeypatch.setenv("JATTN_DATA_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
            jattn_output(shlex.split(command)[1:] + ["--no-progress"])
        finally:
            server.shutdown()
        jattn_output(["data", "verify"])
        return
    need_data(command, data_set)
    argv = fast_argv(command, tmp_path, monkeypatch)
    printed = jattn_output(argv)
    assert printed or out_of(argv)
    check_wrote(argv, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("jattn ")],
                         ids=map(label, [c for c in COMMANDS if c.startswith("jattn ")]))
def test_readme_command_runs_as_written_from_any_folder(command, tmp_path, data_set):
    """The command as written, by bash, in tmp_path, on the whole data (`jattn models make minilm-sst2`
    first: the classifier lines need it)."""
    if command.startswith(tuple(NETWORK)):
        pytest.skip(NETWORK[next(p for p in NETWORK if command.startswith(p))])
    need_data(command, data_set)
    skip_unless_made(command, fast=False)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", in_checkout(command)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    check_wrote(shlex.split(DATA_PATH.sub('"x"', command)), tmp_path)


HISTORY = re.compile(r"\b[Ss]essions?\b|\b[Ii]ssues? #?\d+|\b(?:[Ww]ork|[Dd]evelopment) rounds?\b|\bsittings?\b"
                     r"|\b20\d\d-\d\d-\d\d\b")


def test_no_development_history_in_readme_docs_or_code():
    files = [README, *(ROOT / "docs").glob("*.md"), *(ROOT / "jattn").rglob("*.py")]
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in files for m in HISTORY.finditer(p.read_text())]
    assert not hits, hits
    assert HISTORY.search("as issue 9 asked") and HISTORY.search("in this session") and not HISTORY.search("tissue")
