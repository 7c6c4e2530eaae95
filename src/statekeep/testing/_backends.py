"""The kit's async tests under trio as well as asyncio.

Each async contract test (marked ``pytest.mark.asyncio``, run by pytest-asyncio in its auto or
strict mode) gets a twin, ``<name>_under_trio``, that runs the same test body with
``anyio.run(..., backend="trio")``. The twin is a plain function, so neither pytest-asyncio
(which in auto mode takes every coroutine test, ``pytest.mark.anyio`` ones included) nor
anyio's plugin runs it: the kit works the same with only pytest-asyncio installed. Twins are
made only when trio is importable; ``supports_trio = False`` skips them, saying so.

The hooks a store's test class defines (``server_now``, ``plant_snapshot``) may use drivers
that need asyncio (asyncpg, redis.asyncio): under trio the kit runs them on an asyncio loop of
their own, in a worker thread (:func:`on_asyncio`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import pytest

from .._bridge import _on_asyncio

T = TypeVar("T")

#: The suffix of a test's trio twin.
TWIN = "_under_trio"
HAS_TRIO = importlib.util.find_spec("trio") is not None


def asyncio_only(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Coroutine[Any, Any, None]]:
    """Mark an async contract test that uses asyncio itself (``task.cancel()``,
    ``asyncio.timeout``): it gets no trio twin."""
    test.statekeep_asyncio_only = True  # type: ignore[attr-defined]
    return test


def add_trio_twins(cls: type) -> None:
    """Give ``cls`` a trio twin of each async contract test it has (when trio is installed)."""
    if not HAS_TRIO:
        return
    for name in dir(cls):
        if not name.startswith("test_") or name.endswith(TWIN):
            continue
        test = getattr(cls, name)
        if (
            inspect.iscoroutinefunction(test)
            and not getattr(test, "statekeep_asyncio_only", False)
            and any(mark.name == "asyncio" for mark in getattr(test, "pytestmark", ()))
        ):
            setattr(cls, name + TWIN, _twin(test))


def _twin(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(test)  # pytest reads the fixtures it takes from the test's signature
    def under_trio(self: Any, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "supports_trio", True):
            pytest.skip(f"{type(self).__name__}.supports_trio is False")
        anyio.run(functools.partial(test, self, *args, **kwargs), backend="trio")

    # Its marks without pytest-asyncio's: the twin is a plain function it must leave alone.
    under_trio.pytestmark = [m for m in getattr(test, "pytestmark", ()) if m.name != "asyncio"]  # type: ignore[attr-defined]
    under_trio.__name__ = under_trio.__qualname__ = test.__name__ + TWIN
    return under_trio


async def on_asyncio(hook: Callable[[], Awaitable[T]]) -> T:
    """Await a store test class's own hook: as it is on asyncio; under trio, on an asyncio
    loop in a worker thread (its drivers may work on asyncio only)."""
    if _on_asyncio():
        return await hook()

    async def call() -> T:
        return await hook()

    return await anyio.to_thread.run_sync(asyncio.run, call())
