"""The package's shape (ARCHITECTURE.md): imports point one way, family knowledge stays in
``jattn/families/``, the top level holds packages, modules stay small.

Read from the source with ``ast`` and ``tokenize``: function-level imports count as much as
module-level ones, and only code (not comments or docstrings) counts as naming a family.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "jattn"
FAMILY_WORDS = re.compile(
    r"bert|roberta|electra|mpnet|marian|fsmt|bart|albert|deberta|xlm|m2m|nllb|\bt5\b|mt5|gpt|llama|qwen|gemma", re.I
)
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """jattn modules ``name`` imports anywhere in its file (``from p import m`` counts ``p.m``
    when that is a module, else ``p``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a list of nodes, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in edges:
        if start in state:
            continue
        stack = [(start, iter(sorted(edges[start])))]
        state[start] = 1
        path = [start]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(sorted(edges[child]))))
                path.append(child)
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_import_graph_has_no_cycle():
    edges = graph()
    assert len(edges) > 50 and sum(map(len, edges.values())) > 100  # the parser sees the package
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def code_tokens(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every name and non-docstring string in a file."""
    source = path.read_text(encoding="utf-8")
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.add(first.lineno)
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and tok.start[0] not in docstrings):
            out.append((tok.start[0], tok.string))
    return out


def family_mentions(path: Path, root: Path = ROOT.parent) -> list[str]:
    """Where a file's code names a family or branches on one."""
    where = path.relative_to(root)
    hits = [f"{where}:{line}: {text[:80]}" for line, text in code_tokens(path) if FAMILY_WORDS.search(text)]
    source = path.read_text(encoding="utf-8")
    for m in re.finditer(r"model_type\s*[!=]=|isinstance\([^)]*(EncoderModel|Seq2SeqModel)", source):
        hits.append(f"{where}:{source[:m.start()].count(chr(10)) + 1}: {m.group(0)}")
    return hits


def test_family_checker_sees_a_branch(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text(
        '"""Docs may cite BERT."""\n# so may comments: Marian\nif config.model_type == "marian":\n    pass\n'
    )
    hits = family_mentions(planted, tmp_path)
    assert len(hits) == 2 and all(h.startswith("m.py:3:") for h in hits), hits  # the string and the ==, not the prose


def test_no_family_named_outside_families():
    hits = [h for name, path in modules().items()
            if not name.startswith(("jattn.families", "jattn.artefacts"))  # a recipe names the model it makes
            for h in family_mentions(path)]
    assert not hits, "family names or branches outside jattn/families:\n" + "\n".join(hits)


def test_top_level_holds_packages():
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 2, f"modules at the top of jattn/: {loose}"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


# The public API and the import layers, as docs/ARCHITECTURE.md lists them.
DOC = ROOT.parent / "docs" / "ARCHITECTURE.md"
EXPERIMENTS = ROOT.parent / "experiments"


def doc_section(heading: str) -> str:
    """The text under ``## heading`` in ARCHITECTURE.md, up to the next heading."""
    return DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def doc_table(heading: str) -> list[list[str]]:
    """The rows (cells) of the table under ``## heading`` in ARCHITECTURE.md, header left out."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in doc_section(heading).splitlines()
            if line.startswith("| ")]
    return rows[1:]


GUIDE = ROOT.parent / "docs" / "GUIDE.md"
MAX_RESEARCHER_NAMES = 100


def kit() -> dict[str, tuple[str, ...]]:
    """Study-kit module -> its kit names: the row's backticked names, or the module's whole
    ``__all__`` where the row says ``all``."""
    out = {}
    for row in doc_table("Study kit"):
        name = row[0].strip("`")
        whole = row[1] == "all" or row[1].startswith("all:")
        out[name] = (tuple(getattr(importlib.import_module(name), "__all__", ())) if whole
                     else tuple(re.findall(r"`(\w+)`", row[1])))
    return out


def researcher_api() -> dict[str, tuple[str, ...]]:
    """Researcher's module -> its researcher names: its ``__all__`` less its kit names."""
    kit_names = kit()
    return {name: tuple(n for n in getattr(importlib.import_module(name), "__all__", ())
                        if n not in kit_names.get(name, ()))
            for name in (row[0].strip("`") for row in doc_table("Researcher's API"))}


def public_api() -> dict[str, tuple[str, ...]]:
    """Public module (either tier) -> its public names (``__all__``)."""
    modules = [row[0].strip("`") for row in doc_table("Researcher's API") + doc_table("Study kit")]
    return {name: tuple(getattr(importlib.import_module(name), "__all__", ())) for name in modules}


def layers() -> list[str]:
    """The folders in their import order, bottom first (the numbered list under ``## Import layers``)."""
    return re.findall(r"^\d+\. `(\w+)`", doc_section("Import layers"), re.M)


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[0] if len(parts) == 1 else parts[1]


def between_folders(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importing folder, imported folder) of every import between two folders."""
    return {(folder(a), folder(b)) for a, bs in edges.items() for b in bs if folder(a) != folder(b)}


def climbs(edges: dict[str, set[str]], order: list[str]) -> list[str]:
    """The imports of ``edges`` from a folder to one at or above it in ``order``."""
    rank = {f: i for i, f in enumerate(order)}
    return sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs
                  if folder(a) != folder(b) and rank[folder(b)] > rank[folder(a)])


def test_the_tables_parse():
    public, order = public_api(), layers()
    assert len(public) > 40 and "jattn.stats" in public and "jattn.runner.batcher" not in public
    assert "jattn.reproduce.pipeline" in kit() and "pad_rows" in kit()["jattn.runner"]
    assert "run_corpus" in researcher_api()["jattn.runner"] and "pad_rows" not in researcher_api()["jattn.runner"]
    assert order[:3] == ["stats", "host_memory", "nn"] and order[-2:] == ["cli", "jattn"]
    assert len(order) == len(set(order))


def test_the_climb_finder_sees_a_planted_climb():
    order = ["nn", "runner", "analyses"]
    edges = {"jattn.runner.loop": {"jattn.analyses.base", "jattn.nn.encoder"}, "jattn.analyses.base": {"jattn.nn.x"}}
    assert climbs(edges, order) == ["jattn.runner.loop -> jattn.analyses.base"]
    assert climbs({"jattn.analyses.base": {"jattn.runner.loop"}}, order) == []


def test_imports_only_go_down_the_layers():
    order = layers()
    edges = graph()
    assert {folder(m) for m in edges} <= set(order), "a folder not in ARCHITECTURE.md's import layers"
    bad = climbs(edges, order)
    assert not bad, "imports that climb ARCHITECTURE.md's import layers:\n" + "\n".join(bad)


def test_no_two_folders_import_each_other():
    pairs = between_folders(graph())
    mutual = sorted({tuple(sorted(p)) for p in pairs if p[::-1] in pairs})
    assert mutual == [], f"{len(mutual)} pairs of folders import each other: {mutual}"


def test_the_layers_keep_the_rules():
    """nn knows no family and no method; analyses import no sweep and no command line; only the
    command line imports cli and reproduce."""
    rank = {f: i for i, f in enumerate(layers())}
    assert rank["nn"] < min(rank["families"], rank["runner"], rank["analyses"], rank["models"])
    assert rank["analyses"] < min(rank["sweeps"], rank["cli"]) and rank["sweeps"] < rank["cli"]
    importers = {a for a, b in between_folders(graph()) if b in ("cli", "reproduce")}
    assert importers <= {"cli"}, f"folders importing cli or reproduce: {sorted(importers)}"


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent that is a module, not a package
        return False


def _jattn_uses(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every jattn name a file uses: ``from m import n``, ``import m`` then
    ``m.n``, and chains ``jattn.a.b.n`` (the longest prefix that is a module is the module).
    A module used whole gives (module, "")."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound, uses = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jattn" and not node.level:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if is_module(full):
                    bound[a.asname or a.name] = full
                else:
                    uses.add((node.module, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "jattn":
                    bound[a.asname or "jattn"] = a.name if a.asname else "jattn"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, n = [], node
            while isinstance(n, ast.Attribute):
                chain.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id in bound:
                chain = chain[::-1]
                module = bound[n.id]
                while chain and is_module(f"{module}.{chain[0]}"):
                    module = f"{module}.{chain.pop(0)}"
                uses.add((module, chain[0] if chain else ""))
    uses |= {(m, "") for m in bound.values()}
    return uses


def private_uses(path: Path, public: dict[str, tuple[str, ...]]) -> list[str]:
    uses = _jattn_uses(path)
    out = sorted({f"{path.name}: {module} (a private module)" for module, _ in uses if module not in public})
    return out + sorted(
        f"{path.name}: {module}.{name} (not in {module}.__all__)"
        for module, name in uses
        if module in public and name and name not in public[module] and f"{module}.{name}" not in public
    )


def test_the_private_use_finder_sees_each_form(tmp_path):
    planted = tmp_path / "s.py"
    planted.write_text("import jattn\nfrom jattn import stats\nfrom jattn.runner.batcher import pad_rows\n"
                       "from jattn.runner import pad_rows as ok\nstats._resample\njattn.analyses.base.CLASS_NAMES\n"
                       "jattn.load\nstats.holm\n")
    found = private_uses(planted, public_api())
    assert found == ["s.py: jattn.analyses.base (a private module)", "s.py: jattn.runner.batcher (a private module)",
                     "s.py: jattn.stats._resample (not in jattn.stats.__all__)"], found


def test_experiments_use_only_public_names():
    public = public_api()
    files = sorted(EXPERIMENTS.rglob("*.py"))
    assert len(files) > 30
    bad = [hit for path in files for hit in private_uses(path, public)]
    assert not bad, "experiments/ uses private jattn names:\n" + "\n".join(bad)


def test_the_library_imports_no_experiment():
    bad = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{name} imports {t}" for t in targets if t.split(".")[0] == "experiments"]
    assert not bad, bad


def test_public_modules_declare_their_names_and_only_they_do():
    public = public_api()
    for module, names in public.items():
        mod = importlib.import_module(module)
        assert hasattr(mod, "__all__"), f"{module} is public (ARCHITECTURE.md) but has no __all__"
        assert [n for n in names if not hasattr(mod, n)] == [], module
    declaring = [name for name, path in modules().items() if re.search(r"^__all__ =", path.read_text(), re.M)]
    assert sorted(set(declaring) - set(public)) == [], "an __all__ in a module ARCHITECTURE.md does not list"


def tier_problems(exported: dict[str, tuple[str, ...]], researcher_rows: list[str],
                  kit_names: dict[str, tuple[str, ...]]) -> list[str]:
    """What breaks "each public name in exactly one tier": a module twice in a table, a kit name
    its module does not export, a name of a module only in the kit that the kit leaves out, a
    researcher's module with every name in the kit. ``exported``: module -> ``__all__``."""
    out = [f"{m}: twice in the researcher's table" for m in sorted(set(researcher_rows))
           if researcher_rows.count(m) > 1]
    out += [f"{m}.{n}: in the kit, not in __all__" for m, names in kit_names.items() for n in names
            if n not in exported.get(m, ())]
    out += [f"{m}.{n}: in no tier" for m, names in exported.items() if m not in researcher_rows
            for n in names if n not in kit_names.get(m, ())]
    out += [f"{m}: every name in the kit" for m in researcher_rows
            if exported.get(m) and set(exported[m]) <= set(kit_names.get(m, ()))]
    return out


def test_the_tier_checker_sees_each_problem():
    exported = {"a": ("x", "y"), "b": ("z",), "c": ("w",)}
    assert tier_problems(exported, ["a"], {"a": ("x",), "b": ("z",), "c": ("w",)}) == []
    assert tier_problems(exported, ["a", "a"], {"a": ("q",), "b": (), "c": ("w",)}) == [
        "a: twice in the researcher's table", "a.q: in the kit, not in __all__", "b.z: in no tier"]
    assert tier_problems(exported, ["a", "c"], {"a": ("x",), "b": ("z",), "c": ("w",)}) == ["c: every name in the kit"]


def test_each_public_name_is_in_one_tier():
    """Every name of a public module's ``__all__`` is in exactly one tier: the kit's (its row) or,
    for a module of the researcher's table, the researcher's (the rest)."""
    researcher_rows = [row[0].strip("`") for row in doc_table("Researcher's API")]
    kit_rows = [row[0].strip("`") for row in doc_table("Study kit")]
    assert len(set(kit_rows)) == len(kit_rows), "a module twice in the study kit's table"
    problems = tier_problems(public_api(), researcher_rows, kit())
    assert not problems, "names not in exactly one tier:\n" + "\n".join(problems)


def test_the_researcher_tier_is_small_and_in_the_guide():
    """At most 100 names, each with its line in the GUIDE's researcher's API (``module.name``),
    and no line there for a name outside the tier."""
    researcher = researcher_api()
    count = sum(map(len, researcher.values()))
    assert 50 <= count <= MAX_RESEARCHER_NAMES, f"{count} names in the researcher's API"
    section = GUIDE.read_text(encoding="utf-8").split("## The researcher's API\n", 1)[1].split("\n## ", 1)[0]
    lines = set(re.findall(r"^- `(jattn[\w.]*)`", section, re.M))
    names = {f"{m}.{n}" for m, ns in researcher.items() for n in ns}
    assert not names - lines, "researcher names without their GUIDE line:\n" + "\n".join(sorted(names - lines))
    assert not lines - names, "GUIDE lines for names outside the researcher's API:\n" + "\n".join(sorted(lines - names))


def test_every_public_name_is_named_in_a_test():
    text = "\n".join(p.read_text(encoding="utf-8") for p in Path(__file__).parent.rglob("*.py")
                     if p.name != "test_architecture.py")
    untested = [f"{m}.{n}" for m, names in public_api().items() for n in names
                if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert not untested, "public names no test names:\n" + "\n".join(untested)


def doc_references(text: str) -> set[str]:
    """``jattn.a.b`` references of a Markdown text (code and prose; file paths left out)."""
    return set(re.findall(r"(?<![\w/.])jattn(?:\.\w+)+", text))


@pytest.mark.parametrize("doc", ["docs/GUIDE.md", "README.md"])
def test_the_docs_name_public_things_only(doc):
    public = public_api()
    bad = []
    for ref in sorted(doc_references((ROOT.parent / doc).read_text(encoding="utf-8"))):
        parts = ref.split(".")
        module = next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                       if is_module(".".join(parts[:i]))), "jattn")
        name = parts[len(module.split("."))] if len(parts) > len(module.split(".")) else ""
        if module not in public or (name and not name.startswith("__") and name not in public[module]):
            bad.append(ref)
    assert not bad, f"{doc} names private things:\n" + "\n".join(bad)


def experiments_named(path: Path) -> set[str]:
    """The ``experiments`` modules a file imports (``from experiments import common`` is
    ``experiments.common``; a relative import out of its folder is ``experiments.<..>``) or names
    in a string, as a Stage's ``code`` does."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level > 1:
            out.add("experiments.<..>")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out |= ({f"experiments.{a.name}" for a in node.names} if node.module == "experiments" else {node.module})
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out |= set(re.findall(r"^experiments(?:\.\w+)+$", node.value))
    return {m for m in out if m.split(".")[0] == "experiments"}


def test_no_study_imports_another(tmp_path):
    planted = tmp_path / "s.py"
    planted.write_text('from experiments import common, finetune\nfrom ..x import y\ncode = ("experiments.a.b",)\n'
                       "def f():\n    import experiments.c.d\n")
    assert experiments_named(planted) == {"experiments.common", "experiments.finetune", "experiments.<..>",
                                          "experiments.a.b", "experiments.c.d"}
    folders = sorted(p.parent for p in EXPERIMENTS.glob("*/study.py"))
    assert len(folders) >= 8
    bad = [f"{path.relative_to(EXPERIMENTS)} names {m}" for folder in folders for path in sorted(folder.rglob("*.py"))
           for m in sorted(experiments_named(path)) if m not in ("experiments.common", "experiments.papers")
           and m.split(".")[:2] != ["experiments", folder.name]]
    assert not bad, "a study uses another (what studies share goes to experiments/common.py):\n" + "\n".join(bad)


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*/study.py")), ids=lambda p: p.parent.name)
def test_study_size(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


# A family is one folder and nothing else: its spec and key table; trainers and recipes live in
# jattn/artefacts/, and tables several families share are named by layout (jattn/families/layouts/).
FAMILY_FILES = {"__init__.py", "spec.py", "convert.py"}


def family_folders() -> tuple[str, ...]:
    """The family folders, as the registry lists them (``jattn.families.FOLDERS``)."""
    return tuple(importlib.import_module("jattn.families").FOLDERS)


def family_of(module: str, folders) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["jattn", "families"] and parts[2] in folders else None


def cross_family_imports(edges: dict[str, set[str]], folders) -> list[str]:
    """"a -> b" for each import from one family's folder into another's."""
    return sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets
                  if family_of(a, folders) and family_of(b, folders) not in (None, family_of(a, folders)))


def test_cross_family_finder_sees_a_planted_import():
    edges = {"jattn.families.x.convert": {"jattn.families.y.convert", "jattn.families.layouts.seq2seq"},
             "jattn.families.y.spec": {"jattn.families.y.convert", "jattn.families.spec"}}
    assert cross_family_imports(edges, ("x", "y")) == ["jattn.families.x.convert -> jattn.families.y.convert"]


def test_the_registry_names_every_family_folder():
    folders = family_folders()
    assert len(folders) >= 20 and "bert" in folders and "layouts" not in folders
    on_disk = {p.name for p in (ROOT / "families").iterdir() if p.is_dir() and p.name not in ("__pycache__", "layouts")}
    assert on_disk == set(folders), f"family folders the registry does not list, or listed without a folder: " \
                                    f"{sorted(on_disk ^ set(folders))}"


def test_no_family_imports_another():
    bad = cross_family_imports(graph(), family_folders())
    assert not bad, "imports from one family into another (import a table of jattn/families/layouts/):\n" + \
        "\n".join(bad)


def test_no_trainer_or_recipe_under_families():
    folders = family_folders()
    extra = sorted(f"{name}/{p.name}" for name in folders for p in (ROOT / "families" / name).glob("*.py")
                   if p.name not in FAMILY_FILES)
    assert not extra, f"a family folder holds only {sorted(FAMILY_FILES)} (trainers and recipes: jattn/artefacts/):" \
                      f" {extra}"
    edges = graph()
    bad = sorted(f"{a} -> {b}" for a, targets in edges.items() if a.startswith("jattn.families")
                 for b in targets if folder(b) in ("artefacts", "training"))
    assert not bad, "families import a trainer or a recipe:\n" + "\n".join(bad)
    named = [f"{path.relative_to(ROOT)}:{line}" for name, path in modules().items() if name.startswith("jattn.families")
             for line, text in code_tokens(path) if text in ("Recipe", "seeded", "RECIPES")]
    assert not named, f"recipes under families/: {named}"
