"""StatekeepSessionService (statekeep.adapters.adk) on every store: what it keeps where, and
that a GetSessionConfig is served by range reads (what ADK's own services do is compared in
test_adk_differential.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig

from statekeep import MemoryStore, Store
from statekeep._core.records import Record
from statekeep.adapters._adk_layout import session_id_of
from statekeep.adapters.adk import StatekeepSessionService

BASE = 2_000_000_000.0


def event(i: int, **delta: Any) -> Event:
    return Event(
        id=f"e{i}",
        author="user",
        invocation_id="inv",
        timestamp=BASE + i,
        actions=EventActions(state_delta=delta),
    )


async def test_it_is_an_adk_session_service_keeping_one_state_per_session(store: Store) -> None:
    service = StatekeepSessionService(store)
    assert isinstance(service, BaseSessionService)
    session = await service.create_session(
        app_name="shop", user_id="ann", session_id="s:1", state={"temp:x": 1, "k": 2}
    )
    await service.append_event(session, event(1, k=3, **{"temp:y": 4, "app:a": 5, "user:u": 6}))
    assert session.state == {"k": 3, "temp:y": 4, "app:a": 5, "user:u": 6}  # in memory (create drops temp:)

    record = await store.aread(session_id_of("shop", "ann", "s:1"))
    assert record is not None and record.snapshot is not None
    assert [entry["kind"] for entry in record.entries] == ["adk_session", "event"]
    assert record.entries[1]["event"]["actions"]["state_delta"] == {"k": 3, "app:a": 5, "user:u": 6}
    assert "temp:" not in str(record.entries) + str(record.snapshot)  # never saved
    (row,) = [r for r in await store.alist() if r.labels.get("adk.kind") == "session"]
    assert row.task == "shop/ann/s:1"
    assert row.labels == {"framework": "adk", "adk.kind": "session", "adk.app": "shop", "adk.user": "ann"}
    kinds = sorted(r.labels["adk.kind"] for r in await store.alist())
    assert kinds == ["app", "session", "user"]  # app: and user: state in States of their own


async def test_a_store_in_its_default_namespace_keeps_sessions_in_adk() -> None:
    with MemoryStore() as store:
        service = StatekeepSessionService(store)
        assert service.store.namespace == "adk"  # type: ignore[attr-defined]
        await service.create_session(app_name="a", user_id="u", session_id="s")
        assert await store.alist() == []
        assert len(await service.store.alist()) == 1
        assert StatekeepSessionService(store, namespace="mine").store.namespace == "mine"  # type: ignore[attr-defined]


async def test_a_state_written_by_something_else_is_refused(store: Store) -> None:
    await store.awrite(session_id_of("a", "u", "s"), [{"seq": 0}], {"task": "mine"}, create=True)
    service = StatekeepSessionService(store)
    with pytest.raises(ValueError, match="not an ADK session"):
        await service.get_session(app_name="a", user_id="u", session_id="s")
    record = await store.aread(session_id_of("a", "u", "s"))
    assert record is not None and record.snapshot == {"task": "mine"}  # nothing changed


class Counting(MemoryStore):
    """A MemoryStore that counts the history entries its reads return."""

    read_entries = 0

    async def aread(self, state_id: str, *, since: int = 0) -> Record | None:
        record = await super().aread(state_id, since=since)
        if record is not None:
            self.read_entries += len(record.entries)
        return record


@pytest.mark.parametrize("length", [100, 1200])
async def test_a_config_reads_only_the_range_it_needs(length: int) -> None:
    with Counting(namespace="adk") as store:
        service = StatekeepSessionService(store)
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        for i in range(length):
            await service.append_event(session, event(i, n=i))

        async def entries_read(config: GetSessionConfig) -> tuple[int, list[str]]:
            store.read_entries = 0
            got = await service.get_session(app_name="a", user_id="u", session_id="s", config=config)
            assert got is not None
            return store.read_entries, [e.id for e in got.events]

        read, ids = await entries_read(GetSessionConfig(num_recent_events=20))
        assert ids == [f"e{i}" for i in range(length - 20, length)] and read == 20
        read, ids = await entries_read(GetSessionConfig(after_timestamp=BASE + length - 10))
        assert ids == [f"e{i}" for i in range(length - 10, length)]
        assert read == 16  # timestamps never went back: read back from the end, 16 events first
        read, ids = await entries_read(
            GetSessionConfig(num_recent_events=3, after_timestamp=BASE + length - 10)
        )
        assert ids == [f"e{i}" for i in range(length - 3, length)] and read == 16
        read, ids = await entries_read(GetSessionConfig(after_timestamp=BASE + length - 100))
        assert ids == [f"e{i}" for i in range(length - 100, length)] and read <= 4 * 64  # 16, 64, 256
        read, ids = await entries_read(GetSessionConfig(num_recent_events=0))
        assert (read, ids) == (0, [])


async def test_after_a_time_with_timestamps_that_went_back_reads_from_the_index() -> None:
    """Once an event is older than one before it, a later event may be older than the time
    asked for: the read starts at the index point before that time, at most two strides back."""
    with Counting(namespace="adk") as store:
        service = StatekeepSessionService(store)
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        stamps = [BASE + i for i in range(1000)]
        stamps[500] = BASE - 1  # one event back in time
        for i, stamp in enumerate(stamps):
            await service.append_event(
                session, Event(id=f"e{i}", author="user", invocation_id="i", timestamp=stamp)
            )
        store.read_entries = 0
        got = await service.get_session(
            app_name="a", user_id="u", session_id="s", config=GetSessionConfig(after_timestamp=BASE + 990)
        )
        assert got is not None and [e.id for e in got.events] == [f"e{i}" for i in range(990, 1000)]
        assert store.read_entries <= 10 + 2 * 64
        got = await service.get_session(
            app_name="a", user_id="u", session_id="s", config=GetSessionConfig(after_timestamp=BASE + 499.5)
        )
        assert got is not None and [e.id for e in got.events] == [f"e{i}" for i in range(501, 1000)]


async def test_a_session_object_made_by_hand_is_checked_by_its_last_event(store: Store) -> None:
    """A session object without a revision marker (built by hand, as ADK's fallback allows):
    stale when the stored session has an event it lacks."""
    from google.adk.errors import StaleSessionError
    from google.adk.sessions.session import Session

    service = StatekeepSessionService(store)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    await service.append_event(session, event(1))
    by_hand = Session(id="s", app_name="a", user_id="u", events=[event(1)], last_update_time=0.0)
    await service.append_event(by_hand, event(2))  # it holds the stored last event: fresh
    behind = Session(id="s", app_name="a", user_id="u", events=[event(1)], last_update_time=0.0)
    with pytest.raises(StaleSessionError):
        await service.append_event(behind, event(3))
    got = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert got is not None and [e.id for e in got.events] == ["e1", "e2"]


async def test_the_newest_events_are_right_whatever_another_service_did_meanwhile(store: Store) -> None:
    """A service remembers where a session ended to read its newest events at once: another
    writer appending, or deleting the session and making it again shorter, changes nothing."""
    ours, theirs = StatekeepSessionService(store), StatekeepSessionService(store)
    recent = GetSessionConfig(num_recent_events=3)

    async def newest() -> list[str]:
        got = await ours.get_session(app_name="a", user_id="u", session_id="s", config=recent)
        assert got is not None
        return [e.id for e in got.events]

    session = await ours.create_session(app_name="a", user_id="u", session_id="s")
    for i in range(10):
        await ours.append_event(session, event(i))
    assert await newest() == ["e7", "e8", "e9"]
    other = await theirs.get_session(app_name="a", user_id="u", session_id="s")
    assert other is not None
    for i in range(10, 40):
        await theirs.append_event(other, event(i))
    assert await newest() == ["e37", "e38", "e39"]
    await theirs.delete_session(app_name="a", user_id="u", session_id="s")
    again = await theirs.create_session(app_name="a", user_id="u", session_id="s")
    for i in range(100, 104):
        await theirs.append_event(again, event(i))
    assert await newest() == ["e101", "e102", "e103"]
    await theirs.delete_session(app_name="a", user_id="u", session_id="s")
    assert await ours.get_session(app_name="a", user_id="u", session_id="s", config=recent) is None


async def test_ids_of_any_string_and_a_clear_error_for_others(store: Store) -> None:
    service = StatekeepSessionService(store)
    odd = await service.create_session(
        app_name="", user_id="a/b:c", session_id="x" * 300, state={"user:k": 1}
    )
    listed = await service.list_sessions(app_name="", user_id="a/b:c")
    assert [s.id for s in listed.sessions] == [odd.id] and listed.sessions[0].state == {"user:k": 1}
    for bad in ({"app_name": 3, "user_id": "u"}, {"app_name": "a", "user_id": None}):
        with pytest.raises(TypeError, match="must be a str"):
            await service.create_session(**bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_id must be a str"):
        await service.get_session(app_name="a", user_id="u", session_id=7)  # type: ignore[arg-type]


def test_statekeep_show_the_viewer_and_load_know_an_adk_session(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from google.genai import types

    from statekeep import FileStore, UnsupportedFormatError
    from statekeep.cli import main

    async def save() -> str:
        async with FileStore(tmp_path / "runs") as store:
            service = StatekeepSessionService(store)
            session = await service.create_session(app_name="shop", user_id="ann", session_id="s1")
            call = types.FunctionCall(name="record", args={"turn": 1}, id="c1")
            result = types.FunctionResponse(name="record", response={"ok": True}, id="c1")
            for author, part, delta in (
                ("user", types.Part(text="hello"), {}),
                ("clerk", types.Part(function_call=call), {}),
                ("clerk", types.Part(function_response=result), {"last": 1}),
            ):
                content = types.Content(role="user", parts=[part])
                await service.append_event(
                    session,
                    Event(
                        author=author,
                        invocation_id="i",
                        content=content,
                        actions=EventActions(state_delta=delta),
                    ),
                )
            with pytest.raises(UnsupportedFormatError, match=r"Google ADK state .*StatekeepSessionService"):
                await service.store.aload(session_id_of("shop", "ann", "s1"))
            return session_id_of("shop", "ann", "s1")

    state_id = asyncio.run(save())
    shown = CliRunner().invoke(main, ["show", state_id, "--store", f"{tmp_path / 'runs'}?namespace=adk"])
    assert shown.exit_code == 0, shown.output
    assert "session 's1' of user 'ann' in app 'shop'" in shown.output
    assert "user: hello" in shown.output and "clerk: calls record({'turn': 1}) [c1]" in shown.output
    assert "clerk: result of [c1]: {'ok': True} (state {'last': 1})" in shown.output
    from starlette.testclient import TestClient

    from statekeep.web import create_app

    with (
        FileStore(tmp_path / "runs", namespace="adk") as store,
        TestClient(create_app(store), base_url="http://127.0.0.1") as client,
    ):
        page = client.get(f"/runs/{state_id}")
        assert page.status_code == 200, page.text
        assert "user: hello" in page.text and "calls record(" in page.text  # the viewer too
