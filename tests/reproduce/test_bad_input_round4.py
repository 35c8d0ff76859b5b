"""Bad input to ``jattn reproduce`` and its pipeline (issue #79, round 4; #80): an ``--out`` folder of
the user's is refused, not replaced; a study's registration, a stage's exit and its return value
are checked; a failing stage, package or disk is named in one line with what is kept; the full
profile writes the committed results and the README only when told (``--publish``).

Each test builds a tiny experiments package in ``tmp_path`` (``_package``) and runs the command
in this process on the quick profile: no data, no model, a second or two."""

from __future__ import annotations

import errno
import json
import os
import uuid
from pathlib import Path

import pytest

from jattn.cli import main
from jattn.reproduce import pipeline, records, studies, verdicts

ROOT = Path(__file__).resolve().parents[2]
LOCK = ".jattn-reproduce.lock"

HEADER = '''
import os
import sys

from jattn.reproduce import studies, verdicts
from jattn.reproduce.pipeline import Stage


def count(ctx):
    return {"n": 3}


def judge(claim, evidence):
    return verdicts.context("a count")


def describe(claim):
    return {"paper": "-", "differs": "-", "finding": "-", "on": "-"}

'''
MINE = '''
studies.register("mine", lambda profile: [Stage("mine.count", count), Stage("mine.more", count, params={"k": 1})],
                 "My study")
studies.register_rules("mine", sys.modules[__name__])
'''


@pytest.fixture
def _package(tmp_path, monkeypatch):
    """``make(body)``: an experiments package (a name of its own, so that no import is cached)
    whose ``__init__.py`` is ``HEADER`` + ``body``, with an empty study registry."""
    monkeypatch.setattr(studies, "_REGISTERED", {})
    monkeypatch.setattr(studies, "_TITLES", {})
    monkeypatch.setattr(studies, "_RULES", {})
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(body: str) -> Path:
        package = tmp_path / f"round4_{uuid.uuid4().hex[:10]}"
        package.mkdir()
        (package / "__init__.py").write_text(HEADER + body)
        return package

    return make


def _run(package: Path, out: Path, *more: str) -> None:
    main(["reproduce", "--experiments", str(package), "--quick", "--out", str(out), "--no-progress", *more])


def _error(package: Path, out: Path, *more: str) -> str:
    """The command's one-line error (a non-zero exit)."""
    with pytest.raises(SystemExit) as stop:
        _run(package, out, *more)
    message = str(stop.value.code)
    assert stop.value.code not in (0, None) and message.startswith("jattn reproduce: ") and "\n" not in message
    return message


# --- --out: the user's folder is refused, not replaced ----------------------------------------------

def test_out_refuses_a_folder_of_the_users_and_a_link_to_one(_package, tmp_path):
    package = _package(MINE)
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "REPORT.md").write_text("my own report\n")
    (mine / "reproduce.json").write_text('{"mine": 1}\n')
    (tmp_path / "link").symlink_to(mine)
    for out in (mine, tmp_path / "link"):
        message = _error(package, out)
        assert f"--out {out}" in message and "holds no jattn reproduce results" in message
        assert "Fix: choose another --out, or remove that folder" in message
    assert (mine / "REPORT.md").read_text() == "my own report\n" and sorted(p.name for p in mine.iterdir()) == [
        "REPORT.md", "reproduce.json"]
    # a folder a run wrote is taken again (a rerun), and a new one is made
    out = tmp_path / "out"
    _run(package, out)
    _run(package, out)
    assert json.loads((out / "stages" / "mine.count.json").read_text())["result"] == {"n": 3}


def test_out_refuses_to_write_through_a_link_in_its_folder(_package, tmp_path):
    package = _package(MINE)
    out = tmp_path / "out"
    _run(package, out)
    users = tmp_path / "users-file.md"
    users.write_text("the user's\n")
    (out / "REPORT.md").unlink()
    (out / "REPORT.md").symlink_to(users)
    message = _error(package, out)
    assert "its REPORT.md is a link" in message and "Fix: remove the link, or choose another --out" in message
    assert users.read_text() == "the user's\n"


