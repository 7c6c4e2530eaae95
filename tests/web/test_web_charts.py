"""The viewer's charts over HTTP (Starlette's TestClient, a real FileStore or SQLiteStore): a
run page's waterfall and token chart, the runs page's counts and runs-over-time chart, their
escaping, and the runs summary cached until the store's change stamp moves. The builders
alone are in test_web_timeline.py (the waterfall) and below (the runs summary)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from starlette.testclient import TestClient

from statekeep import FileStore, SQLiteStore, State, Store, agent_info
from statekeep.web import _charts, create_app
from tests.support.web_runs import every_kind, finished, running, save_all
from tests.support.webpage import Node, parse

LOCAL = "http://127.0.0.1:8765"
EVIL_TOOL = """<script>alert("x")</script>'"&amp;"""


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = FileStore(tmp_path / "store") if request.param == "file" else SQLiteStore(tmp_path / "s.db")
    with made:
        yield made


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store), base_url=LOCAL) as c:
        yield c


def page(client: TestClient, url: str) -> Node:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return parse(response.text)


@contextmanager
def clock_at(start: datetime) -> Iterator[Callable[[float], None]]:
    """Entries added inside are stamped from ``start``, moved on by the step function given."""
    at = [start]

    def step(seconds: float) -> None:
        at[0] += timedelta(seconds=seconds)

    with mock.patch("statekeep._run.state.now", lambda: at[0].isoformat()):
        yield step


def test_a_run_page_draws_a_bar_per_call_with_its_tooltip(store: Store, client: TestClient) -> None:
    store.save(every_kind(id="ek"))
    doc = page(client, "/runs/ek")
    chart = doc.one("svg", id="run-timeline")
    assert chart.attrs["role"] == "img"
    assert chart.one("title", id="run-timeline-title").text.startswith("Timeline of the run")
    assert chart.one("desc").text == "3 model requests and 3 tool calls; 1 open-ended (no end known)."
    bars = chart.all("g", cls="bar")
    assert [(b.attrs["data-seq"], b.attrs.get("data-call", "")) for b in bars] == [
        ("3", ""),
        ("4", "c1"),
        ("4", "c2"),
        ("4", "c3"),
        ("10", ""),
        ("12", ""),
    ]
    titles = [b.one("title").text for b in bars]
    assert titles[1].startswith("tool search (call c1); from +") and titles[1].endswith("; done")
    assert "in doubt: it may or may not have run" in titles[2]
    assert titles[3].endswith("; failed") and titles[4].endswith("; failed")
    assert {"open", "state-unknown"} <= bars[2].classes and bars[2].one("path", cls="edge")
    assert "state-error" in bars[3].classes and "model" in bars[0].classes
    assert [b.one("text", cls="label").text for b in bars][:2] == ["model m1", "search"]
    assert bars[2].one("text", cls="duration").text == "in doubt"
    assert doc.one("p", id="chart-summary").text.startswith("3 model requests and 3 tool calls")
    # Token usage: the two replies that gave it, the first 1,234 of them.
    usage = doc.one("svg", id="run-tokens").all("g", cls="usage")
    assert [u.attrs["data-seq"] for u in usage] == ["3", "12"]
    assert usage[0].one("title").text == "model call 1 (m1, seq 3): 1,200 in · 34 out · 1,234 total"
    assert usage[0].one("text", cls="duration").text == "1,234"
    widths = [sum(float(r.attrs["width"]) for r in u.all("rect")) for u in usage]
    assert widths[1] == pytest.approx(widths[0] * 15 / 1234, abs=0.1)


