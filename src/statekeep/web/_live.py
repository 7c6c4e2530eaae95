"""The live streams (Server-Sent Events): a run's new entries, and the runs feed.

Both poll the store on the server side, which works the same on every store and across
processes: the writer can be any program that saves to the same store. A run's stream makes
a range read every :data:`POLL` seconds; the runs feeds share one listing poller
(:mod:`.feed`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._core.errors import DecryptionError
from .._core.ids import validate_id
from .._core.query import ListQuery, make_query
from .._store.contract import Store
from . import _fmt as fmt
from ._children import children_counts
from ._feed import OVERLAP, ROWS, Changes, rendered
from ._pages import filters_of, locked
from ._render import entries_html, message, snapshot_status

POLL = 0.5  # seconds between two looks at the store
_KEEPALIVE = 15.0  # seconds: a comment line now and then, so a gone client is noticed
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def event(name: str, data: Any, event_id: str | None = None) -> str:
    """One Server-Sent Event (``data`` as one line of JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=True)}\n\n"


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        raise ValueError(f"{text!r} is not a seq (an int)") from None


async def run_events(request: Request) -> Response:
    """``GET /runs/{id}/events?after=SEQ``: each entry saved after SEQ as an ``entry`` event
    (its ``<li>``, escaped on the server), a ``summary`` after each batch, and ``end`` once
    the run has stopped. A reconnecting browser's Last-Event-ID wins over ``after``."""
    store: Store = request.app.state.store
    try:
        state_id = validate_id(request.path_params["state_id"])
        after = max(
            _int(request.query_params.get("after"), -1), _int(request.headers.get("last-event-id"), -1)
        )
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    try:
        found = await store.aread(state_id, since=after + 1)  # after >= -1
    except DecryptionError as exc:
        return locked(exc)
    if found is None:
        return message("Not found", f"No State {state_id!r} in this store.", 404)
    return StreamingResponse(
        _run_stream(store, state_id, after, request.app.state.stopping),
        media_type="text/event-stream",
        headers=_HEADERS,
    )


async def _run_stream(
    store: Store, state_id: str, after: int, stopping: threading.Event
) -> AsyncIterator[str]:
    tokens: fmt.Tokens | None = None
    idle = 0.0
    yield "retry: 1000\n\n"
    while not stopping.is_set():
        # Read from the last seq shown: its time gives the first new entry's gap.
        record = await store.aread(state_id, since=max(after, 0))
        if record is None:
            yield event("end", {"reason": "deleted"})
            return
        new = [e for e in record.entries if type(e.get("seq")) is int and e["seq"] > after]
        if new or tokens is None:
            if tokens is None:  # the sums cover the whole history: read it once
                whole = await store.aread(state_id)
                tokens = fmt.token_sum(whole.entries if whole else [], record.snapshot)
            else:
                for entry in new:
                    tokens.add(entry)
            previous = next((e.get("at") for e in record.entries if e.get("seq") == after), None)
            for seq, html in entries_html(new, previous, record.snapshot):
                yield event("entry", {"seq": seq, "html": html}, str(seq))
                after = max(after, seq)
            snap = record.snapshot if isinstance(record.snapshot, dict) else {}
            status = snapshot_status(record.snapshot)
            yield event(
                "summary",
                {
                    "status": status,
                    "status_class": f"status-{fmt.css_word(status)}",
                    "turn": fmt.text(snap.get("turn")),
                    "tokens": tokens.text(),
                    "last_seq": after,
                },
            )
            if status != "running":
                yield event("end", {"reason": status})
                return
            idle = 0.0
        await asyncio.sleep(POLL)
        idle += POLL
        if idle >= _KEEPALIVE:
            idle = 0.0
            yield ": keepalive\n\n"


async def runs_events(request: Request) -> Response:
    """``GET /events/runs?FILTERS&since=ISO``: a ``row`` event (its ``<tr>``) for each State
    that matches the filters and was updated after ``since`` (or after the stream opened);
    with filters, a ``remove`` event (its id) for a State updated so that it no longer matches.
    """
    try:
        filters = filters_of(request)
        query = make_query(**filters)  # a bad filter is a 400 now, not a dead stream
        since = fmt.parse_time(request.query_params.get("since"))
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    return StreamingResponse(
        _runs_stream(request.app.state.changes, filters, query, since, request.app.state.stopping),
        media_type="text/event-stream",
        headers=_HEADERS,
    )


async def _runs_stream(
    changes: Changes, filters: dict[str, Any], query: ListQuery, since: Any, stopping: threading.Event
) -> AsyncIterator[str]:
    store = changes.store
    queue = changes.subscribe()  # first: nothing saved during the catch-up below is missed
    try:
        # id -> the updated_at last sent, or shown on the page (updated at or before ``shown``)
        sent: dict[str, Any] = {}
        removed: dict[str, Any] = {}
        if since is None:  # from the newest matching row on
            rows, since = [], next((row.updated_at for row in await store.alist(limit=1, **filters)), None)
        else:  # what changed between the page and this stream
            rows = await store.alist(updated_after=since - OVERLAP, limit=ROWS, **filters)
        shown = since
        batch = rendered(list(rows), await children_counts(store, list(rows)))
        idle = 0.0
        yield "retry: 1000\n\n"
        while not stopping.is_set():
            for change in reversed(batch):  # oldest first: the newest ends on top
                row = change.row
                if not query.matches(row):
                    if query.filtered and removed.get(row.id) != row.updated_at:
                        removed[row.id] = row.updated_at
                        sent.pop(row.id, None)
                        yield event("remove", {"id": row.id})
                elif shown is not None and row.updated_at <= shown:
                    sent.setdefault(row.id, row.updated_at)
                elif sent.get(row.id) != row.updated_at:
                    sent[row.id] = row.updated_at
                    removed.pop(row.id, None)
                    yield event("row", {"id": row.id, "html": change.html})
                    idle = 0.0
            try:
                batch = await asyncio.wait_for(queue.get(), POLL)
            except TimeoutError:  # no change: look at ``stopping`` again
                batch = []
                idle += POLL
                if idle >= _KEEPALIVE:
                    idle = 0.0
                    yield ": keepalive\n\n"
    finally:
        changes.unsubscribe(queue)
