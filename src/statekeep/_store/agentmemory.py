"""Agent memory: a small durable key/value store with revisions, kept beside a store's States.

Each key is a record of its own in a namespace of the store's storage that listings of
States never show (``<namespace>.memory.<scope>``). Its history holds one small entry per
change (``put`` or ``delete``, with an operation id); the value lives in its snapshot,
which each change replaces in the same write. So a key has the codec and durability of a
State, and the revision check is the store's own seq rule: a change is written at the seq
its revision names, and a different change already there is a StateConflictError.

A key keeps only its latest changes: on a store that can trim (the built-in ones), every
:data:`KEEP`-th change removes the ones before it, so a key's stored history stays under
:data:`KEEP` entries however often it is put (its seqs, and so its revisions, go on).
A ``base`` record takes the place of the latest change removed, so a bounded key's history
starts with its base as a trimmed State's does (copy, export and import carry it exactly).
The bounding is best effort: the change is durable before it runs, so a failure there is
logged (a warning) and the key's next bounding removes what it left.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from .._core.errors import CorruptStateError, StateConflictError, StateExistsError, StateNotFoundError
from .._core.query import Page
from .._core.records import utc_time
from .._run.history import now
from .._runtime.bridge import run_sync
from .capabilities import Records, SnapshotReads
from .expect import expecting, takes_expect_next

KEY_RULE = (
    "a key is a non-empty str; letters, digits and '-' count one character each, any other "
    "character three per UTF-8 byte, and a key may count at most 128"
)
_PLAIN = re.compile(r"[A-Za-z0-9-]")
_RETRIES = 100
#: A key's record is trimmed to its latest change each time it holds this many.
KEEP = 32

_log = logging.getLogger(__name__)


@runtime_checkable
class _KeepsLatest(Protocol):
    async def _akeep_from(self, state_id: str, seq: int) -> None: ...


async def _bound(store: _KeepsLatest, key: str, record_id: str, seq: int) -> None:
    """Remove a key's changes before ``seq`` (the change just made), best effort: the change
    is durable already, so a failure (a busy store, a lost connection) is logged, not raised,
    and the key's next bounding, :data:`KEEP` changes on, removes what this one left."""
    try:
        await store._akeep_from(record_id, seq)
    except Exception as exc:  # (not a cancellation: that is no Exception)
        _log.warning(
            "memory key %r: removing its changes before revision %d failed (%s: %s); the change "
            "itself is stored, and the key is bounded again %d changes on",
            key,
            seq + 1,
            type(exc).__name__,
            exc,
            KEEP,
        )


@dataclass(frozen=True, slots=True)
class Item:
    """One key's current value. ``revision`` counts its changes (1 after the first put)."""

    key: str
    value: Any
    revision: int
    updated_at: datetime


def key_id(key: object, what: str = "key") -> str:
    """The record id of ``key``: reversible, and a prefix of a key maps to a prefix of its id."""
    if type(key) is not str or not key:
        raise ValueError(f"invalid {what} {key!r}: {KEY_RULE}")
    out = "".join(c if _PLAIN.fullmatch(c) else "".join(f"_{b:02x}" for b in c.encode()) for c in key)
    if len(out) > 128:
        raise ValueError(f"{what} {key[:40]!r}... is too long: {KEY_RULE}")
    return out