def test_the_bars_widths_follow_the_calls_durations(store: Store, client: TestClient) -> None:
    with clock_at(datetime(2026, 12, 1, 9, tzinfo=UTC)) as step:
        state = State("timed", id="timed")
        state.begin_run(agent_info("bot", "m1", tools=["slow", "quick"]))
        state.request("m1")
        step(2)
        state.add_reply(
            "", [{"id": "s", "name": "slow", "args": {}}, {"id": "q", "name": "quick", "args": {}}]
        )
        step(6)
        state.add_tool_result("s", "done")
        step(1)
        state.add_tool_result("q", "done")
        state.finish("ok")
    store.save(state)
    bars = page(client, "/runs/timed").one("svg", id="run-timeline").all("g", cls="bar")
    widths = [float(b.one("rect").attrs["width"]) for b in bars]
    assert widths[1] == pytest.approx(3 * widths[0], abs=0.2) and widths[1] == pytest.approx(
        6 * widths[2], abs=0.2
    )
    lefts = [float(b.one("rect").attrs["x"]) for b in bars]
    assert lefts == sorted(lefts)
    assert [b.one("text", cls="duration").text for b in bars] == ["2.0 s", "6.0 s", "1.0 s"]
    assert page(client, "/runs/timed").maybe("svg", id="run-tokens") is None  # no usage: no token chart


def test_a_run_without_calls_has_no_chart(store: Store, client: TestClient) -> None:
    store.save(running("just started", id="new"))
    doc = page(client, "/runs/new")
    assert doc.maybe(id="charts") is None and doc.maybe("svg") is None
    assert doc.one("ol", id="timeline")


def test_a_waiting_call_is_drawn_open_on_a_running_run(store: Store, client: TestClient) -> None:
    state = running("waits", id="waits", agent="bot")
    state.add_reply("", [{"id": "w1", "name": "wait_for_it", "args": {}}])
    store.save(state)
    bar = page(client, "/runs/waits").one("g", data_call="w1")
    assert {"open", "state-waiting"} <= bar.classes
    assert bar.one("text", cls="duration").text == "no end yet"
    assert "still running, or in doubt if its worker stopped" in bar.one("title").text


def test_tool_names_and_ids_are_text_in_the_charts(store: Store, client: TestClient) -> None:
    state = State(f"task {EVIL_TOOL}", id="evil-charts")
    state.begin_run(agent_info("bot", f"model {EVIL_TOOL}", tools=[EVIL_TOOL]))
    state.request(f"model {EVIL_TOOL}")
    state.add_reply("", [{"id": f"id {EVIL_TOOL}", "name": EVIL_TOOL, "args": {}}], usage={"input_tokens": 5})
    state.add_tool_result(f"id {EVIL_TOOL}", "ok")
    store.save(state)
    response = client.get("/runs/evil-charts")
    assert response.status_code == 200
    assert '<script>alert("x")' not in response.text and "<script>" not in response.text
    doc = parse(response.text)
    bar = doc.one("svg", id="run-timeline").one("g", cls="tool")
    assert bar.attrs["data-call"] == f"id {EVIL_TOOL}"  # an attribute value, quotes and all
    assert (
        bar.one("title").text
        == f"tool {EVIL_TOOL} (call id {EVIL_TOOL}); " + bar.one("title").text.split("); ", 1)[1]
    )
    assert (
        bar.one("text", cls="label").text == EVIL_TOOL[:29] + "…"
    )  # long names are cut, the title keeps all
    model = doc.one("svg", id="run-tokens").one("g", cls="usage")
    assert f"model {EVIL_TOOL}" in model.one("title").text


# -- the runs page's summary -------------------------------------------------------------------


