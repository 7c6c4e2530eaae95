"""The two pages: the runs (``GET /``) and one run's timeline (``GET /runs/{id}``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from .._core.errors import DecryptionError
from .._core.ids import validate_id
from .._core.records import SavedState
from .._store.contract import Store
from . import _charts, _timeline
from . import _fmt as fmt
from ._approve import pending_views
from ._children import children_counts
from ._render import entries_html, message, page, row_view, snapshot_status
from ._statuses import Statuses

PAGE_SIZE = 50
LAST = 500  # entries a run's page shows at most (the latest, or those before ?before=SEQ)
MAX_PAGE = 200  # rows of one runs page at most, whatever ``limit`` asks
_EPOCH = "1970-01-01T00:00:00+00:00"


def filters_of(request: Request) -> dict[str, Any]:
    """The listing filters a runs page or feed URL gives; ValueError for a bad one."""
    params = request.query_params
    filters: dict[str, Any] = {}
    for name, key in (("status", "status"), ("agent", "agent"), ("prefix", "id_prefix")):
        value = params.get(name, "").strip()
        if value:
            filters[key] = value
    labels = {}
    for item in params.getlist("label"):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"label {item!r} is not KEY=VALUE")
        labels[key] = value
    if labels:
        filters["labels"] = labels
    return filters


async def rows_html_views(
    store: Store,
    rows: list[SavedState],
    statuses: Statuses | None = None,
    every: list[SavedState] | None = None,
) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    counts = await children_counts(store, rows, None if statuses is None else statuses.note, every)
    return [row_view(row, counts[row.id], now) for row in rows]


def locked(exc: DecryptionError) -> Response:
    """403: a State the viewer has no key for (the same for its page and its live stream)."""
    return message("Encrypted", f"{exc} (start the viewer with --keys FILE)", 403)


def moment(value: Any) -> dict[str, str]:
    """A stored time as a run page shows it: "3 min ago" with the exact time on hover, or as
    it is stored when it is not a time."""
    when = fmt.parse_time(value)
    return {"iso": fmt.text(value), "ago": fmt.relative(when), "exact": fmt.exact(when)}


def _seq(entry: dict[str, Any]) -> int:
    seq = entry.get("seq")
    return seq if type(seq) is int else -1


def page_before(text: str | None) -> int | None:
    """The ``before=SEQ`` of a run's page; ValueError if it is not a seq."""
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"before must be a seq (an int), got {text!r}") from None


def page_size(text: str | None) -> int:
    """The ``limit`` asked for, at most :data:`MAX_PAGE`; ValueError if it is not a count."""
    try:
        size = int(text) if text else PAGE_SIZE
    except ValueError:
        raise ValueError(f"limit must be a number of rows, got {text!r}") from None
    if size < 1:
        raise ValueError(f"limit must be at least 1, got {size}")
    return min(size, MAX_PAGE)


async def runs_page(request: Request) -> Response:
    store: Store = request.app.state.store
    params = request.query_params
    try:
        filters = filters_of(request)
        limit = page_size(params.get("limit"))
        after = params.get("after") or None
        rows = await store.alist(limit=limit, after=after, **filters)
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    following = getattr(rows, "next", None)
    next_url = None
    if following is not None:
        kept = [(k, v) for k, v in params.multi_items() if k != "after"]
        next_url = "/?" + urlencode([*kept, ("after", following)])
    asked = params.get("status", "").strip()
    form = {
        "status": asked,
        "agent": params.get("agent", ""),
        "labels": params.getlist("label") or [""],  # one box per label asked, so all stay
        "prefix": params.get("prefix", ""),
    }
    # The feed sends what changed after the newest row shown (everything, on an empty page).
    newest = rows[0].updated_at.isoformat() if rows else _EPOCH
    feed = "/events/runs?" + urlencode(
        [*((k, v) for k, v in params.multi_items() if k not in ("after", "since")), ("since", newest)]
    )
    statuses: Statuses = request.app.state.statuses
    # The summary (cached until the store changes); a new one's listing of every State
    # counts the rows' children too.
    stats, every = await request.app.state.stats.get(store)
    views = await rows_html_views(store, list(rows), statuses, every)
    return page(
        "runs.html",
        rows=views,
        statuses=statuses.choices(rows, asked),
        next_url=next_url,
        form=form,
        live=after is None,  # only the first page grows: later ones are a fixed window
        feed=feed,
        filtered=bool(filters),
        awaiting=filters.get("status") == "approval",
        approving=request.app.state.allow_approve,
        stats=stats,
        s=_charts,
    )


