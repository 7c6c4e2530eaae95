"""What stores hand back: a State's :class:`Record` and a listing row, :class:`SavedState`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from .errors import CorruptStateError

#: The history entries of one write: JSON objects, each with an int ``"seq"``.
Entries = Sequence[dict[str, Any]]
#: A snapshot to store (a JSON object), or None to keep the stored one.
Snapshot = dict[str, Any] | None

#: The snapshot keys that hold times, which listings sort by.
LISTING_TIMES = ("created_at", "updated_at")


@dataclass(frozen=True, slots=True)
class Record:
    """Everything a store has for one State id.

    ``entries`` are the history entries in seq order: from seq 0, or from the ``since`` a
    range read asked for; ``snapshot`` is the dict the last write stored, or None if no
    write gave one. Both are fresh copies: changing them never changes the store.
    ``incarnation`` is the random id the State got when it was created (a State deleted
    and created again under the same id has a new one), kept by the store; None for a
    State created before statekeep kept one, or by a store that keeps none. Records
    compare by their entries and snapshot alone.
    """

    entries: list[dict[str, Any]] = field(default_factory=list)
    snapshot: dict[str, Any] | None = None
    incarnation: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved State as :meth:`Store.list` shows it; times are aware UTC datetimes."""

    id: str
    task: str
    created_at: datetime
    updated_at: datetime
    turn: int
    stopped_by: str | None
    finished: bool
    #: The agent name of the last ``run_start``, or None.
    agent: str | None = None
    #: The id of the State that spawned this one (:meth:`State.child`), or None.
    parent: str | None = None
    #: The labels the user set (``state.labels``).
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    #: When the State expires (an aware UTC datetime), or None if it never does.
    expires_at: datetime | None = None
    #: ``{"id": ..., "seq": ...}``: the State and seq this one was forked from, or None.
    forked_from: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def status(self) -> str:
        """``"finished"``, else why the last run stopped (:attr:`stopped_by`), else ``"running"``."""
        return run_status(self.finished, self.stopped_by)

    @classmethod
    def from_snapshot(cls, state_id: str, snapshot: Mapping[str, Any]) -> SavedState:
        """Build a listing row from a snapshot dict.

        The snapshot needs ``task`` (str), ``created_at`` and ``updated_at`` (ISO 8601
        strings with a UTC offset, within the years 1 to 9999 in UTC), ``turn`` (int >= 0),
        ``stopped_by`` (str or None) and ``finished`` (bool).
        Raises ValueError naming the first missing or invalid key.
        """
        # The common case (a dict holding every key, each valid) is checked inline; anything
        # else goes the slow way, which finds the first bad key in order and names it.
        if type(snapshot) is dict and cls is SavedState:
            try:
                task = snapshot["task"]
                created = utc_time(snapshot["created_at"])
                updated = utc_time(snapshot["updated_at"])
                turn = snapshot["turn"]
                stopped_by = snapshot["stopped_by"]
                finished = snapshot["finished"]
            except (KeyError, ValueError):
                pass
            else:
                if (
                    type(task) is str
                    and type(turn) is int
                    and turn >= 0
                    and (stopped_by is None or isinstance(stopped_by, str))
                    and type(finished) is bool
                ):
                    row = trusted_row(state_id, task, created, updated, turn, stopped_by, finished)
                    if _EXTRAS.isdisjoint(snapshot):
                        return row
                    return _with_extras(row, snapshot)
        return cls._checked(state_id, snapshot)

    @classmethod
    def _checked(cls, state_id: str, snapshot: Mapping[str, Any]) -> SavedState:
        """:meth:`from_snapshot`, key by key: ValueError naming the first missing or invalid key."""
        if not isinstance(snapshot, Mapping):
            raise ValueError(f"snapshot of {state_id!r} is not a dict: {type(snapshot).__name__}")

        def get(key: str) -> Any:
            try:
                return snapshot[key]
            except KeyError:
                raise ValueError(f"snapshot of {state_id!r} has no {key!r} key") from None

        def bad(key: str, want: str) -> ValueError:
            return ValueError(
                f"snapshot of {state_id!r} has an invalid {key!r}: {get(key)!r} (expected {want})"
            )

        task = get("task")
        if not isinstance(task, str):
            raise bad("task", "a str")
        times = []
        for key in LISTING_TIMES:
            try:
                times.append(utc_time(get(key)))
            except ValueError as exc:
                raise bad(key, str(exc)) from None
        turn = get("turn")
        if type(turn) is not int or turn < 0:
            raise bad("turn", "an int >= 0")
        stopped_by = get("stopped_by")
        if stopped_by is not None and not isinstance(stopped_by, str):
            raise bad("stopped_by", "a str or None")
        finished = get("finished")
        if type(finished) is not bool:
            raise bad("finished", "a bool")
        row = trusted_row(state_id, task, times[0], times[1], turn, stopped_by, finished)
        return _with_extras(row, snapshot)


