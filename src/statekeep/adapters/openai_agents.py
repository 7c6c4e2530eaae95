"""An OpenAI Agents session saved in any statekeep store (``pip install 'statekeep[openai-agents]'``).

``StatekeepSession("user-42", store)`` goes wherever the Agents SDK takes a session
(``Runner.run(agent, text, session=session)``), in place of ``SQLiteSession``. Validated
against openai-agents 0.24.0 with its own session tests on every statekeep store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any, cast

import orjson

from ._needs import framework_missing

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:
    raise framework_missing("openai_agents", "the OpenAI Agents SDK", "openai-agents", exc) from exc

from .._core.codec import check
from .._core.errors import CorruptStateError, StateConflictError, StateExistsError, StateNotFoundError
from .._core.ids import new_incarnation
from .._core.ranges import SNAPSHOT_ONLY
from .._store.contract import Store
from .._store.expect import expecting
from .._store.incarnations import incarnated
from ._cancel import finish_despite_cancel, stop_if_cancelled
from ._flow import adrive
from ._home import Home
from ._ids import state_id_for
from ._openai_history import (
    CLEAR,
    ITEM,
    LABELS,
    MAX_TRIES,
    POP,
    Tail,
    checked_items,
    fold,
    header,
    item_entries,
    newest,
    now,
    snapshot_for,
    tail_of,
    window,
)
from ._openai_keys import ToolCallKeys
from ._openai_run_state import RunStates

__all__ = ["StatekeepSession"]


class StatekeepSession(RunStates, ToolCallKeys):
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
    reads the history again and retries at its new end (:class:`StateConflictError` after
    ``MAX_TRIES`` lost in a row: nothing of that call was written). Each write method is
    durable on return as the store's ``awrite`` is, and, like ``SQLiteSession``'s, finishes
    a write under way before a cancellation of its caller is raised, so the next read
    shows its outcome (a cancellation stops a call between its attempts: after one that
    lost, nothing of the call is written).

    Wrapped by the SDK's ``OpenAIResponsesCompactionSession``, a compaction's items replace
    the old ones in one write (a ``clear`` marker and the items together), so a reader never
    finds the session empty halfway through.

    A function tool keys the calls it makes to a service with :meth:`tool_call_key` (or
    :meth:`atool_call_key`): the session id, the incarnation of the session's State (which
    this object keeps from its reads and writes) and the tool call id.

    Namespace: given a built-in store in its ``default`` namespace, the session is kept in
    its namespace ``openai-agents`` (:attr:`store`), apart from other frameworks and
    statekeep's own runs; a session saved in ``default`` before adapters had namespaces is
    still found and continued there. A store in a namespace you chose, or one without
    namespaces, is used as it is; ``namespace=`` picks another namespace.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        namespace: str | None = None,
    ) -> None:
        #: The id of the State holding this session in ``store``.
        self.state_id = state_id_for(session_id)
        check(session_id, "session_id")  # kept in the snapshot: a lone surrogate cannot be
        self.session_id = session_id
        self._home = Home(store, namespace, "openai-agents", LABELS)
        #: Where the session is kept: ``store`` in its namespace ``openai-agents`` (see above).
        self.store = self._home.store
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self._seen: Tail | None = None  # where this object last saw the history end: a hint
        # (the State's incarnation,) as this object last read or wrote it (None inside when
        # the store keeps none); None: not known (nothing read yet, or a write lost)
        self._incarnation: tuple[str | None] | None = None
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
            await finish_despite_cancel(lambda stop: self._add(values, stop))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None if the session has none), by
        appending a tombstone that hides it. Durable on return as the store's ``awrite``."""
        self._check_open()
        return await finish_despite_cancel(self._pop)

    async def clear_session(self) -> None:
        """Remove every item: appends a marker after which a new, empty generation
        starts (the earlier items stay in the history). Durable on return as the store's
        ``awrite``; nothing is written if the session has no items."""
        self._check_open()
        await finish_despite_cancel(self._clear)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace every item by ``items`` in one write: the hook through which the SDK's
        ``OpenAIResponsesCompactionSession`` stores a compacted history (without it, that
        wrapper clears the session and adds the items in two writes, and a process that dies
        between them leaves the session empty). A ``clear`` marker and the new items are
        appended together, so every reader sees the old items or the new ones; the old ones
        stay in the history. Durable on return as the store's ``awrite`` is; True once done.
        TypeError, writing nothing, for an item the codec refuses (as :meth:`add_items`)."""
        self._check_open()
        values = checked_items(items)
        await finish_despite_cancel(lambda stop: self._replace(values, stop))
        return True

    def close(self) -> None:
        """Refuse further calls on this object (as ``SQLiteSession.close`` does). The
        store stays open; close it yourself when you are done with it."""
        self._closed = True

    # -- reading -------------------------------------------------------------------

    async def _read(self, since: int) -> tuple[Tail, list[dict[str, Any]], int] | None:
        """The history from ``since`` on: its tail (with its last entry if the read reached
        it), the entries read and the seq they start at (None if there is no session). When
        ``since`` is past the snapshot's end, no entries are read: the tail is the snapshot's."""
        record = await adrive(self._home.reading(self.state_id, since))
        if record is None:
            self._seen = self._incarnation = None
            return None
        self._incarnation = (record.incarnation,)
        tail = tail_of(self.state_id, record.snapshot)
        if since > tail.end:
            return tail, [], since
        entries = record.entries
        tail = fold(tail, entries)
        last = entries[-1] if entries and entries[-1]["seq"] == tail.end - 1 else None
        tail = self._seen = dataclasses.replace(tail, last=last)
        return tail, entries, since

    async def _current(self, seen: Tail | None) -> Tail | None:
        """The history's tail as it is now, with its last entry, read from where ``seen``
        ends on (after a write from it lost, or nothing was seen); None if there is no session."""
        since = SNAPSHOT_ONLY if seen is None else seen.end - 1
        while True:
            got = await self._read(since)
            if got is None or got[0].last is not None:
                return None if got is None else got[0]
            if since == got[0].end - 1:  # read from there, and no entry at the snapshot's end
                raise CorruptStateError(
                    f"State {self.state_id!r}: its snapshot says the history ends at seq "
                    f"{since}, but the store has no entry there"
                )
            since = got[0].end - 1  # the history is shorter than ``seen``, or not read yet

    async def _newest(self, want: int | None) -> tuple[Tail, list[dict[str, Any]]] | None:
        """The tail and the newest ``want`` live item entries (None: all), oldest first."""
        seen = self._seen
        since = SNAPSHOT_ONLY if seen is None else window(seen, want, None)
        while True:
            got = await self._read(since)
            if got is None:
                return None
            tail, entries, since = got
            if since <= tail.end:  # the entries run from since to the end
                found, whole = newest(entries, want)
                if whole or since <= tail.start:
                    return tail, found
            since = window(tail, want, since)

    # -- writing -------------------------------------------------------------------

    async def _wrote(self, tail: Tail | None, entries: list[dict[str, Any]], after: Tail) -> bool:
        """Write ``entries`` (``tail`` None: create the session), leaving the history at
        ``after``; False if the write lost to another writer (nothing was written).

        A create gives the State an incarnation chosen here, and an append is bound to the
        one this object knows (the store refuses it if the State was created again since),
        so that :attr:`_incarnation` is the State's after every write that went through; a
        store that takes no ``incarnation=`` gets none, and is read for it when asked."""
        if tail is None:
            binding = incarnated(self.store, new_incarnation())
        else:
            binding = incarnated(self.store, self._incarnation[0] if self._incarnation else None)
        try:
            await adrive(
                self._home.writing(
                    self.state_id,
                    entries,
                    snapshot_for(self.session_id, after),
                    create=tail is None,
                    **expecting(self.store, None if tail is None else tail.end),
                    **binding,
                )
            )
        except (StateConflictError, StateExistsError, StateNotFoundError):
            self._seen = self._incarnation = None
            return False
        except ValueError:
            current = await self._current(None)
            if current is not None and current.end >= entries[0]["seq"]:
                raise  # not a gap: the history was not shortened under this write
            return False  # deleted and started again shorter than this writer saw it
        # the last entry is re-sent by the next write: a copy, safe from changes to the items
        # (a JSON round trip: checked JSON already, and several times faster than deepcopy)
        last = orjson.loads(orjson.dumps(entries[-1]))
        self._seen = dataclasses.replace(after, last=last)
        if tail is None:  # a store of one's own may keep an incarnation it chose itself
            self._incarnation = (binding["incarnation"],) if binding else None
        return True

    async def _add(self, items: list[dict[str, Any]], stop: asyncio.Event) -> None:
        token = uuid.uuid4().hex
        seen = self._seen
        tail = seen if seen is not None and seen.last is not None else await self._current(seen)
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            if tail is None:
                base = Tail(1, 1, 0, now())
                entries = [header(self.session_id, token), *item_entries(items, 1, token)]
            else:
                assert tail.last is not None  # _current and _wrote keep it
                base = tail
                entries = [tail.last, *item_entries(items, tail.end, token)]
            after = dataclasses.replace(
                base, end=base.end + len(items), items=base.items + len(items), last=None
            )
            if await self._wrote(tail, entries, after):
                return
            tail = await self._current(tail)
        raise self._gave_up()

    async def _pop(self, stop: asyncio.Event) -> TResponseInputItem | None:
        token = uuid.uuid4().hex
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            got = await self._newest(1)
            if got is None or not got[1]:
                return None
            tail, (entry,) = got
            if tail.last is None:
                continue  # the read did not reach the end: read again
            tombstone = {"seq": tail.end, "kind": POP, "of": entry["seq"], "w": token}
            after = dataclasses.replace(tail, end=tail.end + 1, items=max(tail.items - 1, 0), last=None)
            if await self._wrote(tail, [tail.last, tombstone], after):
                return cast(TResponseInputItem, entry[ITEM])
        raise self._gave_up()

    async def _clear(self, stop: asyncio.Event) -> None:
        token = uuid.uuid4().hex
        tail = await self._current(self._seen)
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            if tail is None or not tail.items:
                return
            assert tail.last is not None  # _current and _wrote keep it
            marker = {"seq": tail.end, "kind": CLEAR, "w": token}
            after = dataclasses.replace(tail, end=tail.end + 1, start=tail.end + 1, items=0, last=None)
            if await self._wrote(tail, [tail.last, marker], after):
                return
            tail = await self._current(tail)
        raise self._gave_up()

    async def _replace(self, items: list[dict[str, Any]], stop: asyncio.Event) -> None:
        token = uuid.uuid4().hex
        tail = await self._current(self._seen)
        for attempt in range(MAX_TRIES):
            await stop_if_cancelled(stop, attempt)
            if tail is None:
                if not items:
                    return
                entries = [header(self.session_id, token), *item_entries(items, 1, token)]
                after = Tail(1 + len(items), 1, len(items), now())
            else:
                assert tail.last is not None  # _current and _wrote keep it
                if not (tail.items or items):
                    return
                marker = [{"seq": tail.end, "kind": CLEAR, "w": token}] if tail.items else []
                start = tail.end + len(marker) if marker else tail.start
                entries = [tail.last, *marker, *item_entries(items, tail.end + len(marker), token)]
                end = tail.end + len(marker) + len(items)
                after = dataclasses.replace(tail, end=end, start=start, items=len(items), last=None)
            if await self._wrote(tail, entries, after):
                return
            tail = await self._current(tail)
        raise self._gave_up()

    def _gave_up(self) -> StateConflictError:
        return StateConflictError(
            f"OpenAI Agents session {self.session_id!r}: {MAX_TRIES} writes in a row lost to "
            "other writers; nothing of this call was written. Call it again, or have fewer "
            "tasks or processes write this session at once"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
