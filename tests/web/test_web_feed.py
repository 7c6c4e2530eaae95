"""The runs feed (``GET /events/runs``) over a real server (statekeep.web.start): one poller
for every open runs page, and rows that stop matching a filtered page's filters."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from statekeep import FileStore, MemoryStore
from statekeep.web import start
from tests.support.web_runs import running
from tests.support.web_serving import DEADLINE, client, events, until


class Listings(MemoryStore):
    """A MemoryStore that notes which asyncio task made each look at it: a listing, or a
    read of its change stamp (an idle poll's only look)."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[str] = []  # the id of the task making each listing
        self.listed = threading.Condition()

    async def alist(self, **filters: Any) -> Any:
        self.note()
        return await super().alist(**filters)

    async def _change_stamp(self) -> Any:
        self.note()
        return await super()._change_stamp()

    def note(self) -> None:
        with self.listed:
            self.tasks.append(str(id(asyncio.current_task())))
            self.listed.notify_all()

    def wait_listings(self, count: int) -> None:
        with self.listed:
            assert self.listed.wait_for(lambda: len(self.tasks) >= count, DEADLINE), "no more listings"


def feed(base: str, query: str = "") -> str:
    return f"{base}events/runs?{query}since={quote(datetime.now(UTC).isoformat())}"


def test_open_runs_pages_share_one_poller(monkeypatch: pytest.MonkeyPatch) -> None:
    import statekeep.web._feed

    monkeypatch.setattr(statekeep.web._feed, "POLL_MIN", 0.05)  # quick looks, to see many soon
    monkeypatch.setattr(statekeep.web._feed, "POLL_MAX", 0.1)
    store = Listings()
    with start(store) as viewer, client() as http, ExitStack() as streams:
        tabs = [events(streams.enter_context(http.stream("GET", feed(viewer.url)))) for _ in range(3)]
        store.save(running("a new run", id="n1"))
        for tab in tabs:
            assert until(tab, "row")["id"] == "n1"
        with store.listed:
            start_at = len(store.tasks)
        store.wait_listings(start_at + 6)  # the feeds stay open: six more looks at the store
        with store.listed:
            pollers = Counter(store.tasks[start_at:])
    assert len(pollers) == 1, pollers  # made by one task, not one per open page


def test_a_filtered_page_is_told_of_a_run_that_stops_matching(tmp_path: Path) -> None:
    with (
        FileStore(tmp_path / "store") as store,
        start(store) as viewer,
        client() as http,
        http.stream("GET", feed(viewer.url, "status=running&")) as running_feed,
        http.stream("GET", feed(viewer.url)) as every_feed,
    ):
        filtered, unfiltered = events(running_feed), events(every_feed)
        state = running("work", id="w1", agent="bot")  # listed by its last entry's time
        store.save(state)
        assert until(filtered, "row")["id"] == "w1"
        state.add_reply("done")
        state.finish("done")
        store.save(state)
        assert until(filtered, "remove") == {"id": "w1"}
        # unfiltered, the finished run is a row again (updated in place), never removed
        seen = []
        for name, data in unfiltered:
            seen.append((name, data["id"], "finished" in data.get("html", "")))
            if seen[-1][2]:
                break
        assert seen[-1] == ("row", "w1", True) and {name for name, _, _ in seen} == {"row"}
