"""The registry of quoted paper numbers (experiments/papers.py): texts that cannot drift from their
numbers or their table/figure, the three misquotes a review found kept corrected, unique keys."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "experiments" / "papers.py"
# loaded by path: ``import experiments.papers`` would first import every study (experiments/__init__.py)
_spec = importlib.util.spec_from_file_location("papers_registry", PATH)
papers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = papers
_spec.loader.exec_module(papers)

LOCATOR = re.compile(r"Table \d+|Fig\. \d+(?:-\d+)?[a-z]?|§\d+(?:\.\d+)*|App\. [A-Z](?:\.\d+)*|section '[^']+'")


def problems(quote) -> list[str]:
    """What is wrong with one quote: a value not a numeral or absent from the text, a locator of
    ``where`` the text does not name, an unknown paper."""
    out = [f"unknown paper {quote.paper!r}"] if quote.paper not in papers.PAPERS else []
    for name, value in quote.values.items():
        if not re.fullmatch(r"\d+(\.\d+)?", value):
            out.append(f"{name}={value!r} is not a numeral")
        elif not re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])", quote.text):
            out.append(f"{name}={value} not in the text")
    locators = LOCATOR.findall(quote.where)
    out += ["where names no table, figure or section"] if not locators else []
    out += [f"text does not name {loc!r}" for loc in locators if loc not in quote.text]
    return out


def test_every_text_names_its_values_and_where():
    bad = {key: p for key, q in papers.QUOTES.items() if (p := problems(q))}
    assert not bad, bad
    assert all(papers.quote(key) == q.text for key, q in papers.QUOTES.items())


def test_the_checker_sees_drift():
    good = papers.QUOTES["clark2019.syntax.all"]
    drifted = papers.Quote(good.paper, good.where, good.values, good.text.replace("34.5", "34.7"), good.checked)
    relocated = papers.Quote(good.paper, "Table 2", good.values, good.text, good.checked)
    assert problems(good) == []
    assert problems(drifted) == ["head=34.5 not in the text"]
    assert problems(relocated) == ["text does not name 'Table 2'"]
    assert problems(papers.Quote("nobody2020", "Fig. 1", {}, "x (Fig. 1)", "")) == ["unknown paper 'nobody2020'"]


def test_the_reviewed_misquotes_stay_corrected():
    q = papers.QUOTES
    # Clark et al. 2019 Table 1, row All: 34.5 vs 26.3 (the project had 34.7 vs 26.7)
    assert q["clark2019.syntax.all"].values == {"head": "34.5", "offset": "26.3"}
    # Kovaleva et al. 2019: single heads gain 0.1-1.2 (Fig. 8); layer 1 on RTE gains 3.2 (Fig. 9, not 10)
    assert q["kovaleva2019.disable-head"].values == {"min_gain": "0.1", "max_gain": "1.2"}
    assert "Fig. 8" in q["kovaleva2019.disable-head"].where
    assert q["kovaleva2019.disable-layer"].values["rte_gain"] == "3.2"
    assert "Fig. 9" in q["kovaleva2019.disable-layer"].where
    # Kobayashi et al. 2021 Table 2 (Table 1 lists the data sets): Attn-W 97.1, AttnResLn-N 18.8
    mixing = q["kobayashi2021.mixing"]
    assert (mixing.values["attn_w"], mixing.values["attnresln_n"]) == ("97.1", "18.8")
    assert mixing.where.startswith("Table 2")
    stale = {"34.7", "26.7", "96.41", "18.75", "Fig. 10", "up to about 3 points", "2021 Table 1"}
    assert not [(key, s) for key, x in q.items() for s in stale if s in x.text]


def test_keys_are_unique_and_name_their_paper():
    tree = ast.parse(PATH.read_text(encoding="utf-8"))
    literal = next(node.value for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                   and getattr(node.target, "id", None) == "QUOTES")
    keys = [k.value for k in literal.keys]
    assert len(keys) == len(set(keys)) == len(papers.QUOTES), "a key is written twice in QUOTES"
    for key, quote in papers.QUOTES.items():
        assert re.fullmatch(r"[a-z]+\d{4}(\.[a-z0-9-]+)+", key), key
        assert key.split(".")[0] == quote.paper and quote.paper in papers.PAPERS, key
        assert quote.checked.startswith(("checked against", "not retrievable offline")), key
