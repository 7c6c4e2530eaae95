"""Google ADK sessions saved in any statekeep store (``pip install 'statekeep[adk]'``).

``StatekeepSessionService(store)`` goes wherever ADK takes a session service
(``Runner(agent=..., app_name=..., session_service=StatekeepSessionService(store))``), in
place of ``InMemorySessionService`` or ``DatabaseSessionService``. Validated against
google-adk 2.13.0 by differential tests against ADK's own ``DatabaseSessionService``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from typing import Any

from ._needs import framework_missing

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
except ImportError as exc:
    raise framework_missing("adk", "Google ADK", "adk", exc) from exc

from .._core.errors import StateConflictError, StateExistsError, StateNotFoundError
from .._core.ranges import SNAPSHOT_ONLY
from .._store.contract import Store
from .._store.expect import expecting, takes_expect_next
from ._adk_layout import (
    MAX_TRIES,
    META,
    after_event,
    app_id_of,
    iso,
    labels_for,
    marker,
    merged,
    new_session_meta,
    session_id_of,
    session_meta,
    snapshot_of,
    split,
    user_id_of,
)
from ._adk_locks import LoopLocks
from ._adk_read import read_events
from ._adk_shared import apply_shared, read_shared
from ._cancel import finish_despite_cancel, stop_if_cancelled
from ._home import placed

__all__ = ["StatekeepSessionService"]

_log = logging.getLogger(__name__)

_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class StatekeepSessionService(BaseSessionService):
    """An ADK session service whose sessions are statekeep States.

    Each session is one State (its events the history, append-only; its session-scoped state
    and an index in the snapshot); ``app:`` state is one State per app and ``user:`` state
    one per (app, user), shared by their sessions; ``temp:`` keys are never saved. Events
    come back in the order they were appended; ``get_session`` with ``num_recent_events`` or
    ``after_timestamp`` reads only the end of the history it needs, so its cost does not grow
    with the session's length (but for ``after_timestamp`` once an event's timestamp went
    back: then it reads from an index point up to about 1/32 of the history before). An
    event's ``app:`` and ``user:`` deltas are saved in its session's write, then applied to
    the shared states, once each and in the session's order; what a crash or store error
    leaves unapplied, the session's next read or append applies. The store stays yours: this
    service never closes it.

    Any number of tasks, services and processes may share sessions: an append checks the
    session object against the stored revision (:class:`StaleSessionError` if another writer
    appended since it was read, as ADK's ``DatabaseSessionService``), and the store's
    ``expect_next`` makes that check atomic with the write.

    Namespace: given a built-in store in its ``default`` namespace, the sessions are kept in
    its namespace ``adk`` (:attr:`store`); ``namespace=`` picks another one.
    """

    #: Sessions whose history's end this service remembers, to read their newest events at once.
    REMEMBERED = 1024

    def __init__(self, store: Store, *, namespace: str | None = None) -> None:
        #: Where the sessions are kept (``store`` in its namespace ``adk``, see above).
        self.store = placed(store, namespace, "adk")[0]
        self._locks = LoopLocks()
        self._ends: dict[str, int] = {}  # where sessions' histories ended when last seen: hints
        self._done: dict[str, int] = {}  # session token: the newest seq whose shared deltas it applied
        self._memory = threading.Lock()  # for the two above: the service may serve several loops

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    # -- creating and reading ------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (``session_id`` None: a new UUID) with ``state``, whose ``app:``
        and ``user:`` keys go to the app's and the user's state, and ``temp:`` ones nowhere.
        :class:`AlreadyExistsError` (nothing changed) if the id is taken. The session,
        with its ``app:`` and ``user:`` keys, is durable on return as the store's ``awrite``,
        in one write; those keys are then applied to the app's and the user's state (should
        that fail, it is logged and finished by the next read or append of the session)."""
        sid = str(uuid.uuid4()) if session_id is None else session_id
        app_delta, user_delta, own = split(state)
        state_id = session_id_of(app_name, user_id, sid)
        pending = [[0, app_delta, user_delta]] if app_delta or user_delta else []
        meta = new_session_meta(app_name, user_id, sid, own, uuid.uuid4().hex, pending)
        head = {"seq": 0, "kind": "adk_session", "app": app_name, "user": user_id, "id": sid}
        snapshot = snapshot_of(
            meta,
            _task(app_name, user_id, sid),
            labels_for("session", app_name, user_id),
            iso(meta["updated"]),
        )
        try:
            await self.store.awrite(state_id, [head], snapshot, create=True)
        except StateExistsError:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        await self._settle(state_id, snapshot)
        app_state, user_state = await self._shared(app_name, user_id)  # with the deltas, if applied
        app_state.update(app_delta)  # as this creation wrote them
        user_state.update(user_delta)
        return _session(meta, merged(app_state, user_state, own), [])

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state and the events ``config`` selects (all by
        default), oldest first; None if there is none. If an append or creation of the
        session left ``app:`` or ``user:`` changes unapplied (a crash, a store error), this
        applies them first (the only writes a read makes)."""
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        state_id = session_id_of(app_name, user_id, session_id)
        got, (app_state, user_state) = await asyncio.gather(
            read_events(self.store, state_id, recent, after, self._ends.get(state_id)),
            self._shared(app_name, user_id),
        )
        if got is None:
            return None
        snapshot, events = got
        meta = snapshot[META]
        if self._unsettled(meta):
            await self._settle(state_id, snapshot)
            app_state, user_state = await self._shared(app_name, user_id)
        self._saw(state_id, meta["next"])
        return _session(meta, merged(app_state, user_state, meta["state"]), events)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The sessions of ``app_name`` (of ``user_id`` only, when given), without events,
        least recently updated first (ties by user id, then session id), each with its merged
        state (unapplied ``app:`` and ``user:`` changes applied first, as in :meth:`get_session`)."""
        labels = labels_for("session", app_name, user_id)
        rows = [row async for row in self.store.aiter_states(labels=labels)]
        records = await asyncio.gather(*(self.store.aread(row.id, since=SNAPSHOT_ONLY) for row in rows))
        await asyncio.gather(
            *(
                self._settle(row.id, record.snapshot)
                for row, record in zip(rows, records, strict=True)
                if record is not None
                and record.snapshot is not None
                and self._unsettled(session_meta(record.snapshot, row.id))
            )
        )
        metas = [
            session_meta(record.snapshot, row.id)
            for row, record in zip(rows, records, strict=True)
            if record is not None
        ]
        metas = [meta for meta in metas if meta["app"] == app_name and user_id in (None, meta["user"])]
        users = sorted({meta["user"] for meta in metas})
        app_state = await read_shared(self.store, app_id_of(app_name))
        user_states = await asyncio.gather(*(read_shared(self.store, user_id_of(app_name, u)) for u in users))
        by_user = dict(zip(users, user_states, strict=True))
        metas.sort(key=lambda meta: (meta["updated"], meta["user"], meta["id"]))
        return ListSessionsResponse(
            sessions=[
                _session(meta, merged(app_state, by_user[meta["user"]], meta["state"]), []) for meta in metas
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (nothing happens if there is none); the app and
        user state stay. Durable on return as the store's ``adelete``."""
        await self.store.adelete(session_id_of(app_name, user_id, session_id))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of ``(app_name, user_id)``, keys without the prefix ({} if none)."""
        return await read_shared(self.store, user_id_of(app_name, user_id))

    # -- appending -----------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` to the session and apply its state delta (``temp:`` keys only to
        the ``session`` object, never saved); a partial event is returned untouched.

        :class:`SessionNotFoundError` if the session is not stored;
        :class:`StaleSessionError` if another writer appended to it since ``session`` was
        read (reload it with :meth:`get_session`); :class:`AlreadyExistsError` if an event
        with this id is among the session's newest 32 (appended already: a retry). Nothing is
        written then. The event, the session state and the event's ``app:`` and ``user:``
        deltas are durable on return as the store's ``awrite``, in one write; the deltas are
        then applied to the app's and the user's state, in the session's order. Once the
        event is written this never raises: should applying the deltas fail (a store error,
        a crash), that is logged, and the next :meth:`get_session`, :meth:`append_event` or
        :meth:`list_sessions` of the session, by any service, applies them.
        Cancelled, it finishes the writes under way first, as the store's ``awrite`` does."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await finish_despite_cancel(lambda stop: self._append(session, event, stop))
        return event

    async def _append(self, session: Session, event: Event, stop: asyncio.Event) -> None:
        """Write the event with its app and user deltas marked pending (retrying a write that
        lost to another writer: the retry's check says whether this one is stale now), add it
        to ``session``, then apply the pending deltas, all under the session's lock, so
        appends through one object keep their order."""
        app_delta, user_delta, own = split(event.actions.state_delta if event.actions else None)
        state_id = session_id_of(session.app_name, session.user_id, session.id)
        stored = event.model_dump(exclude_none=True, mode="json")
        async with self._locks.hold(state_id):
            for attempt in range(MAX_TRIES):
                await stop_if_cancelled(stop, attempt)
                record = await self.store.aread(state_id, since=SNAPSHOT_ONLY)
                if record is None:
                    raise SessionNotFoundError(f"Session {session.id} not found.")
                meta = session_meta(record.snapshot, state_id)
                assert record.snapshot is not None
                await self._check_fresh(session, meta, state_id)
                if event.id in meta.get("ids", ()):
                    raise AlreadyExistsError(
                        f"Event with id {event.id} already exists in session {session.id}."
                    )
                pending = [
                    item for item in meta.get("pending", ()) if item[0] > self._done.get(meta["token"], -1)
                ]
                if app_delta or user_delta:
                    pending.append([meta["next"], app_delta, user_delta])
                after = after_event(meta, event.timestamp, own, event.id, pending)
                entry = {"seq": meta["next"], "kind": "event", "event": stored, "w": uuid.uuid4().hex}
                labels = labels_for("session", session.app_name, session.user_id)
                created = record.snapshot.get("created_at", iso(after["updated"]))
                snapshot = snapshot_of(after, record.snapshot.get("task", ""), labels, created)
                try:
                    await self.store.awrite(
                        state_id, [entry], snapshot, **expecting(self.store, meta["next"])
                    )
                except StateConflictError:
                    continue
                except StateNotFoundError:
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                break
            else:
                raise StateConflictError(
                    f"ADK session {session.id!r}: {MAX_TRIES} appends in a row lost to other writers; "
                    "nothing of this event was written"
                )
            session.last_update_time = after["updated"]
            session._storage_update_marker = marker(after)
            self._saw(state_id, after["next"])
            self._commit_event_to_session(session, event)  # in order, before the next append's
            await self._settle(state_id, snapshot)

    async def _check_fresh(self, session: Session, meta: dict[str, Any], state_id: str) -> None:
        """StaleSessionError unless ``session`` is the stored revision (ADK's rule: by marker,
        else, for a session object without one, by its last event)."""
        if session._storage_update_marker is not None:
            if session._storage_update_marker != marker(meta):
                raise StaleSessionError(_STALE)
        elif meta["updated"] > session.last_update_time:
            last = None
            if meta["next"] > 1:
                record = await self.store.aread(state_id, since=meta["next"] - 1)
                entries = [] if record is None else record.entries
                last = (
                    entries[-1]["event"].get("id") if entries and entries[-1].get("kind") == "event" else None
                )
            if last != (session.events[-1].id if session.events else None):
                raise StaleSessionError(_STALE)
        session.last_update_time = meta["updated"]
        session._storage_update_marker = marker(meta)

    async def _shared(self, app: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The app and user states."""
        app_state, user_state = await asyncio.gather(
            read_shared(self.store, app_id_of(app)), read_shared(self.store, user_id_of(app, user))
        )
        return app_state, user_state

    def _unsettled(self, meta: dict[str, Any]) -> bool:
        """Whether the session holds app or user deltas this service has not applied."""
        return any(item[0] > self._done.get(meta["token"], -1) for item in meta.get("pending", ()))

    async def _settle(self, state_id: str, snapshot: dict[str, Any]) -> None:
        """Apply the session's pending app and user deltas, oldest first (applying one again
        changes nothing), then clear them from its snapshot unless it changed since. Never
        raises (but when cancelled): a failure is logged, the deltas stay pending."""
        meta = snapshot[META]
        token = meta["token"]
        pending = [item for item in meta.get("pending", ()) if item[0] > self._done.get(token, -1)]
        app, user = meta["app"], meta["user"]
        try:
            for seq, app_delta, user_delta in pending:
                changes = [
                    (app_id_of(app), app_delta, json.dumps(["app", app]), None),
                    (user_id_of(app, user), user_delta, json.dumps(["user", app, user]), user),
                ]
                await asyncio.gather(
                    *(
                        apply_shared(
                            self.store,
                            shared_id,
                            delta,
                            task=task,
                            app=app,
                            user=owner,
                            source=(token, seq),
                            hold=self._locks.hold,
                        )
                        for shared_id, delta, task, owner in changes
                        if delta
                    )
                )
                self._remember(self._done, token, seq)
            if meta.get("pending") and takes_expect_next(self.store):
                cleared = {**snapshot, META: {**meta, "pending": []}}
                try:
                    await self.store.awrite(state_id, [], cleared, expect_next=meta["next"])
                except (StateConflictError, StateNotFoundError):
                    pass  # appended to since (that append clears them) or deleted
        except Exception as exc:  # the event is saved: its deltas stay pending
            _log.warning(
                "ADK session %r of app %r, user %r: its app:/user: state changes are saved but "
                "not applied yet (%s: %s); the next get_session, append_event or list_sessions "
                "of this session applies them",
                meta["id"], app, user, type(exc).__name__, exc,
            )  # fmt: skip

    def _saw(self, state_id: str, end: int) -> None:
        """Remember where a session's history ended (the newest ``REMEMBERED`` sessions)."""
        self._remember(self._ends, state_id, end)

    def _remember(self, memory: dict[str, int], key: str, value: int) -> None:
        """``memory[key] = value``, keeping the newest ``REMEMBERED`` keys."""
        with self._memory:
            memory.pop(key, None)
            if len(memory) >= self.REMEMBERED:
                del memory[next(iter(memory))]
            memory[key] = value


def _task(app: str, user: str, session: str) -> str:
    return f"{app}/{user}/{session}"


def _session(meta: dict[str, Any], state: dict[str, Any], events: list[dict[str, Any]]) -> Session:
    session = Session(
        id=meta["id"],
        app_name=meta["app"],
        user_id=meta["user"],
        state=state,
        events=[Event.model_validate(event) for event in events],
        last_update_time=meta["updated"],
    )
    session._storage_update_marker = marker(meta)
    return session
