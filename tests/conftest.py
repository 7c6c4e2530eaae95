"""Fixtures and hooks shared by the test suite: every store, driven through the sync or async
API. What tests import lives in tests/support/, never here."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest

# Before tests.support is first imported: its asserts report what they compared, as a test's do.
pytest.register_assert_rewrite("tests.support")

from statekeep import Store  # noqa: E402
from statekeep.testing import Api  # noqa: E402
from tests.support.stores import STORE_FACTORIES  # noqa: E402

pytest_plugins = [
    "tests.support.servers",
    "tests.support.browser",
]  # fixtures: postgres_server, redis_server; browser, page, serve


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Module | pytest.Class, name: str, obj: object) -> None:
    """Mark this repository's coroutine tests that carry neither an asyncio nor an anyio mark
    ``pytest.mark.asyncio``, as pytest-asyncio's auto mode would; the repository runs it in
    strict mode so that anyio-marked tests (the kit's trio twins) go to anyio's plugin."""
    if not collector.istestfunction(obj, name):
        return
    test = obj.__func__ if isinstance(obj, staticmethod) else obj
    inner = test.hypothesis.inner_test if hasattr(test, "hypothesis") else test
    if not (inspect.iscoroutinefunction(inner) or inspect.isasyncgenfunction(inner)):
        return
    if any(collector.get_closest_marker(mark) for mark in ("asyncio", "anyio")):
        return
    if any(mark.name in ("asyncio", "anyio") for mark in getattr(test, "pytestmark", ())):
        return
    pytest.mark.asyncio(test)  # on the function: the item pytest makes next carries it


@pytest.fixture(params=sorted(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Store]:
    s = STORE_FACTORIES[request.param](tmp_path)
    yield s
    s.close()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, store: Store) -> Api:
    return Api(store, request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``STATEKEEP_TRIO_TWINS=memory`` (what ./dev test sets for Python 3.12 and 3.13), the
    kit's trio twins run for the MemoryStore class alone: they prove the async API under trio on
    that Python, and the same bodies ran under asyncio for every store. Python 3.11 runs them all."""
    if os.environ.get("STATEKEEP_TRIO_TWINS") != "memory":
        return
    kept, dropped = [], []
    for item in items:
        cls = item.cls.__name__ if item.cls is not None else ""
        twin = item.originalname.endswith("_under_trio") if isinstance(item, pytest.Function) else False
        (dropped if twin and cls.startswith("Test") and cls != "TestMemoryStore" else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
