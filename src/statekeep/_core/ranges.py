"""Range reads (``read(state_id, since=N)``): the rule for ``since`` and the default for
stores whose read takes none (pure, no I/O)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .records import Record

F = TypeVar("F", bound=Callable[..., Any])


#: No seq is larger (seqs are 64-bit signed in the database stores): a larger ``since`` is
#: past every end, and is read as this one, which the databases can take.
MAX_SEQ = 2**63 - 1
#: A ``since`` past every history: the read returns the snapshot alone (and None for no State).
SNAPSHOT_ONLY = MAX_SEQ


def check_since(since: object) -> int:
    """``since`` (at most :data:`MAX_SEQ`) if it is an int >= 0, else TypeError/ValueError
    saying so."""
    if type(since) is not int:
        raise TypeError(f"since must be an int seq (>= 0), got {type(since).__name__}")
    if since < 0:
        raise ValueError(f"since must be a seq >= 0, got {since}: read the end with since=last_seq - n + 1")
    return min(since, MAX_SEQ)


@overload
def cut(record: Record, since: int) -> Record: ...
@overload
def cut(record: None, since: int) -> None: ...
def cut(record: Record | None, since: int) -> Record | None:
    """``record`` with only its entries of seq >= ``since`` (seqs are dense from the first
    entry's: 0, or a trimmed history's base, which a ``since`` below it reads from)."""
    if record is None or since == 0:
        return record
    first = record.entries[0].get("seq") if record.entries else 0
    start = first if type(first) is int and first > 0 and record.entries[0].get("kind") == "base" else 0
    return Record(record.entries[max(since - start, 0) :], record.snapshot, record.incarnation)


def with_since(method: F) -> F:
    """Wrap a store's ``read(self, state_id)`` or ``aread`` that predates range reads so it
    takes ``since``: it reads the whole history and cuts it."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def aread(self: Any, state_id: str, *args: Any, since: int = 0, **kwargs: Any) -> Any:
            check_since(since)
            return cut(await method(self, state_id, *args, **kwargs), since)

        return aread  # type: ignore[return-value]

    @functools.wraps(method)
    def read(self: Any, state_id: str, *args: Any, since: int = 0, **kwargs: Any) -> Any:
        check_since(since)
        return cut(method(self, state_id, *args, **kwargs), since)

    return read  # type: ignore[return-value]
