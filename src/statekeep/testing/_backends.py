"""The kit's async tests under trio as well as asyncio.

Each async contract test is marked ``pytest.mark.asyncio``: pytest-asyncio runs it (in its
auto or strict mode). Where trio is installed it gets a twin, ``<name>_under_trio``, marked
``pytest.mark.anyio`` and requesting the class's ``anyio_backend`` fixture (``"trio"``), so that
anyio's pytest plugin (installed with anyio) runs the same body under trio:

- with pytest-asyncio in strict mode (its default), anyio's plugin runs the twin on trio;
- in auto mode pytest-asyncio takes every coroutine test, the twin included, and runs it on
  asyncio: the twin then runs its body under trio itself, with ``anyio.run(..., backend="trio")``
  in a worker thread, so the trio coverage is the same in either mode.

``supports_trio = False`` skips the twins, saying so. The hooks a store's test class defines
(``server_now``, ``plant_snapshot``) may use drivers that need asyncio (asyncpg, redis.asyncio):
under trio the kit runs them on an asyncio loop of their own, in a worker thread
(:func:`on_asyncio`).
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

from .._runtime.bridge import _on_asyncio

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


def _twin(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(test)  # pytest reads the fixtures it takes from the test's signature
    async def under_trio(self: Any, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "supports_trio", True):
            pytest.skip(f"{type(self).__name__}.supports_trio is False")
        body = functools.partial(test, self, *args, **kwargs)
        if not _on_asyncio():  # anyio's plugin runs it on trio
            await body()
            return
        # pytest-asyncio's auto mode took it: trio in a thread of its own (not in this one,
        # where asyncio's running loop would make the code under test think it is on asyncio).
        await anyio.to_thread.run_sync(functools.partial(anyio.run, body, backend="trio"))

    # Its marks with anyio's in place of pytest-asyncio's, which strict mode then leaves alone.
    marks = [m for m in getattr(test, "pytestmark", ()) if m.name != "asyncio"]
    under_trio.pytestmark = [*marks, pytest.mark.anyio.mark]  # type: ignore[attr-defined]
    under_trio.__name__ = under_trio.__qualname__ = test.__name__ + TWIN
    return under_trio


class BackendContract:
    """The backend the kit's async tests run on, and a test that checks it."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """What anyio's pytest plugin runs this class's anyio-marked tests (the trio twins) on."""
        return "trio"

    @pytest.mark.asyncio
    async def test_async_tests_run_on_the_backend_they_name(self, request: pytest.FixtureRequest) -> None:
        if request.node.name.split("[")[0].endswith(TWIN):
            import trio

            assert not _on_asyncio()
            assert trio.lowlevel.current_root_task() is not None  # raises outside trio
        else:
            assert _on_asyncio()


async def on_asyncio(hook: Callable[[], Awaitable[T]]) -> T:
    """Await a store test class's own hook: as it is on asyncio; under trio, on an asyncio
    loop in a worker thread (its drivers may work on asyncio only)."""
    if _on_asyncio():
        return await hook()

    async def call() -> T:
        return await hook()

    return await anyio.to_thread.run_sync(asyncio.run, call())
