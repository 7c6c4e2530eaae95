"""What a copy checks (:mod:`._transfer`): how snapshots compare (a store's retention stamp
is not the State's), whether the destination's history is a prefix of the source's, and the
read-back after writing; and the errors that name a State a copy left unchanged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .._core.errors import (
    CorruptStateError,
    DecryptionError,
    LeaseHeldError,
    NotAStoreError,
    StateConflictError,
    StateExistsError,
    StatekeepError,
    UnsafeStoreError,
    UnsupportedFormatError,
)
from .._core.records import Record
from .._core.writes import same_json
from .._protect.sealing import STORE_MANAGED
from .._store.contract import Store


class CopyConflictError(StateConflictError):
    """The destination holds a different State under the same id: nothing of it was changed.
    ``state_id`` names it; the message says what differs (delete it there to replace it, or
    move it under another id: the command line says how, in its own options)."""

    def __init__(self, state_id: str, what: str) -> None:
        super().__init__(f"State {state_id!r} differs in the destination: {what}; nothing of it was changed")
        self.state_id = state_id


class CopyVerifyError(CorruptStateError):
    """Read back after the copy, the destination's State does not hold what was sent."""

    def __init__(self, state_id: str, what: str) -> None:
        super().__init__(
            f"State {state_id!r} was written to the destination but reads back {what}; "
            "check the destination store, then run it again"
        )
        self.state_id = state_id


class CopyKeysError(DecryptionError):
    """A record of the copy's ``side`` (``"source"`` or ``"destination"``) could not be
    opened: that store needs (other) keys. The copy stopped; what it wrote stays."""

    def __init__(self, side: str, error: DecryptionError) -> None:
        super().__init__(f"in the {side}: {error}")
        self.side = side
        self.error = error


class CopyWriteError(StatekeepError):
    """The destination refused a write of this State (a lease held there, another writer,
    an entry it rejects). What it took before stays: a prefix the next run extends."""

    def __init__(self, state_id: str, what: str) -> None:
        super().__init__(f"State {state_id!r} was not (fully) written to the destination: {what}")
        self.state_id = state_id


#: What reading one State of a source can raise that leaves that State behind while the
#: others move: a damaged record, a State of a newer format, a State folder another user
#: could change. A store-wide problem (keys, a connection, a store that is not one) stops.
UNREADABLE = (CorruptStateError, UnsupportedFormatError, UnsafeStoreError)


def unreadable(state_id: str, why: str, side: str = "source") -> str:
    """Why a State was left behind: the ``side`` could not read it (``why``: what it said)."""
    return f"State {state_id!r} cannot be read in the {side}: {why}"


@contextmanager
def refusals(state_id: str) -> Iterator[None]:
    """Turn the destination's refusal of one State's write into :class:`CopyWriteError`, so
    a copy counts it and goes on with the others; a store-wide problem still stops it."""
    try:
        yield
    except (StateExistsError, DecryptionError, NotAStoreError):
        raise
    except LeaseHeldError as exc:
        raise CopyWriteError(
            state_id,
            f"another worker ({exc.owner!r}) holds its lease there until {exc.expires_at}; run "
            "it again once that lease is released or has expired",
        ) from None
    except StateConflictError:
        raise CopyWriteError(state_id, "another writer saved to it there meanwhile; run it again") from None
    except ValueError as exc:
        raise CopyWriteError(state_id, f"the destination refused it ({exc})") from None


def stamped(snapshot: Mapping[str, Any]) -> bool:
    """Whether a snapshot's expiry is a store's retention stamp (not the State's own)."""
    return snapshot.get("expiry") == "retention"


def unstamped(snapshot: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot without a store's retention stamp (``expires_at`` back to None, no
    ``expiry``), as the State itself saved it; an explicit expiry is kept."""
    if snapshot is None:
        return None
    if not stamped(snapshot):
        return dict(snapshot)
    kept = {k: v for k, v in snapshot.items() if k not in STORE_MANAGED}
    return {**kept, "expires_at": None}


def same_snapshot(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Snapshot equality as copies see it: with a store's retention stamp taken off each
    side (see :func:`unstamped`); an explicit expiry counts."""
    if a is None or b is None:
        return a is b
    return same_json(unstamped(a), unstamped(b))


def check_prefix(state_id: str, held: Record, entries: list[dict[str, Any]]) -> None:
    """CopyConflictError unless the destination's entries are a prefix of ``entries``."""
    if len(held.entries) > len(entries):
        raise CopyConflictError(state_id, f"it holds {len(held.entries)} entries, the source {len(entries)}")
    for seq, (old, new) in enumerate(zip(held.entries, entries, strict=False)):
        if not same_json(old, new):
            raise CopyConflictError(state_id, f"a different entry at seq {seq}")


def behind(held: Mapping[str, Any], snapshot: Mapping[str, Any]) -> bool:
    """Whether the destination's snapshot covers fewer entries than the source's: the
    last chunk's entries were stored, its snapshot not (a copy killed in between)."""
    mine, theirs = held.get("seq"), snapshot.get("seq")
    return type(mine) is int and type(theirs) is int and mine < theirs


async def verify_copy(dst: Store, state_id: str, record: Record) -> None:
    """Read the State back: its last seq (so its entry count) and snapshot as sent."""
    first = record.entries[0].get("seq") if record.entries else 0  # a trimmed State's base's
    count = len(record.entries) + (first if type(first) is int and first > 0 else 0)  # the seq after its last
    back = await dst.aread(state_id, since=max(count - 1, 0))
    if back is None:
        raise CopyVerifyError(state_id, "as absent (expired, or deleted meanwhile?)")
    if count and not back.entries:
        raise CopyVerifyError(state_id, f"with fewer than the {count} entries sent")
    last = back.entries[-1]["seq"] if back.entries else -1
    if len(back.entries) != min(len(record.entries), 1) or last != count - 1:
        raise CopyVerifyError(state_id, f"with its last seq {last}, not {count - 1}")
    if not same_snapshot(back.snapshot, record.snapshot):
        raise CopyVerifyError(state_id, "with another snapshot")
