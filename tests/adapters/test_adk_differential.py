"""StatekeepSessionService against ADK's own DatabaseSessionService (on SQLite), op for op.

Hypothesis makes sequences of create/get (with GetSessionConfig)/list/append_event (state
deltas with every prefix: ``app:``, ``user:``, ``temp:``, none; partial events; stale session
objects)/delete/get_user_state over a few apps, users and sessions; each runs on both
services and every result is compared after normalising what differs by nature: generated
session ids, and the wall-clock time of a session never appended to. Errors compare by class.

Fixed examples in CI (``derandomize``); ``STATEKEEP_SOAK=1`` (``./dev test --soak``) runs more.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.session import Session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeep.adapters.adk import StatekeepSessionService

from .conftest import FACTORIES

SOAK = os.environ.get("STATEKEEP_SOAK") == "1"
EXAMPLES = {"memory": 60, "sqlite": 40, "file": 15, "postgres": 10, "redis": 10}
#: Event times: after any wall-clock creation time of the run, one second apart.
BASE = 2_000_000_000.0

APPS, USERS, SIDS = ["app1", "app2"], ["u1", "u2", "user 3"], ["s1", "s2"]
KEYS = ["k1", "k2", "app:a1", "app:a2", "user:u1", "user:u2", "temp:t1", "temp:t2"]
values = st.one_of(
    st.integers(-3, 3), st.sampled_from(["x", "y", ""]), st.none(), st.lists(st.integers(0, 2), max_size=2)
)
deltas = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)
sid_refs = st.one_of(st.sampled_from(SIDS), st.tuples(st.just("made"), st.integers(0, 2)))
#: Which session a get or delete names: most often one the sequence holds (a handle), else any.
targets = st.one_of(
    st.tuples(st.just("handle"), st.integers(0, 5)),
    st.tuples(st.just("handle"), st.integers(0, 5)),
    st.tuples(st.sampled_from(APPS), st.sampled_from(USERS), sid_refs),
)
#: after_timestamp: none, 0 (none too, as ADK reads it), or k seconds before the op (k events back at most)
times = st.sampled_from([None, 0.0, *range(-1, 12)])

creates = st.tuples(st.just("create"), st.sampled_from(APPS), st.sampled_from(USERS),
                    st.one_of(st.none(), st.sampled_from(SIDS)), deltas)  # fmt: skip
appends = st.tuples(st.just("append"), st.integers(-2, 5), deltas,
                    st.sampled_from([False, False, False, True]), st.booleans())  # fmt: skip
configs = st.tuples(st.sampled_from([None, 0, 1, 2, 3, 20]), times)
BY_KIND = {
    "create": creates,
    "get": st.tuples(st.just("get"), targets, st.one_of(st.none(), configs)),
    "get with config": st.tuples(st.just("get"), targets, configs),
    "list": st.tuples(st.just("list"), st.sampled_from(APPS), st.one_of(st.none(), st.sampled_from(USERS))),
    "append": appends,
    "together": st.tuples(st.just("together"), st.integers(-2, 5), st.integers(-2, 5), deltas, deltas),
    "delete": st.tuples(st.just("delete"), targets),
    "user_state": st.tuples(st.just("user_state"), st.sampled_from(APPS), st.sampled_from(USERS)),
    "again": st.tuples(st.just("again")),
}
#: Kinds by weight (a sampled_from is drawn evenly): appends and reads most.
KINDS = (
    ["append"] * 5
    + ["get with config"] * 3
    + ["get", "create", "list", "delete", "user_state", "together", "again"]
)
ops = st.sampled_from(KINDS).flatmap(BY_KIND.__getitem__)
#: A sequence: a few sessions made first, then any operations.
sequences = st.builds(lambda first, rest: first + rest, st.lists(creates, min_size=1, max_size=3),
                      st.lists(ops, min_size=6, max_size=30))  # fmt: skip


class Side:
    """One service and what the sequence made on it: session objects, generated ids."""

    def __init__(self, service: BaseSessionService) -> None:
        self.service = service
        self.handles: list[Session] = []
        self.made: list[str] = []
        self.events = 0
        self.last: tuple[Event, Session] | None = None  # the last event stored, and its session

    def key(self, target: Any) -> tuple[str, str, str]:
        """The (app, user, session id) a get or delete names."""
        if target[0] == "handle":
            if not self.handles:
                return APPS[0], USERS[0], SIDS[0]
            held = self.handles[target[1] % len(self.handles)]
            return held.app_name, held.user_id, held.id
        return target[0], target[1], self.sid(target[2])

    def sid(self, ref: Any) -> str:
        if isinstance(ref, str):
            return ref
        return self.made[ref[1]] if ref[1] < len(self.made) else "s1"

    def norm_id(self, sid: str) -> str:
        return f"made#{self.made.index(sid)}" if sid in self.made else sid

    def session(self, session: Session | None) -> Any:
        if session is None:
            return None
        return {
            "id": self.norm_id(session.id),
            "app": session.app_name,
            "user": session.user_id,
            "state": session.state,
            "events": [event.model_dump(mode="json", exclude_none=True) for event in session.events],
            "time": round(session.last_update_time, 3) if session.last_update_time >= BASE else "wall clock",
        }

    async def run(self, op: tuple[Any, ...], clock: int) -> Any:
        kind, service = op[0], self.service
        if kind == "create":
            _, app, user, sid, delta = op
            made = await service.create_session(app_name=app, user_id=user, state=dict(delta), session_id=sid)
            if sid is None:
                self.made.append(made.id)
            self.handles.append(made)
            return self.session(made)
        if kind == "get":
            _, target, config = op
            app, user, sid = self.key(target)
            cfg = None
            if config is not None:
                after = config[1] if config[1] in (None, 0.0) else BASE + clock - config[1]
                cfg = GetSessionConfig(num_recent_events=config[0], after_timestamp=after)
            got = await service.get_session(app_name=app, user_id=user, session_id=sid, config=cfg)
            if got is not None:
                self.handles.append(got)
            return self.session(got)
        if kind == "list":
            listed = await service.list_sessions(app_name=op[1], user_id=op[2])
            return [self.session(session) for session in listed.sessions]
        if kind == "append":
            _, which, delta, partial, with_text = op
            if not self.handles:
                return "no session"
            session = self.handles[which % len(self.handles)]
            event = Event(
                id=f"e{clock}", invocation_id=f"inv{clock % 3}", author="user" if with_text else "agent",
                timestamp=BASE + clock, partial=partial or None,
                actions=EventActions(state_delta=dict(delta)),
            )  # fmt: skip
            returned = await service.append_event(session, event)
            if not partial:
                self.last = event, session
            return returned.model_dump(mode="json", exclude_none=True), self.session(session)
        if kind == "again":  # the last event stored, again, to its session read afresh: a retry
            if self.last is None:
                return "nothing to retry"
            event, held = self.last
            session = await service.get_session(
                app_name=held.app_name, user_id=held.user_id, session_id=held.id
            )
            assert session is not None  # a delete forgets the last event
            returned = await service.append_event(session, event.model_copy(deep=True))
            return returned.model_dump(mode="json", exclude_none=True), self.session(session)
        if kind == "together":
            return await self.together(op, clock)
        if kind == "delete":
            app, user, sid = self.key(op[1])
            self.last = None
            await service.delete_session(app_name=app, user_id=user, session_id=sid)
            return None
        assert kind == "user_state"
        return await service.get_user_state(app_name=op[1], user_id=op[2])

    async def together(self, op: tuple[Any, ...], clock: int) -> Any:
        """Two appends at once (``asyncio.gather``) through two session objects: the same one
        (both go in, in order), or two of one session (the second is stale); two of different
        sessions run one after the other (two SQLite transactions at once may meet a lock)."""
        _, one, two, first, second = op
        if not self.handles:
            return "no session"
        pair = [self.handles[which % len(self.handles)] for which in (one, two)]
        events = [
            Event(id=f"e{clock}{tag}", invocation_id="inv", author="user", timestamp=BASE + clock + half,
                  actions=EventActions(state_delta=dict(delta)))
            for tag, half, delta in (("a", 0.0, first), ("b", 0.5, second))
        ]  # fmt: skip
        calls = [
            self.service.append_event(session, event) for session, event in zip(pair, events, strict=True)
        ]
        if (pair[0].app_name, pair[0].user_id, pair[0].id) == (pair[1].app_name, pair[1].user_id, pair[1].id):
            results = await asyncio.gather(*calls, return_exceptions=True)
        else:
            results = [await settled(call) for call in calls]
        shown = [
            type(result).__name__
            if isinstance(result, Exception)
            else result.model_dump(mode="json", exclude_none=True)
            for result in results
        ]
        return shown, [self.session(session) for session in pair]


async def settled(call: Any) -> Any:
    try:
        return await call
    except Exception as exc:
        return exc


async def outcome(side: Side, op: tuple[Any, ...], clock: int) -> Any:
    try:
        return ("ok", await side.run(op, clock))
    except Exception as exc:  # errors compare by class
        name = type(exc).__name__
        # an event id the session has: ADK's database refuses it with SQLAlchemy's error
        return ("error", "AlreadyExistsError" if name == "IntegrityError" else name)


async def compare(kind: str, sequence: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = FACTORIES[kind](Path(tmp))
        theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp}/adk.db")
        try:
            adk, ours = Side(theirs), Side(StatekeepSessionService(store))
            for clock, op in enumerate(sequence):
                expected = await outcome(adk, op, clock)
                got = await outcome(ours, op, clock)
                assert got == expected, f"op {clock} {op!r}: ADK gave {expected!r}, the adapter {got!r}"
        finally:
            await theirs.close()
            await store.aclose()


def differential(kind: str) -> Any:
    @settings(
        max_examples=EXAMPLES[kind] * (10 if SOAK else 1),
        derandomize=not SOAK,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(sequence=sequences)
    def test(sequence: list[tuple[Any, ...]]) -> None:
        asyncio.run(compare(kind, sequence))

    return test


test_same_as_adk_on_memory = differential("memory")
test_same_as_adk_on_sqlite = differential("sqlite")
test_same_as_adk_on_file = differential("file")
test_same_as_adk_on_postgres = differential("postgres")
test_same_as_adk_on_redis = differential("redis")


def test_a_long_sequence_on_sqlite(tmp_path: Path) -> None:
    """One sequence long enough to cross the timestamp index's strides (32 events, then more)."""
    sequence: list[tuple[Any, ...]] = [("create", "app1", "u1", "s1", {"k1": 1, "app:a1": 0})]
    sequence.append(("get", ("app1", "u1", "s1"), None))
    for i in range(150):
        sequence.append(("append", 1, {"k1": i, "user:u1": i, "temp:t1": i}, i % 7 == 3, True))
    for back in (None, 0.0, -5, 1, 20, 63, 64, 65, 100, 130, 200):  # the k in BASE + clock - k
        for recent in (None, 0, 1, 20, 200):
            sequence.append(("get", ("app1", "u1", "s1"), (recent, back)))
    asyncio.run(compare("sqlite", sequence))


