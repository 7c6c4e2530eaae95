"""What an idle open runs page costs the store: the runs feed's poller asks the store's change
stamp and lists only when it moved (or at least every ``RESYNC`` seconds, so a change the
stamp missed is never missed for good). Counted through a real server (statekeep.web.start)
over a real store of every kind, with its ``alist`` wrapped; the CPU it saves is measured in
benchmarks/bench_viewer.py."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

import statekeep.web._feed
from statekeep import Store
from statekeep.web import start
from tests.support.web_runs import running
from tests.support.web_serving import DEADLINE, client, events, until

#: Stores with a change stamp: an idle poll lists nothing there. The server stores list by
#: ``updated_after`` from an index: their idle poll is that one range read (of the States
#: updated in the last ``OVERLAP`` seconds: none, once the store has been idle that long).
STAMPED = {"memory", "file", "sqlite"}
QUIET = 20  # polls in a row without a listing: the page is idle


class Calls:
    """The poller's looks at the store, in order: "poll" (a change stamp asked) and
    ("list", filters, rows found)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[Any] = []
        self.cond = threading.Condition()
        original_list = store.alist
        original_stamp = getattr(statekeep.web._feed, "change_stamp", None)

        async def alist(**filters: Any) -> Any:
            rows = await original_list(**filters)
            self.note(("list", filters, len(rows)))
            return rows

        async def change_stamp(of: Store) -> Hashable | None:
            self.note("poll")
            return await original_stamp(of)

        monkeypatch.setattr(store, "alist", alist)
        monkeypatch.setattr(statekeep.web._feed, "change_stamp", change_stamp, raising=False)

    def note(self, call: Any) -> None:
        with self.cond:
            self.seen.append(call)
            self.cond.notify_all()

    def quiet_polls(self) -> int:
        """Polls since the last listing."""
        count = 0
        for call in reversed(self.seen):
            if call != "poll":
                break
            count += 1
        return count

    def wait_idle(self, polls: int = QUIET) -> list[Any]:
        """Wait for ``polls`` polls in a row that list nothing; the calls since the last
        listing before them."""
        with self.cond:
            idle = self.cond.wait_for(lambda: self.quiet_polls() >= polls, DEADLINE)
            assert idle, f"no {polls} polls in a row without a listing: {self.tail()}"
            return list(self.seen)

    def wait_polls(self, count: int) -> list[Any]:
        """Wait for ``count`` more polls; the calls made meanwhile."""
        with self.cond:
            start = len(self.seen)
            done = self.cond.wait_for(lambda: self.seen[start:].count("poll") >= count, DEADLINE)
            assert done, f"no {count} polls: {self.tail()}"
            return self.seen[start:]

    def tail(self) -> list[Any]:
        return [c if c == "poll" else (c[0], sorted(c[1]), c[2]) for c in self.seen[-8:]]


def feed_url(base: str) -> str:
    return f"{base}events/runs?since={quote(datetime.now(UTC).isoformat())}"


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statekeep.web._feed, "POLL_MIN", 0.01)  # many polls soon
    monkeypatch.setattr(statekeep.web._feed, "POLL_MAX", 0.02)


def test_an_idle_runs_page_lists_nothing_per_poll(
    store: Store, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, quick: None
) -> None:
    kind = request.node.callspec.params["store"]
    for i in range(5):
        store.save(running(f"run {i}", id=f"r{i}", agent="bot"))
    calls = Calls(store, monkeypatch)
    with start(store) as viewer, client() as http, http.stream("GET", feed_url(viewer.url)) as response:
        feed = events(response)
        if kind in STAMPED:
            calls.wait_idle()
            assert calls.wait_polls(QUIET) == ["poll"] * QUIET  # idle: no listing at all
        else:  # a range read of the index per poll: the States updated lately, never all
            polls = calls.wait_polls(QUIET)
            listings = [c for c in polls if c != "poll"]
            assert listings and all(
                {"updated_after", "limit"} <= filters.keys() for _, filters, _ in listings
            ), listings
        # A change is seen: the new run reaches the open page, and the page goes idle again.
        store.save(running("a new run", id="fresh", agent="bot"))
        assert until(feed, "row")["id"] == "fresh"
        if kind in STAMPED:
            calls.wait_idle()
        # A run written again (a snapshot changed, no State made or removed) is seen too.
        again = store.load("r0")
        again.set_data("progress", "half way")
        store.save(again)
        assert until(feed, "row", id="r0") is not None


def test_a_change_the_stamp_missed_still_reaches_the_page(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, quick: None
) -> None:
    from statekeep import FileStore

    async def never_moves(store: Store) -> Hashable | None:
        return "always the same"  # a store whose stamp misses every change

    monkeypatch.setattr(statekeep.web._feed, "change_stamp", never_moves, raising=False)
    monkeypatch.setattr(statekeep.web._feed, "RESYNC", 0.2, raising=False)  # a listing at least this often
    with (
        FileStore(tmp_path / "store") as store,
        start(store) as viewer,
        client() as http,
        http.stream("GET", feed_url(viewer.url)) as response,
    ):
        feed = events(response)
        store.save(running("unannounced", id="quiet", agent="bot"))
        assert until(feed, "row")["id"] == "quiet"