def test_replace_text_replaces_a_link_rather_than_writing_through_it(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("kept\n")
    (tmp_path / "link.txt").symlink_to(target)
    records.replace_text(tmp_path / "link.txt", "new\n")
    assert target.read_text() == "kept\n" and not (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "link.txt").read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "link.txt", "target.txt"]


# --- a study's registration ------------------------------------------------------------------------

REGISTRATIONS = {
    "two stages of one name": ('studies.register("mine", lambda p: [Stage("mine.count", count), '
                               'Stage("mine.count", count, params={"k": 2})], "t")', "names two stages mine.count"),
    "another study's stage": ('studies.register("mine", lambda p: [Stage("other.one", count)], "t")',
                              "names a stage 'other.one', not 'mine.<step>'"),
    "no stage": ('studies.register("mine", lambda p: [], "t")', "not a list of at least one Stage"),
    "not a stage": ('studies.register("mine", lambda p: ["mine.count"], "t")', "holds 'mine.count', not a Stage"),
    "stages() raising": ('def stages(profile):\n    raise RuntimeError("no such size")\n\n\n'
                         'studies.register("mine", stages, "t")',
                         "its stages(profile) for the quick profile raised RuntimeError: no such size"),
    "no study": ("", "registers no study. Fix: call jattn.reproduce.studies.register(name, stages, title)"),
    "a syntax error": ("def broken(:\n    pass\n", "failed to import: SyntaxError: "),
}


@pytest.mark.parametrize("case", REGISTRATIONS)
def test_a_bad_registration_is_one_line_before_any_write(_package, tmp_path, case):
    body, expected = REGISTRATIONS[case]
    out = tmp_path / "out"
    message = _error(_package(body), out)
    assert expected in message and "Fix: " in message
    assert not out.exists()


