"""openai-agents' own session tests (from the pinned version's source distribution) run
against StatekeepSession, once per statekeep backend.

The plugin tests/adapters/_openai_agents_plugin.py puts StatekeepSession where those tests
build their ``SQLiteSession``; the tests that inspect SQLite internals are deselected by
name, with their reasons, in tests/adapters/openai_agents_deselected.toml.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import BACKENDS, backend_url, framework_source, run_suite

LIST = Path(__file__).with_name("openai_agents_deselected.toml")


def listing() -> dict[str, Any]:
    with LIST.open("rb") as file:
        return tomllib.load(file)


@pytest.mark.parametrize("backend", BACKENDS)
def test_openai_agents_session_suite(backend: str, tmp_path: Path) -> None:
    spec = listing()
    source = framework_source("openai-agents", spec["version"])
    deselected: dict[str, str] = spec["deselected"]
    result = run_suite(
        [source / name for name in spec["files"]],
        "tests.adapters._openai_agents_plugin",
        env={"STATEKEEP_TEST_STORE": backend_url(backend, tmp_path)},
        deselect=list(deselected),
        cwd=source,
    )
    assert result.failed == {}, result.explain()
    assert result.skipped == {}
    assert len(result.passed) == spec["passed"], result.output[-3000:]
    assert {name.split("::")[0] for name in result.passed} == {
        "tests.memory.test_session",
        "tests.memory.test_session_limit",
    }
    # A deselected test is gone from the run, so the list cannot name one that does not exist.
    assert f"{len(deselected)} deselected" in result.output, result.output[-3000:]


def test_every_deselected_test_has_a_reason() -> None:
    spec = listing()
    assert spec["deselected"]
    for node, reason in spec["deselected"].items():
        assert node.split("::")[0] in spec["files"], node
        assert isinstance(reason, str) and len(reason) > 20, node
