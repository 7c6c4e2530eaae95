"""The outcomes of a server-side write (PostgreSQL's write function, Redis's write script),
and the errors of those that refuse the write."""

from __future__ import annotations

from ..._core.errors import StateConflictError
from ..._core.writes import PreparedWrite, exists_error, missing_error, plan_append
from ..._store.expect import check_clear, check_next, reborn

# Outcomes of a server-side write; a store may add its own after these (5 to 9).
OK, MISSING, EXISTS, GAP, COMPARE = 0, 1, 2, 3, 4
# The write's preconditions refused it (see statekeep._store.expect): the State's next seq is not
# its expect_next (reported with the next seq), or the write is clear and the State sealed.
UNEXPECTED, SEALED_STATE = 10, 11
# The write is bound to an incarnation the State no longer has (deleted and created again
# since): checked before the other preconditions.
REBORN = 12
# The write refers to a blob the store does not hold and does not carry its bytes.
BLOB_MISSING = 13
#: Times a write compares its entries with a State that keeps changing, before giving up.
MAX_COMPARES = 8


def check_outcome(status: int, write: PreparedWrite, next_seq: int | None) -> None:
    """Raise the error of a refused write (MISSING, EXISTS, GAP, REBORN, UNEXPECTED,
    SEALED_STATE); return for OK and COMPARE."""
    sid = write.state_id
    if status == BLOB_MISSING:
        raise missing_blobs(sid)
    if status == REBORN:
        raise reborn(sid)
    if status == UNEXPECTED:
        check_next(write, int(next_seq or 0))  # raises
        raise AssertionError(f"the server reported next seq {next_seq}, which is the one expected")
    if status == SEALED_STATE:
        check_clear(write, True)  # raises
        raise AssertionError("the server reported a sealed State to a sealed write")
    if status == MISSING:
        raise missing_error(sid)
    if status == EXISTS:
        raise exists_error(sid)
    if status == GAP:
        plan_append(write, int(next_seq or 0))  # raises the gap error
        raise AssertionError(f"the server reported a gap at {next_seq} that is none")


def missing_blobs(sid: str) -> LookupError:
    """The error of a write that refers to a blob the store does not hold, without its bytes."""
    return LookupError(
        f"State {sid!r}: the write refers to a blob this store does not hold (removed by gc, or "
        "never stored), and does not carry its bytes; nothing was written. Write the values "
        "themselves again"
    )


def kept_changing(sid: str) -> StateConflictError:
    """The error of a write whose State changed at every one of its MAX_COMPARES compares."""
    return StateConflictError(
        f"State {sid!r} kept changing while this write compared its entries with it "
        f"({MAX_COMPARES} tries); nothing was written. Read the State again and retry"
    )
