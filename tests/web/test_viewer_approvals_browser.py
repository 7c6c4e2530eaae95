"""Approvals in the viewer, in a real headless Chromium: ``statekeep serve --token T
--allow-approve`` in a process of its own over a FileStore; the runs page's filter, a run page's
pending calls, and its approve and reject buttons, whose decisions another process then reads
from the store. A viewer without --allow-approve shows the calls and no buttons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeep import FileStore, State, agent_info
from tests.support.browser import Server, wait_for
from tests.web.test_viewer_browser import by_css, in_another_process, left_the_document, one, shown

TOKEN = "approve-s3cret-token"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with FileStore(tmp_path / "store") as s:
        state = State("pay the bill", id="bill")
        state.begin_run(agent_info("payer", "m", tools=["pay", "refund"]))
        state.request("m")
        state.add_reply(
            "",
            [
                {"id": "c1", "name": "pay", "args": {"amount": 120}},
                {"id": "c2", "name": "refund", "args": {"amount": 7}},
            ],
        )
        state._wait_for_approval(["c1", "c2"])
        s.save(state)
        other = State("other", id="other")
        other.finish("ok")
        s.save(other)
        yield s


def test_approve_and_reject_with_the_buttons(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path), "--token", TOKEN, "--allow-approve")
    page.get(server.url + "?token=" + TOKEN)
    wait_for(page, shown("#runs tbody tr.run"), "the runs")
    assert "approvals allowed" in one(page, "header.top").text
    one(page, "a#awaiting").click()
    wait_for(page, shown("span#awaiting"), "the filtered page")
    assert [tr.get_attribute("data-id") for tr in by_css(page, "#runs tbody tr.run")] == ["bill"]

    page.get(server.url + "runs/bill")
    wait_for(page, shown("#approvals li.approval"), "the pending approvals")
    assert [li.get_attribute("data-call") for li in by_css(page, "#approvals li.approval")] == ["c1", "c2"]
    first = one(page, 'li.approval[data-call="c1"]')
    first.find_element("css selector", "input[name=note]").send_keys("ok by Ann")
    first.find_element("css selector", "button.approve").click()
    wait_for(page, left_the_document(first), "the page after approving")
    wait_for(page, shown('li.approval[data-call="c2"]'), "the call still waiting")
    assert [li.get_attribute("data-call") for li in by_css(page, "#approvals li.approval")] == ["c2"]

    second = one(page, 'li.approval[data-call="c2"]')
    second.find_element("css selector", "button.reject").click()
    wait_for(page, left_the_document(second), "the page after rejecting")
    wait_for(page, shown("#timeline li.entry"), "the timeline")
    assert by_css(page, "#approvals") == []

    decisions = [
        (e["call_id"], e["approved"], e["note"])
        for e in store.load("bill").history
        if e["kind"] == "approval"
    ]
    assert decisions == [("c1", True, "ok by Ann"), ("c2", False, None)]


def test_a_read_only_viewer_shows_the_calls_without_buttons(serve: Any, page: Any, store: FileStore) -> None:
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/bill")
    wait_for(page, shown("#approvals li.approval"), "the pending approvals")
    assert by_css(page, "#approvals button") == [] and by_css(page, "form.decide") == []
    assert "read-only" in one(page, "header.top").text
    assert "statekeep approve bill CALL" in one(page, "#approvals").text


def test_an_open_running_page_shows_the_calls_once_the_run_stops_for_approval(
    serve: Any, page: Any, store: FileStore
) -> None:
    live = State("Pay the rent", id="rent")
    live.begin_run(agent_info("payer", "m", tools=["pay"]))
    store.save(live)
    server: Server = serve(str(store.path))
    page.get(server.url + "runs/rent")
    wait_for(page, shown('body[data-live="on"]'), "the live connection")
    assert by_css(page, "#approvals") == []
    in_another_process(
        store,
        """
        state = store.load("rent")
        state.request("m")
        state.add_reply("", [{"id": "r1", "name": "pay", "args": {"amount": 900}}])
        state._wait_for_approval(["r1"])
        store.save(state)
        """,
    )
    wait_for(page, shown('#approvals li.approval[data-call="r1"]'), "the call waiting for approval")
    assert one(page, "#status").text == "approval"
