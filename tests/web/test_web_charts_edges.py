"""The run page's charts at their edges, over HTTP (Starlette's TestClient, a real FileStore or
SQLiteStore): a page of earlier entries (``?before=SEQ``) draws its calls as the whole history
tells them, decided approvals are drawn as decided, token counts that do not add up (or are
not counts) stay inside the token chart, and times UTC cannot hold are shown as stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from statekeep import FileStore, SQLiteStore, State, Store, agent_info
from statekeep.web import _timeline, create_app
from tests.support.webpage import Node, parse
from tests.web.test_web_charts import LOCAL, clock_at, page


@pytest.fixture(params=["file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = FileStore(tmp_path / "store") if request.param == "file" else SQLiteStore(tmp_path / "s.db")
    with made:
        yield made


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store), base_url=LOCAL) as c:
        yield c


def bars(doc: Node) -> dict[str, Node]:
    """The waterfall's bars by call id (a model request's by "model SEQ")."""
    return {
        b.attrs.get("data-call") or f"model {b.attrs['data-seq']}": b
        for b in doc.one("svg", id="run-timeline").all("g", cls="bar")
    }


def test_a_page_of_earlier_entries_draws_calls_whose_end_came_later_as_ended(
    store: Store, client: TestClient
) -> None:
    with clock_at(datetime(2026, 12, 1, 9, tzinfo=UTC)) as step:
        state = State("two calls", id="cut")
        state.begin_run(agent_info("bot", "m1", tools=["slow", "quick"]))
        state.request("m1")  # seq 2
        step(2)
        state.add_reply(
            "", [{"id": "s", "name": "slow", "args": {}}, {"id": "q", "name": "quick", "args": {}}]
        )  # seq 3
        step(6)
        state.add_tool_result("s", "done")  # seq 4
        step(1)
        state.add_tool_result("q", "failed", is_error=True)  # seq 5
        state.request("m1")  # seq 6
        step(3)
        state.add_reply("ok", usage={"input_tokens": 10, "output_tokens": 2})  # seq 7
        state.finish("ok")
    store.save(state)
    whole = bars(page(client, "/runs/cut"))
    # Cut before the second call's result: both calls started before it, and ended.
    early = bars(page(client, "/runs/cut?before=5"))
    assert list(early) == ["model 2", "s", "q"]
    assert "state-done" in early["s"].classes and "state-error" in early["q"].classes
    assert not any("open" in b.classes for b in early.values())
    assert [b.one("text", cls="duration").text for b in early.values()] == ["2.0 s", "6.0 s", "1.0 s"]
    assert early["q"].one("title").text == whole["q"].one("title").text  # as the whole run tells it
    # Cut before a model reply: the request is answered, not "no reply".
    late = page(client, "/runs/cut?before=7")
    request = bars(late)["model 6"]
    assert "state-done" in request.classes and request.one("text", cls="duration").text == "3.0 s"
    assert late.one("svg", id="run-tokens").one("g", cls="usage").attrs["data-seq"] == "6"
    # The chart covers the calls that start before the cut, no later ones.
    assert list(bars(page(client, "/runs/cut?before=4"))) == ["model 2", "s", "q"]
    assert list(bars(page(client, "/runs/cut?before=3"))) == ["model 2"]


def waiting() -> State:
    state = State("pay the bill", id="bill")
    state.begin_run(agent_info("payer", "m", tools=["pay", "refund"]))
    state.request("m")
    state.add_reply("", [{"id": "c1", "name": "pay", "args": {}}, {"id": "c2", "name": "refund", "args": {}}])
    state._wait_for_approval(["c1", "c2"])  # as the agent records it: the run stops
    return state


def test_decided_calls_are_drawn_as_decided(store: Store, client: TestClient) -> None:
    state = waiting()
    store.save(state)
    before = bars(page(client, "/runs/bill"))
    assert {"state-approval", "open"} <= before["c1"].classes
    assert before["c1"].one("text", cls="duration").text == "awaiting approval"
    state.approve("c1")
    state.reject("c2", "not today")
    store.save(state)
    decided = bars(page(client, "/runs/bill"))
    assert {"state-approved", "open"} <= decided["c1"].classes  # not run yet: the run goes on later
    assert decided["c1"].one("text", cls="duration").text == "approved, not run"
    assert "approved by a person, not run yet" in decided["c1"].one("title").text
    assert "state-rejected" in decided["c2"].classes
    assert decided["c2"].one("text", cls="duration").text == "rejected"
    assert "waiting for a person's approval" not in decided["c2"].one("title").text


def test_an_approved_call_with_a_result_is_not_drawn_rejected(store: Store, client: TestClient) -> None:
    # A writer that saved the approved call's result without its tool_resume (an older or
    # another writer's history, stored as it is): the call ran after its approval.
    store.save(waiting())
    record = store.read("bill")
    assert record is not None
    at = record.entries[-1]["at"]
    more: list[dict[str, Any]] = [
        {"kind": "approval", "at": at, "call_id": "c1", "approved": True, "note": None},
        {"kind": "approval", "at": at, "call_id": "c2", "approved": False, "note": "no"},
        {
            "kind": "tool_result",
            "at": at,
            "call_id": "c1",
            "name": "pay",
            "output": "paid",
            "is_error": False,
        },
        {
            "kind": "tool_result",
            "at": at,
            "call_id": "c2",
            "name": "refund",
            "output": "no",
            "is_error": True,
        },
    ]
    entries = [dict(e, seq=len(record.entries) + i) for i, e in enumerate(more)]
    store.write("bill", entries, record.snapshot)
    drawn = bars(page(client, "/runs/bill"))
    assert "state-done" in drawn["c1"].classes and drawn["c1"].one("title").text.endswith("; done")
    assert "state-rejected" in drawn["c2"].classes


def test_token_bars_stay_inside_the_chart_whatever_the_counts(store: Store, client: TestClient) -> None:
    state = State("odd usage", id="odd")
    state.begin_run(agent_info("bot", "m1"))
    for usage in (
        {"input_tokens": 900, "output_tokens": 300, "total_tokens": 1000},  # in + out > total
        {"input_tokens": -50, "output_tokens": 40},  # a count below zero
        {"input_tokens": "many", "output_tokens": 2.5, "total_tokens": -7},  # not counts, a negative
        {"prompt_tokens": None, "completion_tokens": 100},
    ):
        state.request("m1")
        state.add_reply("", usage=usage)
    store.save(state)
    doc = page(client, "/runs/odd")
    usage = doc.one("svg", id="run-tokens").all("g", cls="usage")
    assert [u.attrs["data-seq"] for u in usage] == ["2", "4", "6", "8"]
    rects = [[(float(r.attrs["x"]), float(r.attrs["width"])) for r in u.all("rect")] for u in usage]
    right = _timeline.LABEL + _timeline.PLOT
    assert all(w >= 0 and x >= _timeline.LABEL and x + w <= right + 0.01 for bar in rects for x, w in bar)
    assert sum(w for _, w in rects[0]) == pytest.approx(_timeline.PLOT, abs=0.1)  # the longest: 1,200
    assert [w for _, w in rects[1]] == pytest.approx([_timeline.PLOT * 40 / 1200], abs=0.1)  # only its output
    assert rects[2] == []  # nothing to draw
    assert usage[1].one("title").text.endswith("-50 in · 40 out · -10 total")  # as stored
    assert usage[2].one("title").text.endswith("-7 total")


def test_times_utc_cannot_hold_are_shown_as_stored(store: Store, client: TestClient) -> None:
    # An entry's time as a writer gave it, valid ISO 8601, but out of UTC's years 1 to 9999.
    first, last = "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"
    state = State("odd times", id="src")
    state.begin_run(agent_info("bot", "m1"))
    state.request("m1")
    state.add_reply("ok")
    store.save(state)
    record = store.read("src")
    assert record is not None
    entries = [dict(e, at={2: first, 3: last}.get(e["seq"], e["at"])) for e in record.entries]
    store.write("far", entries, record.snapshot, create=True)
    response = client.get("/runs/far")
    assert response.status_code == 200, response.text
    items = parse(response.text).one("ol", id="timeline").all("li")
    shown = " ".join(li.text for li in items)
    assert first in shown and last in shown
    assert parse(client.get("/runs/far?before=3").text).one("ol", id="timeline")
