"""Every example in the docs and the README runs, as a reader runs them: each page's Python
examples one after the other in one empty folder, and each one alone; the one that defines a
StoreContract test class passes the conformance kit, run by pytest in a process of its own; and
each page's bash examples, in order, in one shell in an empty folder, with this Python's
``statekeep`` first on PATH (``sh`` blocks are illustrations, with placeholders, and are not run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.pages import DOCS, README, ROOT, Block, all_blocks, blocks, pages
from tests.support.settle import drop_and_collect

KITS = [block for block in all_blocks("python") if "StoreContract" in block.code]
EXAMPLES = [block for block in all_blocks("python") if "StoreContract" not in block.code]
#: Each page's Python examples, in order, by the page's path (those of one page build on each other).
BY_PAGE = {
    str(page.relative_to(ROOT)): found
    for page in pages()
    if (found := [block for block in blocks(page, "python") if "StoreContract" not in block.code])
}
#: Each page's bash examples, in order, by the page's path.
SHELL = {str(page.relative_to(ROOT)): found for page in pages() if (found := blocks(page, "bash"))}


def test_the_pages_have_examples() -> None:
    assert len(EXAMPLES) >= 20
    assert [kit.page.name for kit in KITS] == ["write-your-own-store.md"]
    assert {"docs/cli.md", "docs/viewer.md", "docs/moving-runs.md"} <= set(SHELL)


@pytest.fixture(autouse=True)
def no_telemetry_provider() -> Iterator[None]:
    """Each example starts as a program does, with no OpenTelemetry provider set (docs/telemetry.md
    sets one; the API lets a process set it once, so the globals are reset after each test)."""
    yield
    if "opentelemetry.trace" in sys.modules:
        from tests.support import otel

        otel.reset()


def run(block: Block, name: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Run ``block`` as a module of its own, as a user's script runs: classes it defines (a
    LangGraph state TypedDict) have their annotations resolved in it, without this file's
    __future__ import."""
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(block.compiled(), module.__dict__)
    return module


def unclosed_stores(*modules: types.ModuleType) -> list[str]:
    """The stores the examples that ran in ``modules`` dropped without closing them."""
    held: list[Any] = [module.__dict__ for module in modules]
    for namespace in held:
        namespace.clear()
    return [w for w in drop_and_collect(held) if "dropped without close()" in w]


@pytest.mark.parametrize("page", sorted(BY_PAGE))
def test_a_pages_examples_run_in_order_in_one_folder(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a reader runs them one after the other in one folder: each adapter keeps its
    States in a namespace of its own, so sharing ``./runs`` meets nothing of another's."""
    monkeypatch.chdir(tmp_path)
    ran: list[types.ModuleType] = []
    for i, block in enumerate(BY_PAGE[page]):
        try:
            ran.append(run(block, f"__docs_{i}__", monkeypatch))
        except Exception as exc:
            raise AssertionError(
                f"the example at {block.name} fails after the ones before it: {exc!r}"
            ) from exc
    assert not any(p.name.startswith(".creating-") for p in tmp_path.rglob("*"))
    assert unclosed_stores(*ran) == []  # a reader who copies them is not warned


@pytest.mark.parametrize("block", [pytest.param(block, id=block.name) for block in EXAMPLES])
def test_an_example_runs_alone(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = run(block, "__docs__", monkeypatch)
    assert not any(p.name.startswith(".creating-") for p in tmp_path.rglob("*"))
    assert unclosed_stores(module) == []


def run_kit(code: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a test file of its own with pytest, outside this project (no
    asyncio_mode setting: the kit's async tests must run in pytest-asyncio's strict mode)."""
    (folder / "test_docs_store.py").write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_docs_store.py", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_docs_store_passes_the_kit(tmp_path: Path) -> None:
    proc = run_kit(KITS[0].code, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 50, proc.stdout  # sync and async, and the model
    assert "failed" not in proc.stdout, proc.stdout


def test_the_kit_fails_a_store_that_breaks_the_contract(tmp_path: Path) -> None:
    broken = KITS[0].code.replace("snap or old_snap", "snap")  # snapshot=None no longer keeps it
    assert broken != KITS[0].code
    proc = run_kit(broken, tmp_path, "-k", "snapshot_none")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_snapshot_none_keeps_the_stored_one" in proc.stdout


@pytest.mark.parametrize("page", sorted(SHELL))
def test_a_pages_shell_examples_run_in_order(page: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("STATEKEEP_KEYS", None)
    env.pop("STATEKEEP_TOKEN", None)
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", "\n".join(block.code for block in SHELL[page])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_readme_starts_with_the_two_commands_and_stays_short() -> None:
    lines = README.read_text().split("\n")
    assert any(line.startswith("./dev demo") for line in lines[:6])
    assert any(line.startswith("./dev test") for line in lines[:6])
    assert len(lines) <= 200


def test_the_readmes_links_lead_to_pages_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_the_api_reference_shows_every_public_name() -> None:
    """Each name a public module exports has a ``::: path`` in docs/reference/ that is it."""
    import importlib

    paths = {
        path
        for page in (DOCS / "reference").glob("*.md")
        for path in re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.M)
    }
    # A class or function shown under one path is shown for every path that exports it.
    shown = {
        id(thing)
        for path in paths
        if hasattr(
            thing := getattr(importlib.import_module(path.rpartition(".")[0]), path.rpartition(".")[2]),
            "__qualname__",
        )
    }
    public = [
        "statekeep",
        "statekeep.stores",
        "statekeep.testing",
        "statekeep.web",
        "statekeep.adapters.langgraph",
        "statekeep.adapters.openai_agents",
        "statekeep.adapters.alpineagents",
    ]
    missing = [
        f"{module}.{name}"
        for module in public
        for name in importlib.import_module(module).__all__
        if f"{module}.{name}" not in paths and id(getattr(importlib.import_module(module), name)) not in shown
    ]
    assert missing == []


def test_a_broken_link_or_a_page_left_out_of_the_nav_fails_the_strict_build(tmp_path: Path) -> None:
    """What ./dev docs and ./dev test run (mkdocs build --strict), on a copy of the site with a
    link to an anchor that does not exist and a page no nav entry names: the build fails naming both."""
    for name in ("docs", "scripts"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "src").symlink_to(ROOT / "src")
    with (tmp_path / "docs" / "index.md").open("a") as index:
        index.write("\nSee [the queries](queries.md#no-such-part).\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Nobody links here\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "'#no-such-part'" in proc.stderr and "orphan.md" in proc.stderr, proc.stderr
