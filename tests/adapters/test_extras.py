"""Each framework extra installs what its adapter and its docs example import, and an
adapter imported without its framework says which extra to install.

What ``pip install 'statekeep[X]'`` installs is read from the installed statekeep's metadata
(its ``Requires-Dist`` for extra X, followed through the installed distributions' own
requirements); which distribution gives a module, from the installed distributions' file lists.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.docs.pages import all_blocks

REPO = Path(__file__).resolve().parent.parent.parent
ADAPTERS = REPO / "src" / "statekeep" / "adapters"

#: adapter module -> (its extra, the framework's top-level modules, its private modules' prefix)
FRAMEWORKS = {
    "langgraph": ("langgraph", ("langgraph", "langchain_core"), "_langgraph"),
    "openai_agents": ("openai-agents", ("agents",), "_openai"),
    "alpineagents": ("alpineagents", ("alpineagents",), "_alpine"),
    "adk": ("adk", ("google",), "_adk"),
}


def extra_requirements(extra: str) -> set[str]:
    """The distributions ``pip install 'statekeep[extra]'`` installs (canonical names),
    from the installed metadata: statekeep's own and the extra's Requires-Dist and, in turn, theirs."""
    wanted = {
        canonicalize_name(req.name)
        for req in map(Requirement, importlib.metadata.requires("statekeep") or [])
        if req.marker is None or req.marker.evaluate({"extra": extra})
    }
    found: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in found:
            continue
        found.add(name)
        for raw in importlib.metadata.requires(name) or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                wanted.add(canonicalize_name(req.name))
    return found


def distribution_of(module: str) -> str:
    """The installed distribution whose files hold ``module`` (canonical name)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{module} is not installed"
    origin = Path(spec.origin).resolve()
    for dist in importlib.metadata.distributions():
        for file in dist.files or []:
            if file.suffix == ".py" and Path(dist.locate_file(file)).resolve() == origin:
                return canonicalize_name(dist.metadata["Name"])
    raise AssertionError(f"no installed distribution holds {origin}")


def imported(code: str) -> set[str]:
    """The absolute modules ``code`` imports, outside the standard library and statekeep."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return {
        name
        for name in out
        if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] != "statekeep"
    }


def docs_examples(adapter: str) -> set[str]:
    """The modules the docs' examples that import the adapter import (at least one does)."""
    codes = [
        block.code for block in all_blocks("python") if f"statekeep.adapters.{adapter} import" in block.code
    ]
    assert codes, f"no docs example imports statekeep.adapters.{adapter}"
    return set().union(*(imported(code) for code in codes))


def test_the_installed_metadata_is_this_checkouts() -> None:
    """The checks below read the installed metadata: it must say what pyproject.toml says."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = importlib.metadata.requires("statekeep") or []
    for extra, _, _ in FRAMEWORKS.values():
        declared = {str(Requirement(raw)) for raw in extras[extra]}
        got = {
            str(Requirement(raw.split(";")[0]))
            for raw in installed
            if Requirement(raw).marker is not None and Requirement(raw).marker.evaluate({"extra": extra})  # type: ignore[union-attr]
        }
        assert got == declared, f"the installed statekeep is stale: run pip install -e . ({extra})"


@pytest.mark.parametrize("adapter", sorted(FRAMEWORKS))
def test_the_extra_installs_what_the_docs_example_and_the_adapter_import(adapter: str) -> None:
    extra, _, private = FRAMEWORKS[adapter]
    installs = extra_requirements(extra)
    sources = [ADAPTERS / f"{adapter}.py", *sorted(ADAPTERS.glob(f"{private}*.py"))]
    needed = docs_examples(adapter) | {name for path in sources for name in imported(path.read_text())}
    assert needed  # the example or the adapter imports its framework
    lacking = {module: distribution_of(module) for module in sorted(needed)}
    lacking = {module: dist for module, dist in lacking.items() if dist not in installs}
    assert not lacking, f"statekeep[{extra}] does not install {lacking} (module: distribution)"


# Run first in the child: the framework's modules cannot be imported, as if not installed.
BLOCK = """\
import importlib.abc, sys
BLOCKED = {blocked!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


@pytest.mark.parametrize("adapter", sorted(FRAMEWORKS))
def test_an_adapter_without_its_framework_names_the_extra(adapter: str) -> None:
    extra, blocked, _ = FRAMEWORKS[adapter]
    code = BLOCK.format(blocked=set(blocked)) + (
        "import statekeep, statekeep.adapters\n"  # importing the package needs no framework
        "try:\n"
        f"    import statekeep.adapters.{adapter}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(type(exc).__name__, exc.name, exc, sep='|')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    kind, name, message = done.stdout.strip().split("|")
    assert kind == "ModuleNotFoundError" and name.split(".")[0] in blocked, done.stdout
    assert f"statekeep.adapters.{adapter} needs" in message, message
    assert f"pip install 'statekeep[{extra}]'" in message, message
