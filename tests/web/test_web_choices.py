"""The runs page's status filter as a choice (running, finished, each stop reason seen), and
times shown as "3 min ago" with the exact time in their ``title`` (the hover text), through
Starlette's TestClient over a real FileStore. The same in Chromium: test_viewer_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from statekeep import FileStore, State
from statekeep.web import create_app
from tests.support.web_runs import EVIL, finished, running, save_all
from tests.support.webpage import Node, parse

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    with FileStore(tmp_path / "store") as s:
        yield s


def page(client: TestClient, url: str) -> Node:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return parse(response.text)


def stopped(task: str, why: str, *, id: str) -> State:
    state = running(task, id=id, agent="bot")
    state.add_reply("")
    state.stop(why)
    return state


def choices(doc: Node) -> list[tuple[str, str, bool]]:
    """The status filter's options: (value, text, selected)."""
    box = doc.one("form", id="filters").one("select", name="status")
    return [(o.attrs["value"], o.text, "selected" in o.attrs) for o in box.all("option")]


def exact(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def test_the_status_filter_offers_running_finished_and_each_stop_reason_seen(store: FileStore) -> None:
    save_all(
        store,
        stopped("gave up", "cancelled", id="old-cancel"),  # older than the one-row page below
        running("busy", id="busy"),
        finished("done", id="done"),
        stopped("too long", "limit", id="lim"),
        stopped("evil", EVIL, id="evil"),
    )
    with TestClient(create_app(store), base_url=LOCAL) as client:
        doc = page(client, "/?limit=1")
        assert [(v, t) for v, t, _ in choices(doc)] == [
            ("", "any"), ("running", "running"), ("finished", "finished"),
            (EVIL, EVIL), ("cancelled", "cancelled"), ("limit", "limit"),
        ]  # fmt: skip
        assert [v for v, _, chosen in choices(doc) if chosen] == [""]
        picked = page(client, "/?status=limit")
        assert [v for v, _, chosen in choices(picked) if chosen] == ["limit"]
        assert [tr.attrs["data-id"] for tr in picked.all("tr", cls="run")] == ["lim"]
        # A reason saved after the viewer started is offered once a page has shown it.
        store.save(stopped("slow", "timeout", id="slow"))
        page(client, "/")
        assert "timeout" in [v for v, _, _ in choices(page(client, "/?status=running"))]
        # A status asked for in the URL stays chosen, even one no run has.
        asked = choices(page(client, "/?status=nobody-stops-so"))
        assert ("nobody-stops-so", "nobody-stops-so", True) in asked


def test_times_read_relative_with_the_exact_time_on_hover(store: FileStore) -> None:
    state = finished("done", id="done")
    store.save(state)
    row = store.list()[0]
    with TestClient(create_app(store), base_url=LOCAL) as client:
        when = page(client, "/").one("tr", data_id="done").one("td", cls="updated").one("time")
        assert when.text == "just now" or when.text.endswith(" s ago"), when.text  # a slow machine
        assert when.attrs["title"] == row.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        run = page(client, "/runs/done")
    snapshot = store.read("done")
    assert snapshot is not None and snapshot.snapshot is not None
    for field, key in (("created", "created_at"), ("updated", "updated_at")):
        shown = run.one("dd", id=field).one("time")
        assert shown.text == "just now" or shown.text.endswith(" s ago"), shown.text
        assert shown.attrs["datetime"] == snapshot.snapshot[key]
        assert shown.attrs["title"] == exact(snapshot.snapshot[key])