def test_an_experiments_folder_that_does_not_exist_is_named_as_such(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        studies.load(tmp_path / "nowhere")


def test_a_stage_name_of_no_study_and_a_name_twice_are_refused_by_the_pipeline():
    with pytest.raises(ValueError, match="is not '<study>.<step>'"):
        pipeline.keys([pipeline.Stage("count", lambda ctx: {})])
    with pytest.raises(ValueError, match="two stages are named toy.a"):
        pipeline.keys([pipeline.Stage("toy.a", lambda ctx: {}), pipeline.Stage("toy.a", lambda ctx: {})])


# --- a stage's exit and return value -------------------------------------------------------------

FAILING = {  # the second stage fails while ROUND4_BROKEN is set
    "sys.exit(0)": ("sys.exit(0)", "failed: sys.exit(0) was called ("),
    "raising": ('raise ValueError("boom")', "failed: ValueError: boom ("),
    "returning None": ("return None", "failed: its run returned None, not a dict. "),
}


@pytest.mark.parametrize("case", FAILING)
def test_a_failing_stage_is_named_with_what_is_kept_and_a_rerun_resumes(_package, tmp_path, monkeypatch, case,
                                                                          capsys):
    statement, expected = FAILING[case]
    package = _package(f'''
def flaky(ctx):
    if os.environ.get("ROUND4_BROKEN"):
        {statement}
    return {{"n": 4}}


studies.register("mine", lambda profile: [Stage("mine.count", count), Stage("mine.flaky", flaky)], "t")
''')
    out = tmp_path / "out"
    monkeypatch.setenv("ROUND4_BROKEN", "1")
    message = _error(package, out)
    assert f"stage mine.flaky {expected}" in message
    assert "Kept: the records of the 1 stage(s) before it" in message and "resumes at mine.flaky. Fix: " in message
    assert (out / "stages" / "mine.count.json").is_file() and not (out / "stages" / "mine.flaky.json").exists()
    assert not (out / "REPORT.md").exists()
    monkeypatch.delenv("ROUND4_BROKEN")
    capsys.readouterr()
    _run(package, out)
    assert "mine.count: unchanged" in capsys.readouterr().err
    assert json.loads((out / "stages" / "mine.flaky.json").read_text())["result"] == {"n": 4}


# --- a full disk ---------------------------------------------------------------------------------

def _fill_disk(monkeypatch, when) -> None:
    """From now on, writing a file ``when(path)`` holds writes half of it, then fails as a full disk does
    (at ``os.write``, which ``jattn.io.atomic.replace`` writes with)."""
    real = os.write

    def write(fd, data):
        if not when(Path(os.readlink(f"/proc/self/fd/{fd}"))):
            return real(fd, data)
        real(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith(".tmp"))


def test_a_full_disk_while_a_stage_is_recorded_names_it_and_leaves_nothing_half_written(_package, tmp_path,
                                                                                        monkeypatch):
    package = _package(MINE)
    out = tmp_path / "out"
    _run(package, out)
    report = (out / "REPORT.md").read_text()
    _fill_disk(monkeypatch, lambda path: tmp_path in path.parents)
    message = _error(package, out, "--force", "mine.more")
    assert ("stage mine.more failed: its record could not be written (WriteError: No space left on device writing "
            f"{out / 'stages' / 'mine.more.json'}") in message
    assert "Kept: the records of the 1 stage(s) before it" in message
    assert message.endswith("Fix: free space on that disk, or choose another out folder (--out)")
    assert _left(tmp_path) == [] and (out / "REPORT.md").read_text() == report
    assert json.loads((out / "stages" / "mine.count.json").read_text())["result"] == {"n": 3}
    assert not (out / LOCK).exists()


def test_a_full_disk_while_the_report_is_written_keeps_the_last_report_whole(_package, tmp_path, monkeypatch):
    package = _package(MINE)
    out = tmp_path / "out"
    _run(package, out)
    before = {name: (out / name).read_text() for name in ("REPORT.md", "reproduce.json")}
    _fill_disk(monkeypatch, lambda path: "REPORT.md" in path.name or "reproduce.json" in path.name)
    message = _error(package, out, "--force", "mine.more")
    assert f"writing the report into {out} failed (No space left on device" in message
    assert "every stage's record is kept" in message and message.endswith("Fix: free space on that disk, or choose "
                                                                           "another --out")
    assert {name: (out / name).read_text() for name in before} == before and _left(tmp_path) == []


# --- #80: the committed results and the README only when asked -----------------------------------

def test_the_full_profile_writes_the_readme_and_the_committed_results_only_with_publish(_package, tmp_path,
                                                                                       monkeypatch):
    from jattn.reproduce import report

    checkout = tmp_path / "checkout"
    (checkout / "experiments").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    readme = checkout / "README.md"
    readme.write_text(f"intro\n{report.README_BEGIN}\nold table\n{report.README_END}\n")
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("JATTN_CACHE", str(tmp_path / "cache"))
    package = _package(MINE)
    command = ["reproduce", "--experiments", str(package), "--no-progress"]
    with pytest.raises(SystemExit, match="Fix: pass --out FOLDER, or --publish"):
        main(command)
    main([*command, "--out", str(tmp_path / "elsewhere")])
    assert readme.read_text().endswith("old table\n<!-- end of generated results -->\n")
    assert not (checkout / "experiments" / "results").exists()
    with pytest.raises(SystemExit, match="takes no --quick"):
        main([*command, "--publish", "--quick"])
    main([*command, "--publish"])
    assert "old table" not in readme.read_text() and "| study |" in readme.read_text()  # the table, regenerated
    assert (checkout / "experiments" / "results" / "stages" / "mine.count.json").is_file()
    assert "\tjattn reproduce --publish" in (ROOT / "Makefile").read_text().replace("$(BIN)/", "")


def test_the_rules_are_named_by_the_function_that_registers_them():
    """Docstrings and errors point to ``studies.register_rules(name, rules)``: ``register`` takes no
    ``judge=`` or ``rules=``."""
    import inspect
    import re

    for path in [*(ROOT / "jattn" / "reproduce").glob("*.py"), ROOT / "jattn" / "cli" / "reproduce.py"]:
        for function, keyword in re.findall(r"studies\.(\w+)\(\.\.\., (\w+)=", path.read_text()):
            assert keyword in inspect.signature(getattr(studies, function)).parameters, (path.name, function, keyword)
    with pytest.raises(ValueError, match=r"register_rules\(name, rules\)"):
        verdicts.judge_claims([{"study": "mine", "id": "x"}], None, {})
