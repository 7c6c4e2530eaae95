"""PostgresStore's listing: the columns a write fills from its snapshot, and a page of a
:class:`~statekeep._core.query.ListQuery` as one statement answered from the indexes.

A page is one ordered index scan (``updated_at DESC, id`` after the namespace, or after
the agent, parent or status filtered on, or after a label's key and value in the labels
table), stopped after ``limit + 1`` rows; the other filters are conditions on it. The cursor is a condition on the index's own
columns, so the next page starts where the last one ended. Rows whose listing columns
could not be filled (a snapshot lacking a listing key, or a value no column holds) come
from a small partial index in the same statement and are filtered here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from ..._core.query import ListQuery, Page, encode_cursor
from ..._core.records import SavedState, left_out, listing_order, trusted_row, utc_time
from .. import _server as servercommon

if TYPE_CHECKING:
    from asyncpg import Record as Row

    from ._sql import Sql

INT64_MAX = 2**63 - 1

#: The listing columns of a write, in the write function's order: task, created_at,
#: updated_at, turn, stopped_by, finished, unlisted, agent, parent, labels (JSON text),
#: forked_from (JSON text), expires_at (the snapshot's own, or None).
Listing = tuple[Any, ...]
_EMPTY: Listing = (None,) * 12


def listing(state_id: str, snapshot: bytes | None) -> Listing:
    """The listing columns of ``snapshot``: all None without one; only ``unlisted`` (the
    reason) and ``expires_at`` when it lacks a listing key; only ``expires_at`` when a
    value does not fit a column (a NUL, a huge turn): list() then reads the snapshot."""
    if snapshot is None:
        return _EMPTY
    try:
        data = orjson.loads(snapshot)
    except orjson.JSONDecodeError:
        return _EMPTY
    try:
        row = SavedState.from_snapshot(state_id, data)
    except ValueError as exc:
        reason = str(exc).replace("\x00", "\\x00")
        return (None,) * 6 + (reason,) + (None,) * 4 + (_own_expiry(data),)
    except Exception:
        return _EMPTY
    texts = [row.task, row.stopped_by, row.agent, row.parent, *row.labels, *row.labels.values()]
    if row.forked_from is not None:
        texts.append(row.forked_from["id"])
    if row.turn > INT64_MAX or any(t is not None and "\x00" in t for t in texts):
        return (None,) * 11 + (row.expires_at,)
    return (
        row.task, row.created_at, row.updated_at, row.turn, row.stopped_by, row.finished, None,
        row.agent, row.parent, orjson.dumps(row.labels).decode() if row.labels else None,
        None if row.forked_from is None else orjson.dumps(row.forked_from).decode(), row.expires_at,
    )  # fmt: skip


def _own_expiry(data: Any) -> datetime | None:
    try:
        return utc_time(data.get("expires_at")) if type(data) is dict and data.get("expires_at") else None
    except ValueError:
        return None


_COLUMNS = ", ".join(
    f"s.{c}"
    for c in (
        "id", "task", "created_at", "updated_at", "turn", "stopped_by", "finished", "agent", "parent",
        "labels", "expires_at", "forked_from",
    )
)  # fmt: skip
_LIVE = "(s.expires_at IS NULL OR s.expires_at > now())"


def page_query(sql: Sql, namespace: str, query: ListQuery) -> tuple[str, list[Any]]:
    """One statement for a page of ``query``: the listed rows in order (at most ``limit + 1``),
    then the odd rows (``task`` NULL), which carry ``unlisted`` and the snapshot.

    The listed rows come from the states table in listing order, or, with labels, from the
    first label's rows in the labels table (same order, same ``updated_at``) joined to their
    States, the other labels a condition on those."""
    args: list[Any] = [namespace]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    where = ["s.ns = $1", "s.task IS NOT NULL"]
    source = f"{sql.states} s"
    order = "s.updated_at", "s.id"  # the columns the page is ordered and cut by
    if query.labels:
        (key, value), *more = query.labels.items()
        source = f"{sql.labels} l JOIN {sql.states} s ON s.ns = l.ns AND s.id = l.state_id"
        where += [f"l.ns = $1 AND l.key = {arg(key)} AND l.value = {arg(value)}"]
        order = "l.updated_at", "l.state_id"
        if more:
            where.append(f"s.labels @> {arg(orjson.dumps(dict(more)).decode())}::jsonb")
    at, sid = order
    if query.agent is not None:
        where.append(f"s.agent = {arg(query.agent)}")
    if query.parent is not None:
        where.append(f"s.parent = {arg(query.parent)}")
    if query.finished is True:
        where.append("s.status = 'finished'")
    elif query.finished is False:
        where.append("s.status <> 'finished'")
    if query.status is not None:
        where.append(f"s.status = {arg(query.status)}")
    if query.stopped_by is not None:
        where.append(f"s.stopped_by = {arg(query.stopped_by)}")
    if query.updated_after is not None:
        where.append(f"{at} > {arg(query.updated_after)}")
    if query.updated_before is not None:
        where.append(f"{at} < {arg(query.updated_before)}")
    if query.id_prefix is not None:
        # Ids are [A-Za-z0-9_-] and sort bytewise ("C"): '~' comes after each of them.
        where.append(f"{sid} >= {arg(query.id_prefix)} AND {sid} < {arg(query.id_prefix + '~')}")
    if query.after is not None:
        after_at, after_id = query.after
        p_at = arg(after_at)
        where.append(f"{at} <= {p_at} AND ({at} < {p_at} OR {sid} > {arg(after_id)})")
    limit = "" if query.limit is None else f" LIMIT {arg(query.limit + 1)}"
    live = "TRUE" if query.include_expired else _LIVE  # a tree delete lists expired States too
    statement = f"""
        (SELECT {_COLUMNS}, NULL AS unlisted, NULL AS snapshot FROM {source}
         WHERE {" AND ".join(where)} AND {live}
         ORDER BY {at} DESC, {sid}{limit})
        UNION ALL
        (SELECT s.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, s.expires_at, NULL, s.unlisted,
                CASE WHEN s.unlisted IS NULL THEN s.snapshot END
         FROM {sql.states} s WHERE s.ns = $1 AND s.task IS NULL AND s.snapshot IS NOT NULL AND {live})"""
    return statement, args


def page_rows(rows: list[Row], query: ListQuery, first_page: bool) -> tuple[Page, list[str]]:
    """The page of ``query`` from the rows of :func:`page_query` (the columns are checked
    when written; asyncpg gives UTC datetimes), and the warnings for rows left out."""
    listed: list[SavedState] = []
    odd: list[SavedState] = []
    skipped: list[str] = []
    loads = orjson.loads
    for (
        sid,
        task,
        created,
        updated,
        turn,
        stopped_by,
        finished,
        agent,
        parent,
        labels,
        expires,
        forked,
        *rest,
    ) in rows:
        if task is not None:
            row = trusted_row(
                sid, task, created, updated, turn, stopped_by, finished, agent, parent,
                None if labels is None else loads(labels), expires,
                None if forked is None else loads(forked),
            )  # fmt: skip
            listed.append(row)
            continue
        unlisted, raw = rest
        if unlisted is not None:
            skipped.append(left_out(sid, unlisted))
            continue
        found: list[SavedState] = []
        if servercommon.add_listed(sid, raw, found, skipped):
            row = _with_expiry(found[0], expires)
            if query.past_cursor(row) and query.matches(row):
                odd.append(row)
    if odd:  # rare: merged into the listed rows' order here
        listed = listing_order(listed + odd)
    page = Page(listed)
    if query.limit is not None and len(page) > query.limit:
        del page[query.limit :]
        page.next = encode_cursor(page[-1])
    return page, skipped if first_page else []


def _with_expiry(row: SavedState, expires_at: datetime | None) -> SavedState:
    """``row`` with the effective expiry (the column: retention stamped by the server)."""
    if row.expires_at == expires_at:
        return row
    return trusted_row(
        row.id, row.task, row.created_at, row.updated_at, row.turn, row.stopped_by, row.finished,
        row.agent, row.parent, row.labels, expires_at, row.forked_from,
    )  # fmt: skip