async def run_page(request: Request) -> Response:
    store: Store = request.app.state.store
    raw = request.path_params["state_id"]
    try:
        state_id = validate_id(raw)
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    try:
        before = page_before(request.query_params.get("before"))
        record = await store.aread(state_id)
    except DecryptionError as exc:  # a ValueError too: first
        return locked(exc)
    except ValueError as exc:
        return message("Bad request", str(exc), 400)
    if record is None:
        return message("Not found", f"No State {state_id!r} in this store.", 404)
    snap = record.snapshot if isinstance(record.snapshot, dict) else {}
    children = [row.id for row in await store.alist(parent=state_id)]
    forked = snap.get("forked_from")
    fork_source = forked.get("id") if isinstance(forked, dict) and isinstance(forked.get("id"), str) else None
    parent = snap.get("parent") if isinstance(snap.get("parent"), str) else None
    task = snap.get("task")
    if not isinstance(task, str):
        first = record.entries[0] if record.entries else {}
        task = fmt.text(first.get("text")) if first.get("kind") == "task" else ""
    status = snapshot_status(record.snapshot)
    last_seq = record.entries[-1].get("seq") if record.entries else -1
    # The last LAST entries (before ``before``): a long run's page stays quick to render
    # and to show; the rest are a link away. Tokens still cover the whole history.
    window = record.entries if before is None else [e for e in record.entries if _seq(e) < before]
    shown = window[-LAST:]
    hidden = len(window) - len(shown)
    previous_at = window[hidden - 1].get("at") if hidden else None
    # Rendering thousands of entries takes a while: not on the event loop, which serves
    # every other page and live stream meanwhile.
    rendered = await run_in_threadpool(entries_html, shown, previous_at, record.snapshot)
    # The chart covers the whole window (not only the entries shown), drawn on the server:
    # its calls as the whole history (already read) tells them, so that a call whose result
    # came after ``before`` is drawn done, not in doubt.
    chart = await run_in_threadpool(
        _timeline.timeline, record.entries, record.snapshot, running=status == "running", before=before
    )
    return page(
        "run.html",
        id=state_id,
        task=task,
        status=status,
        status_class=f"status-{fmt.css_word(status)}",
        agent=fmt.text(snap.get("agent")),
        turn=fmt.text(snap.get("turn")),
        tokens=fmt.token_sum(record.entries, record.snapshot).text(),
        parent=parent,
        children=children,
        fork_source=fork_source,
        fork_seq=fmt.text(forked.get("seq")) if isinstance(forked, dict) else "",
        labels=snap.get("labels") if isinstance(snap.get("labels"), dict) else {},
        created=moment(snap.get("created_at")),
        updated=moment(snap.get("updated_at")),
        entries=[html for _, html in rendered],
        chart=chart,
        g=_timeline,
        hidden=hidden,
        earlier=_seq(shown[0]) if hidden else None,
        before=before,
        last_seq=last_seq if type(last_seq) is int else -1,
        live=status == "running" and before is None,  # an earlier window does not grow
        approvals=[{**a, "since": moment(a["since"])} for a in pending_views(state_id, record)],
        approving=request.app.state.allow_approve,
        csrf=request.app.state.csrf if request.app.state.allow_approve else "",
    )
