"""``failover_timeout``: a write whose outcome is unknown (the connection was lost, or the
replicas ``wait_replicas`` asks for did not all acknowledge it) is sent again until it has an
outcome or the time is up. Safe: the write contract skips entries the State already has,
byte for byte or as equal JSON, and refuses different ones; a ``create=True`` write whose
first attempt created the State is recognised by the State holding exactly what was sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..._core.records import Record
from ..._core.writes import PreparedWrite, same_json

#: Waits between resends (seconds): quick at first, then a steady pace while a master is elected.
PAUSES = (0.02, 0.05, 0.1, 0.2, 0.25)


async def resending(
    attempt: Callable[[bool], Awaitable[None]],
    timeout: float,
    refused: Callable[[BaseException], bool],
) -> None:
    """Run ``attempt(resent)`` until it returns; on a ConnectionError (outcome unknown) that
    is no refusal of this client (``refused``: a bad password, say), run it again with
    ``resent=True`` for up to ``timeout`` seconds, then raise the last error."""
    deadline: float | None = None
    resent = False
    tries = 0
    while True:
        try:
            await attempt(resent)
            return
        except ConnectionError as exc:
            if timeout <= 0 or refused(exc):
                raise
            now = time.monotonic()
            deadline = now + timeout if deadline is None else deadline
            if now >= deadline:
                raise
            await asyncio.sleep(min(PAUSES[min(tries, len(PAUSES) - 1)], max(deadline - now, 0.0)))
            tries += 1
            resent = True


def holds_what_was_sent(write: PreparedWrite, record: Record | None) -> bool:
    """Whether ``record`` (the State as stored) is what the ``create=True`` ``write`` makes: its
    entries, and its snapshot unless the write script stamped it (retention)."""
    if record is None or len(record.entries) != len(write.lines):
        return False
    sent: list[Any] = [orjson.loads(line) for line in write.lines]
    if not all(same_json(a, b) for a, b in zip(record.entries, sent, strict=True)):
        return False
    if write.snapshot is None:
        return record.snapshot is None
    snapshot = orjson.loads(write.snapshot)
    if isinstance(snapshot, dict) and str(snapshot.get("expires_at", "")).startswith("sk:"):
        return record.snapshot is not None  # stamped with the server's time: not the bytes sent
    return record.snapshot is not None and same_json(record.snapshot, snapshot)