#: The optional snapshot keys a listing row reads; a snapshot without them (an older one,
#: or one written through the raw API) lists with their defaults.
_EXTRAS = frozenset(("agent", "parent", "labels", "expires_at", "forked_from"))


def _with_extras(row: SavedState, snapshot: Mapping[str, Any]) -> SavedState:
    """``row`` with the optional keys of ``snapshot``; ValueError naming a bad one."""
    sid = row.id

    def bad(key: str, want: str) -> ValueError:
        return ValueError(f"snapshot of {sid!r} has an invalid {key!r}: {snapshot[key]!r} (expected {want})")

    agent, parent = snapshot.get("agent"), snapshot.get("parent")
    if agent is not None and type(agent) is not str:
        raise bad("agent", "a str or None")
    if parent is not None and type(parent) is not str:
        raise bad("parent", "a str or None")
    labels = snapshot.get("labels") or {}
    if type(labels) is not dict or not all(type(k) is str and type(v) is str for k, v in labels.items()):
        raise bad("labels", "a dict of str to str")
    raw_expiry = snapshot.get("expires_at")
    expires_at = None
    if raw_expiry is not None:
        try:
            expires_at = utc_time(raw_expiry)
        except ValueError as exc:
            raise bad("expires_at", str(exc)) from None
    forked = snapshot.get("forked_from")
    if forked is not None and not (
        type(forked) is dict and type(forked.get("id")) is str and type(forked.get("seq")) is int
    ):
        raise bad("forked_from", 'a dict {"id": str, "seq": int} or None')
    _set_agent(row, agent)
    _set_parent(row, parent)
    _set_labels(row, dict(labels))
    _set_expires_at(row, expires_at)
    _set_forked_from(row, None if forked is None else {"id": forked["id"], "seq": forked["seq"]})
    return row


# Each slot's own setter: it stores a value past the frozen __setattr__ (which refuses every
# assignment), as the generated __init__ does with object.__setattr__, at half the cost.
# Unpacked by name so that a field added to SavedState fails here until trusted_row sets it.
(
    _set_id, _set_task, _set_created_at, _set_updated_at, _set_turn, _set_stopped_by, _set_finished,
    _set_agent, _set_parent, _set_labels, _set_expires_at, _set_forked_from,
) = (SavedState.__dict__[name].__set__ for name in SavedState.__slots__)  # fmt: skip
_new = object.__new__