@pytest.mark.parametrize("kind", ["memory"])
def test_stale_objects_and_deleted_sessions(kind: str) -> None:
    """The cases a random walk reaches rarely, spelt out: two objects of one session, the
    older one appended to after the newer; an append after a delete; a create over a
    deleted id; a taken id; an event appended again."""
    sequence: list[tuple[Any, ...]] = [
        ("create", "app1", "u1", "s1", {"k1": 1}),
        ("get", ("app1", "u1", "s1"), None),
        ("append", 1, {"k1": 2}, False, True),
        ("append", 0, {"k1": 3}, False, True),  # handle 0 is stale now
        ("append", 1, {"app:a1": 1}, False, True),
        ("create", "app1", "u1", "s1", {}),  # taken
        ("delete", ("app1", "u1", "s1")),
        ("append", 1, {"k1": 4}, False, True),  # deleted
        ("create", "app1", "u1", "s1", {"user:u1": 5}),
        ("append", 1, {"k1": 5}, False, True),  # made again since
        ("list", "app1", None),
        ("append", 2, {"k1": 6, "user:u1": 6}, False, True),  # handle 2: the session made again
        ("again",),  # the same event id again, to the session read afresh: refused, nothing written
        ("get", ("app1", "u1", "s1"), None),
    ]
    asyncio.run(compare(kind, sequence))
