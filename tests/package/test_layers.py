"""The package's layers, read from the source: every import (type-only and function-level ones
included) goes from a higher layer to a lower one, and no modules import each other in a ring.

Run it alone with ``./dev test tests/package``. The table below is the map of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Each part of ``statekeep`` and the parts it may import. Lower parts never import higher ones.
MAY_IMPORT: dict[str, set[str]] = {
    "_core": set(),  # pure: errors, ids, codec, records, labels and times, queries, write rules
    "_run": {"_core"},  # pure: history, State, resume and repair, lineage
    "_runtime": {"_core"},  # the owner loop, hand-offs, workers, group commit
    "_leases": {"_core", "_runtime"},
    "_protect": {"_core", "_runtime"},
    "_store": {"_core", "_run", "_runtime", "_leases", "_protect"},  # the seam: contract, engine
    "_transfer": {"_core", "_run", "_runtime", "_leases", "_protect", "_store"},
    "_agent": {"_core", "_run", "_runtime", "_leases", "_store"},
    "stores": {"_core", "_run", "_runtime", "_leases", "_protect", "_store"},
}
#: The outer parts: built on the public API, free to use any part below (never each other's
#: internals but where listed).
OUTER = {
    "adapters": set(),
    "web": set(),
    "testing": set(),
    "cli": {"web"},
    "__main__": {"cli"},
}
#: Package plumbing the top-level ``statekeep/__init__.py`` uses.
PLUMBING = {"_oldpaths"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def imports_in(source: str, name: str, is_package: bool) -> set[str]:
    """The statekeep modules that module ``name`` (source text ``source``) imports, wherever
    the import statement is: top level, under ``if TYPE_CHECKING:``, inside a function."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "statekeep")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "statekeep":
                continue
            for alias in node.names:  # ``from . import state`` imports the module ``state``
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    found.discard(name)
    return found


GRAPH = {
    name: imports_in(path.read_text(), name, path.name == "__init__.py") for name, path in MODULES.items()
}


def part_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "statekeep"


def wrong_imports(graph: dict[str, set[str]], part: str) -> list[str]:
    """The imports of ``part``'s modules that go to a part it may not import."""
    if part in MAY_IMPORT:
        allowed = MAY_IMPORT[part] | {part}
    else:  # the outer parts use the public API and everything below it
        allowed = set(MAY_IMPORT) | OUTER[part] | {part, "statekeep"}
    return sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if part_of(name) == part
        for target in targets
        if part_of(target) not in allowed
    )


def rings(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules that import each other, directly or round a ring (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            ring = []
            while (member := stack.pop()) != node:
                ring.append(member)
            if ring:
                found.append(sorted([node, *ring]))

    for name in graph:
        if name not in index:
            visit(name)
    return found


def test_every_module_belongs_to_a_known_part() -> None:
    known = set(MAY_IMPORT) | set(OUTER) | PLUMBING | {"statekeep"}
    assert sorted({part_of(name) for name in MODULES} - known) == []


@pytest.mark.parametrize("part", sorted(MAY_IMPORT) + sorted(OUTER))
def test_imports_go_down_the_layers(part: str) -> None:
    assert wrong_imports(GRAPH, part) == []


def test_no_import_cycles() -> None:
    assert rings(GRAPH) == []


def test_the_check_finds_hidden_wrong_imports_and_rings() -> None:
    # A core module that imports a store only for its types, and the CLI only inside a function:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from .errors import StatekeepError\n"
        "if TYPE_CHECKING:\n    from ..stores import FileStore\n"
        "def show():\n    import statekeep.cli\n"
    )
    graph = {"statekeep._core.fake": imports_in(source, "statekeep._core.fake", is_package=False)}
    assert wrong_imports(graph, "_core") == [
        "statekeep._core.fake imports statekeep.cli",
        "statekeep._core.fake imports statekeep.stores",
    ]
    graph["statekeep.stores"] = {"statekeep._core.fake"}
    assert rings(graph) == [["statekeep._core.fake", "statekeep.stores"]]
