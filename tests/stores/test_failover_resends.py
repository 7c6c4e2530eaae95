"""The rules of ``failover_timeout``'s resends, on PostgresStore and RedisStore.

A lost answer is injected at the store's write seam (``_send``): the first send reaches the
real server and commits, then its answer is lost (ConnectionLost, as a dead connection
gives), so the store must resend a write whose outcome it does not know. Another writer,
in another process, acts in between where a rule is about one.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statekeep.stores import PostgresStore, RedisStore
from statekeep.stores._server import ConnectionLost
from tests.support import REPO, servers

KINDS = ["postgres", "redis"]


def _store(kind: str, **options: Any) -> Any:
    if kind == "postgres":
        return servers.postgres_store(**options)
    return servers.redis_store(**options)


def _reopen(store: Any) -> tuple[str, str, str]:
    """What another process needs to open the same store: (kind, url, place)."""
    if isinstance(store, PostgresStore):
        return "postgres", servers.shared_postgres().dsn, store.schema
    assert isinstance(store, RedisStore)
    prefix = store.prefix
    return "redis", servers.shared_redis().url, prefix.decode() if isinstance(prefix, bytes) else prefix


OTHER = """
import sys
from statekeep.stores import PostgresStore, RedisStore
kind, url, place, action = sys.argv[1:5]
s = PostgresStore(url, schema=place) if kind == "postgres" else RedisStore(url, prefix=place)
if action == "snapshot":
    s.write("s", [], {"by": "B"})
s.close()
"""


def _other(store: Any, action: str) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        args = [sys.executable, "-c", OTHER, *_reopen(store), action]
        await asyncio.to_thread(subprocess.run, args, check=True, cwd=REPO)

    return run


def _lose_first_answer(store: Any, between: Callable[[], Awaitable[None]] | None = None) -> list[Any]:
    """Make the store's first send commit and then lose its answer (running ``between``
    first); the later sends go through. Returns the answers the server gave, in order."""
    real, answers = store._send, []

    async def send(args: Any) -> Any:
        answer = await real(args)
        answers.append(answer)
        if len(answers) == 1:
            if between is not None:
                await between()
            raise ConnectionLost("test: the connection was lost after the server answered")
        return answer

    store._send = send
    return answers


@pytest.mark.parametrize("kind", KINDS)
async def test_a_resent_append_never_puts_its_snapshot_back_over_a_later_one(kind: str) -> None:
    store = _store(kind, failover_timeout=30)
    try:
        await store.awrite("s", [{"seq": 0, "turn": 0}], {"by": "A", "turn": 0}, create=True)
        # A's append commits; its answer is lost; B saves a snapshot; A resends.
        answers = _lose_first_answer(store, _other(store, "snapshot"))
        await store.awrite("s", [{"seq": 1, "turn": 1}], {"by": "A", "turn": 1})
        assert len(answers) >= 2  # it was sent again
        record = await store.aread("s")
        assert record is not None
        assert record.entries == [{"seq": 0, "turn": 0}, {"seq": 1, "turn": 1}]  # applied once
        assert record.snapshot == {"by": "B"}  # B's acknowledged snapshot stands
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_resent_create_that_committed_is_a_success(kind: str) -> None:
    store = _store(kind, failover_timeout=30)
    try:
        _lose_first_answer(store)
        await store.awrite("s", [{"seq": 0, "turn": 0}], {"turn": 0}, create=True)  # no "already exists"
        record = await store.aread("s")
        assert record is not None and record.entries == [{"seq": 0, "turn": 0}]
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_the_store_stops_a_resending_write(kind: str) -> None:
    store = _store(kind, failover_timeout=30)
    await store.awrite("s", [], {"turn": 0}, create=True)
    lost = threading.Event()  # set on the store's own loop, in its thread

    async def send(args: Any) -> Any:
        lost.set()
        raise ConnectionLost("test: the connection was lost before the write was sent")

    store._send = send
    write = asyncio.ensure_future(store.awrite("s", [{"seq": 0, "turn": 0}], {"turn": 0}))
    await asyncio.to_thread(lost.wait)
    await store.aclose()  # waits for the write, which stops at its next resend
    with pytest.raises(ConnectionError, match="closed while the write was being sent again"):
        await write
    assert store._state is None  # no connection made again after close


async def test_a_delete_is_never_resent() -> None:
    # Nothing listens on the port: a resent delete would try for 30 s and say how often.
    store = PostgresStore(
        f"postgresql://postgres:pw@127.0.0.1:{servers.free_port()}/postgres", failover_timeout=30
    )
    try:
        with pytest.raises(ConnectionError) as caught:
            await store.adelete("s")
        assert "sent" not in str(caught.value) and "could not be reached" in str(caught.value)
    finally:
        await store.aclose()