class Memory:
    """A durable key/value store for what an agent keeps between runs: ``store.memory(scope)``.

    - ``get(key)`` -> :class:`Item` or None;
    - ``put(key, value, *, revision=None)`` -> :class:`Item`: with ``revision``, only if the
      key is at that revision now (``0``: only if it does not exist), else
      :class:`StateConflictError` and nothing is written;
    - ``delete(key, *, revision=None)``: the same check; a missing key is no error;
    - ``items(prefix=None, limit=None, after=None)``: a page, most recently changed first,
      with ``.next`` as listings have.

    Each method has an async twin (``aget``, ``aput``, ``adelete``, ``aitems``). A put or
    delete is durable on return as the store's ``write`` is. Values are JSON values; with
    the store's ``redact=``, a key with a secret name has its value masked whole in what
    the store keeps, as a ``data`` entry's is (``put`` returns the value given).
    """

    def __init__(self, store: Records, scope: str) -> None:
        self._store = store
        self.scope = scope
        # Asked once: a runtime-checkable protocol costs microseconds per check.
        self._snapshots = store if isinstance(store, SnapshotReads) else None
        self._trims = store if isinstance(store, _KeepsLatest) else None

    def __repr__(self) -> str:
        return f"Memory(scope={self.scope!r}, store={self._store!r})"

    # -- async --------------------------------------------------------------------------

    async def aget(self, key: str) -> Item | None:
        return _item(key, await self._snapshot(key_id(key)))

    async def _snapshot(self, record_id: str) -> dict[str, Any] | None:
        """The key's snapshot alone (its value and revision): never its history of changes."""
        if self._snapshots is not None:
            return await self._snapshots.aread_snapshot(record_id)
        record = await self._store.aread(record_id)
        return None if record is None else record.snapshot

    async def aput(self, key: str, value: Any, *, revision: int | None = None) -> Item:
        return await self._change(key, revision, value=value)  # type: ignore[return-value]

    async def adelete(self, key: str, *, revision: int | None = None) -> None:
        await self._change(key, revision, deleted=True)

    async def aitems(
        self, prefix: str | None = None, limit: int | None = None, after: str | None = None
    ) -> Page:
        filters: dict[str, Any] = {"finished": False, "limit": limit, "after": after}
        if prefix:
            filters["id_prefix"] = key_id(prefix, "prefix")
        rows = await self._store.alist(**filters)
        page = Page(next=getattr(rows, "next", None))
        for row in rows:  # one snapshot read per row: a listing row does not carry the value
            item = await self.aget(row.task)
            if item is not None:
                page.append(item)  # type: ignore[arg-type]  # a Page of Items
        return page

    async def _change(
        self,
        key: str,
        revision: int | None,
        *,
        value: Any = None,
        deleted: bool = False,
        expires_at: str | None = None,
        about: dict[str, Any] | None = None,
    ) -> Item | None:
        """Put or delete ``key``; ``expires_at`` (ISO 8601): the store's own expiry of the
        key's record, judged by the store's clock as a State's is (the LangGraph adapter's
        TTL, and the grace after which its deleted items' records go). ``about`` (a put):
        what an adapter keeps beside the value, in the snapshot's ``about`` field, which a
        redactor never rewrites (:data:`~statekeep._core.redactor.MEMORY_KEPT_KEYS`): the
        adapter's own names for the key, not secrets. ``Memory``'s own API never sets
        either, so its deleted keys stay until put again, as before."""
        sid = key_id(key)
        if revision is not None and (type(revision) is not int or revision < 0):
            raise ValueError(f"revision must be an int >= 0 or None, got {revision!r}")
        op = uuid.uuid4().hex
        headless = False  # the key's record exists, maybe without a snapshot (see _next_seq)
        for _ in range(_RETRIES):
            snapshot = await self._snapshot(sid)
            # A key's snapshot holds its revision, which is also its count of changes: the
            # seq the next change takes.
            held = 0 if snapshot is None else _revision(snapshot)
            if snapshot is None and headless:
                held = await self._next_seq(sid)
            live = snapshot is not None and not snapshot.get("finished", False)
            current = held if live else 0  # a deleted key is at revision 0, as one never put
            if revision is not None and revision != current:
                raise _stale(key, revision, current)
            if deleted and not live:
                return None
            at = now()
            entry = {"seq": held, "kind": "delete" if deleted else "put", "at": at, "op": op}
            new = {
                "task": key,
                # A key put again after its delete starts anew, as one never put.
                "created_at": snapshot.get("created_at", at) if live and snapshot else at,
                "updated_at": at,
                "turn": held + 1,
                "stopped_by": None,
                "finished": deleted,
                "value": None if deleted else value,
            }
            if expires_at is not None:
                new["expires_at"] = expires_at
            if about is not None and not deleted:
                new["about"] = about
            create = snapshot is None and not held
            try:
                # expect_next: a key deleted and made again since its read is a conflict,
                # never a gap or a change on top of another history.
                await self._store.awrite(sid, [entry], new, create=create, **expecting(self._store, held))
            except StateExistsError:
                # Made by another writer since its read, or left with changes but no
                # snapshot (a copy or import cut short): read it again, then repair it.
                headless = True
                continue
            except (StateConflictError, StateNotFoundError) as exc:
                # Another writer got ahead (a change at this seq, or a delete): with a
                # revision that is stale, else go again.
                if revision is not None:
                    raise _stale(key, revision, None) from exc
                continue
            if self._trims is not None and (held + 1) % KEEP == 0:
                await _bound(self._trims, key, sid, held)
            return None if deleted else Item(key, _copy(value), held + 1, utc_time(at))
        raise StateConflictError(f"memory key {key!r}: {_RETRIES} writers got ahead of this one; try again")

    async def _arefresh(self, key: str, snapshot: dict[str, Any], expires_at: str) -> bool:
        """Move the expiry of ``key``, read as ``snapshot``, to ``expires_at`` without a
        change: its revision, value and times stay. Only if the key is still at the revision
        read (a change since wins, and False is returned), and only on a store whose write
        takes ``expect_next`` (else False: nothing is written)."""
        if not takes_expect_next(self._store):
            return False
        held = _revision(snapshot)
        try:
            sid, moved = key_id(key), {**snapshot, "expires_at": expires_at}
            await self._store.awrite(sid, [], moved, **expecting(self._store, held))
        except (StateConflictError, StateNotFoundError):
            return False
        return True

    async def _next_seq(self, record_id: str) -> int:
        """The seq after the last change of a key's record (0 if there is none): for a
        record that has changes but no snapshot, which says its revision."""
        record = await self._store.aread(record_id)
        if record is None or not record.entries:
            return 0
        last = record.entries[-1].get("seq")  # (a trimmed key's record starts above seq 0)
        return last + 1 if type(last) is int else len(record.entries)

    # -- sync ---------------------------------------------------------------------------

    def get(self, key: str) -> Item | None:
        return run_sync(self.aget(key), "aget")

    def put(self, key: str, value: Any, *, revision: int | None = None) -> Item:
        return run_sync(self.aput(key, value, revision=revision), "aput")

    def delete(self, key: str, *, revision: int | None = None) -> None:
        run_sync(self.adelete(key, revision=revision), "adelete")

    def items(self, prefix: str | None = None, limit: int | None = None, after: str | None = None) -> Page:
        return run_sync(self.aitems(prefix, limit, after), "aitems")


def _item(key: str, snapshot: dict[str, Any] | None) -> Item | None:
    if not snapshot or snapshot.get("finished"):
        return None
    return Item(key, snapshot.get("value"), _revision(snapshot), utc_time(snapshot["updated_at"]))


def _revision(snapshot: dict[str, Any]) -> int:
    revision = snapshot.get("turn")
    if type(revision) is not int or revision < 0:
        raise CorruptStateError(
            f"memory key {snapshot.get('task')!r} is damaged: its revision is {revision!r}"
        )
    return revision


def _copy(value: Any) -> Any:
    import orjson

    return orjson.loads(orjson.dumps(value))


def _stale(key: str, revision: int, current: int | None) -> StateConflictError:
    now_at = "" if current is None else f" (it is at revision {current})"
    return StateConflictError(
        f"memory key {key!r} is not at revision {revision}{now_at}: another writer changed it; "
        "nothing was written. Get it again and retry with its revision"
    )
