"""The live streams (Server-Sent Events): a run's new entries, and the runs feed.

Both poll the store on the server side (range reads for a run, a listing for the feed)
every :data:`POLL` seconds, which works the same on every store and across processes: the
writer can be any program that saves to the same store.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._ids import validate_id
from .._store import Store
from . import fmt
from .children import children_counts
from .pages import filters_of
from .render import entries_html, message, render, row_view, snapshot_status

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
    if await store.aread(state_id, since=after + 1) is None:  # after >= -1
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
                tokens = fmt.token_sum(whole.entries if whole else [])
            else:
                for entry in new:
                    tokens.add(entry)
            previous = next((e.get("at") for e in record.entries if e.get("seq") == after), None)
            for seq, html in entries_html(new, previous):
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
    that matches the filters and was updated after ``since`` (or after the stream opened)."""
    store: Store = request.app.state.store
    try:
        filters = filters_of(request)
        since = fmt.parse_time(request.query_params.get("since"))
        await store.alist(limit=1, **filters)  # a bad filter is a 400 now, not a dead stream
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    return StreamingResponse(
        _runs_stream(store, filters, since, request.app.state.stopping),
        media_type="text/event-stream",
        headers=_HEADERS,
    )


async def _runs_stream(
    store: Store, filters: dict[str, Any], since: Any, stopping: threading.Event
) -> AsyncIterator[str]:
    # id -> the updated_at last sent, or shown on the page (updated at or before ``since``)
    seen: dict[str, Any] = {}
    if since is None:
        for row in await store.alist(limit=1, **filters):
            since = row.updated_at
    shown = since  # rows up to here are on the page already
    idle = 0.0
    yield "retry: 1000\n\n"
    while not stopping.is_set():
        query = dict(filters, limit=200)
        if since is not None:
            # A second of overlap: a State updated twice within one clock tick is still seen.
            query["updated_after"] = since - timedelta(seconds=1)
        rows = await store.alist(**query)
        fresh = []
        for row in rows:
            if shown is not None and row.updated_at <= shown:
                seen.setdefault(row.id, row.updated_at)
            elif seen.get(row.id) != row.updated_at:
                fresh.append(row)
        counts = await children_counts(store, fresh)
        for row in reversed(fresh):  # oldest first: the newest ends on top
            seen[row.id] = row.updated_at
            html = render("_row.html", r=row_view(row, counts[row.id]))
            yield event("row", {"id": row.id, "html": html})
            if since is None or row.updated_at > since:
                since = row.updated_at
        if fresh:
            idle = 0.0
        await asyncio.sleep(POLL)
        idle += POLL
        if idle >= _KEEPALIVE:
            idle = 0.0
            yield ": keepalive\n\n"
