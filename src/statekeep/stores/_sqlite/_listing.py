"""A listing query as SQL: one page, answered from one index in listing order.

Every filter of :class:`~statekeep._core.query.ListQuery` has an index whose columns are its
equality columns and then ``updated_at DESC, id`` (see the version 2 schema in ``_sql``),
so a page is one range of that index, read until the page is full; the other filters are
checked on the rows found. A label filter reads the labels table's index (which holds the
State's ``updated_at``); each further label is one primary-key lookup per row. ``id_prefix``
alone reads the primary key's range of that prefix and sorts it. Expired States (by the
store's clock) are left out as they are met, unless the (internal) query includes them.

The cursor condition ``updated_at <= at AND (updated_at < at OR id > cursor id)`` is the
keyset order of :mod:`statekeep._core.query`, written so that its first part bounds the range.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..._core.labels import iso
from ..._core.query import ListQuery, Page, encode_cursor
from ..._core.records import left_out, trusted_row, utc_time
from ..._runtime.batching import WouldBlock
from . import _sql as sql
from ._connections import Connections, connect, is_busy
from ._rows import saved_state
from ._schema import check_version, refuse_newer, refuse_newer_after


def read_page(
    path: Path, conn: sqlite3.Connection, namespace: str, query: ListQuery, now: str
) -> tuple[Page, list[str]]:
    """One page of ``query`` in one statement that also reads the schema version (checked
    here: ``path`` names the database) and, on a walk's first page, whether any State is
    unlisted; and a message for each State left out: unlisted ones (on a walk's first
    page: a second statement, when there are some) and rows whose columns were edited into
    something a listing cannot hold."""
    first = query.after is None
    text, params = listing_sql(namespace, query, now, with_version=True, with_unlisted=first)
    try:
        rows = conn.execute(text, params).fetchall()
    except sqlite3.OperationalError as exc:
        refuse_newer_after(path, conn, exc)
        raise
    # The statement read the version with the rows, so the rows were read under a schema
    # this statekeep knows; with no rows, the version is read on its own.
    if rows:
        refuse_newer(path, rows[0][-1] or 0)
    else:
        check_version(path, conn)
    unlisted = first and (not rows or bool(rows[0][-2]))
    skipped = []
    if unlisted:
        skipped = [left_out(sid, why) for sid, why in conn.execute(sql.UNLISTED, (namespace,))]
    page = Page()
    limit = len(rows) if query.limit is None else query.limit
    for row in rows[:limit]:
        try:
            page.append(saved_state(row))
        except ValueError as exc:  # columns edited by hand: leave the State out, as elsewhere
            skipped.append(left_out(row[0], exc))
    if len(rows) > limit:
        page.next = _cursor_after(rows[limit - 1])
    return page, skipped


def read_page_now(
    path: Path, conns: Connections, namespace: str, query: ListQuery, now: str
) -> tuple[Page, list[str]]:
    """:func:`read_page` on the owner loop, for a page small enough not to hold it up (a
    thread hop costs as much as such a page), with a reader that never waits: WouldBlock,
    with nothing read, if SQLite reports the database busy."""
    conn = loop_reader(path, conns)
    try:  # one statement, so no explicit transaction: the page is one consistent read
        return read_page(path, conn, namespace, query, now)
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise WouldBlock from None
        raise


def loop_reader(path: Path, conns: Connections) -> sqlite3.Connection:
    """The reader used on the owner loop only (made on first use): it never waits for a lock."""
    conn = conns.loop_reader
    if conn is None:
        if conns.closed:  # a read that passed the open check before close() began
            raise RuntimeError(f"SQLiteStore({str(path)!r}) is closed; open a new store to use it again")
        conn = conns.loop_reader = connect(path, waits=False)
    return conn


def _cursor_after(row: tuple[Any, ...]) -> str:
    """The ``.next`` cursor after the last row a page read (even one left out as unreadable)."""
    try:
        at = utc_time(row[3])
    except ValueError:
        at = datetime.min.replace(tzinfo=UTC)  # an edited time: the walk ends after this page
    return encode_cursor(trusted_row(row[0], "", at, at, 0, None, False))


def listing_sql(
    namespace: str, query: ListQuery, now: str, *, with_version: bool = False, with_unlisted: bool = False
) -> tuple[str, list[Any]]:
    """The SELECT for one page of ``query`` (limit + 1 rows, to know whether more follow),
    and its parameters; rows as ``_sql.ROW_COLUMNS``, then with ``with_unlisted`` whether
    the namespace has an unlisted State, then with ``with_version`` the schema version
    (uncorrelated subqueries: SQLite runs each once)."""
    labels = list(query.labels.items())
    where: list[str] = []
    params: list[Any] = [namespace] if with_unlisted else []  # the column's, before the WHERE's
    if labels:
        # Driven by the first label's index: order, cursor and range on the label rows.
        key, value = labels[0]
        source = "labels l JOIN states s ON s.namespace = l.namespace AND s.id = l.state_id"
        where += ["l.namespace = ?", "l.key = ?", "l.value = ?"]
        params += [namespace, key, value]
        at, sid = "l.updated_at", "l.state_id"
        for key, value in labels[1:]:
            where.append(
                "EXISTS (SELECT 1 FROM labels x WHERE x.namespace = s.namespace AND x.state_id = s.id "
                "AND x.key = ? AND x.value = ?)"
            )
            params += [key, value]
    else:
        source = "states s"
        where += ["s.namespace = ?", "s.updated_at IS NOT NULL"]
        params.append(namespace)
        at, sid = "s.updated_at", "s.id"
    if query.agent is not None:
        where.append("s.agent = ?")
        params.append(query.agent)
    if query.parent is not None:
        where.append("s.parent = ?")
        params.append(query.parent)
    where += _status_terms(query, params)
    # With only an id prefix to narrow by, its primary-key range drives, sorted after; the
    # time terms are kept off the listing index (unary +), which would read every State.
    if query.id_prefix is not None and not labels and len(where) == 2:
        at = f"+{at}"
    if query.updated_after is not None:
        where.append(f"{at} > ?")
        params.append(iso(query.updated_after))
    if query.updated_before is not None:
        where.append(f"{at} < ?")
        params.append(iso(query.updated_before))
    if query.id_prefix is not None:
        # Ids are ASCII letters, digits, '_' and '-', all before '~'.
        where.append(f"{sid} >= ? AND {sid} < ?")
        params += [query.id_prefix, query.id_prefix + "~"]
    if query.after is not None:
        cursor_at, cursor_id = query.after
        where.append(f"{at} <= ? AND ({at} < ? OR {sid} > ?)")
        stamp = iso(cursor_at)
        params += [stamp, stamp, cursor_id]
    if not query.include_expired:  # a tree delete and a gc dry run see expired States too
        where.append("(s.expires_at IS NULL OR s.expires_at > ?)")
        params.append(now)
    order = at.lstrip("+")
    columns = sql.ROW_COLUMNS + (f", {sql.ANY_UNLISTED}" if with_unlisted else "")
    columns += ", (SELECT max(version) FROM schema_version)" if with_version else ""
    text = f"SELECT {columns} FROM {source} WHERE {' AND '.join(where)} ORDER BY {order} DESC, {sid}"
    if query.limit is not None:
        text += " LIMIT ?"
        params.append(query.limit + 1)
    return text, params


def _status_terms(query: ListQuery, params: list[Any]) -> list[str]:
    """The terms for ``finished``, ``stopped_by`` and ``status``, each written to match the
    index that answers it (states_status, states_unfinished, states_stopped)."""
    terms = []
    if query.status is not None:
        terms.append("s.status = ?")
        params.append(query.status)
    if query.finished is True:
        terms.append("s.status = 'finished'")
    elif query.finished is False:
        terms.append("s.finished = 0")  # literal: the partial index states_unfinished matches it
    if query.stopped_by is not None:
        terms.append("s.stopped_by = ?")
        params.append(query.stopped_by)
    return terms