def test_the_runs_page_counts_runs_by_status(store: Store, client: TestClient) -> None:
    waiting = running("needs a yes", id="w", agent="bot")
    waiting.add_reply("", [{"id": "p", "name": "pay", "args": {}}])
    waiting._wait_for_approval(["p"])  # as the agent records it: the run stops for approval
    limited = running("too long", id="l", agent="bot")
    limited.add_reply("more")
    limited.stop("limit")
    save_all(store, running("a", id="r1"), running("b", id="r2"), finished("c", id="f1"), waiting, limited)
    doc = page(client, "/")
    counts = doc.one("ul", id="run-counts").all("li")
    assert [(li.attrs["data-status"], li.text) for li in counts] == [
        ("running", "2 running"),
        ("finished", "1 finished"),
        ("approval", "1 waiting for approval"),
        ("limit", "1 stopped by the limit"),
    ]
    assert counts[2].one("a").attrs["href"] == "/?status=approval"
    assert doc.one("h2", id="run-stats-title").text == "All 5 runs"
    chart = doc.one("svg", id="runs-chart")
    buckets = chart.all("g", cls="bucket")
    assert len(buckets) == _charts.LEAST  # a new store: the last day, by the hour
    assert sum(int(b.attrs["data-count"]) for b in buckets) == 5
    assert buckets[-1].one("title").text.endswith(": 5 runs created")
    assert chart.one("title", id="runs-chart-title").text == "Runs created per hour"
    assert "5 in all, at most 5 in one hour" in chart.one("desc").text
    # The summary is the store's, whatever the page's filters.
    assert page(client, "/?status=finished").one("ul", id="run-counts").all("li")[0].text == "2 running"


def test_runs_over_time_by_day_for_older_runs(store: Store, client: TestClient) -> None:
    now = datetime.now(UTC)
    for days in (0, 1, 1, 15):
        with clock_at(now - timedelta(days=days, minutes=5)):
            store.save(finished(f"{days} days ago", id=f"d{days}-{len(store.list())}"))
    chart = page(client, "/").one("svg", id="runs-chart")
    assert chart.one("title", id="runs-chart-title").text == "Runs created per day"
    counts = [int(b.attrs["data-count"]) for b in chart.all("g", cls="bucket")]
    assert len(counts) == _charts.LEAST and sum(counts) == 4
    heights = [float(b.one("rect").attrs["height"]) for b in chart.all("g", cls="bucket")]
    assert max(heights) == pytest.approx(2 * min(h for h in heights if h), abs=0.1)  # 2 runs: twice 1


