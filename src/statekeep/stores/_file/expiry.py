"""Expiry in a FileStore: a snapshot's ``expires_at`` read cheaply, and judged under the
State's lock where it decides something (an append, a create over an expired State, gc).

An expired State is absent: reads and listings leave it out (the store's clock judges),
a ``create=False`` write raises StateNotFoundError, a create replaces it (see
:mod:`.create`), and ``gc`` removes it -- each deciding from the log's current snapshot
with the State's flock held, so a write that extended it in another process is seen.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from ..._logtail import reader, snapshot_record
from ..._records import utc_time

_KEY = b'"expires_at"'


def expiry_of(snapshot: Any) -> datetime | None:
    """A decoded snapshot's ``expires_at``; None if it has none (or one no reader takes:
    such a State never expires, as listings and reads judge it)."""
    raw = snapshot.get("expires_at") if isinstance(snapshot, dict) else None
    if type(raw) is not str:
        return None
    try:
        return utc_time(raw)
    except ValueError:
        return None


def encoded_expiry(encoded: bytes | None) -> datetime | None:
    """:func:`expiry_of` an encoded snapshot, decoded only if it may hold an expiry."""
    if encoded is None or _KEY not in encoded:
        return None
    return expiry_of(orjson.loads(encoded))


def log_expiry(log: int, snapshot_at: int | None, size: int) -> datetime | None:
    """The expiry of the snapshot record at ``snapshot_at`` in a log of ``size`` bytes."""
    if snapshot_at is None:
        return None
    return encoded_expiry(snapshot_record(reader(log), snapshot_at, size))
