"""A listing query as SQL: one page, answered from one index in listing order.

Every filter of :class:`~statekeep._query.ListQuery` has an index whose columns are its
equality columns and then ``updated_at DESC, id`` (see the version 2 schema in ``_sql``),
so a page is one range of that index, read until the page is full; the other filters are
checked on the rows found. A label filter reads the labels table's index (which holds the
State's ``updated_at``); each further label is one primary-key lookup per row. ``id_prefix``
alone reads the primary key's range of that prefix and sorts it. Expired States (by the
store's clock) are left out as they are met.

The cursor condition ``updated_at <= at AND (updated_at < at OR id > cursor id)`` is the
keyset order of :mod:`statekeep._query`, written so that its first part bounds the range.
"""

from __future__ import annotations

from typing import Any

from ..._labels import iso
from ..._query import ListQuery
from . import _sql as sql


def listing_sql(namespace: str, query: ListQuery, now: str) -> tuple[str, list[Any]]:
    """The SELECT for one page of ``query`` (limit + 1 rows, to know whether more follow),
    and its parameters; rows as ``_sql.ROW_COLUMNS``."""
    labels = list(query.labels.items())
    where: list[str] = []
    params: list[Any] = []
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
    where.append("(s.expires_at IS NULL OR s.expires_at > ?)")
    params.append(now)
    order = at.lstrip("+")
    text = f"SELECT {sql.ROW_COLUMNS} FROM {source} WHERE {' AND '.join(where)} ORDER BY {order} DESC, {sid}"
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
