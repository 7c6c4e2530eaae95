"""Checking a write before any storage is touched, and its seq rules (pure, no I/O).

:func:`prepare_write` validates the id, the entries and the snapshot and encodes them, so
every error about the caller's data is raised before a byte is written. :func:`plan_append`
and :func:`check_overlap` apply the seq rules against what a store holds: entries it
already has are skipped when equal and a conflict when different; the rest must follow
on with no gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .codec import encode
from .errors import StateConflictError, StateExistsError, StateNotFoundError
from .ids import validate_id
from .records import LISTING_TIMES, utc_time

if TYPE_CHECKING:
    from .leases import Lease

#: Entries may not carry top-level keys that start with this: statekeep's own records (the file log's
#: checksums among them) do.
RESERVED = "sk."


@dataclass(slots=True)  # not frozen: a frozen one costs a microsecond to make, on every write
class PreparedWrite:
    """A validated, encoded write. ``lines`` are the entries, each ending in ``\\n``."""

    state_id: str
    first_seq: int  # seq of lines[0]; 0 when there are no lines
    lines: tuple[bytes, ...]
    snapshot: bytes | None
    create: bool
    #: The lease the caller passed (None: none). The store checks the fence
    #: (:func:`~statekeep._core.leases.check_fence`) atomically with the write.
    lease: Lease | None = None
    #: For a sealed write: the plaintext lines, and a function opening a stored entry
    #: (seq, stored dict) so that an overlap is compared as plaintext.
    plain: tuple[bytes, ...] | None = None
    opener: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    #: The State's incarnation (see :attr:`Record.incarnation`): a create stores it; an
    #: append with ``bound`` is refused (:func:`~._expect.check_incarnation`) unless the State's is
    #: this one (None: a State created before incarnations), as its records are sealed for it.
    incarnation: str | None = None
    bound: bool = False
    #: The caller's ``expect_next`` (None: none): the store refuses the write, atomically
    #: with it, unless the State's next seq is exactly this (:mod:`~statekeep._store.expect`).
    expect_next: int | None = None
    #: Blobs to store (:mod:`statekeep._core.blobs`): NAME -> the bytes (sealed when the store
    #: encrypts), None for none. The store makes them durable no later than the lines that
    #: refer to them, and never writes a NAME it already holds again.
    blobs: dict[str, bytes] | None = None
    #: Every blob NAME the lines refer to (new or already stored), None for none: for a
    #: store that keeps an index of references.
    blob_refs: frozenset[str] | None = None

    @property
    def end_seq(self) -> int:
        """The seq after the last entry of this write."""
        return self.first_seq + len(self.lines)


def prepare_write(
    state_id: str,
    entries: Sequence[dict[str, Any]],
    snapshot: dict[str, Any] | None,
    create: bool,
    incarnation: str | None = None,
    bound: bool = False,
) -> PreparedWrite:
    """Validate and encode a write (bound to ``incarnation``: see :class:`PreparedWrite`);
    raise TypeError/ValueError for bad input.

    A snapshot's ``created_at`` and ``updated_at``, when present, must be times listings
    can read (ISO 8601 with a UTC offset, within the years 1 to 9999 in UTC).
    """
    validate_id(state_id)
    if not isinstance(entries, (list, tuple)):
        raise TypeError(f"entries must be a list of dicts, got {type(entries).__name__}")
    lines = []
    first_seq = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TypeError(f"entries[{i}] must be a dict, got {type(entry).__name__}")
        seq = entry.get("seq")
        if type(seq) is not int or seq < 0:
            raise ValueError(f"entries[{i}] needs an int 'seq' >= 0, got {seq!r}")
        if i == 0:
            first_seq = seq
        elif seq != first_seq + i:
            raise ValueError(
                f"entries[{i}] has seq {seq}, expected {first_seq + i}: "
                "the entries of one write must have consecutive seqs, in order"
            )
        line = encode(entry, ("entries", i))  # (its name spelled only for an error)
        if b'"sk.' in line:
            _check_reserved(entry, i)
        lines.append(line + b"\n")
    snap = None
    if snapshot is not None:
        snap = encode(snapshot, "snapshot")
        _check_times(snapshot)
    if create and lines and first_seq != 0 and entries[0].get("kind") != "base":
        raise ValueError(
            f"a new State's history starts at seq 0, got {first_seq} (only a fork of a trimmed "
            "State starts later, with its base entry)"
        )
    return PreparedWrite(
        state_id, first_seq, tuple(lines), snap, bool(create), incarnation=incarnation, bound=bound
    )


def _check_reserved(entry: dict[str, Any], i: int) -> None:
    for key in entry:
        if key.startswith(RESERVED):
            raise ValueError(
                f"entries[{i}] has the key {key!r}, but top-level entry keys starting with "
                f"{RESERVED!r} are statekeep's own (the file log's checksums and records); nothing "
                "was written. Rename the key, or nest it inside another value"
            )


def _check_times(snapshot: dict[str, Any]) -> None:
    """Refuse a snapshot time that listings could not read, so one bad write never breaks
    ``list()`` (a snapshot without times is fine: it is left out of listings)."""
    for key in LISTING_TIMES:
        if key in snapshot:
            try:
                utc_time(snapshot[key])
            except ValueError as exc:
                raise ValueError(
                    f"snapshot[{key!r}] is {snapshot[key]!r}, but listings need {exc}; nothing was "
                    "written. Give an ISO 8601 time with a UTC offset, e.g. datetime.now(UTC).isoformat()"
                ) from None


def plan_append(write: PreparedWrite, next_seq: int) -> int:
    """Return how many leading lines of ``write`` the store already has (to compare, then skip).

    ``next_seq`` is the seq the store expects next. Raises ValueError on a gap.
    """
    if not write.lines:
        return 0
    if write.first_seq > next_seq:
        raise ValueError(
            f"State {write.state_id!r}: expected seq {next_seq} next, got seq {write.first_seq}; "
            "entries must continue the history with no gap"
        )
    return min(next_seq - write.first_seq, len(write.lines))


def check_overlap(write: PreparedWrite, stored: Sequence[dict[str, Any]]) -> None:
    """Raise StateConflictError unless ``stored`` (the store's entries for the overlapping
    seqs, in order) equals the first ``len(stored)`` entries of ``write``.

    A trimmed State holds no entries below its base, and a base in place of the entry at its
    seq: ``stored`` then starts at the base, which is skipped (the write's entries up to its
    seq are had already: the base stands for them), and the rest compare seq by seq."""
    opener, lines = write.opener, write.plain or write.lines
    for i, old in enumerate(stored):
        seq = old.get("seq")
        seq = write.first_seq + i if type(seq) is not int else seq
        if opener is not None:
            old = opener(seq, old)
        if old.get("kind") == "base" or not 0 <= seq - write.first_seq < len(lines):
            continue
        if not same_json(old, orjson.loads(lines[seq - write.first_seq])):
            raise StateConflictError(
                f"State {write.state_id!r} already has a different entry at seq {seq}: "
                "another writer saved first. Nothing was written; read the State again "
                "and continue from what it holds"
            )


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: like ``==``, but 1, 1.0 and true are different values (key order is not)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def exists_error(state_id: str) -> StateExistsError:
    """The error of a ``create=True`` write whose id is taken; every store raises this one."""
    return StateExistsError(
        f"State {state_id!r} already exists; nothing was written. "
        "Use create=False to add to it, or pick another id"
    )


def missing_error(state_id: str, where: str = "this store") -> StateNotFoundError:
    """The error for a State id that ``where`` does not hold: a ``create=False`` write, a
    load, the CLI. Every store and command raises this one, with this one message."""
    return StateNotFoundError(
        f"no State {state_id!r} in {where}: it was never created, or it was deleted",
        "A State is created by its first save, or by a write with create=True",
    )


def trimmed_meanwhile(state_id: str, first: int, actual: int | None) -> StateConflictError:
    """The error of a backend's ``_trim`` refused because State ``state_id`` no longer starts
    at seq ``first`` (the trim read it there; another process trimmed it since): nothing was
    trimmed, and ``trim`` reads the State again and retries."""
    return StateConflictError(
        f"State {state_id!r} starts at seq {actual}, not at seq {first} where this trim read it: "
        "another process trimmed it meanwhile; nothing was trimmed. Read it again and retry"
    )