def trusted_row(
    state_id: str,
    task: str,
    created_at: datetime,
    updated_at: datetime,
    turn: int,
    stopped_by: str | None,
    finished: bool,
    agent: str | None = None,
    parent: str | None = None,
    labels: dict[str, str] | None = None,
    expires_at: datetime | None = None,
    forked_from: dict[str, Any] | None = None,
) -> SavedState:
    """A :class:`SavedState` from values already checked: nothing is validated again.

    For stores building listing rows from what they validated when it was written (their
    own columns); the times must be aware UTC datetimes. Equal to what ``SavedState(...)``
    builds from the same values, and as immutable.
    """
    row: SavedState = _new(SavedState)
    _set_id(row, state_id)
    _set_task(row, task)
    _set_created_at(row, created_at)
    _set_updated_at(row, updated_at)
    _set_turn(row, turn)
    _set_stopped_by(row, stopped_by)
    _set_finished(row, finished)
    _set_agent(row, agent)
    _set_parent(row, parent)
    _set_labels(row, {} if labels is None else labels)
    _set_expires_at(row, expires_at)
    _set_forked_from(row, forked_from)
    return row


def built(result: Record | Callable[[], Record] | None) -> Record | None:
    """What a store's ``_read`` gave: the Record, None, or a function that builds it (called here)."""
    return result() if callable(result) else result


def run_status(finished: bool, stopped_by: str | None) -> str:
    """The one status rule: ``"finished"``, else what stopped the last run, else ``"running"``."""
    return "finished" if finished else (stopped_by or "running")


def utc_time(raw: Any) -> datetime:
    """``raw`` (an ISO 8601 time with a UTC offset) as an aware UTC datetime.

    Raises ValueError whose message says what was expected.
    """
    try:
        when = datetime.fromisoformat(raw)
    except (TypeError, ValueError):
        raise ValueError("an ISO 8601 time") from None
    if when.tzinfo is UTC:  # an offset of zero parses to this very object: nothing to convert
        return when
    if when.tzinfo is None:
        raise ValueError("a time with a UTC offset")
    try:
        return when.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-01:00 is in the year 10000 in UTC
        raise ValueError("a time within the years 1 to 9999 in UTC") from None


def listing_order(rows: list[SavedState]) -> list[SavedState]:
    """Most recently updated first; ties broken by id so the order is stable."""
    rows.sort(key=lambda r: r.id)
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    return rows


def decode_snapshot(raw: bytes | str | None, where: str) -> dict[str, Any] | None:
    """A stored snapshot decoded (None if there is none); ``where`` names it in errors.

    Raises CorruptStateError if it is not JSON or not a JSON object.
    """
    return None if raw is None else decode_object(raw, where)


def decode_object(raw: bytes | str, where: str) -> dict[str, Any]:
    """A stored JSON object (an entry, a snapshot); CorruptStateError naming ``where`` if
    it is not valid JSON or not an object."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptStateError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CorruptStateError(f"{where} is not a JSON object")
    return value


def check_covered(
    snapshot: Mapping[str, Any] | None, next_seq: int, *, snapshot_name: str, history_name: str, advice: str
) -> None:
    """Raise CorruptStateError if a State's snapshot covers entries its history lacks.

    A snapshot is written after the entries it covers are durable, so only damage puts it
    ahead of them: acknowledged entries were lost. ``next_seq`` is the seq after the last
    entry held. Snapshots without an int ``"v"`` are not a State's (written through the raw
    API): their ``"seq"``, if any, is not ours to read.
    """
    if snapshot is None or type(snapshot.get("v")) is not int:
        return
    seq = snapshot.get("seq")
    if type(seq) is not int or seq < next_seq:
        return
    holds = "holds no entries" if next_seq == 0 else f"ends at seq {next_seq - 1}"
    missing = f"entry seq {seq} is" if seq == next_seq else f"entries seq {next_seq} to {seq} are"
    raise CorruptStateError(
        f"{snapshot_name} covers the history up to seq {seq}, but {history_name} {holds}, so the "
        f"saved {missing} missing. Nothing was loaded or repaired; {advice}"
    )


def left_out(state_id: str, why: object) -> str:
    """The warning for a State that ``list()`` leaves out."""
    return f"statekeep: State {state_id!r} left out of the listing: {why}"
