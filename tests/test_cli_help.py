"""The command line's help: every option of every sub-command (and of ``data``/``models``'
actions) states its default, or that it is required, or is a flag; no reST/Markdown markup;
the top-level listing gives each command a whole sentence."""

from __future__ import annotations

import argparse
import re

import pytest

from jattn.cli import FLAGS, HelpFormatter, build_parser, summary


def parsers():
    """(name, parser) for ``jattn`` and every sub-command and action, recursively."""
    root, _ = build_parser()
    todo, out = [("jattn", root)], []
    while todo:
        name, p = todo.pop()
        out.append((name, p))
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {k}", sub) for k, sub in action.choices.items()]
    return out


PARSERS = parsers()


def _params():
    return [pytest.param(n, p, id=n) for n, p in PARSERS]


def option_help(parser, action) -> str:
    return parser._get_formatter()._expand_help(action) if action.help else ""


@pytest.mark.parametrize("name,parser", _params())
def test_every_option_states_its_default(name, parser):
    assert isinstance(parser._get_formatter(), HelpFormatter)
    missing = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        text = option_help(parser, action)
        label = "/".join(action.option_strings) or action.dest
        if not text:
            missing.append(f"{label}: no help")
        elif isinstance(action, FLAGS) or action.required:
            continue
        elif "default" not in text.lower() and "required" not in text:
            missing.append(f"{label}: {text!r} says no default")
        elif "(default: None)" in text:
            missing.append(f"{label}: 'None' does not say what happens")
    assert not missing, f"{name}: " + "; ".join(missing)


@pytest.mark.parametrize("name,parser", PARSERS, ids=[n for n, _ in PARSERS])
def test_help_has_no_markup(name, parser):
    text = parser.format_help()
    assert "`" not in text, f"{name} --help shows backticks"
    assert not re.search(r"(?m)^\s*\* ", text), f"{name} --help shows '*' bullets"
    assert not re.search(r"\*\*?\w", text), f"{name} --help shows '*' emphasis"
    assert "%%" not in text, f"{name} --help shows a doubled '%%' (an escape printed as it is)"


def test_top_level_listing_is_whole_sentences():
    root, modules = build_parser()
    text = root.format_help()
    listing = text.split("positional arguments:")[1].split("options:")[0]
    entries = dict(re.findall(r"(?m)^    (\w+)\s+(.*(?:\n {8,}.*)*)", listing))
    assert set(entries) == set(modules)
    for command, module in modules.items():
        line = summary(module.__doc__)
        assert line.endswith(".") and line.count("(") == line.count(")"), (command, line)
        assert " ".join(entries[command].split()) == line, command  # shown whole
    assert "jattn disable --model" not in text  # a usage line is not a summary


def test_summary_cuts_at_sentences_not_lines():
    doc = "Head sweeps (A et al. 2019;\nB et al. 2019): ``jattn disable --model\nX --out DIR``.\n\nMore."
    assert summary(doc) == "Head sweeps (A et al. 2019; B et al. 2019)."
    assert summary("Fine-tune a model. Then export it.") == "Fine-tune a model."
