"""The shape of the house: names by role, layers, no circle between files, no borrowed private names.

Pure and fast: every `.py` of `cache`, `reader` and `reshard` is parsed (never imported). Every import
counts, lazy ones inside functions and those under `TYPE_CHECKING` included, relative ones resolved. Each
rule is also run on a small synthetic tree that breaks it, so that a checker that finds nothing fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cache", "reader", "reshard")
SHARED_BASENAMES = frozenset({"__init__.py", "errors.py"})
# A package may import the ones to its left, never those to its right.
LAYERS = ("cache", "reader", "reshard")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


@dataclass(frozen=True)
class Import:
    """One imported name: `target` is the module it comes from, `name` the name (None for `import x`)."""

    source: str
    target: str
    name: str | None
    line: int


def load_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Module]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = Module(name, path, ast.parse(path.read_text(), filename=str(path)))
    return modules


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    base = base if module.is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: Module) -> Iterator[Import]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                yield Import(module.name, target, alias.name, node.lineno)


def edges(modules: dict[str, Module]) -> dict[str, set[str]]:
    """File import graph: `from pkg import sub` points at `pkg.sub` when that is a module, else at `pkg`."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for imp in imports(module):
            sub = f"{imp.target}.{imp.name}"
            target = sub if imp.name and sub in modules else imp.target
            if target in modules and target != module.name:
                graph[module.name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself (breadth first)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


def duplicate_basenames(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Basenames used twice within one top-level package (`reader/x.py` and `reader/sub/x.py`).

    A name need not be unique across the tree: `reader/errors.py` and `reshard/errors.py` each say what
    their package raises. Within a package one name is one thing."""
    found: dict[str, list[str]] = {}
    for module in modules.values():
        if module.path.name not in SHARED_BASENAMES:
            key = f"{module.name.split('.')[0]}/{module.path.name}"
            found.setdefault(key, []).append(module.name)
    return {name: owners for name, owners in found.items() if len(owners) > 1}


def folders_without_docstring(modules: dict[str, Module]) -> list[str]:
    return sorted(m.name for m in modules.values() if m.is_package and not ast.get_docstring(m.tree))


def duplicate_classes(modules: dict[str, Module]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module in modules.values():
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(module.name)
    return {name: owners for name, owners in found.items() if len(owners) > 1}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_aliases(module: Module, modules: dict[str, Module]) -> dict[str, str]:
    """Local names bound to our modules: `import a.b` binds `a`, `import a.b as c` and `from a import b` bind."""
    aliases = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
    return {local: name for local, name in aliases.items() if name in modules}


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def private_uses(module: Module, modules: dict[str, Module]) -> Iterator[str]:
    """`from x import _y` and `x._y` where `x` is another of our modules and `_y` is not a module."""
    for imp in imports(module):
        borrowed = imp.target in modules and imp.target != module.name
        if imp.name and _private(imp.name) and borrowed and f"{imp.target}.{imp.name}" not in modules:
            yield f"{module.name}:{imp.line} imports {imp.target}.{imp.name}"
    aliases = _module_aliases(module, modules)
    for node in ast.walk(module.tree):
        parts = _dotted(node) if isinstance(node, ast.Attribute) else None
        if not parts or parts[0] not in aliases:
            continue
        owner = aliases[parts[0]]
        for part in parts[1:]:
            if f"{owner}.{part}" not in modules:
                if _private(part) and owner != module.name:
                    yield f"{module.name}:{node.lineno} uses {owner}.{part}"
                break
            owner = f"{owner}.{part}"


def layer_violations(modules: dict[str, Module]) -> list[str]:
    found = []
    for source, targets in edges(modules).items():
        for target in targets:
            below = LAYERS.index(source.split(".")[0]) if source.split(".")[0] in LAYERS else None
            above = LAYERS.index(target.split(".")[0]) if target.split(".")[0] in LAYERS else None
            if below is not None and above is not None and above > below:
                found.append(f"{source} imports {target}")
    return sorted(found)


def all_private_uses(modules: dict[str, Module]) -> list[str]:
    return sorted(use for module in modules.values() for use in private_uses(module, modules))


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return load_modules(ROOT, PACKAGES)


def test_no_two_modules_of_a_package_share_a_basename(tree: dict[str, Module]) -> None:
    assert duplicate_basenames(tree) == {}


def test_every_folder_says_what_it_holds(tree: dict[str, Module]) -> None:
    assert folders_without_docstring(tree) == []


# At most this many modules directly in a package's root folder: the rest sit in folders named by role.
ROOT_FILES = {"reshard": 6, "reader": 8}


def crowded_roots(root: Path, limits: dict[str, int]) -> dict[str, list[str]]:
    found = {}
    for package, limit in limits.items():
        files = sorted(path.name for path in (root / package).glob("*.py"))
        if len(files) > limit:
            found[package] = files
    return found


def test_package_roots_hold_few_files() -> None:
    assert crowded_roots(ROOT, ROOT_FILES) == {}


def test_checker_finds_crowded_roots(tmp_path: Path) -> None:
    (tmp_path / "reshard").mkdir()
    for name in ("__init__.py", "a.py", "b.py"):
        (tmp_path / "reshard" / name).write_text("")
    assert crowded_roots(tmp_path, {"reshard": 2}) == {"reshard": ["__init__.py", "a.py", "b.py"]}
    assert crowded_roots(tmp_path, {"reshard": 3}) == {}


def test_no_two_public_classes_share_a_name(tree: dict[str, Module]) -> None:
    assert duplicate_classes(tree) == {}


def test_no_circle_between_files(tree: dict[str, Module]) -> None:
    cycles = find_cycles(edges(tree))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_module_uses_another_modules_private_names(tree: dict[str, Module]) -> None:
    assert all_private_uses(tree) == []


def test_layers_import_only_downwards(tree: dict[str, Module]) -> None:
    assert layer_violations(tree) == []


# The checker on trees that break each rule.

SYNTHETIC = {
    "cache/__init__.py": "",
    "cache/plan.py": "from reader import helpers\n",
    "reader/__init__.py": "from .plan import Plan\n",
    "reader/plan.py": "class Plan: ...\nclass _Hidden: ...\n",
    "reader/sub/__init__.py": '"""What sub holds."""\n',
    "reader/sub/plan.py": "",
    "reshard/plan.py": "",
    "reader/helpers.py": "def f():\n    from . import order\n    return order\n",
    "reader/order.py": "import reader.helpers\nfrom reader.plan import _Hidden\n",
    "reader/mod.py": "import reader.plan as p\n\ndef g():\n    return p._Hidden, p.Plan\n",
    "reshard/__init__.py": "",
    "reshard/sched/__init__.py": "from .. import tables\nKEY = 1\n",
    "reshard/tables.py": "from .sched import KEY, keys\nclass Plan: ...\n",
    "reshard/sched/keys.py": "",
}


@pytest.fixture
def synthetic(tmp_path: Path) -> dict[str, Module]:
    for rel, text in SYNTHETIC.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return load_modules(tmp_path, PACKAGES)


def test_checker_finds_shared_basenames_and_classes(synthetic: dict[str, Module]) -> None:
    assert duplicate_basenames(synthetic) == {"reader/plan.py": ["reader.plan", "reader.sub.plan"]}
    assert duplicate_classes(synthetic) == {"Plan": ["reader.plan", "reshard.tables"]}


def test_checker_finds_cycles_through_lazy_and_relative_imports(synthetic: dict[str, Module]) -> None:
    cycles = find_cycles(edges(synthetic))
    assert sorted(cycles) == [
        ["reader.helpers", "reader.order", "reader.helpers"],
        ["reshard.sched", "reshard.tables", "reshard.sched"],
    ]


def test_checker_finds_private_names(synthetic: dict[str, Module]) -> None:
    assert all_private_uses(synthetic) == [
        "reader.mod:4 uses reader.plan._Hidden",
        "reader.order:2 imports reader.plan._Hidden",
    ]


def test_checker_finds_folders_without_docstring(synthetic: dict[str, Module]) -> None:
    assert folders_without_docstring(synthetic) == ["cache", "reader", "reshard", "reshard.sched"]


def test_checker_finds_upward_imports(synthetic: dict[str, Module]) -> None:
    assert layer_violations(synthetic) == ["cache.plan imports reader.helpers"]


# The command line is thin: it imports what a package exports, never a module's internals.

CLI = "reshard.cli"
# What `reshard.cli` may still import from a module rather than a package's `__all__`, by module.
CLI_ALLOWED = {
    # cache's command-line helpers. Not cache's API: the Python API page (docs/api) lists all of
    # `cache.__all__`, and these are tools of lrs's own commands, not of a user of the cache.
    "cache.arguments": frozenset({"format_index_list", "index_range", "local_dir"}),
    "cache.errors": frozenset({"os_error_message"}),
    "cache.exits": frozenset({"EXIT_SIGINT", "EXIT_SIGTERM", "Terminated", "raise_on_sigterm"}),
    "cache.printable": frozenset({"printable", "printable_lines"}),
    "cache.progress": frozenset({"human_bytes", "progress_bar"}),
    "cache.redaction": frozenset({"redact"}),
}


def exported(module: Module) -> frozenset[str]:
    """The names of a module's `__all__ = [...]` (a list or tuple of strings), empty without one."""
    for node in module.tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, (ast.List, ast.Tuple)):
            continue
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets):
            return frozenset(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return frozenset()


def _in_cli(name: str) -> bool:
    return name == CLI or name.startswith(CLI + ".")


def cli_reaches_in(modules: dict[str, Module], allowed: dict[str, frozenset[str]] | None = None) -> list[str]:
    """Imports of `reshard.cli` from the library (`cache`, `reader`, `reshard` outside the CLI) that are
    not a name in a package's `__all__`: a module's own name, `import a.b`, a submodule, or `allowed`."""
    allowed = CLI_ALLOWED if allowed is None else allowed
    found = []
    for module in modules.values():
        if not _in_cli(module.name):
            continue
        for imp in imports(module):
            if imp.target.split(".")[0] not in PACKAGES or _in_cli(imp.target):
                continue
            owner = modules.get(imp.target)
            if imp.name is not None and imp.name in allowed.get(imp.target, frozenset()):
                continue
            fine = (
                imp.name is not None
                and owner is not None
                and owner.is_package
                and imp.name in exported(owner)
                and f"{imp.target}.{imp.name}" not in modules
            )
            if not fine:
                shown = imp.target if imp.name is None else f"{imp.target}.{imp.name}"
                found.append(f"{module.name}:{imp.line} imports {shown}")
    return sorted(found)


def test_the_command_line_imports_only_what_packages_export(tree: dict[str, Module]) -> None:
    assert cli_reaches_in(tree) == []


def test_every_allowed_cli_import_is_still_used(tree: dict[str, Module]) -> None:
    """An allow-list entry the command line no longer needs is removed, so that the list only shrinks."""
    used = {
        (imp.target, imp.name) for module in tree.values() if _in_cli(module.name) for imp in imports(module)
    }
    unused = sorted(f"{m}.{n}" for m, names in CLI_ALLOWED.items() for n in names if (m, n) not in used)
    assert unused == []


SYNTHETIC_CLI = {
    "cache/__init__.py": '__all__ = ["NodeCache"]\n',
    "cache/redaction.py": "def redact(s): ...\n",
    "reader/__init__.py": '__all__ = ("EpisodeStream",)\n',
    "reader/stream.py": "class EpisodeStream: ...\n",
    "reshard/__init__.py": "",
    "reshard/job/__init__.py": '__all__ = ["reshard", "run"]\n',
    "reshard/job/run.py": "def reshard(): ...\n",
    "reshard/cli/__init__.py": "from reshard.cli.base import cli\nfrom .base import helper\n",
    "reshard/cli/base.py": (
        "import reader.stream\n"
        "from cache import NodeCache, resolve\n"
        "from cache.redaction import redact\n"
        "from reader import EpisodeStream\n"
        "from reader.stream import EpisodeStream as S\n"
        "from reshard.job import reshard\n"
        "from reshard.job import run\n"
        "from ..job.run import reshard as r\n"
    ),
}


@pytest.fixture
def synthetic_cli(tmp_path: Path) -> dict[str, Module]:
    for rel, text in SYNTHETIC_CLI.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return load_modules(tmp_path, PACKAGES)


def test_checker_finds_cli_imports_of_internals(synthetic_cli: dict[str, Module]) -> None:
    assert cli_reaches_in(synthetic_cli, {}) == [
        "reshard.cli.base:1 imports reader.stream",
        "reshard.cli.base:2 imports cache.resolve",
        "reshard.cli.base:3 imports cache.redaction.redact",
        "reshard.cli.base:5 imports reader.stream.EpisodeStream",
        "reshard.cli.base:7 imports reshard.job.run",
        "reshard.cli.base:8 imports reshard.job.run.reshard",
    ]
    allowed = {"cache.redaction": frozenset({"redact"})}
    assert "reshard.cli.base:3 imports cache.redaction.redact" not in cli_reaches_in(synthetic_cli, allowed)


# scripts/: each script's folder is its import root (scripts/README.md), so a script imports the files
# beside it by bare name; the graph is over basenames, which are unique across scripts/.


def script_modules(root: Path) -> dict[str, Module]:
    modules = load_modules(root, ("scripts",))
    by_basename = {m.path.stem: Module(m.path.stem, m.path, m.tree) for m in modules.values()}
    assert len(by_basename) == len(modules), "two files of scripts/ share a basename"
    return by_basename


def test_no_circle_between_scripts() -> None:
    cycles = find_cycles(edges(script_modules(ROOT)))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_checker_finds_cycles_between_scripts(tmp_path: Path) -> None:
    synthetic = {
        "scripts/setup.py": "",
        "scripts/lerobot/check.py": "def main():\n    from compare import measure\n",
        "scripts/lerobot/compare.py": "from check import ACT\n",
        "scripts/lerobot/runs.py": "",
        "scripts/bench/bench_reader.py": "import json_report\nfrom runs import tool\n",
        "scripts/bench/json_report.py": "",
    }
    for rel, text in synthetic.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = script_modules(tmp_path)
    assert edges(modules)["bench_reader"] == {"json_report", "runs"}
    assert find_cycles(edges(modules)) == [["check", "compare", "check"]]