class Clock:
    """The summary cache's clock, moved on by hand (no sleeps)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counting(store: Store, listings: list[dict[str, Any]]) -> Store:
    """A second store over ``store``'s file, of its class, that notes each listing's filters."""

    class Counting(type(store)):  # type: ignore[misc]
        async def alist(self, **filters: Any) -> Any:
            listings.append(filters)
            return await super().alist(**filters)

    return Counting(store.path)  # type: ignore[attr-defined,no-any-return]


def with_clock(client: TestClient) -> tuple[_charts.StatsCache, Clock]:
    clock = Clock()
    stats = client.app.state.stats = _charts.StatsCache(clock)  # type: ignore[attr-defined]
    return stats, clock


def test_the_summary_is_computed_again_only_when_the_store_changes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FileStore's stamp says nothing (None: list) for two seconds after a change, for file
    # systems with coarse times; this one's are fine: the stamp speaks at once.
    monkeypatch.setattr("statekeep.stores._file.folder.SETTLE_NS", 0)
    listings: list[dict[str, Any]] = []
    save_all(store, finished("one", id="one"), running("two", id="two"))
    other = counting(store, listings)
    with other, TestClient(create_app(other), base_url=LOCAL) as c:
        stats, clock = with_clock(c)
        first = page(c, "/")
        assert (stats.computed, stats.hits) == (1, 0)
        assert len(listings) == 2  # the rows, and every State (the summary, and the rows' children)
        del listings[:]
        clock.now += _charts.EVERY  # old enough to ask the stamp: it has not moved
        second = page(c, "/")
        assert (stats.computed, stats.hits) == (1, 1)  # the cached summary
        assert [f for f in listings if f == {"limit": _charts.MOST}] == []
        assert second.one("ul", id="run-counts").text == first.one("ul", id="run-counts").text
        other.save(finished("three", id="three"))  # the change stamp moves
        del listings[:]
        third = page(c, "/")
        assert (stats.computed, stats.hits) == (2, 1)
        assert {"limit": _charts.MOST} in listings
        assert third.one("li", data_status="finished").text == "2 finished"


# -- the runs summary's builder ----------------------------------------------------------------


def test_run_stats_picks_the_smallest_bucket_that_covers_the_runs() -> None:
    from statekeep._core.records import SavedState

    now = datetime(2026, 12, 2, 12, 30, tzinfo=UTC)

    def row(hours_ago: float, **keys: Any) -> SavedState:
        at = now - timedelta(hours=hours_ago)
        return SavedState(
            id=f"r{hours_ago}",
            task="t",
            created_at=at,
            updated_at=at,
            turn=1,
            stopped_by=None,
            finished=False,
            **keys,
        )

    stats = _charts.run_stats([row(0), row(0.2), row(3)], now)
    assert stats.unit == "hour" and len(stats.buckets) == _charts.LEAST
    assert [b.count for b in stats.buckets][-4:] == [1, 0, 0, 2]
    assert stats.buckets[-1].label == "2026-12-02 12:00 UTC"
    tall = stats.buckets[-1]
    assert tall.y + tall.height == pytest.approx(_charts.HEIGHT - _charts.AXIS)  # bars stand on the axis
    assert stats.buckets[-4].height == pytest.approx(tall.height / 2)
    assert [b.x for b in stats.buckets] == sorted(b.x for b in stats.buckets)
    assert _charts.run_stats([row(0), row(100)], now).unit == "6 hours"
    assert _charts.run_stats([row(0), row(24 * 20)], now).unit == "day"
    weeks = _charts.run_stats([row(0), row(24 * 7 * 60)], now)
    assert (weeks.unit, len(weeks.buckets), weeks.older) == ("week", _charts.BUCKETS, 1)
    assert "1 older runs are not drawn" in weeks.summary
    empty = _charts.run_stats([], now)
    assert empty.buckets == [] and [c.count for c in empty.counts] == [0, 0]


def test_a_store_without_a_change_stamp_keeps_the_summary_a_few_seconds(tmp_path: Path) -> None:
    from tests.support.stores import STORE_FACTORIES

    store = STORE_FACTORIES["redis"](tmp_path)  # a throwaway Redis: no change stamp
    with store, TestClient(create_app(store), base_url=LOCAL) as c:
        stats, clock = with_clock(c)
        save_all(store, finished("one", id="one"))
        page(c, "/")
        store.save(finished("two", id="two"))  # no stamp to tell: kept until it is EVERY old
        clock.now += _charts.EVERY - 0.5
        assert page(c, "/").one("li", data_status="finished").text == "1 finished"
        assert (stats.computed, stats.hits) == (1, 1)
        clock.now += 0.5  # ... and listed again once it is
        assert page(c, "/").one("li", data_status="finished").text == "2 finished"
        assert (stats.computed, stats.hits) == (2, 1)


def test_a_busy_store_is_listed_for_the_summary_at_most_every_few_seconds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store written all the time (a SQLite store's data_version moves on every commit): each
    # runs page sees a new stamp, and still the summary's listing of up to MOST rows comes at
    # most once every EVERY seconds.
    monkeypatch.setattr("statekeep.stores._file.folder.SETTLE_NS", 0)
    listings: list[dict[str, Any]] = []
    store.save(finished("first", id="first"))
    other = counting(store, listings)
    with other, TestClient(create_app(other), base_url=LOCAL) as c:
        stats, clock = with_clock(c)
        for i in range(6):
            other.save(finished(f"run {i}", id=f"busy{i}"))  # the stamp moves before each page
            counts = page(c, "/").one("li", data_status="finished").text
            clock.now += _charts.EVERY / 4
        summaries = [f for f in listings if f == {"limit": _charts.MOST}]
        assert len(summaries) == stats.computed == 2  # at the first page, and once EVERY had passed
        assert stats.hits == 4
        assert counts == "6 finished"  # the listing at EVERY: runs 0 to 4 and "first"
        clock.now += _charts.EVERY
        assert page(c, "/").one("li", data_status="finished").text == "7 finished"
        assert stats.computed == 3
