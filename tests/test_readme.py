"""Every Python example in the README runs; the one that defines a StoreContract test class
passes the conformance kit, run by pytest in a process of its own; and the bash examples of each
section run, in order, in one shell in an empty folder, with this Python's ``statekeep`` first on
PATH (``sh`` blocks are illustrations, with placeholders, and are not run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.support.settle import drop_and_collect

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
EXAMPLES = [code for code in BLOCKS if "StoreContract" not in code]
KITS = [code for code in BLOCKS if "StoreContract" in code]
#: Each ``## `` section's bash blocks, by its title (the blocks of one section build on each other).
SHELL = {
    part.split("\n", 1)[0]: blocks
    for part in re.split(r"^## ", README.read_text(), flags=re.M)[1:]
    if (blocks := re.findall(r"```bash\n(.*?)```", part, flags=re.S))
}


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 2
    assert len(KITS) == 1  # "Write your own store"


@pytest.mark.parametrize(
    "code",
    [pytest.param(code, id=f"example-{i}") for i, code in enumerate(EXAMPLES)],
)
def test_readme_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # As a module of its own, as a user's script runs it: classes it defines (a LangGraph state
    # TypedDict) have their annotations resolved in it, and without this file's __future__ import.
    module = types.ModuleType("__readme__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, str(README), "exec", dont_inherit=True), module.__dict__)
    assert not any(p.name.startswith(".creating-") for p in tmp_path.rglob("*"))
    assert unclosed_stores(module) == []  # a reader who copies it is not warned


def unclosed_stores(*modules: types.ModuleType) -> list[str]:
    """The stores the examples that ran in ``modules`` dropped without closing them."""
    held: list[Any] = [module.__dict__ for module in modules]
    for namespace in held:
        namespace.clear()
    return [w for w in drop_and_collect(held) if "dropped without close()" in w]


def test_readme_examples_run_in_order_in_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a reader runs them one after the other in one folder: each adapter keeps its
    States in a namespace of its own, so sharing ``./runs`` meets nothing of another's."""
    monkeypatch.chdir(tmp_path)
    ran: list[types.ModuleType] = []
    for i, code in enumerate(EXAMPLES):
        module = types.ModuleType(f"__readme_{i}__")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        try:
            exec(compile(code, str(README), "exec", dont_inherit=True), module.__dict__)
        except Exception as exc:
            raise AssertionError(f"example {i} fails after examples 0 to {i - 1}: {exc!r}") from exc
        ran.append(module)
    assert unclosed_stores(*ran) == []


def run_kit(code: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a test file of its own with pytest, outside this project (no
    asyncio_mode setting: the kit's async tests must run in pytest-asyncio's strict mode)."""
    (folder / "test_readme_store.py").write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_readme_store.py", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_readme_store_passes_the_kit(tmp_path: Path) -> None:
    proc = run_kit(KITS[0], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 50, proc.stdout  # sync and async, and the model
    assert "failed" not in proc.stdout, proc.stdout


def test_the_kit_fails_a_store_that_breaks_the_contract(tmp_path: Path) -> None:
    broken = KITS[0].replace("snap or old_snap", "snap")  # snapshot=None no longer keeps it
    assert broken != KITS[0]
    proc = run_kit(broken, tmp_path, "-k", "snapshot_none")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_snapshot_none_keeps_the_stored_one" in proc.stdout


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text().split("\n")[:6]
    assert any(line.startswith("./dev demo") for line in head)
    assert any(line.startswith("./dev test") for line in head)


def test_readme_has_shell_examples() -> None:
    assert {"The command line", "Look at your runs"} <= set(SHELL)


@pytest.mark.parametrize("section", sorted(SHELL))
def test_readme_shell_examples_run(section: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("STATEKEEP_KEYS", None)
    env.pop("STATEKEEP_TOKEN", None)
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", "\n".join(SHELL[section])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
