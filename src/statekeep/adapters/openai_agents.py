"""An OpenAI Agents session saved in any statekeep store (``pip install 'statekeep[openai-agents]'``).

``StatekeepSession("user-42", store)`` goes wherever the Agents SDK takes a session
(``Runner.run(agent, text, session=session)``), in place of ``SQLiteSession``. Validated
against openai-agents 0.24.0 with its own session tests on every statekeep store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from .._codec import check
from .._errors import StateConflictError, StateExistsError, StateNotFoundError
from .._store import Store
from ._ids import state_id_for
from ._openai_history import (
    CLEAR,
    ITEM,
    POP,
    Tail,
    checked_items,
    fold,
    header,
    newest,
    now,
    snapshot_for,
    tail_of,
)

__all__ = ["StatekeepSession"]

T = TypeVar("T")

#: A ``since`` past any history: the read returns the snapshot and no entries.
_SNAPSHOT_ONLY = 2**62


class StatekeepSession:
    """An OpenAI Agents ``Session`` whose history is one statekeep State.

    ``session_id`` is any non-empty string (valid Unicode: no lone surrogates); the State id is
    :func:`statekeep.adapters._ids.state_id_for` of it, and the State's ``task`` (what
    ``statekeep list`` shows) is ``session_id`` itself. ``session_settings`` (a
    ``SessionSettings`` or a dict of its fields) gives the default ``limit`` of
    :meth:`get_items`. The store stays yours: :meth:`close` does not close it.

    The history is append-only: :meth:`pop_item` appends a tombstone and
    :meth:`clear_session` a marker that starts a new generation; nothing is ever removed
    (``store.delete(session.state_id)`` removes the whole session). Any number of tasks,
    session objects and processes may write one session: a write that loses a race
    reads the history again and retries at its new end. Each write method is durable on
    return as the store's ``awrite`` is, and, like ``SQLiteSession``'s, finishes before
    a cancellation of its caller is raised, so the next read shows its outcome.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        #: The id of the State holding this session in ``store``.
        self.state_id = state_id_for(session_id)
        check(session_id, "session_id")  # kept in the snapshot: a lone surrogate cannot be
        self.session_id = session_id
        self.store = store
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self._seen: Tail | None = None  # where this object last saw the history end: a hint
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_id!r}, {self.store!r})"

    # -- the Session protocol ------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the newest ``limit`` of them (default:
        ``session_settings.limit``; None or a negative limit: all, 0: none).

        Reads the end of the history only: from the newest entries back until it has
        ``limit`` items (further back only where popped items hide some)."""
        self._check_open()
        want = resolve_session_limit(limit, self.session_settings)
        if want is not None and want < 0:
            want = None
        if want == 0:
            return []
        found = await self._newest(want)
        return [] if found is None else [cast(TResponseInputItem, entry[ITEM]) for entry in found[1]]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (JSON dicts) to the session, in order, as one write.

        TypeError naming the item and the value if statekeep's codec refuses one (NaN, a
        set, an object, a lone surrogate, ...): nothing is written then. Durable on return
        as the store's ``awrite`` is; concurrent writers never lose or duplicate items."""
        self._check_open()
        values = checked_items(items)
        if values:
            await _finish_despite_cancel(self._add(values))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None if the session has none), by
        appending a tombstone that hides it. Durable on return as the store's ``awrite``."""
        self._check_open()
        return await _finish_despite_cancel(self._pop())

    async def clear_session(self) -> None:
        """Remove every item: appends a marker after which a new, empty generation
        starts (the earlier items stay in the history). Durable on return as the store's
        ``awrite``; nothing is written if the session has no items."""
        self._check_open()
        await _finish_despite_cancel(self._clear())

    def close(self) -> None:
        """Refuse further calls on this object (as ``SQLiteSession.close`` does). The
        store stays open; close it yourself when you are done with it."""
        self._closed = True

    # -- reading -------------------------------------------------------------------

    async def _read(self, since: int) -> tuple[Tail, list[dict[str, Any]], int] | None:
        """The history from ``since`` on: its tail, the entries read and the seq they
        start at (None if there is no session). When ``since`` is past the snapshot's
        end, no entries are read: the tail is the snapshot's."""
        record = await self.store.aread(self.state_id, since=since)
        if record is None:
            self._seen = None
            return None
        tail = tail_of(self.state_id, record.snapshot)
        if since > tail.end:
            return tail, [], since
        tail = fold(tail, record.entries)
        self._seen = tail
        return tail, record.entries, since

    async def _tail(self) -> Tail | None:
        """The history's tail as this object last saw it, else as the snapshot says (a
        write that starts from a stale tail fails with StateConflictError and retries)."""
        seen = self._seen
        if seen is not None:
            return seen
        got = await self._read(_SNAPSHOT_ONLY)
        return None if got is None else got[0]

    async def _newest(self, want: int | None) -> tuple[Tail, list[dict[str, Any]]] | None:
        """The tail and the newest ``want`` live item entries (None: all), oldest first."""
        seen = self._seen
        since = _SNAPSHOT_ONLY if seen is None else _window(seen, want, None)
        while True:
            got = await self._read(since)
            if got is None:
                return None
            tail, entries, since = got
            if since <= tail.end:  # the entries run from since to the end
                found, whole = newest(entries, want)
                if whole or since <= tail.start:
                    return tail, found
            since = _window(tail, want, since)

    # -- writing -------------------------------------------------------------------

    async def _write(self, tail: Tail | None, entries: list[dict[str, Any]], after: Tail) -> None:
        """One write of ``entries`` leaving the history at ``after``; ``tail`` None creates it."""
        snapshot = snapshot_for(self.session_id, after)
        await self.store.awrite(self.state_id, entries, snapshot, create=tail is None)
        self._seen = after

    async def _add(self, items: list[dict[str, Any]]) -> None:
        token = uuid.uuid4().hex
        tail = await self._tail()
        while True:
            if tail is None:
                first = header(self.session_id, token)
                base = Tail(1, 1, 0, now())
                entries = [first, *_item_entries(items, 1, token)]
            else:
                base = tail
                entries = _item_entries(items, tail.end, token)
            after = Tail(base.end + len(items), base.start, base.items + len(items), base.created_at)
            try:
                await self._write(tail, entries, after)
                return
            except (StateConflictError, StateExistsError, StateNotFoundError):
                tail = await self._current(tail)

    async def _pop(self) -> TResponseInputItem | None:
        token = uuid.uuid4().hex
        while True:
            got = await self._newest(1)
            if got is None or not got[1]:
                return None
            tail, (entry,) = got
            tombstone = {"seq": tail.end, "kind": POP, "of": entry["seq"], "w": token}
            after = Tail(tail.end + 1, tail.start, max(tail.items - 1, 0), tail.created_at)
            try:
                await self._write(tail, [tombstone], after)
            except (StateConflictError, StateNotFoundError):
                continue  # another writer got there first: look at the end again
            return cast(TResponseInputItem, entry[ITEM])

    async def _clear(self) -> None:
        token = uuid.uuid4().hex
        tail = await self._current(self._seen)
        while tail is not None and tail.items:
            marker = {"seq": tail.end, "kind": CLEAR, "w": token}
            try:
                await self._write(tail, [marker], Tail(tail.end + 1, tail.end + 1, 0, tail.created_at))
                return
            except (StateConflictError, StateNotFoundError):
                tail = await self._current(tail)

    async def _current(self, seen: Tail | None) -> Tail | None:
        """The history's tail as it is now, read from ``seen`` on (after a write from it
        lost a race, or the State was created or deleted meanwhile); None if there is no
        session."""
        got = await self._read(_SNAPSHOT_ONLY if seen is None else seen.end)
        if got is not None and got[2] > got[0].end:  # the snapshot's tail: read what follows it
            got = await self._read(got[0].end)
        return None if got is None else got[0]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")


def _window(tail: Tail, want: int | None, since: int | None) -> int:
    """Where to read from next: enough for ``want`` items if nothing hides any, then
    twice as far back each time (``since``: the last read's start)."""
    if want is None or want >= tail.items:
        return tail.start
    if since is None or since > tail.end:
        return max(tail.start, tail.end - want)
    return max(tail.start, tail.end - 2 * max(tail.end - since, want))


def _item_entries(items: list[dict[str, Any]], seq: int, token: str) -> list[dict[str, Any]]:
    return [{"seq": seq + i, "kind": ITEM, "item": item, "w": token} for i, item in enumerate(items)]


async def _finish_despite_cancel(operation: Awaitable[T]) -> T:
    """Run ``operation`` to its end even if the caller is cancelled meanwhile, then raise
    the cancellation: the caller never leaves a write whose outcome it cannot know."""
    task = asyncio.ensure_future(operation)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the loop must not report it as never retrieved
        raise cancelled
    return task.result()
