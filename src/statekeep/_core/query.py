"""A listing as a query: filters, order, pages and their cursors (pure, no I/O).

Order: most recently updated first, ties by id. A page ends with a cursor naming its last
row's place in that order (its ``updated_at`` and id); the next page is the rows strictly
after that place. So a walk never returns a State twice: a State updated during the walk
moves to the front, before the cursor. It skips no State either, except one updated during
the walk after its old place was passed (it is in front now, with its new time).
"""

from __future__ import annotations

import base64
import binascii
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar

import orjson

from .ids import validate_id
from .labels import aware_time, check_labels
from .records import SavedState, listing_order

MAX_LIMIT = 10_000
F = TypeVar("F", bound=Callable[..., Any])


class Page(list[SavedState]):
    """One page of a listing: a list of :class:`SavedState`, with :attr:`next`.

    ``next`` is the ``after=`` value for the following page, or None when this page is the
    last one.
    """

    next: str | None

    def __init__(self, rows: Iterable[SavedState] = (), next: str | None = None) -> None:
        super().__init__(rows)
        self.next = next


class ListFilters(TypedDict, total=False):
    """The keyword arguments of a listing (:meth:`statekeep.Store.list`), each optional:
    ``def list(self, **filters: Unpack[ListFilters])``."""

    limit: int | None
    after: str | None
    agent: str | None
    parent: str | None
    finished: bool | None
    stopped_by: str | None
    status: str | None
    labels: Mapping[str, str] | None
    updated_after: datetime | None
    updated_before: datetime | None
    id_prefix: str | None


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Validated listing arguments (see :meth:`statekeep.Store.list`)."""

    limit: int | None = None
    after: tuple[datetime, str] | None = None
    agent: str | None = None
    parent: str | None = None
    finished: bool | None = None
    stopped_by: str | None = None
    status: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    id_prefix: str | None = None
    #: Internal (never from a user's arguments): list expired States too, as a tree delete
    #: and a gc dry run need. Stores honour it in ``_select``.
    include_expired: bool = False

    def with_after(self, cursor: tuple[datetime, str] | None) -> ListQuery:
        """The same query, for the page after ``cursor``."""
        return ListQuery(
            self.limit, cursor, self.agent, self.parent, self.finished, self.stopped_by, self.status,
            self.labels, self.updated_after, self.updated_before, self.id_prefix, self.include_expired,
        )  # fmt: skip

    @property
    def filtered(self) -> bool:
        """Whether any filter (beyond paging) is set."""
        return any(
            v is not None
            for v in (
                self.agent, self.parent, self.finished, self.stopped_by, self.status,
                self.updated_after, self.updated_before, self.id_prefix,
            )
        ) or bool(self.labels)  # fmt: skip

    def matches(self, row: SavedState) -> bool:
        """Whether ``row`` passes every filter (paging aside)."""
        if self.agent is not None and row.agent != self.agent:
            return False
        if self.parent is not None and row.parent != self.parent:
            return False
        if self.finished is not None and row.finished is not self.finished:
            return False
        if self.stopped_by is not None and row.stopped_by != self.stopped_by:
            return False
        if self.status is not None and row.status != self.status:
            return False
        if self.updated_after is not None and not row.updated_at > self.updated_after:
            return False
        if self.updated_before is not None and not row.updated_at < self.updated_before:
            return False
        if self.id_prefix is not None and not row.id.startswith(self.id_prefix):
            return False
        return all(row.labels.get(k) == v for k, v in self.labels.items())

    def past_cursor(self, row: SavedState) -> bool:
        """Whether ``row`` comes after the cursor in listing order (True without one)."""
        if self.after is None:
            return True
        at, sid = self.after
        return row.updated_at < at or (row.updated_at == at and row.id > sid)


def make_query(
    *,
    limit: object = None,
    after: object = None,
    agent: object = None,
    parent: object = None,
    finished: object = None,
    stopped_by: object = None,
    status: object = None,
    labels: object = None,
    updated_after: object = None,
    updated_before: object = None,
    id_prefix: object = None,
) -> ListQuery:
    """Check listing arguments: ValueError (TypeError for a wrong type) naming the argument."""
    if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_LIMIT):
        raise ValueError(f"limit must be an int from 1 to {MAX_LIMIT}, or None for every row; got {limit!r}")
    for name, value in (("agent", agent), ("stopped_by", stopped_by), ("status", status)):
        if value is not None and (type(value) is not str or not value):
            raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")
    if parent is not None:
        try:
            validate_id(parent)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"parent must be a State id: {exc}") from None
    if id_prefix is not None and (type(id_prefix) is not str or not _id_prefix_ok(id_prefix)):
        raise ValueError(f"id_prefix must be the start of a State id, got {id_prefix!r}")
    if finished is not None and type(finished) is not bool:
        raise ValueError(f"finished must be True, False or None, got {finished!r}")
    try:
        checked_labels = check_labels(labels, "labels")
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    times = []
    for name, value in (("updated_after", updated_after), ("updated_before", updated_before)):
        try:
            times.append(None if value is None else aware_time(value, name))
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    return ListQuery(
        limit,
        None if after is None else decode_cursor(after),
        agent,  # type: ignore[arg-type]
        parent,  # type: ignore[arg-type]
        finished,
        stopped_by,  # type: ignore[arg-type]
        status,  # type: ignore[arg-type]
        checked_labels,
        times[0],
        times[1],
        id_prefix,
    )


def _id_prefix_ok(prefix: str) -> bool:
    try:
        validate_id(prefix)
    except ValueError:
        return False
    return True


def encode_cursor(row: SavedState) -> str:
    """The ``after=`` value for the page after ``row``."""
    raw = orjson.dumps([row.updated_at.isoformat(timespec="microseconds"), row.id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(after: object) -> tuple[datetime, str]:
    """The place a cursor names; ValueError naming ``after`` if it is not one of ours."""
    bad = ValueError(
        f"after must be the .next of a listing page (or None), got {after!r}; start again without it"
    )
    if type(after) is not str or not after:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(after + "=" * (-len(after) % 4))
        at, sid = orjson.loads(raw)
        when = datetime.fromisoformat(at)
        validate_id(sid)
    except (binascii.Error, orjson.JSONDecodeError, ValueError, TypeError):
        raise bad from None
    if when.tzinfo is None:
        raise bad
    return when.astimezone(UTC), sid


def select(rows: Iterable[SavedState], query: ListQuery) -> Page:
    """One page of ``rows`` (already in listing order, expired ones left out) for ``query``:
    the generic listing every store can fall back to."""
    page = Page()
    limit = query.limit
    for row in rows:
        if not query.past_cursor(row) or not query.matches(row):
            continue
        if limit is not None and len(page) == limit:
            page.next = encode_cursor(page[-1])
            break
        page.append(row)
    return page


#: The keywords of :meth:`statekeep.Store.list`.
QUERY_KEYWORDS = frozenset(ListFilters.__annotations__)


def takes_no_query(method: Callable[..., Any]) -> bool:
    """Whether a store's ``list``/``alist`` was written without the query's keywords."""
    params = inspect.signature(method).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return False
    return not QUERY_KEYWORDS & {p.name for p in params}


def with_query(method: F) -> F:
    """Wrap a store's ``list(self)`` or ``alist`` written without filters so that it takes
    the query of :meth:`statekeep.Store.list`: it lists every State, and the rows are put in
    listing order, filtered and paged here, by the rules every store follows (expired
    States left out)."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def alist(self: Any, **filters: Any) -> Page:
            query = make_query(**filters)
            return _answer(await method(self), query)

        return alist  # type: ignore[return-value]

    @functools.wraps(method)
    def list_(self: Any, **filters: Any) -> Page:
        query = make_query(**filters)
        return _answer(method(self), query)

    return list_  # type: ignore[return-value]


def _answer(rows: Iterable[SavedState], query: ListQuery) -> Page:
    now = datetime.now(UTC)
    live = [row for row in rows if row.expires_at is None or row.expires_at > now]
    return select(listing_order(live), query)


def given(**filters: Any) -> dict[str, Any]:
    """The listing arguments a caller gave (not None), to pass on as keywords."""
    return {name: value for name, value in filters.items() if value is not None}
