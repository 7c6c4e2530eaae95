"""Expiry in a FileStore: a snapshot's ``expires_at`` read cheaply, and judged under the
State's lock where it decides something (an append, a create over an expired State, gc).

An expired State is absent: reads and listings leave it out (the store's clock judges),
a ``create=False`` write raises StateNotFoundError, a create replaces it (see
:mod:`.create`), and ``gc`` removes it -- each deciding from the log's current snapshot
with the State's flock held, so a write that extended it in another process is seen.
"""

from __future__ import annotations

from datetime import datetime

from ..._core.labels import encoded_expiry
from .logtail import reader, snapshot_record


def log_expiry(log: int, snapshot_at: int | None, size: int) -> datetime | None:
    """The expiry of the snapshot record at ``snapshot_at`` in a log of ``size`` bytes."""
    if snapshot_at is None:
        return None
    return encoded_expiry(snapshot_record(reader(log), snapshot_at, size))
