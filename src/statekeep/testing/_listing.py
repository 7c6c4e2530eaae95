"""The listing part of the Store contract: ``list()`` as a query (filters, order, pages,
cursors), ``iter_states`` and paging while writes go on."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from ._helpers import Api, snapshot

asyncio_test = pytest.mark.asyncio


def listed_snapshot(
    day: int,
    hour: int = 0,
    *,
    agent: str | None = None,
    parent: str | None = None,
    labels: dict[str, str] | None = None,
    stopped_by: str | None = None,
    finished: bool = False,
) -> dict[str, Any]:
    """A snapshot updated on 2026-01-``day`` at ``hour``, with the listing keys a saved State has."""
    return {
        **snapshot(updated=f"2026-01-{day:02d}T{hour:02d}:00:00+00:00"),
        "agent": agent,
        "parent": parent,
        "labels": labels or {},
        "stopped_by": "finish" if finished else stopped_by,
        "finished": finished,
    }


#: The States the filter tests list, in listing order (most recently updated first, ties by id).
FLEET = {
    "a1": listed_snapshot(5, agent="planner", labels={"env": "prod", "user": "u1"}),
    "a2": listed_snapshot(4, agent="planner", labels={"env": "dev"}, finished=True),
    "b1": listed_snapshot(4, agent="coder", parent="a1", labels={"env": "prod"}, stopped_by="limit"),
    "b2": listed_snapshot(3, agent="coder", parent="a1", labels={"env": "prod", "user": "u2"}),
    "c1": listed_snapshot(2),
    "c2": listed_snapshot(1, agent="planner", parent="b1", labels={"user": "u1"}, finished=True),
}

JAN = {day: datetime(2026, 1, day, tzinfo=UTC) for day in range(1, 6)}

#: Each filter (and some combinations) with the ids it must list, written out by hand.
FILTERS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "none": ({}, ["a1", "a2", "b1", "b2", "c1", "c2"]),
    "agent": ({"agent": "planner"}, ["a1", "a2", "c2"]),
    "agent-other": ({"agent": "coder"}, ["b1", "b2"]),
    "agent-unknown": ({"agent": "nobody"}, []),
    "parent": ({"parent": "a1"}, ["b1", "b2"]),
    "parent-deeper": ({"parent": "b1"}, ["c2"]),
    "finished": ({"finished": True}, ["a2", "c2"]),
    "not-finished": ({"finished": False}, ["a1", "b1", "b2", "c1"]),
    "stopped_by": ({"stopped_by": "limit"}, ["b1"]),
    "stopped_by-finish": ({"stopped_by": "finish"}, ["a2", "c2"]),
    "status-finished": ({"status": "finished"}, ["a2", "c2"]),
    "status-running": ({"status": "running"}, ["a1", "b2", "c1"]),
    "status-reason": ({"status": "limit"}, ["b1"]),
    "label": ({"labels": {"env": "prod"}}, ["a1", "b1", "b2"]),
    "labels-both": ({"labels": {"env": "prod", "user": "u2"}}, ["b2"]),
    "label-user": ({"labels": {"user": "u1"}}, ["a1", "c2"]),
    "label-unknown": ({"labels": {"env": "nope"}}, []),
    "labels-empty": ({"labels": {}}, ["a1", "a2", "b1", "b2", "c1", "c2"]),
    "updated_after": ({"updated_after": JAN[3]}, ["a1", "a2", "b1"]),  # exclusive: b2 is at JAN[3]
    "updated_before": ({"updated_before": JAN[3]}, ["c1", "c2"]),
    "updated-between": ({"updated_after": JAN[1], "updated_before": JAN[5]}, ["a2", "b1", "b2", "c1"]),
    "id_prefix": ({"id_prefix": "b"}, ["b1", "b2"]),
    "agent+finished": ({"agent": "planner", "finished": True}, ["a2", "c2"]),
    "agent+label+status": ({"agent": "coder", "labels": {"env": "prod"}, "status": "running"}, ["b2"]),
    "parent+updated_before": ({"parent": "a1", "updated_before": JAN[4]}, ["b2"]),
    "agent+label+after": ({"agent": "planner", "labels": {"user": "u1"}, "updated_after": JAN[1]}, ["a1"]),
    "contradiction": ({"finished": True, "status": "running"}, []),
}

#: Bad filter values, each with the argument its ValueError must name.
BAD_FILTERS: dict[str, tuple[dict[str, Any], str]] = {
    "limit-zero": ({"limit": 0}, "limit"),
    "limit-negative": ({"limit": -1}, "limit"),
    "limit-str": ({"limit": "5"}, "limit"),
    "limit-bool": ({"limit": True}, "limit"),
    "limit-huge": ({"limit": 10_001}, "limit"),
    "after-garbage": ({"after": "not-a-cursor"}, "after"),
    "after-int": ({"after": 5}, "after"),
    "agent-empty": ({"agent": ""}, "agent"),
    "agent-int": ({"agent": 5}, "agent"),
    "parent-bad-id": ({"parent": "not an id"}, "parent"),
    "finished-str": ({"finished": "yes"}, "finished"),
    "stopped_by-empty": ({"stopped_by": ""}, "stopped_by"),
    "status-empty": ({"status": ""}, "status"),
    "labels-bad-key": ({"labels": {"bad key!": "x"}}, "labels"),
    "labels-not-dict": ({"labels": "env=prod"}, "labels"),
    "labels-int-value": ({"labels": {"env": 1}}, "labels"),
    "updated_after-naive": ({"updated_after": datetime(2026, 1, 1)}, "updated_after"),
    "updated_before-text": ({"updated_before": "yesterday"}, "updated_before"),
}


class ListingContract:
    """Mixed into :class:`StoreContract`: ``list(**filters)`` as the query it documents."""

    #: ``list()`` takes the filters and pages of :meth:`statekeep.Store.list`.
    supports_query: ClassVar[bool] = True

    if TYPE_CHECKING:

        def needs(self, *flags: str) -> None: ...

    async def fleet(self, api: Api) -> None:
        for sid, snap in FLEET.items():
            await api.write(sid, [], snap, create=True)

    @pytest.mark.parametrize("case", list(FILTERS))
    @asyncio_test
    async def test_query_filters_alone_and_combined(self, api: Api, case: str) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        filters, expected = FILTERS[case]
        rows = await api.list(**filters)
        assert [r.id for r in rows] == expected
        assert getattr(rows, "next", None) is None

    @asyncio_test
    async def test_query_rows_carry_the_listing_fields(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        rows = {r.id: r for r in await api.list()}
        assert (rows["b1"].agent, rows["b1"].parent, rows["b1"].labels) == ("coder", "a1", {"env": "prod"})
        assert (rows["c1"].agent, rows["c1"].parent, rows["c1"].labels) == (None, None, {})
        statuses = {sid: row.status for sid, row in rows.items()}
        assert statuses == {
            "a1": "running", "a2": "finished", "b1": "limit", "b2": "running", "c1": "running",
            "c2": "finished",
        }  # fmt: skip

    @pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 6, 7])
    @asyncio_test
    async def test_query_pages_concatenate_to_the_listing(self, api: Api, limit: int) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        seen: list[str] = []
        after = None
        pages = 0
        while True:
            page = await api.list(limit=limit, after=after)
            assert 0 < len(page) <= limit
            seen += [r.id for r in page]
            pages += 1
            after = page.next  # type: ignore[attr-defined]
            if after is None:
                break
            assert isinstance(after, str)
        assert seen == list(FLEET)
        assert pages == -(-len(FLEET) // limit)  # an exactly full last page says there is no next

    @asyncio_test
    async def test_query_pages_with_a_filter(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        first = await api.list(agent="planner", limit=2)
        assert [r.id for r in first] == ["a1", "a2"] and first.next is not None  # type: ignore[attr-defined]
        second = await api.list(agent="planner", limit=2, after=first.next)  # type: ignore[attr-defined]
        assert [r.id for r in second] == ["c2"] and second.next is None  # type: ignore[attr-defined]

    @asyncio_test
    async def test_query_empty_store_page(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        page = await api.list(limit=10)
        assert page == [] and page.next is None  # type: ignore[attr-defined]

    @pytest.mark.parametrize("page_size", [None, 1, 4])
    @asyncio_test
    async def test_query_iter_states_walks_every_page(self, api: Api, page_size: int | None) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        sized = {} if page_size is None else {"limit": page_size}
        assert [r.id for r in await api.walk(**sized)] == list(FLEET)
        assert [r.id for r in await api.walk(labels={"env": "prod"}, **sized)] == ["a1", "b1", "b2"]
        assert await api.walk(agent="nobody", **sized) == []

    @pytest.mark.parametrize("case", list(BAD_FILTERS))
    @asyncio_test
    async def test_query_bad_filter_is_a_value_error_naming_it(self, api: Api, case: str) -> None:
        self.needs("supports_list", "supports_query")
        await self.fleet(api)
        filters, name = BAD_FILTERS[case]
        with pytest.raises(ValueError, match=name):
            await api.list(**filters)

    @asyncio_test
    async def test_query_unknown_filter_is_a_type_error(self, api: Api) -> None:
        self.needs("supports_list", "supports_query")
        with pytest.raises(TypeError, match="colour"):
            await api.list(colour="red")

    @asyncio_test
    async def test_query_paging_while_states_are_written(self, api: Api) -> None:
        """Writes between pages: no State is listed twice in one walk, and every State not
        updated during the walk is listed."""
        self.needs("supports_list", "supports_query")
        ids = [f"s{n:02d}" for n in range(30)]
        for n, sid in enumerate(ids):  # s29 newest; hours make distinct times, with some ties
            await api.write(sid, [], listed_snapshot(2, n // 2), create=True)
        seen: list[str] = []
        touched: set[str] = set()
        after = None
        step = 0
        while True:
            page = await api.list(limit=4, after=after)
            seen += [r.id for r in page]
            after = page.next  # type: ignore[attr-defined]
            if after is None:
                break
            step += 1
            # Move one State already seen and one not yet seen to the front, create a new one.
            unseen = [sid for sid in ids if sid not in seen and sid not in touched]
            for sid in [seen[0], *unseen[-1:]]:
                touched.add(sid)
                await api.write(sid, [], listed_snapshot(3, step))
            await api.write(f"new{step:02d}", [], listed_snapshot(3, step), create=True)
        assert len(seen) == len(set(seen)), f"listed twice: {sorted(s for s in seen if seen.count(s) > 1)}"
        missing = set(ids) - touched - set(seen)
        assert not missing, f"skipped though not updated during the walk: {sorted(missing)}"

    @asyncio_test
    async def test_query_paging_while_another_thread_writes(self, api: Api) -> None:
        """A writer thread moves States to the front while the walk goes on: still no State
        twice, and none skipped that the writer had not touched."""
        self.needs("supports_list", "supports_query")
        ids = [f"s{n:02d}" for n in range(40)]
        for n, sid in enumerate(ids):
            await api.write(sid, [], listed_snapshot(2, n // 2), create=True)
        touched: set[str] = set()
        done = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                for n in range(400):  # until the walk ends, or this many writes
                    if done.is_set():
                        return
                    sid = ids[(n * 7) % len(ids)]
                    touched.add(sid)  # before the write: it counts as updated during the walk
                    api.store.write(sid, [], listed_snapshot(3, 0) | {"turn": n})
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            seen: list[str] = []
            after = None
            while True:
                page = await api.list(limit=3, after=after)
                seen += [r.id for r in page]
                after = page.next  # type: ignore[attr-defined]
                if after is None:
                    break
        finally:
            done.set()
            thread.join()
        assert not errors, errors
        assert len(seen) == len(set(seen)), f"listed twice: {sorted(s for s in seen if seen.count(s) > 1)}"
        missing = set(ids) - touched - set(seen)
        assert not missing, f"skipped though not updated during the walk: {sorted(missing)}"
