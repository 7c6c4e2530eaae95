"""alpineagents' own store tests (tests/test_store.py of the pinned 0.7.1 source distribution)
pass against StatekeepStore on every statekeep backend.

The child pytest runs from the unpacked sdist with tests/adapters/_alpineagents_plugin.py,
which makes ``FileStore(path)`` in those tests a StatekeepStore on the backend under test.
Only the tests listed in alpineagents_deselected.toml (each reads alpineagents' own file
layout) are left out.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.support.frameworks import BACKENDS, backend_url, framework_source, run_suite

VERSION = "0.7.1"
DESELECTED = Path(__file__).with_name("alpineagents_deselected.toml")
PLUGIN = "tests.adapters._alpineagents_plugin"


def deselected() -> dict[str, str]:
    reasons: dict[str, str] = tomllib.loads(DESELECTED.read_text("utf-8"))["deselected"]
    return reasons


def test_each_deselected_test_has_a_reason() -> None:
    assert deselected()
    for name, reason in deselected().items():
        assert name.startswith("test_") and reason.strip(), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_alpineagents_store_tests_pass(backend: str, tmp_path: Path) -> None:
    source = framework_source("alpineagents", VERSION)
    tests = source / "tests" / "test_store.py"
    defined = tests.read_text("utf-8")
    for name in deselected():
        # A name no longer in the file would silently deselect nothing.
        assert f"def {name}(" in defined, f"{name} is not in alpineagents {VERSION}'s test_store.py"
    result = run_suite(
        [tests],
        PLUGIN,
        env={"STATEKEEP_TEST_STORE": backend_url(backend, tmp_path)},
        deselect=[f"tests/test_store.py::{name}" for name in deselected()],
        cwd=source,
    )
    assert result.failed == {}, result.explain()
    ran = {name.rsplit("::", 1)[-1].split("[")[0] for name in result.passed}
    assert not ran & set(deselected()), "a deselected test ran"
    assert len(result.passed) >= 60, result.explain()
    assert result.skipped == {}, result.skipped
