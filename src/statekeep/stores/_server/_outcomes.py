"""The outcomes of a server-side write (PostgreSQL's write function, Redis's write script),
and the errors of those that refuse the write."""

from __future__ import annotations

from ..._errors import StateConflictError
from ..._writes import PreparedWrite, exists_error, missing_error, plan_append

# Outcomes of a server-side write; a store may add its own after these.
OK, MISSING, EXISTS, GAP, COMPARE = 0, 1, 2, 3, 4
#: Times a write compares its entries with a State that keeps changing, before giving up.
MAX_COMPARES = 8


def check_outcome(status: int, write: PreparedWrite, next_seq: int | None) -> None:
    """Raise the error of a refused write (MISSING, EXISTS, GAP); return for OK and COMPARE."""
    sid = write.state_id
    if status == MISSING:
        raise missing_error(sid)
    if status == EXISTS:
        raise exists_error(sid)
    if status == GAP:
        plan_append(write, int(next_seq or 0))  # raises the gap error
        raise AssertionError(f"the server reported a gap at {next_seq} that is none")


def kept_changing(sid: str) -> StateConflictError:
    """The error of a write whose State changed at every one of its MAX_COMPARES compares."""
    return StateConflictError(
        f"State {sid!r} kept changing while this write compared its entries with it "
        f"({MAX_COMPARES} tries); nothing was written. Read the State again and retry"
    )
